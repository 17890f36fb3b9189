"""Tier 3: impute an embedding for users without a servable user aggregate, from their neighbours.

At ``--as-of t``: for every user in ``user_neighbors`` with no ``user_embeddings`` row servable at
``t`` (``expires_at > t``), the similarity-weighted mean of the aggregates of those neighbours
that have one (at least ``enrichment.min_neighbors``, similarity >= ``min_similarity``;
:func:`solaris.enrichment.impute_from_neighbors`). Written to ``imputed_embeddings`` with
provenance (``n_neighbors``, ``mean_similarity``) and ``expires_at = t + enrichment.ttl_hours``.

    solaris impute --as-of 2000-12-01T03:00:00Z
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import asdict, dataclass
from datetime import timedelta

from solaris.runtime import job_parser, run_stage

log = logging.getLogger("solaris.impute")

SCHEMA = ("user_id long, embedding binary, n_neighbors int, mean_similarity float, computed_at timestamp, "
          "expires_at timestamp, fm_version string, run_id string")


@dataclass(frozen=True)
class ImputeResult:
    """Users without a servable aggregate, how many of them got a tier-3 value, how many could not."""

    users_without_aggregate: int
    imputed: int
    not_imputable: int


def build_parser() -> argparse.ArgumentParser:
    return job_parser("solaris impute", __doc__)


def run(spark, config, as_of, run_id: str) -> ImputeResult:
    import pandas as pd
    from pyspark.sql import functions as F

    from solaris.embedding_codec import decode
    from solaris.enrichment import impute_from_neighbors
    from solaris.runtime import JobInputError
    from solaris.tables import RunRecord, merge_if_new_run, table_exists, table_version

    enrichment, dim = config.enrichment, config.model.embedding_dim
    record = RunRecord(run_id=run_id, job="impute", as_of=as_of)
    neighbors_path, users_path = config.table_path("user_neighbors"), config.table_path("user_embeddings")
    if not table_exists(spark, neighbors_path):
        raise JobInputError(f"no user_neighbors at {neighbors_path}: run `solaris knn` first")
    neighbors = spark.read.format("delta").load(neighbors_path)
    if table_exists(spark, users_path):
        servable = spark.read.format("delta").load(users_path).where(F.col("expires_at") > F.lit(as_of)).select(
            F.col("user_id").alias("neighbor_id"), F.col("embedding").alias("neighbor_embedding"), "fm_version")
    else:
        servable = spark.createDataFrame([], "neighbor_id long, neighbor_embedding binary, fm_version string")
    missing = neighbors.join(servable.select(F.col("neighbor_id").alias("user_id")), "user_id", "left_anti")
    pairs = (
        missing.select("user_id", F.posexplode(F.arrays_zip("neighbor_ids", "similarities")).alias("pos", "n"))
        .select("user_id", F.col("n.neighbor_ids").alias("neighbor_id"), F.col("n.similarities").alias("similarity"))
        .join(servable, "neighbor_id", "left")
    )
    expires_at = as_of + timedelta(hours=enrichment.ttl_hours)

    def per_user(frame: pd.DataFrame) -> pd.DataFrame:
        none = pd.DataFrame(columns=[c.split()[0] for c in SCHEMA.split(", ")])
        has = frame["neighbor_embedding"].notna().to_numpy()
        if not has.any():
            return none
        # neighbours without an aggregate get a zero placeholder; `has` keeps them out of the mean
        stacked = decode([value if ok else b"\x00" * 4 * dim
                          for value, ok in zip(frame["neighbor_embedding"], has)], dim)
        result = impute_from_neighbors(frame["similarity"].to_numpy(), stacked, has,
                                       enrichment.min_neighbors, enrichment.min_similarity)
        if result is None:
            return none
        version = frame.loc[has, "fm_version"].iloc[0]
        return pd.DataFrame({
            "user_id": [int(frame["user_id"].iloc[0])], "embedding": [result.embedding.astype("<f4").tobytes()],
            "n_neighbors": [result.n_neighbors], "mean_similarity": [result.mean_similarity],
            "computed_at": [pd.Timestamp(as_of)], "expires_at": [pd.Timestamp(expires_at)],
            "fm_version": [version], "run_id": [run_id],
        })

    imputed = pairs.groupBy("user_id").applyInPandas(per_user, SCHEMA)
    path = config.table_path("imputed_embeddings")
    merge_if_new_run(imputed, path, keys=["user_id"])
    n_missing = missing.count()
    n_written = spark.read.format("delta").load(path).where(F.col("run_id") == run_id).count()
    record.rows_in, record.rows_out = n_missing, n_written
    record.table_versions = {"imputed_embeddings": table_version(spark, path)}
    result = ImputeResult(users_without_aggregate=n_missing, imputed=n_written, not_imputable=n_missing - n_written)
    record.details = asdict(result)
    record.write(spark, config, "success")
    log.info("impute at %s: %d users without an aggregate, %d imputed from neighbours", as_of, n_missing, n_written)
    return result


def main(argv: list[str] | None = None) -> int:
    return run_stage(
        build_parser(), argv, "impute", "enrichment",
        run=lambda spark, config, args, run_id: run(spark, config, args.as_of, run_id),
        report=lambda config, result: f"imputed_embeddings: {config.table_path('imputed_embeddings')} imputed={result.imputed}",
    )


if __name__ == "__main__":
    sys.exit(main())
