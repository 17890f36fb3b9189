"""Tier 4: impute an embedding for users without a servable user aggregate, from their neighbours.

At ``--as-of t``: for every user in ``user_neighbors`` with no ``user_embeddings`` row servable at
``t`` (``expires_at > t``), the similarity-weighted mean of the aggregates of those neighbours
that have one (at least ``enrichment.min_neighbors``, similarity >= ``min_similarity``;
:func:`solaris.enrichment.aggregates.impute_users`, one ``mapInArrow`` call per batch of whole users,
repartitioned by user and sorted by neighbour rank). Written to ``imputed_embeddings`` with
provenance (``n_neighbors``, ``mean_similarity``) and ``expires_at = t + enrichment.ttl_hours``;
the label ``fm_version`` is that of the first listed neighbour with an aggregate.

    solaris impute --as-of 2000-12-01T03:00:00Z
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Callable, Iterator

from solaris.enrichment.aggregates import complete_groups, group_starts, impute_users
from solaris.runtime import JobInputError
from solaris.storage.audit import RunRecord
from solaris.storage.embedding_codec import decode, encode_arrow
from solaris.storage.table import Table
from solaris.storage.validity import expires_at
from solaris.tick import StepContext

if TYPE_CHECKING:  # pragma: no cover

    import numpy as np
    import pyarrow as pa


log = logging.getLogger("solaris.impute")

# imputed_embeddings, column order and types (the job selects and casts its output to it)
SCHEMA = ("user_id long, embedding binary, n_neighbors int, mean_similarity float, computed_at timestamp, "
          "expires_at timestamp, fm_version string, run_id string")


@dataclass(frozen=True)
class ImputeResult:
    """Users without a servable aggregate, how many of them got a tier-4 value, how many could not."""

    users_without_aggregate: int
    imputed: int
    not_imputable: int


PER_USER_SCHEMA = "user_id long, embedding binary, n_neighbors int, mean_similarity float, fm_version string"


def _spread(values: np.ndarray, fill: float, at: np.ndarray, n: int) -> np.ndarray:
    """``n`` rows: ``values`` at rows ``at``, ``fill`` elsewhere."""
    import numpy as np

    out = np.full((n, *values.shape[1:]), fill, dtype=values.dtype)
    out[at] = values
    return out


def make_imputer(dim: int, min_neighbors: int,
                 min_similarity: float) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: (user, neighbour) rows sorted by user and neighbour rank within the
    partition -> one row per user without an aggregate; ``embedding`` is null when not imputable."""
    def impute(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        for table in complete_groups(batches, "user_id"):
            users = table.column("user_id").to_numpy()
            users = users[group_starts(users)]
            has = table.filter(pc.is_valid(table.column("neighbor_embedding")))  # neighbours with an aggregate
            result = impute_users(has.column("user_id").to_numpy(), has.column("similarity").to_numpy(),
                                  decode(has.column("neighbor_embedding"), dim), min_neighbors=min_neighbors,
                                  min_similarity=min_similarity)
            at = np.searchsorted(users, result.user_ids)
            missed = np.ones(len(users), dtype=bool)
            missed[at] = False
            n = len(users)
            yield pa.record_batch([
                pa.array(users, pa.int64()),
                pc.if_else(pa.array(~missed), encode_arrow(_spread(result.embeddings, 0.0, at, n)),
                           pa.scalar(None, pa.binary())),
                pa.array(_spread(result.n_neighbors, 0, at, n).astype(np.int32), pa.int32(), mask=missed),
                pa.array(_spread(result.mean_similarity, 0.0, at, n), pa.float32(), mask=missed),
                has.column("fm_version").take(pa.array(_spread(result.first_row, 0, at, n), mask=missed))
                .combine_chunks().cast(pa.string()),
            ], names=["user_id", "embedding", "n_neighbors", "mean_similarity", "fm_version"])

    return impute


@dataclass(frozen=True)
class ImputeOptions:
    """None yet: ``enrichment.*`` settles everything (a field here would be a per-run choice)."""


def run(step: StepContext, *, options: ImputeOptions) -> ImputeResult:
    spark, config, as_of, run_id, tick = step.spark, step.config, step.as_of, step.run_id, step.tick
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    enrichment, dim = config.enrichment, config.model.embedding_dim
    record = RunRecord(run_id=run_id, job="impute", as_of=as_of)
    neighbors_table, users = Table.of(spark, config, "user_neighbors"), Table.of(spark, config, "user_embeddings")
    if not neighbors_table.exists():
        raise JobInputError(f"no user_neighbors at {neighbors_table.path}: run `solaris knn` first")
    neighbors = neighbors_table.frame()
    if users.exists():
        servable = users.frame(
            ["user_id", "embedding", "fm_version"], servable_at=as_of).select(
            F.col("user_id").alias("neighbor_id"), F.col("embedding").alias("neighbor_embedding"), "fm_version")
    else:
        servable = spark.createDataFrame([], "neighbor_id long, neighbor_embedding binary, fm_version string")
    missing = neighbors.join(servable.select(F.col("neighbor_id").alias("user_id")), "user_id", "left_anti")
    # every user without an aggregate keeps at least one row (outer explode, left join), so the same
    # pass that imputes also counts them
    pairs = (
        missing.select("user_id", F.posexplode_outer(F.arrays_zip("neighbor_ids", "similarities")).alias("pos", "n"))
        .select("user_id", "pos", F.col("n.neighbor_ids").alias("neighbor_id"),
                F.col("n.similarities").alias("similarity"))
        .join(servable, "neighbor_id", "left")
        .repartition("user_id").sortWithinPartitions("user_id", "pos")
    )
    expiry = expires_at(as_of, enrichment.ttl_hours)
    per_user = pairs.mapInArrow(make_imputer(dim, enrichment.min_neighbors, enrichment.min_similarity),
                                PER_USER_SCHEMA).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        constants = {"computed_at": as_of, "expires_at": expiry, "run_id": run_id}
        imputed = per_user.where(F.col("embedding").isNotNull()).select(
            *[(F.lit(constants[name]) if name in constants else F.col(name)).cast(kind).alias(name)
              for name, kind in (column.split() for column in SCHEMA.split(", "))])
        table = Table.of(spark, config, "imputed_embeddings")
        table.write(imputed, run_id)
        n_missing = per_user.count()  # users without an aggregate (the cached pass)
    finally:
        per_user.unpersist()
    n_written = table.run_rows(run_id).num_rows
    record.rows_in, record.rows_out = n_missing, n_written
    record.table_versions = {"imputed_embeddings": table.version()}
    result = ImputeResult(users_without_aggregate=n_missing, imputed=n_written, not_imputable=n_missing - n_written)
    record.details = asdict(result)
    record.write(spark, config, "success", tick)
    log.info("impute at %s: %d users without an aggregate, %d imputed from neighbours", as_of, n_missing, n_written)
    return result
