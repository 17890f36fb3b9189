"""Tier 2: per-user mean of the pair embeddings computed in the last 24 h.

At ``--as-of t``: reads ``pair_embeddings_log`` rows with ``t - window < computed_at <= t`` (the
latest row per pair, so a pair re-scored every hour is not over-weighted), averages each user's
embeddings (plain or recency-weighted, optional L2 normalisation: :mod:`solaris.enrichment`) in
an ``applyInPandas`` group, and MERGEs ``user_embeddings`` on ``user_id`` with
``expires_at = t + enrichment.ttl_hours``. Rerunning the same run id changes nothing.

    solaris user-aggregates --as-of 2000-12-01T03:00:00Z
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import asdict, dataclass
from datetime import timedelta

from solaris.runtime import job_parser, run_stage

log = logging.getLogger("solaris.user_aggregates")

SCHEMA = ("user_id long, embedding binary, n_pairs int, window_start timestamp, window_end timestamp, "
          "computed_at timestamp, expires_at timestamp, fm_version string, run_id string")


@dataclass(frozen=True)
class UserAggregatesResult:
    """Users whose tier-2 aggregate this run wrote, from how many pair embeddings, since when."""

    users: int
    pairs: int
    window_start: str | None


def build_parser() -> argparse.ArgumentParser:
    return job_parser("solaris user-aggregates", __doc__)


def run(spark, config, as_of, run_id: str) -> UserAggregatesResult:
    import pandas as pd
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from solaris.embedding_codec import decode
    from solaris.enrichment import aggregate_user
    from solaris.tables import RunRecord, merge_if_new_run, table_exists, table_version

    enrichment, dim = config.enrichment, config.model.embedding_dim
    record = RunRecord(run_id=run_id, job="user_aggregates", as_of=as_of)
    window_start = as_of - timedelta(hours=enrichment.window_hours)
    expires_at = as_of + timedelta(hours=enrichment.ttl_hours)
    log_path = config.table_path("pair_embeddings_log")
    if not table_exists(spark, log_path):
        log.warning("no pair_embeddings_log yet at %s: no user aggregates", log_path)
        record.write(spark, config, "success")
        return UserAggregatesResult(users=0, pairs=0, window_start=None)
    latest = Window.partitionBy("user_id", "item_id").orderBy(F.col("computed_at").desc())
    pairs = (
        spark.read.format("delta").load(log_path)
        .where((F.col("computed_at") > F.lit(window_start)) & (F.col("computed_at") <= F.lit(as_of)))
        .withColumn("_rank", F.row_number().over(latest)).where("_rank = 1")
        .select("user_id", "embedding", F.unix_seconds("computed_at").alias("computed_s"), "fm_version")
    )
    as_of_s = int(as_of.timestamp())

    def per_user(frame: pd.DataFrame) -> pd.DataFrame:
        result = aggregate_user(decode(frame["embedding"].tolist(), dim), frame["computed_s"].to_numpy(), as_of_s,
                                enrichment.aggregation, enrichment.half_life_hours, enrichment.l2_normalize)
        if result is None:
            return pd.DataFrame(columns=[c.split()[0] for c in SCHEMA.split(", ")])
        latest_version = frame.sort_values("computed_s")["fm_version"].iloc[-1]
        return pd.DataFrame({
            "user_id": [int(frame["user_id"].iloc[0])], "embedding": [result.embedding.astype("<f4").tobytes()],
            "n_pairs": [result.n_pairs], "window_start": [pd.Timestamp(window_start)], "window_end": [pd.Timestamp(as_of)],
            "computed_at": [pd.Timestamp(as_of)], "expires_at": [pd.Timestamp(expires_at)],
            "fm_version": [latest_version], "run_id": [run_id],
        })

    aggregates = pairs.groupBy("user_id").applyInPandas(per_user, SCHEMA)
    path = config.table_path("user_embeddings")
    merge_if_new_run(aggregates, path, keys=["user_id"])
    written = spark.read.format("delta").load(path).where(F.col("run_id") == run_id)
    stats = written.agg(F.count("*").alias("users"), F.coalesce(F.sum("n_pairs"), F.lit(0)).alias("pairs")).collect()[0]
    record.rows_out = int(stats["users"])
    record.rows_in = int(stats["pairs"])
    record.table_versions = {"user_embeddings": table_version(spark, path)}
    result = UserAggregatesResult(users=int(stats["users"]), pairs=int(stats["pairs"]),
                                  window_start=window_start.isoformat())
    record.details = asdict(result)
    record.write(spark, config, "success")
    log.info("user aggregates at %s: %d users from %d pair embeddings computed since %s",
             as_of, stats["users"], stats["pairs"], window_start)
    return result


def main(argv: list[str] | None = None) -> int:
    return run_stage(
        build_parser(), argv, "user-aggregates", "enrichment",
        run=lambda spark, config, args, run_id: run(spark, config, args.as_of, run_id),
        report=lambda config, result: f"user_embeddings: {config.table_path('user_embeddings')} users={result.users}",
    )


if __name__ == "__main__":
    sys.exit(main())
