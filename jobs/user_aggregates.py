"""Tier 2: per-user mean of the pair embeddings computed in the last 24 h.

At ``--as-of t``: reads ``pair_embeddings_log`` rows with ``t - window < computed_at <= t`` (the
latest row per pair, so a pair re-scored every hour is not over-weighted), averages each user's
embeddings (plain or recency-weighted, optional L2 normalisation: :func:`solaris.enrichment.aggregates.aggregate_users`)
with one ``mapInArrow`` call per batch of whole users (repartitioned by user, sorted within
partitions; no per-user Python call), and MERGEs ``user_embeddings`` on ``user_id`` with
``expires_at = t + enrichment.ttl_hours``. Rerunning the same run id changes nothing.

    solaris user-aggregates --as-of 2000-12-01T03:00:00Z
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Callable, Iterator

from solaris.runtime import job_parser, run_stage

if TYPE_CHECKING:  # pragma: no cover
    from datetime import datetime

    import pyarrow as pa
    from pyspark.sql import SparkSession

    from solaris.config import SolarisConfig

log = logging.getLogger("solaris.user_aggregates")

# user_embeddings, column order and types (the job selects and casts its output to it)
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


def make_aggregator(dim: int, as_of_s: int, mode: str, half_life_hours: float,
                    l2_normalize: bool) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: rows sorted by user within the partition -> one row per user."""

    def aggregate(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import numpy as np
        import pyarrow as pa

        from solaris.enrichment.aggregates import aggregate_users, complete_groups
        from solaris.storage.embedding_codec import decode, encode_arrow

        for table in complete_groups(batches, "user_id"):
            result = aggregate_users(table.column("user_id").to_numpy(), decode(table.column("embedding"), dim),
                                     table.column("computed_s").to_numpy(), as_of_s, mode, half_life_hours,
                                     l2_normalize)
            if len(result.user_ids):
                yield pa.record_batch([
                    pa.array(result.user_ids, pa.int64()), encode_arrow(result.embeddings),
                    pa.array(result.n_pairs.astype(np.int32), pa.int32()),
                    table.column("fm_version").take(pa.array(result.latest_row)).combine_chunks().cast(pa.string()),
                ], names=["user_id", "embedding", "n_pairs", "fm_version"])

    return aggregate


def run(spark: SparkSession, config: SolarisConfig, as_of: datetime, run_id: str) -> UserAggregatesResult:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from solaris.storage.tables import RunRecord, merge_if_new_run, table_exists, table_version

    enrichment, dim = config.enrichment, config.model.embedding_dim
    record = RunRecord(run_id=run_id, job="user_aggregates", as_of=as_of)
    window_start = as_of - timedelta(hours=enrichment.window_hours)
    expires_at = as_of + timedelta(hours=enrichment.ttl_hours)
    log_path = config.table_path("pair_embeddings_log")
    if not table_exists(spark, log_path):
        log.warning("no pair_embeddings_log yet at %s: no user aggregates", log_path)
        record.write(spark, config, "success")
        return UserAggregatesResult(users=0, pairs=0, window_start=None)
    # One shuffle by user: the latest-row-per-pair window (partitioned by user, item) reuses it, and
    # each task then aggregates whole runs of users at once in numpy.
    latest = Window.partitionBy("user_id", "item_id").orderBy(F.col("computed_at").desc(), F.col("run_id").desc())
    pairs = (
        spark.read.format("delta").load(log_path)
        .where((F.col("computed_at") > F.lit(window_start)) & (F.col("computed_at") <= F.lit(as_of)))
        .select("user_id", "item_id", "embedding", "computed_at", "fm_version", "run_id")
        .repartition("user_id")
        .withColumn("_rank", F.row_number().over(latest)).where("_rank = 1")
        .select("user_id", "item_id", "embedding", F.unix_seconds("computed_at").alias("computed_s"), "fm_version")
        .sortWithinPartitions("user_id", "item_id")
    )
    aggregator = make_aggregator(dim, int(as_of.timestamp()), enrichment.aggregation, enrichment.half_life_hours,
                                 enrichment.l2_normalize)
    per_user = pairs.mapInArrow(aggregator, "user_id long, embedding binary, n_pairs int, fm_version string")
    constants = {"window_start": window_start, "window_end": as_of, "computed_at": as_of, "expires_at": expires_at,
                 "run_id": run_id}
    aggregates = per_user.select(*[(F.lit(constants[name]) if name in constants else F.col(name)).cast(kind).alias(name)
                                   for name, kind in (column.split() for column in SCHEMA.split(", "))])
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
