"""Speculate: write the (user, item) pairs likely to be requested in ``(as_of, as_of + horizon]``.

Runs ``sql/candidates.sql`` (co-engagement, trending and recent-exposure rules over events with
``ts <= as_of``), caps per user and by the global budget, and replaces this run's rows in the
``candidates`` table (partitioned by run date). Rerunning the same run id gives the same rows.

    solaris candidates --as-of 2000-12-01T00:00:00Z
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from solaris.runtime import job_parser, run_stage

if TYPE_CHECKING:  # pragma: no cover
    from datetime import datetime

    from pyspark.sql import DataFrame, SparkSession

    from solaris.config import SolarisConfig

log = logging.getLogger("solaris.candidates")


@dataclass(frozen=True)
class CandidatesResult:
    """What one speculation run wrote: pairs, distinct users, pairs per source rule."""

    pairs: int
    users: int
    by_source: dict[str, int] = field(default_factory=dict)


def build_parser() -> argparse.ArgumentParser:
    return job_parser("solaris candidates", __doc__)


def build_candidates(spark: SparkSession, config: SolarisConfig, as_of: datetime, run_id: str) -> DataFrame:
    """DataFrame of this run's candidates (contract columns), computed from events <= as_of."""
    from pyspark.sql import functions as F

    from solaris.precompute.spark_features import visible_events
    from solaris.precompute.speculation import candidate_params
    from solaris.storage.sql import render, statements

    visible_events(spark, config, as_of).createOrReplaceTempView("events")
    *views, final = statements(render("candidates", **candidate_params(config.precompute.candidates, as_of)))
    for statement in views:
        spark.sql(statement)
    horizon_end = as_of + timedelta(hours=config.precompute.horizon_hours)
    return spark.sql(final).select(
        F.lit(run_id).alias("run_id"), "user_id", "item_id", "source", "spec_score",
        F.lit(as_of).cast("timestamp").alias("as_of"),
        F.lit(horizon_end).cast("timestamp").alias("horizon_end"),
        F.to_date(F.lit(as_of).cast("timestamp")).alias("run_date"),
    )


def run(spark: SparkSession, config: SolarisConfig, as_of: datetime, run_id: str) -> CandidatesResult:
    from pyspark.sql import functions as F

    from solaris.storage.tables import RunRecord, replace_where, table_version

    record = RunRecord(run_id=run_id, job="candidates", as_of=as_of)
    frame = build_candidates(spark, config, as_of, run_id)
    path = config.table_path("candidates")
    replace_where(frame, path, f"run_id = '{run_id}'", partition_by=["run_date"])
    written = spark.read.format("delta").load(path).where(F.col("run_id") == run_id)
    # per source and in total (the rollup's grand-total row) in one Spark job
    rows = written.rollup("source").agg(F.grouping("source").alias("total"), F.count("*").alias("pairs"),
                                        F.countDistinct("user_id").alias("users")).collect()
    stats = next((row for row in rows if row["total"]), {"pairs": 0, "users": 0})
    by_source = {row["source"]: row["pairs"] for row in rows if not row["total"]}
    record.rows_out = int(stats["pairs"])
    record.table_versions["candidates"] = table_version(spark, path)
    record.details = {"users": int(stats["users"]), "by_source": by_source}
    record.write(spark, config, "success")
    log.info("candidates at %s: %d pairs for %d users %s", as_of, stats["pairs"], stats["users"], by_source)
    return CandidatesResult(pairs=int(stats["pairs"]), users=int(stats["users"]), by_source=by_source)


def main(argv: list[str] | None = None) -> int:
    return run_stage(
        build_parser(),
        argv,
        "candidates",
        "precompute",
        run=lambda spark, config, args, run_id: run(spark, config, args.as_of, run_id),
        report=lambda config, result: (
            f"candidates: {config.table_path('candidates')} pairs={result.pairs} users={result.users}"
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
