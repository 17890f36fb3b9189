"""Speculation hit rate of a precompute run, measured against the requests that then arrived.

For the run at ``t``: of the events in ``(t, t + horizon]`` (the requests the run speculated on),
which share had their (user, item) pair among the run's candidates, and among its verified pairs
(``pair_embeddings`` rows written by the run)? Also the precision of each set. Only meaningful in
replays and backfills, where the future events are known; it reads events after ``t`` for this
measurement only, never for a decision. Run it right after ``score`` (a later run may refresh the
pairs, re-tagging them with its own run id).

    solaris hit-rate --as-of 2000-12-01T00:00:00Z
"""

from __future__ import annotations

import argparse
import logging
import sys
from datetime import timedelta

from solaris.runtime import job_parser, run_stage

log = logging.getLogger("solaris.hit_rate")


def build_parser() -> argparse.ArgumentParser:
    return job_parser("solaris hit-rate", __doc__)


def run(spark, config, as_of, run_id: str) -> dict:
    from pyspark.sql import functions as F

    from solaris.tables import RunRecord

    horizon_end = as_of + timedelta(hours=config.precompute.horizon_hours)
    requests = (
        spark.read.format("delta").load(config.table_path("events"))
        .where((F.col("ts") > F.lit(as_of)) & (F.col("ts") <= F.lit(horizon_end)))
        .select("user_id", "item_id").distinct()
    )
    candidates = spark.read.format("delta").load(config.table_path("candidates")).where(F.col("run_id") == run_id)
    verified = spark.read.format("delta").load(config.table_path("pair_embeddings")).where(F.col("run_id") == run_id)
    n_requests = requests.count()
    figures: dict[str, float | int | None] = {"requests": n_requests, "horizon_end": horizon_end.isoformat()}
    for name, pairs in (("candidates", candidates), ("verified", verified)):
        pairs = pairs.select("user_id", "item_id").distinct()
        size = pairs.count()
        hits = requests.join(pairs, ["user_id", "item_id"], "left_semi").count()
        figures[f"{name}"] = size
        figures[f"{name}_hits"] = hits
        figures[f"{name}_hit_rate"] = hits / n_requests if n_requests else None
        figures[f"{name}_precision"] = hits / size if size else None
    record = RunRecord(run_id=run_id, job="hit_rate", as_of=as_of, rows_in=n_requests,
                       rows_out=int(figures["verified_hits"]), details=figures)
    record.write(spark, config, "success")
    log.info("run %s: %d requests in the horizon; hit rate candidates %s, verified %s", run_id, n_requests,
             _pct(figures["candidates_hit_rate"]), _pct(figures["verified_hit_rate"]))
    return figures


def _pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def main(argv: list[str] | None = None) -> int:
    return run_stage(
        build_parser(), argv, "hit-rate", "precompute",
        run=lambda spark, config, args, run_id: run(spark, config, args.as_of, run_id),
        report=lambda config, result: (f"hit rate: candidates {_pct(result['candidates_hit_rate'])}, verified {_pct(result['verified_hit_rate'])} "
                f"of {result['requests']} requests"),
    )


if __name__ == "__main__":
    sys.exit(main())
