"""Publish a serving snapshot: quality gate, then an atomic manifest pinning Delta versions.

At ``--as-of t``: counts the servable rows (``expires_at > t``) of ``pair_embeddings``,
``user_embeddings``, ``imputed_embeddings``, ``item_embeddings`` and ``imputed_item_embeddings``,
checks every embedding is finite and of the configured dimension, and measures coverage (share of known users with a
servable user-keyed tier; the item tiers serve any user, so they are counted in rows, not users). A
snapshot with a failed check, or whose coverage fell by more than ``coverage_tolerance`` against
the previous one, is refused: nothing is published and the reasons are logged and recorded in
``runs``. Otherwise the manifest (``warehouse/snapshots/<id>.json``) and ``LATEST`` are written
atomically; the last ``snapshots_kept`` hourly manifests are kept, and the stream's since the
oldest of them (:func:`solaris.serving.snapshots.manifests_to_prune`).

    solaris publish --as-of 2000-12-01T03:00:00Z
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator

from solaris import provenance
from solaris.runtime import JobInputError
from solaris.serving.snapshots import (
    SNAPSHOTS_DIR,
    Manifest,
    ManifestCoverage,
    NeighborPairRule,
    PinnedTable,
    QualityGateError,
    ServableStats,
    latest_manifest_path,
    quality_gate,
    read_manifest,
    servable_stats,
    write_manifest,
)
from solaris.storage.audit import RunRecord
from solaris.storage.engine import Access, Engine, choose_engine
from solaris.storage.table import Table
from solaris.storage.validity import servable_column
from solaris.tick import StepContext
from solaris.timeutil import utc_stamp

if TYPE_CHECKING:  # pragma: no cover
    from datetime import datetime

    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

    from solaris.config import SolarisConfig, StorageConfig

log = logging.getLogger("solaris.publish")

EMBEDDING_TABLES = ("pair_embeddings", "user_embeddings", "imputed_embeddings", "item_embeddings",
                    "imputed_item_embeddings")
USER_KEYED_TABLES = ("pair_embeddings", "user_embeddings", "imputed_embeddings")


@dataclass(frozen=True)
class PublishResult:
    """The manifest written, servable rows per tier table, and the share of known users covered."""

    manifest: str
    coverage: float
    users_known: int
    row_counts: dict[str, int] = field(default_factory=dict)


def _flag_bad_rows(dim: int) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """The ``mapInPandas`` function: each row's ``embedding`` -> ``bad`` (missing, wrong size or not finite),
    vectorised; the rule of :func:`solaris.serving.snapshots.servable_stats`."""
    def flag(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        import numpy as np

        for part in frames:
            lengths = part["embedding"].map(lambda value: -1 if value is None else len(value)).to_numpy()
            ok_len = lengths == 4 * dim
            bad = ~ok_len
            if ok_len.any():
                values = np.frombuffer(b"".join(part.loc[ok_len, "embedding"]), dtype="<f4").reshape(-1, dim)
                bad[ok_len] = ~np.isfinite(values).all(axis=1)
            yield part.drop(columns=["embedding"]).assign(bad=bad)

    return flag


def _servable_stats(spark: SparkSession, pinned: dict[str, PinnedTable], known: DataFrame, as_of: datetime,
                    dim: int) -> ServableStats:
    """Servable rows and bad rows per tier table, known and covered users, and the pair rows' FM
    versions, in one Spark action (it used to be one job per table plus two more).

    Every tier's servable rows (at the pinned version) are unioned with a table tag, flagged bad
    by a vectorised check of the packed embedding, grouped per user (tier rows, bad rows, FM
    versions), and joined with the known users; one global aggregate sums it all.
    """
    from pyspark.sql import functions as F

    names = list(pinned)
    parts = [
        Table.at(spec.path, spark=spark).scan(spec.version)
        .where(servable_column(as_of))
        .select(F.lit(index).alias("tier_table"),
                # the item tier has no user: its rows count, but cover no known user (null never joins)
                (F.col("user_id") if name in USER_KEYED_TABLES else F.lit(None).cast("long")).alias("user_id"),
                "embedding",
                (F.col("fm_version") if name == "pair_embeddings" else F.lit(None)).cast("string").alias("fm_version"))
        for index, (name, spec) in enumerate(pinned.items())
    ]
    if parts:
        rows = parts[0]
        for part in parts[1:]:
            rows = rows.unionByName(part)
        flagged = rows.mapInPandas(_flag_bad_rows(dim), "tier_table int, user_id long, fm_version string, bad boolean")
        per_user = flagged.groupBy("user_id").agg(
            *[F.count_if(F.col("tier_table") == index).alias(f"rows_{index}") for index in range(len(names))],
            *[F.count_if((F.col("tier_table") == index) & F.col("bad")).alias(f"bad_{index}")
              for index in range(len(names))],
            F.collect_set("fm_version").alias("fm_versions"),
        ).withColumn("has_tier", F.lit(True))
        users = known.select("user_id", F.lit(True).alias("is_known")).join(per_user, "user_id", "full_outer")
        totals = users.agg(
            F.count_if(F.col("is_known")).alias("known"),
            F.count_if(F.col("is_known") & F.col("has_tier")).alias("covered"),
            *[F.coalesce(F.sum(f"{kind}_{index}"), F.lit(0)).alias(f"{kind}_{index}")
              for kind in ("rows", "bad") for index in range(len(names))],
            F.array_distinct(F.flatten(F.collect_list(F.coalesce("fm_versions", F.array().cast("array<string>")))))
            .alias("fm_versions"),
        ).collect()[0]
    else:
        totals = known.agg(F.count("*").alias("known"), F.lit(0).alias("covered"),
                           F.array().cast("array<string>").alias("fm_versions")).collect()[0]
    return ServableStats(
        rows={name: int(totals[f"rows_{index}"]) for index, name in enumerate(names)},
        bad={name: int(totals[f"bad_{index}"]) for index, name in enumerate(names)},
        users_known=int(totals["known"]), users_covered=int(totals["covered"]),
        fm_versions=sorted(str(version) for version in totals["fm_versions"]),
    )


def _servable_stats_on_driver(pinned: dict[str, PinnedTable], neighbors: PinnedTable, as_of: datetime, dim: int,
                              storage: StorageConfig) -> ServableStats | None:
    """:func:`_servable_stats` with ``deltalake`` and pyarrow on the driver, or None: Spark computes them.

    Why: the tier tables of a tick are small (the serving layer loads them whole), and Spark's one
    action over them still costs a snapshot and a file listing per table, a union, a Python UDF
    and a shuffle - seconds a tick, most of publish. Read here when every pinned table's row count
    is in its log's statistics and the engine rule takes their sum to the driver (a ``FRAME`` access
    of the pinned tables together, bounded by ``storage.driver_max_rows``); the rule is the same
    function of the same rows (:func:`solaris.serving.snapshots.servable_stats`).
    """
    specs = (*pinned.values(), neighbors)

    def total(_limit: int) -> int | None:
        counts = [Table.at(spec.path).log.row_count(spec.version) for spec in specs]
        # a file without statistics: no bound known before reading
        return None if any(count is None for count in counts) else sum(count or 0 for count in counts)

    try:
        if choose_engine(storage, [spec.path for spec in specs], Access.FRAME, count=total) is Engine.SPARK:
            return None
        tiers = {}
        for name, spec in pinned.items():
            columns = ["embedding", *(["user_id"] if name in USER_KEYED_TABLES else []),
                       *(["fm_version"] if name == "pair_embeddings" else [])]
            tiers[name] = Table.at(spec.path).servable_rows(as_of, columns, version=spec.version)
        known_rows = Table.at(neighbors.path).rows(["user_id"], version=neighbors.version)
        if known_rows is None or any(rows is None for rows in tiers.values()):
            return None  # deltalake could not read one (it logged why): Spark checks them
        known = known_rows.column("user_id")
    except Exception as error:  # noqa: BLE001 - e.g. a reader feature deltalake lacks: Spark can
        log.warning("publish: deltalake could not read the pinned tables (%s: %s); Spark checks them",
                    type(error).__name__, error)
        return None
    return servable_stats(tiers, known, dim, USER_KEYED_TABLES)


def _pinned(spark: SparkSession, path: str) -> PinnedTable:
    """The table at its latest committed version (the caller checked that it exists)."""
    version = Table.at(path, spark=spark).version()
    if version is None:
        raise RuntimeError(f"{path} vanished between its existence check and reading its version")
    return PinnedTable(path=path, version=version)


@dataclass(frozen=True)
class PublishOptions:
    """``snapshot_id``: the manifest's name (None: ``snapshot-<as-of stamp>``, the hourly one; the
    stream names its own: ``solaris.precompute.stream.snapshot_id``). ``enrichment.*`` settles the gate."""

    snapshot_id: str | None = None


def run(step: StepContext, *, options: PublishOptions) -> PublishResult:
    """Pin every tier table at its current version, count what is servable at the as-of, run the
    quality gate, then write the snapshot manifest (the one atomic step serving sees)."""
    spark, config, as_of, run_id, tick = step.spark, step.config, step.as_of, step.run_id, step.tick
    dim = config.model.embedding_dim
    record = RunRecord(run_id=run_id, job="publish", as_of=as_of)
    tables, stats = _pinned_tables_and_stats(spark, config, as_of)
    counts = {name: stats.rows.get(name, 0) for name in EMBEDDING_TABLES}
    bad = {name: stats.bad.get(name, 0) for name in EMBEDDING_TABLES}
    n_known, n_covered = stats.users_known, stats.users_covered
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
        record.write(spark, config, "refused", tick)
        raise QualityGateError("snapshot refused, nothing published: " + "; ".join(reasons))
    manifest = Manifest(
        snapshot_id=options.snapshot_id or f"snapshot-{utc_stamp(as_of)}",
        as_of=as_of.isoformat(),
        run_id=run_id,
        embedding_dim=dim,
        fm_versions=stats.fm_versions,
        tables=tables,
        row_counts=counts,
        coverage=ManifestCoverage(users_any_tier=coverage, users_known=n_known, users_covered=n_covered),
        neighbor_pairs=NeighborPairRule(config.enrichment.neighbor_pair_min_neighbors,
                                        config.enrichment.neighbor_pair_min_similarity)
        if config.enrichment.neighbor_pairs else None,
        provenance=provenance.collect(config, Table.of(spark, config, "events").log.digest(),
                                      {"fm": ",".join(stats.fm_versions)} if stats.fm_versions else {}),
    )
    manifest_path = write_manifest(directory, manifest, config.enrichment.snapshots_kept)
    record.rows_out = sum(counts.values())
    record.table_versions = {name: spec.version for name, spec in tables.items()}
    record.details["manifest"] = str(manifest_path)
    record.write(spark, config, "success", tick)
    log.info(
        "published %s: %s servable rows, coverage %.1f%% of %d known users",
        manifest_path,
        counts,
        100 * coverage,
        n_known,
    )
    return PublishResult(manifest=str(manifest_path), coverage=coverage, users_known=n_known, row_counts=counts)


def _pinned_tables_and_stats(spark: SparkSession, config: SolarisConfig, as_of: datetime
                             ) -> tuple[dict[str, PinnedTable], ServableStats]:
    """Every existing tier table and ``user_neighbors`` pinned at their current Delta versions, and
    the servable rows / users of those versions at ``as_of`` (on the driver when small enough)."""
    dim = config.model.embedding_dim
    tables: dict[str, PinnedTable] = {}
    log.info("publish at %s: checking servable rows of %s at their current Delta versions", as_of,
             ", ".join(EMBEDDING_TABLES))
    for name in EMBEDDING_TABLES:
        table = Table.of(spark, config, name)
        if table.exists():
            tables[name] = _pinned(spark, table.path)
    neighbors_table = Table.of(spark, config, "user_neighbors")
    if not neighbors_table.exists():
        raise JobInputError(f"no user_neighbors at {neighbors_table.path}: run `solaris knn` first")
    neighbors = _pinned(spark, neighbors_table.path)
    stats = _servable_stats_on_driver(dict(tables), neighbors, as_of, dim, config.storage)
    if stats is None:
        # the known users at the version the manifest pins, like every tier table
        known = neighbors_table.scan(neighbors.version)
        stats = _servable_stats(spark, dict(tables), known.select("user_id"), as_of, dim)
    tables["user_neighbors"] = neighbors
    return tables, stats
