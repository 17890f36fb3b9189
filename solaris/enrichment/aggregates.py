"""Hierarchical gap filling, the pure math (numpy only): tier 3 user aggregates, tier 4 imputation.

* :func:`aggregate_users` - a user's embedding is the mean of their pair embeddings computed in the
  window (plain, or recency-weighted with a half-life so the last hours count more), optionally
  L2-normalised. Tier 3 serves it for any item of that user.
* :func:`impute_users` - a user with no servable user aggregate (tier 3) borrows the
  similarity-weighted mean of their KNN neighbours' aggregates; only neighbours that have one and
  whose similarity clears the floor count, and too few of them means no imputation (tier stays
  "none" rather than serving noise).

Both take *many users per call*: one input row per (user, pair) or (user, neighbour), the rows of
a user contiguous and the user ids ascending. Each user's sum is one ``np.add.reduceat`` segment,
so the cost is a few vectorised passes over the rows whatever the number of users. The Spark jobs
repartition by ``user_id``, sort within partitions and hand whole runs of users to these functions
(:func:`complete_groups` re-cuts the Arrow batch stream so that no user is split between calls);
keeping the math here makes it testable without a JVM and identical wherever it runs.

Sums are taken in float64 and the results cast to float32 (the stored layout).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np

AGGREGATION_MODES = ("mean", "recency")


def group_starts(user_ids: np.ndarray) -> np.ndarray:
    """Start offsets of the runs of equal ids in an ascending id array (no rows: no groups)."""
    ids = np.asarray(user_ids)
    if ids.ndim != 1:
        raise ValueError(f"user ids must be 1-D, got shape {ids.shape}")
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64)
    step = np.diff(ids)
    if (step < 0).any():
        raise ValueError("user ids must be ascending (the rows of a user contiguous)")
    return np.flatnonzero(np.r_[True, step != 0])


def _segment_sums(weights: np.ndarray, vectors: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per segment: sum of ``weights * vectors`` (float64 ``[g, D]``) and sum of ``weights`` (``[g]``)."""
    if starts.size == 0:
        return np.zeros((0, vectors.shape[1])), np.zeros(0)
    return np.add.reduceat(weights[:, None] * vectors, starts, axis=0), np.add.reduceat(weights, starts)


@dataclass(frozen=True)
class UserAggregates:
    """One row per user that got an aggregate, user ids ascending."""

    user_ids: np.ndarray  # int64 [m]
    embeddings: np.ndarray  # float32 [m, D]
    n_pairs: np.ndarray  # int64 [m]: finite pair embeddings averaged
    latest_row: np.ndarray  # int64 [m]: input row of the user's latest pair (its fm_version labels the aggregate)


def aggregate_users(
    user_ids: np.ndarray,
    embeddings: np.ndarray,
    computed_at_seconds: np.ndarray,
    as_of_seconds: int,
    *,
    mode: str = "mean",
    half_life_hours: float = 6.0,
    l2_normalize: bool = False,
) -> UserAggregates:
    """Mean (``mode="mean"``) or recency-weighted mean (``"recency"``) of every user's embeddings.

    Rows with a non-finite value are left out (a user with none left gets no row); with
    ``l2_normalize`` a zero mean gets no row either. ``latest_row`` is the user's row with the
    largest ``computed_at`` (ties: the later row), finite or not.
    """
    if mode not in AGGREGATION_MODES:
        raise ValueError(f"unknown aggregation mode {mode!r}; expected 'mean' or 'recency'")
    if mode == "recency" and half_life_hours <= 0:
        raise ValueError("half_life_hours must be positive")
    ids = all_ids = np.asarray(user_ids, dtype=np.int64)
    vectors = np.asarray(embeddings, dtype=np.float64)
    computed = np.asarray(computed_at_seconds, dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[0] != ids.shape[0] or computed.shape != ids.shape:
        raise ValueError(f"expected [n] ids, [n, D] embeddings, [n] times; "
                         f"got {ids.shape}, {vectors.shape}, {computed.shape}")
    all_starts = group_starts(ids)
    # sorted by (user, computed_at, row): the last row of each user's run is their latest pair
    order = np.lexsort((np.arange(ids.size), computed, ids))
    latest_all = order[np.r_[all_starts[1:], ids.size] - 1] if ids.size else np.zeros(0, dtype=np.int64)

    finite = np.isfinite(vectors).all(axis=1)
    ids, vectors, computed = ids[finite], vectors[finite], computed[finite]
    starts = group_starts(ids)
    if mode == "mean":
        weights = np.ones(ids.size)
    else:
        ages = (as_of_seconds - computed) / 3600.0
        weights = np.power(0.5, np.maximum(ages, 0.0) / half_life_hours)
    sums, totals = _segment_sums(weights, vectors, starts)
    means = sums / totals[:, None]
    users = ids[starts]
    counts = np.diff(np.r_[starts, ids.size]).astype(np.int64)
    if l2_normalize:
        norms = np.linalg.norm(means, axis=1)
        keep = norms != 0.0
        means, users, counts = means[keep] / norms[keep, None], users[keep], counts[keep]
    latest = latest_all[np.searchsorted(all_ids[all_starts], users)]
    return UserAggregates(users, means.astype(np.float32), counts, latest.astype(np.int64))


@dataclass(frozen=True)
class Imputations:
    """One row per user that got an imputed embedding, user ids ascending."""

    user_ids: np.ndarray  # int64 [m]
    embeddings: np.ndarray  # float32 [m, D]
    n_neighbors: np.ndarray  # int64 [m]: neighbours averaged
    mean_similarity: np.ndarray  # float32 [m]: their mean similarity
    first_row: np.ndarray  # int64 [m]: the user's first input row (its fm_version labels the imputation)


def impute_users(
    user_ids: np.ndarray,
    similarities: np.ndarray,
    neighbor_embeddings: np.ndarray,
    *,
    min_neighbors: int,
    min_similarity: float,
) -> Imputations:
    """Similarity-weighted mean of each user's neighbours that are similar enough.

    One row per (user, neighbour *that has an aggregate*), in the user's neighbour order. A
    neighbour counts when its similarity is finite, ``>= min_similarity`` and ``> 0``; a user needs
    at least ``max(min_neighbors, 1)`` of them, and gets nothing if any of them has a non-finite value.
    Both settings are keyword-only without defaults: the job passes ``enrichment.min_neighbors`` /
    ``min_similarity``, the config is their one source.
    """
    ids = all_ids = np.asarray(user_ids, dtype=np.int64)
    sims = np.asarray(similarities, dtype=np.float64)
    vectors = np.asarray(neighbor_embeddings, dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[0] != ids.shape[0] or sims.shape != ids.shape:
        raise ValueError(f"expected [n] ids, [n] similarities, [n, D] embeddings; "
                         f"got {ids.shape}, {sims.shape}, {vectors.shape}")
    all_starts = group_starts(ids)
    with np.errstate(invalid="ignore"):
        usable = np.isfinite(sims) & (sims >= min_similarity) & (sims > 0)
    ids, sims, vectors = ids[usable], sims[usable], vectors[usable]
    starts = group_starts(ids)
    counts = np.diff(np.r_[starts, ids.size]).astype(np.int64)
    finite = np.isfinite(vectors).all(axis=1)
    all_finite = np.logical_and.reduceat(finite, starts) if starts.size else np.zeros(0, dtype=bool)
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite users are dropped just below
        sums, totals = _segment_sums(sims, vectors, starts)
    keep = (counts >= max(min_neighbors, 1)) & all_finite
    users, counts, sums, totals = ids[starts][keep], counts[keep], sums[keep], totals[keep]
    first = all_starts[np.searchsorted(all_ids[all_starts], users)]
    return Imputations(users, (sums / totals[:, None]).astype(np.float32), counts,
                       (totals / counts).astype(np.float32), first.astype(np.int64))


def complete_groups(batches: Iterable, key: str) -> Iterator:
    """Re-cut a stream of Arrow record batches sorted by ``key`` into tables of whole groups.

    Spark cuts a partition into batches of ``arrow.maxRecordsPerBatch`` rows wherever the count
    falls, so a user's rows may straddle two batches; the trailing group of each batch is held back
    and joined to the next one. Yields ``pyarrow.Table`` s (zero-copy slices).
    """
    import pyarrow as pa

    carry = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        table = pa.Table.from_batches([batch])
        if carry is not None:
            table = pa.concat_tables([carry, table])
        keys = table.column(key).to_numpy()
        cut = int(np.searchsorted(keys, keys[-1], side="left"))
        if cut:
            yield table.slice(0, cut)
        carry = table.slice(cut)
    if carry is not None and carry.num_rows:
        yield carry
