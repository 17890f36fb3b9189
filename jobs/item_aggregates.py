"""Item tier: per-item mean of the pair embeddings computed in the last window (default 24 h).

Why: tiers 1-3 are keyed by the requesting user, so a user with no event before the snapshot (the
first hour of an onboarding burst) is served nothing. The item's own mean interaction embedding is
the best a brand-new user can get: it says how the FM sees this item across the users it was just
scored for. The resolver tries it last (``solaris.tiers.TIER_ITEM``).

At ``--as-of t``: reads ``pair_embeddings_log`` rows with ``t - enrichment.item_window_hours <
computed_at <= t`` (the latest row per pair, so a pair re-scored every hour is not over-weighted),
averages each item's embeddings over the users it was scored for (same rule as the user aggregates,
:func:`solaris.enrichment.aggregates.aggregate_users`, keyed by item; items with fewer than
``enrichment.item_min_pairs`` finite pairs get no row), and MERGEs ``item_embeddings`` on ``item_id``
with ``expires_at = t + enrichment.item_ttl_hours``. Rerunning the same run id changes nothing.

    solaris item-aggregates --as-of 2000-12-01T03:00:00Z
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

log = logging.getLogger("solaris.item_aggregates")

# item_embeddings, column order and types (the job selects and casts its output to it)
SCHEMA = ("item_id long, embedding binary, n_pairs int, window_start timestamp, window_end timestamp, "
          "computed_at timestamp, expires_at timestamp, fm_version string, run_id string")


@dataclass(frozen=True)
class ItemAggregatesResult:
    """Items whose aggregate this run wrote, from how many pair embeddings, since when."""

    items: int
    pairs: int
    window_start: str | None


def build_parser() -> argparse.ArgumentParser:
    return job_parser("solaris item-aggregates", __doc__)


def make_item_aggregator(dim: int, as_of_s: int, mode: str, half_life_hours: float, l2_normalize: bool,
                         min_pairs: int) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: rows sorted by item within the partition -> one row per item."""

    def aggregate(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import numpy as np
        import pyarrow as pa

        from solaris.enrichment.aggregates import aggregate_users, complete_groups
        from solaris.storage.embedding_codec import decode, encode_arrow

        for table in complete_groups(batches, "item_id"):
            result = aggregate_users(table.column("item_id").to_numpy(), decode(table.column("embedding"), dim),
                                     table.column("computed_s").to_numpy(), as_of_s, mode, half_life_hours,
                                     l2_normalize)
            keep = result.n_pairs >= min_pairs
            if keep.any():
                yield pa.record_batch([
                    pa.array(result.user_ids[keep], pa.int64()), encode_arrow(result.embeddings[keep]),
                    pa.array(result.n_pairs[keep].astype(np.int32), pa.int32()),
                    table.column("fm_version").take(pa.array(result.latest_row[keep])).combine_chunks()
                    .cast(pa.string()),
                ], names=["item_id", "embedding", "n_pairs", "fm_version"])

    return aggregate


def run(spark: SparkSession, config: SolarisConfig, as_of: datetime, run_id: str) -> ItemAggregatesResult:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from solaris.storage.tables import RunRecord, merge_if_new_run, table_exists, table_version

    enrichment, dim = config.enrichment, config.model.embedding_dim
    record = RunRecord(run_id=run_id, job="item_aggregates", as_of=as_of)
    window_start = as_of - timedelta(hours=enrichment.item_window_hours)
    expires_at = as_of + timedelta(hours=enrichment.item_ttl_hours)
    log_path = config.table_path("pair_embeddings_log")
    if not table_exists(spark, log_path):
        log.warning("no pair_embeddings_log yet at %s: no item aggregates", log_path)
        record.write(spark, config, "success")
        return ItemAggregatesResult(items=0, pairs=0, window_start=None)
    # One shuffle by item; the latest-row-per-pair window (partitioned by item, user) reuses it.
    latest = Window.partitionBy("item_id", "user_id").orderBy(F.col("computed_at").desc(), F.col("run_id").desc())
    pairs = (
        spark.read.format("delta").load(log_path)
        .where((F.col("computed_at") > F.lit(window_start)) & (F.col("computed_at") <= F.lit(as_of)))
        .select("user_id", "item_id", "embedding", "computed_at", "fm_version", "run_id")
        .repartition("item_id")
        .withColumn("_rank", F.row_number().over(latest)).where("_rank = 1")
        .select("item_id", "user_id", "embedding", F.unix_seconds("computed_at").alias("computed_s"), "fm_version")
        .sortWithinPartitions("item_id", "user_id")
    )
    aggregator = make_item_aggregator(dim, int(as_of.timestamp()), enrichment.aggregation,
                                      enrichment.half_life_hours, enrichment.l2_normalize, enrichment.item_min_pairs)
    per_item = pairs.mapInArrow(aggregator, "item_id long, embedding binary, n_pairs int, fm_version string")
    constants = {"window_start": window_start, "window_end": as_of, "computed_at": as_of, "expires_at": expires_at,
                 "run_id": run_id}
    aggregates = per_item.select(*[(F.lit(constants[name]) if name in constants else F.col(name)).cast(kind).alias(name)
                                   for name, kind in (column.split() for column in SCHEMA.split(", "))])
    path = config.table_path("item_embeddings")
    merge_if_new_run(aggregates, path, keys=["item_id"])
    written = spark.read.format("delta").load(path).where(F.col("run_id") == run_id)
    stats = written.agg(F.count("*").alias("items"), F.coalesce(F.sum("n_pairs"), F.lit(0)).alias("pairs")).collect()[0]
    result = ItemAggregatesResult(items=int(stats["items"]), pairs=int(stats["pairs"]),
                                  window_start=window_start.isoformat())
    record.rows_out, record.rows_in = result.items, result.pairs
    record.table_versions = {"item_embeddings": table_version(spark, path)}
    record.details = asdict(result)
    record.write(spark, config, "success")
    log.info("item aggregates at %s: %d items from %d pair embeddings computed since %s",
             as_of, result.items, result.pairs, window_start)
    return result


def main(argv: list[str] | None = None) -> int:
    return run_stage(
        build_parser(), argv, "item-aggregates", "enrichment",
        run=lambda spark, config, args, run_id: run(spark, config, args.as_of, run_id),
        report=lambda config, result: f"item_embeddings: {config.table_path('item_embeddings')} items={result.items}",
    )


if __name__ == "__main__":
    sys.exit(main())
