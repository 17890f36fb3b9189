"""Publish a serving snapshot: quality gate, then an atomic manifest pinning Delta versions.

At ``--as-of t``: counts the servable rows (``expires_at > t``) of ``pair_embeddings``,
``user_embeddings``, ``imputed_embeddings`` and ``item_embeddings``, checks every embedding is
finite and of the configured dimension, and measures coverage (share of known users with a
servable user-keyed tier; the item tier serves any user, so it is counted in rows, not users). A
snapshot with a failed check, or whose coverage fell by more than ``coverage_tolerance`` against
the previous one, is refused: nothing is published and the reasons are logged and recorded in
``runs``. Otherwise the manifest (``warehouse/snapshots/<id>.json``) and ``LATEST`` are written
atomically; the last ``snapshots_kept`` manifests are kept.

    solaris publish --as-of 2000-12-01T03:00:00Z
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

from solaris.runtime import job_parser, run_stage

if TYPE_CHECKING:  # pragma: no cover
    from datetime import datetime

    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

    from solaris.config import SolarisConfig
    from solaris.serving.snapshots import PinnedTable

log = logging.getLogger("solaris.publish")

EMBEDDING_TABLES = ("pair_embeddings", "user_embeddings", "imputed_embeddings", "item_embeddings")
USER_KEYED_TABLES = ("pair_embeddings", "user_embeddings", "imputed_embeddings")


@dataclass(frozen=True)
class PublishResult:
    """The manifest written, servable rows per tier table, and the share of known users covered."""

    manifest: str
    coverage: float
    users_known: int
    row_counts: dict[str, int] = field(default_factory=dict)


def build_parser() -> argparse.ArgumentParser:
    return job_parser("solaris publish", __doc__)


def _rows_and_bad_rows(frame: DataFrame, dim: int) -> tuple[int, int]:
    """Servable rows and how many of them have a wrong-size or non-finite embedding, in one pass."""
    import numpy as np
    import pandas as pd

    def count(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for part in frames:
            lengths = part["embedding"].map(len).to_numpy()
            ok_len = lengths == 4 * dim
            bad = int((~ok_len).sum())
            if ok_len.any():
                values = np.frombuffer(b"".join(part.loc[ok_len, "embedding"]), dtype="<f4").reshape(-1, dim)
                bad += int((~np.isfinite(values).all(axis=1)).sum())
            yield pd.DataFrame({"rows": [len(part)], "bad": [bad]})

    row = (
        frame.select("embedding")
        .mapInPandas(count, "rows long, bad long")
        .agg({"rows": "sum", "bad": "sum"})
        .collect()[0]
    )
    return int(row["sum(rows)"] or 0), int(row["sum(bad)"] or 0)


def _pinned(spark: SparkSession, path: str) -> PinnedTable:
    """The table at its latest committed version (the caller checked that it exists)."""
    from solaris.serving.snapshots import PinnedTable
    from solaris.storage.tables import table_version

    version = table_version(spark, path)
    if version is None:
        raise RuntimeError(f"{path} vanished between its existence check and reading its version")
    return PinnedTable(path=path, version=version)


def run(spark: SparkSession, config: SolarisConfig, as_of: datetime, run_id: str) -> PublishResult:
    from pyspark.sql import functions as F

    from solaris.runtime import JobInputError
    from solaris.serving.snapshots import (
        SNAPSHOTS_DIR,
        Manifest,
        ManifestCoverage,
        NeighborPairRule,
        QualityGateError,
        latest_manifest_path,
        quality_gate,
        read_manifest,
        write_manifest,
    )
    from solaris.storage.tables import RunRecord, table_exists
    from solaris.timeutil import utc_stamp

    dim = config.model.embedding_dim
    record = RunRecord(run_id=run_id, job="publish", as_of=as_of)
    tables: dict[str, PinnedTable] = {}
    counts: dict[str, int] = {}
    bad: dict[str, int] = {}
    users_by_tier: dict[str, DataFrame] = {}
    log.info(
        "publish %s: checking servable rows of %s at their current Delta versions", run_id, ", ".join(EMBEDDING_TABLES)
    )
    for name in EMBEDDING_TABLES:
        path = config.table_path(name)
        if not table_exists(spark, path):
            counts[name], bad[name] = 0, 0
            continue
        pinned = _pinned(spark, path)
        version = pinned.version
        frame = (
            spark.read.format("delta")
            .option("versionAsOf", version)
            .load(path)
            .where(F.col("expires_at") > F.lit(as_of))
        )
        counts[name], bad[name] = _rows_and_bad_rows(frame, dim)
        if name in USER_KEYED_TABLES:
            users_by_tier[name] = frame.select("user_id").distinct()
        tables[name] = pinned
    neighbors_path = config.table_path("user_neighbors")
    if not table_exists(spark, neighbors_path):
        raise JobInputError(f"no user_neighbors at {neighbors_path}: run `solaris knn` first")
    known = spark.read.format("delta").load(neighbors_path).select("user_id")
    tables["user_neighbors"] = _pinned(spark, neighbors_path)
    covered = None
    for frame in users_by_tier.values():
        covered = frame if covered is None else covered.union(frame)
    if covered is None:
        n_known, n_covered = known.count(), 0
    else:  # known users and those with a servable tier, in one Spark job
        flags = known.join(covered.distinct().withColumn("covered", F.lit(True)), "user_id", "left")
        totals = flags.agg(F.count("*").alias("known"), F.count_if(F.col("covered")).alias("covered")).collect()[0]
        n_known, n_covered = int(totals["known"]), int(totals["covered"])
    coverage = n_covered / n_known if n_known else 0.0

    directory = config.warehouse / SNAPSHOTS_DIR
    previous_path = latest_manifest_path(directory)
    previous = read_manifest(previous_path) if previous_path and previous_path.is_file() else None
    previous_coverage = previous.coverage.users_any_tier if previous and previous.coverage else None
    reasons = quality_gate(counts, bad, coverage, previous_coverage, config.enrichment.coverage_tolerance)
    record.details = {
        "row_counts": counts,
        "bad_rows": bad,
        "users_known": n_known,
        "coverage": coverage,
        "previous_coverage": previous_coverage,
    }
    if reasons:
        record.details["refused"] = reasons
        record.write(spark, config, "refused")
        raise QualityGateError("snapshot refused, nothing published: " + "; ".join(reasons))
    fm_versions = set()
    if "pair_embeddings" in tables:  # the versions of what the manifest pins, not of the latest table
        pinned = tables["pair_embeddings"]
        fm_versions = {
            row[0]
            for row in spark.read.format("delta")
            .option("versionAsOf", pinned.version)
            .load(pinned.path)
            .where(F.col("expires_at") > F.lit(as_of))
            .select("fm_version")
            .distinct()
            .collect()
        }
    manifest = Manifest(
        snapshot_id=f"snapshot-{utc_stamp(as_of)}",
        as_of=as_of.isoformat(),
        run_id=run_id,
        embedding_dim=dim,
        fm_versions=sorted(str(v) for v in fm_versions),
        tables=tables,
        row_counts=counts,
        coverage=ManifestCoverage(users_any_tier=coverage, users_known=n_known, users_covered=n_covered),
        neighbor_pairs=NeighborPairRule(config.enrichment.neighbor_pair_min_neighbors,
                                        config.enrichment.neighbor_pair_min_similarity)
        if config.enrichment.neighbor_pairs else None,
    )
    manifest_path = write_manifest(directory, manifest, config.enrichment.snapshots_kept)
    record.rows_out = sum(counts.values())
    record.table_versions = {name: spec.version for name, spec in tables.items()}
    record.details["manifest"] = str(manifest_path)
    record.write(spark, config, "success")
    log.info(
        "published %s: %s servable rows, coverage %.1f%% of %d known users",
        manifest_path,
        counts,
        100 * coverage,
        n_known,
    )
    return PublishResult(manifest=str(manifest_path), coverage=coverage, users_known=n_known, row_counts=counts)


def main(argv: list[str] | None = None) -> int:
    return run_stage(
        build_parser(),
        argv,
        "publish",
        "enrichment",
        run=lambda spark, config, args, run_id: run(spark, config, args.as_of, run_id),
        report=lambda config, result: f"snapshot: {result.manifest} coverage={result.coverage:.3f}",
    )


if __name__ == "__main__":
    sys.exit(main())
