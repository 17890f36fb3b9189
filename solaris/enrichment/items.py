"""The item side of the hierarchy, the pure math (numpy + FAISS): impute items without an aggregate.

Why: the item aggregate (tier 5) exists only for items scored for at least ``item_min_pairs``
users in the last window, so a new user requesting any other item is served nothing. The FM has
a learned embedding for every item id it was trained on; items close in that space are engaged
by the same users, so their interaction embeddings are the best available stand-in. An item
without an aggregate borrows the similarity-weighted mean of the aggregates of its ``k`` nearest
items (cosine in the FM's item space) that have one (tier 6, after the item aggregate).

Only positive similarities above ``min_similarity`` count (an item unrelated to every item with
an aggregate - e.g. one the FM never saw, whose hashed embedding is still its random
initialisation - gets no row rather than noise), and the provenance (neighbours used, their
mean similarity) is stored with the row so readers and the VM can judge it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solaris.enrichment.knn import search


@dataclass(frozen=True)
class ImputedItems:
    """One row per imputed item: its embedding and what it was built from."""

    item_ids: np.ndarray  # int64 [m]
    embeddings: np.ndarray  # float32 [m, D]
    n_neighbors: np.ndarray  # int32 [m], items whose aggregate was averaged
    similarity: np.ndarray  # float32 [m], mean cosine similarity of those items


def impute_items(target_ids: np.ndarray, target_vectors: np.ndarray, *, source_ids: np.ndarray,
                 source_vectors: np.ndarray, source_embeddings: np.ndarray, k: int,
                 min_similarity: float = 0.0) -> ImputedItems:
    """Impute each target item from its ``k`` nearest source items in the FM's item space.

    ``*_vectors`` are FM item embeddings (any scale; compared by cosine), ``source_embeddings``
    the sources' aggregates [n, D]. Ties go to the smaller item id (:func:`solaris.enrichment.knn.search`),
    so the result does not depend on row order. Targets with no usable neighbour are left out.
    """
    target_ids = np.asarray(target_ids, dtype=np.int64)
    source_ids = np.asarray(source_ids, dtype=np.int64)
    dim = np.asarray(source_embeddings).shape[1] if np.ndim(source_embeddings) == 2 else 0
    if target_ids.size == 0 or source_ids.size == 0:
        return ImputedItems(np.empty(0, np.int64), np.empty((0, dim), np.float32), np.empty(0, np.int32),
                            np.empty(0, np.float32))
    neighbours, similarities = search(source_ids, np.asarray(source_vectors, np.float32),
                                      target_ids, np.asarray(target_vectors, np.float32), k)
    usable = (neighbours >= 0) & (similarities > max(min_similarity, 0.0))
    keep = usable.any(axis=1)
    order = np.argsort(source_ids, kind="stable")
    rows = order[np.searchsorted(source_ids[order], np.maximum(neighbours[keep], 0))]  # [m, k]
    weights = np.where(usable[keep], similarities[keep], 0.0).astype(np.float64)
    vectors = np.asarray(source_embeddings, dtype=np.float64)[rows]  # [m, k, D]
    mean = np.einsum("mk,mkd->md", weights, vectors) / weights.sum(axis=1, keepdims=True)
    used = usable[keep].sum(axis=1)
    mean_similarity = (weights.sum(axis=1) / used).astype(np.float32)
    return ImputedItems(target_ids[keep], mean.astype(np.float32), used.astype(np.int32), mean_similarity)
