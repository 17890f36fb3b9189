"""Mean pair embedding per user (tier 3) or per item (tier 5) over a window: the Spark executor.

The rule is :func:`solaris.enrichment.aggregates.aggregate_users` (plain numpy); this module runs it
over ``pair_embeddings_log`` with one ``mapInArrow`` call per batch of whole keys (repartitioned by
key, sorted within partitions: no per-key Python call) and MERGEs the means into their table. The
``user_aggregates`` and ``item_aggregates`` stages both call :func:`write_window_means`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Callable, Iterator

from solaris.config import SolarisConfig
from solaris.storage.table import Table
from solaris.storage.validity import expires_at

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

# user_embeddings (and item_embeddings with item_id as the key), column order and types
SCHEMA = ("{key} long, embedding binary, n_pairs int, window_start timestamp, window_end timestamp, "
          "computed_at timestamp, expires_at timestamp, fm_version string, run_id string")


@dataclass(frozen=True)
class WindowMeans:
    """What :func:`write_window_means` wrote: keys (users or items) and the pair embeddings averaged."""

    keys: int
    pairs: int
    version: int | None


def make_aggregator(dim: int, key: str, as_of_s: int, *, mode: str, half_life_hours: float, l2_normalize: bool,
                    min_pairs: int = 1) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: rows sorted by ``key`` within the partition -> one row per key."""

    def aggregate(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import numpy as np
        import pyarrow as pa

        from solaris.enrichment.aggregates import aggregate_users, complete_groups
        from solaris.storage.embedding_codec import decode, encode_arrow

        for table in complete_groups(batches, key):
            result = aggregate_users(table.column(key).to_numpy(), decode(table.column("embedding"), dim),
                                     table.column("computed_s").to_numpy(), as_of_s, mode=mode,
                                     half_life_hours=half_life_hours, l2_normalize=l2_normalize)
            keep = result.n_pairs >= min_pairs
            if keep.any():
                yield pa.record_batch([
                    pa.array(result.user_ids[keep], pa.int64()), encode_arrow(result.embeddings[keep]),
                    pa.array(result.n_pairs[keep].astype(np.int32), pa.int32()),
                    table.column("fm_version").take(pa.array(result.latest_row[keep])).combine_chunks()
                    .cast(pa.string()),
                ], names=[key, "embedding", "n_pairs", "fm_version"])

    return aggregate


def write_window_means(spark: SparkSession, config: SolarisConfig, as_of: datetime, run_id: str, *, key: str,
                       table: str, window_hours: float, ttl_hours: float, min_pairs: int = 1,
                       only: DataFrame | None = None) -> WindowMeans:
    """Mean pair embedding per ``key`` (``user_id`` or ``item_id``) over ``(as_of - window, as_of]``,
    MERGEd into ``table`` on the key with ``expires_at = as_of + ttl``; the caller checked the log exists.
    ``only`` (a frame of ``key`` values): those keys only (the stream refreshes its batch's users).

    Shared by the user tier and the item tier: the same window, latest-row-per-pair and aggregation
    rule, grouped by the other side of the pair; only the pairs of the FM version of the key's newest
    pair are averaged (``fm_version`` is that version).
    """
    import pyarrow.compute as pc
    from pyspark.sql import Window
    from pyspark.sql import functions as F


    enrichment, dim = config.enrichment, config.model.embedding_dim
    other = "item_id" if key == "user_id" else "user_id"
    window_start = as_of - timedelta(hours=window_hours)
    expiry = expires_at(as_of, ttl_hours)
    # One shuffle by key: the latest-row-per-pair window (partitioned by key, other) reuses it, and
    # each task then aggregates whole runs of keys at once in numpy.
    latest = Window.partitionBy(key, other).orderBy(F.col("computed_at").desc(), F.col("run_id").desc())
    pairs = (
        Table.of(spark, config, "pair_embeddings_log").scan()
        .where((F.col("computed_at") > F.lit(window_start)) & (F.col("computed_at") <= F.lit(as_of)))
        .select("user_id", "item_id", "embedding", "computed_at", "fm_version", "run_id")
    )
    if only is not None:
        pairs = pairs.join(only.select(key), key, "left_semi")
    # the key's newest pair names the FM version its mean is of: embeddings of two FM versions lie in
    # different spaces, so a mean over both (the window after a new FM) would be of neither
    newest = Window.partitionBy(key).orderBy(F.col("computed_at").desc(), F.col("run_id").desc())
    pairs = (
        pairs.repartition(key)
        .withColumn("_rank", F.row_number().over(latest)).where("_rank = 1")
        .withColumn("_version", F.first("fm_version").over(newest)).where(F.col("fm_version") == F.col("_version"))
        .select(key, other, "embedding", F.unix_seconds("computed_at").alias("computed_s"), "fm_version")
        .sortWithinPartitions(key, other)
    )
    aggregator = make_aggregator(dim, key, int(as_of.timestamp()), mode=enrichment.aggregation,
                                 half_life_hours=enrichment.half_life_hours, l2_normalize=enrichment.l2_normalize,
                                 min_pairs=min_pairs)
    means = pairs.mapInArrow(aggregator, f"{key} long, embedding binary, n_pairs int, fm_version string")
    constants = {"window_start": window_start, "window_end": as_of, "computed_at": as_of, "expires_at": expiry,
                 "run_id": run_id}
    columns = (column.split() for column in SCHEMA.format(key=key).split(", "))
    rows = means.select(*[(F.lit(constants[name]) if name in constants else F.col(name)).cast(kind).alias(name)
                          for name, kind in columns])
    target = Table.of(spark, config, table)
    target.write(rows, run_id)
    written = target.run_rows(run_id, ("n_pairs",))
    averaged = pc.sum(written.column("n_pairs")).as_py() or 0
    return WindowMeans(keys=written.num_rows, pairs=int(averaged), version=target.version())
