"""Replay the hourly precompute + enrichment over a time range, hour by hour, in one Spark session.

For each tick ``t`` in ``[--start, --end)`` (step ``--step-hours``): candidates -> score/verify/
write -> hit rate against the requests that arrived in ``(t, t + horizon]`` -> expire -> user
aggregates -> KNN -> impute -> publish -> coverage: the requests of ``(t, t + 1h]`` resolved
through the published snapshot at their own timestamps, share served per tier. It is what
the backfill/replay DAG and the demo run, and the engine of evaluations: every tick sees only
events with ``ts <= t``, exactly like the live hourly DAG. Ticks already done (a ``success`` row in
``runs`` for their last stage, coverage) are skipped unless ``--force``, so an interrupted replay
resumes; every stage is idempotent, so a half-done tick is simply redone.

    solaris replay --start 2000-12-01T00:00:00Z --end 2000-12-01T06:00:00Z
"""

from __future__ import annotations

import argparse
import logging
import sys
from datetime import timedelta

from solaris.runtime import add_common_args, as_of_arg, config_from_args, run_job, setup_logging

log = logging.getLogger("solaris.replay")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="solaris replay", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 2)[-1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--start", type=as_of_arg, required=True, help="first tick (UTC)")
    parser.add_argument("--end", type=as_of_arg, required=True, help="end of the range (exclusive)")
    parser.add_argument("--step-hours", type=float, default=1.0)
    parser.add_argument("--force", action="store_true", help="redo ticks that already succeeded")
    add_common_args(parser)
    return parser


def ticks(start, end, step_hours: float) -> list:
    if step_hours <= 0:
        raise ValueError("--step-hours must be positive")
    out, current = [], start
    while current < end:
        out.append(current)
        current += timedelta(hours=step_hours)
    return out


def _done(spark, config, run_id: str) -> bool:
    from pyspark.sql import functions as F

    from solaris.tables import table_exists

    path = config.table_path("runs")
    if not table_exists(spark, path):
        return False
    runs = spark.read.format("delta").load(path)
    return runs.where((F.col("run_id") == run_id) & (F.col("job") == "coverage") & (F.col("status") == "success")).limit(1).count() > 0


def run(spark, config, start, end, step_hours: float = 1.0, force: bool = False) -> list[dict]:
    from solaris.jobs import candidates, expire, hit_rate, impute, knn, publish, score, user_aggregates
    from solaris.runtime import JobInputError
    from solaris.speculation import default_run_id

    schedule = ticks(start, end, step_hours)
    if not schedule:
        raise JobInputError(f"empty replay range [{start}, {end})")
    summary = []
    for index, tick in enumerate(schedule, 1):
        run_id = default_run_id("precompute", tick)
        if not force and _done(spark, config, default_run_id("enrichment", tick)):
            log.info("tick %d/%d %s already done (run %s): skipped", index, len(schedule), tick, run_id)
            continue
        log.info("tick %d/%d: %s", index, len(schedule), tick)
        produced = candidates.run(spark, config, tick, run_id)
        scored = score.run(spark, config, tick, run_id)
        hits = hit_rate.run(spark, config, tick, run_id)
        expired = expire.run(spark, config, tick, run_id, vacuum=(index == len(schedule)))
        enrichment_id = default_run_id("enrichment", tick)
        user_aggregates.run(spark, config, tick, enrichment_id)
        neighbours = knn.run(spark, config, tick, enrichment_id)
        impute.run(spark, config, tick, enrichment_id)
        published = publish.run(spark, config, tick, enrichment_id)
        served = coverage(spark, config, tick, published["manifest"], enrichment_id)
        summary.append({"as_of": tick.isoformat(), "candidates": produced["pairs"], **{k: scored[k] for k in (
            "verified", "written", "quarantined")}, "expired": expired["expired"],
            "requests": hits["requests"], "candidates_hit_rate": hits["candidates_hit_rate"],
            "verified_hit_rate": hits["verified_hit_rate"], f"knn_recall_at_{neighbours['k']}":
            neighbours[f"recall_at_{neighbours['k']}"], **{f"coverage_{k}": v for k, v in served.items()
                                                          if k.startswith("cumulative")}})
    return summary


def coverage(spark, config, tick, manifest_path: str, run_id: str) -> dict:
    """Resolve the next hour's requests through the snapshot just published; share per tier."""
    from solaris.serving.resolver import coverage as tier_shares
    from solaris.serving.resolver import load_snapshot
    from solaris.tables import RunRecord, events_until

    requests = events_until(spark, config, tick + timedelta(hours=1), since=tick)
    tables = load_snapshot(manifest_path)
    _, tiers, _ = tables.resolve(requests["user_id"].to_numpy(), requests["item_id"].to_numpy(),
                                 requests["ts"].to_numpy().astype("float64"))
    shares = tier_shares(tiers) if len(requests) else {}
    RunRecord(run_id=run_id, job="coverage", as_of=tick, rows_in=len(requests),
              details={"requests": len(requests), "snapshot": tables.snapshot_id, **shares}).write(spark, config, "success")
    log.info("coverage of %d requests in (%s, +1h] via %s: tier1 %.1f%%, <=2 %.1f%%, <=3 %.1f%%", len(requests), tick,
             tables.snapshot_id, *(100 * shares.get(f"cumulative_tier{c}", 0.0) for c in (1, 2, 3)))
    return shares


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)

    def body() -> None:
        from solaris.spark import get_spark

        config = config_from_args(args)
        spark = get_spark(config, "replay")
        summary = run(spark, config, args.start, args.end, args.step_hours, args.force)
        for row in summary:
            print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
        print(f"replayed {len(summary)} ticks into {config.table_path('pair_embeddings')}")

    return run_job("replay", body)


if __name__ == "__main__":
    sys.exit(main())
