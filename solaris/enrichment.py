"""Hierarchical gap filling, the pure math (numpy only): tier 2 user aggregates, tier 3 imputation.

* :func:`aggregate_user` - a user's embedding is the mean of their pair embeddings computed in the
  window (plain, or recency-weighted with a half-life so the last hours count more), optionally
  L2-normalised. Tier 2 serves it for any item of that user.
* :func:`impute_from_neighbors` - a user with no servable tier-1/tier-2 value borrows the
  similarity-weighted mean of their KNN neighbours' aggregates; only neighbours that have one and
  whose similarity clears the floor count, and too few of them means no imputation (tier stays
  "none" rather than serving noise).

The Spark jobs call these per group (``applyInPandas``); keeping them here makes them testable
without a JVM and identical wherever they run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Aggregate:
    embedding: np.ndarray  # float32 [D]
    n_pairs: int


def aggregate_user(
    embeddings: np.ndarray,
    computed_at_seconds: np.ndarray,
    as_of_seconds: int,
    mode: str = "mean",
    half_life_hours: float = 6.0,
    l2_normalize: bool = False,
) -> Aggregate | None:
    """Mean (``mode="mean"``) or recency-weighted mean (``"recency"``) of one user's embeddings."""
    vectors = np.asarray(embeddings, dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[0] == 0:
        return None
    finite = np.isfinite(vectors).all(axis=1)
    vectors = vectors[finite]
    ages = (as_of_seconds - np.asarray(computed_at_seconds, dtype=np.float64)[finite]) / 3600.0
    if vectors.shape[0] == 0:
        return None
    if mode == "mean":
        weights = np.ones(vectors.shape[0])
    elif mode == "recency":
        if half_life_hours <= 0:
            raise ValueError("half_life_hours must be positive")
        weights = np.power(0.5, np.maximum(ages, 0.0) / half_life_hours)
    else:
        raise ValueError(f"unknown aggregation mode {mode!r}; expected 'mean' or 'recency'")
    mean = (weights[:, None] * vectors).sum(axis=0) / weights.sum()
    if l2_normalize:
        norm = np.linalg.norm(mean)
        if norm == 0.0:
            return None
        mean = mean / norm
    return Aggregate(mean.astype(np.float32), int(vectors.shape[0]))


@dataclass(frozen=True)
class Imputation:
    embedding: np.ndarray  # float32 [D]
    n_neighbors: int
    mean_similarity: float


def impute_from_neighbors(
    similarities: np.ndarray,
    neighbor_embeddings: np.ndarray,
    has_embedding: np.ndarray,
    min_neighbors: int = 3,
    min_similarity: float = 0.0,
) -> Imputation | None:
    """Similarity-weighted mean of the neighbours that have an aggregate and are similar enough."""
    sims = np.asarray(similarities, dtype=np.float64)
    usable = np.asarray(has_embedding, dtype=bool) & np.isfinite(sims) & (sims >= min_similarity) & (sims > 0)
    if usable.sum() < max(min_neighbors, 1):
        return None
    vectors = np.asarray(neighbor_embeddings, dtype=np.float64)[usable]
    if not np.isfinite(vectors).all():
        return None
    weights = sims[usable]
    mean = (weights[:, None] * vectors).sum(axis=0) / weights.sum()
    return Imputation(mean.astype(np.float32), int(usable.sum()), float(weights.mean()))
