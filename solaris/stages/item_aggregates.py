"""Item tiers: per-item mean of the pair embeddings computed in the last window (tier 5, default
24 h), and for the other recently engaged items, imputation from the FM's item space (tier 6).

Why: tiers 1-4 are keyed by the requesting user, so a user with no event before the snapshot (the
first hour of an onboarding burst) is served nothing. The item's own mean interaction embedding is
the best a brand-new user can get: it says how the FM sees this item across the users it was just
scored for. The resolver tries it last (``solaris.tiers.TIER_ITEM``).

At ``--as-of t``: reads ``pair_embeddings_log`` rows with ``t - enrichment.item_window_hours <
computed_at <= t`` (the latest row per pair, so a pair re-scored every hour is not over-weighted),
averages each item's embeddings over the users it was scored for (the user tier's executor,
``solaris.enrichment.window_means.write_window_means``, keyed by item; items with fewer than
``enrichment.item_min_pairs`` finite pairs get no row), and MERGEs ``item_embeddings`` on ``item_id``
with ``expires_at = t + enrichment.item_ttl_hours``.

Tier 6: the items with an event in ``(t - enrichment.item_catalog_hours, t]`` and no servable
aggregate at ``t`` borrow the similarity-weighted mean of the aggregates of their
``enrichment.item_neighbors`` nearest items in the FM's item space
(:func:`solaris.enrichment.items.impute_items`), MERGEd into ``imputed_item_embeddings`` on
``item_id`` with the same TTL and provenance (``n_neighbors``, ``similarity``). Both sides are
collected to the driver: they are the recently engaged catalogue (thousands to a few hundred
thousand items), not the users or the pairs - so they are read back and merged with ``deltalake``
(``Table.servable_rows`` / ``Table.write_rows``), without Spark's per-query
and per-MERGE fixed costs. ``item_neighbors: 0`` turns tier 6 off.

Rerunning the same run id changes nothing.

    solaris item-aggregates --as-of 2000-12-01T03:00:00Z
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, cast

from solaris.enrichment.items import impute_items
from solaris.enrichment.window_means import write_window_means
from solaris.precompute.spark_features import visible_events, within_hours
from solaris.storage.audit import RunRecord
from solaris.storage.embedding_codec import decode
from solaris.storage.table import Table
from solaris.storage.validity import expires_at
from solaris.tick import StepContext

if TYPE_CHECKING:  # pragma: no cover
    from datetime import datetime

    import pyarrow as pa
    from pyspark.sql import SparkSession

    from solaris.config import SolarisConfig
    from solaris.models.fm import FoundationModel
    from solaris.tick import Tick

log = logging.getLogger("solaris.item_aggregates")


@dataclass(frozen=True)
class ItemAggregatesResult:
    """Items whose aggregate this run wrote, from how many pair embeddings, since when; items imputed."""

    items: int
    pairs: int
    window_start: str | None
    imputed_items: int = 0


def imputed_item_schema() -> pa.Schema:
    """imputed_item_embeddings, column order and types (Arrow: tier 6 is written from the driver)."""
    import pyarrow as pa

    stamp = pa.timestamp("us", tz="UTC")
    return pa.schema([
        ("item_id", pa.int64()), ("embedding", pa.binary()), ("n_neighbors", pa.int32()), ("similarity", pa.float32()),
        ("computed_at", stamp), ("expires_at", stamp), ("fm_version", pa.string()), ("run_id", pa.string()),
    ])


def impute_missing_items(spark: SparkSession, config: SolarisConfig, as_of: datetime,
                         run_id: str, tick: Tick | None = None) -> tuple[int, int | None]:
    """Tier 6 at ``as_of``: write ``imputed_item_embeddings`` -> (rows this run wrote, table version)."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import torch

    from solaris.models.checkpoint import load_checkpoint, resolve_checkpoint

    enrichment, dim = config.enrichment, config.model.embedding_dim
    aggregates = Table.of(spark, config, "item_embeddings")
    imputed_items = Table.of(spark, config, "imputed_item_embeddings")
    if aggregates.exists():
        sources = aggregates.servable_rows(as_of, ["item_id", "embedding"])
        source_ids = sources.column("item_id").to_numpy().astype(np.int64)
        source_embeddings = decode(sources.column("embedding"), dim)
    else:
        source_ids, source_embeddings = np.empty(0, np.int64), np.empty((0, dim), np.float32)
    engaged = (visible_events(spark, config, as_of, tick).where(within_hours(enrichment.item_catalog_hours))
               .select("item_id").distinct().toArrow().column("item_id").to_numpy().astype(np.int64))
    targets = np.setdiff1d(engaged, source_ids)
    fm_dir = resolve_checkpoint(config.resolve_under_warehouse(config.precompute.fm_checkpoint))
    fm, fm_meta = load_checkpoint(fm_dir, "fm", dim)
    item_space = cast("FoundationModel", fm).item_emb
    with torch.no_grad():
        def fm_vectors(ids: np.ndarray) -> np.ndarray:
            return item_space(torch.as_tensor(ids, dtype=torch.long)).numpy().astype(np.float32)

        imputed = impute_items(targets, fm_vectors(targets), source_ids=source_ids,
                               source_vectors=fm_vectors(source_ids), source_embeddings=source_embeddings,
                               k=enrichment.item_neighbors, min_similarity=enrichment.item_neighbor_min_similarity)
    rows = pd.DataFrame({
        "item_id": imputed.item_ids,
        "embedding": [vector.astype("<f4").tobytes() for vector in imputed.embeddings],
        "n_neighbors": imputed.n_neighbors,
        "similarity": imputed.similarity,
        "computed_at": pd.Timestamp(as_of),
        "expires_at": pd.Timestamp(expires_at(as_of, enrichment.item_ttl_hours)),
        "fm_version": str(fm_meta["version"]),
        "run_id": run_id,
    })
    imputed_items.write_rows(pa.Table.from_pandas(rows, schema=imputed_item_schema(), preserve_index=False))
    log.info("imputed items at %s: %d of %d engaged items without an aggregate (from %d aggregates)",
             as_of, imputed.item_ids.size, targets.size, source_ids.size)
    return int(imputed.item_ids.size), imputed_items.version()


@dataclass(frozen=True)
class ItemAggregatesOptions:
    """None yet: ``enrichment.*`` settles everything (a field here would be a per-run choice)."""


def run(step: StepContext, *, options: ItemAggregatesOptions) -> ItemAggregatesResult:
    spark, config, as_of, run_id, tick = step.spark, step.config, step.as_of, step.run_id, step.tick
    enrichment = config.enrichment
    record = RunRecord(run_id=run_id, job="item_aggregates", as_of=as_of)
    log_path = config.table_path("pair_embeddings_log")
    if not Table.of(spark, config, "pair_embeddings_log").exists():
        log.warning("no pair_embeddings_log yet at %s: no item aggregates", log_path)
        record.write(spark, config, "success", tick)
        return ItemAggregatesResult(items=0, pairs=0, window_start=None)
    window_start = as_of - timedelta(hours=enrichment.item_window_hours)
    means = write_window_means(spark, config, as_of, run_id, key="item_id", table="item_embeddings",
                               window_hours=enrichment.item_window_hours, ttl_hours=enrichment.item_ttl_hours,
                               min_pairs=enrichment.item_min_pairs)
    record.table_versions = {"item_embeddings": means.version}
    imputed = 0
    if enrichment.item_neighbors > 0:
        imputed, version = impute_missing_items(spark, config, as_of, run_id, tick)
        record.table_versions["imputed_item_embeddings"] = version
    result = ItemAggregatesResult(items=means.keys, pairs=means.pairs, window_start=window_start.isoformat(),
                                  imputed_items=imputed)
    record.rows_out, record.rows_in = means.keys + imputed, means.pairs
    record.details = asdict(result)
    record.write(spark, config, "success", tick)
    log.info("item aggregates at %s: %d items from %d pair embeddings computed since %s",
             as_of, means.keys, means.pairs, window_start)
    return result
