"""KNN over FM user representations with FAISS (pure: numpy + faiss, no Spark).

The distributed design (``jobs/knn``): k-means centroids trained on a sample on the driver,
broadcast; every user is a *member* of its nearest cluster and a *query* in its ``nprobe``
nearest clusters; each cluster is searched exactly inside one ``applyInPandas`` group; the
per-cluster answers are merged into a global top-k per user. Vectors are L2-normalised, so inner
product = cosine similarity. :func:`recall_at_k` checks the result against exact search.
"""

from __future__ import annotations

import numpy as np


def normalize(vectors: np.ndarray) -> np.ndarray:
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def default_clusters(n_users: int) -> int:
    return int(max(1, min(4096, round(np.sqrt(max(n_users, 1))))))


def train_centroids(sample: np.ndarray, n_clusters: int, seed: int, iterations: int = 20) -> np.ndarray:
    """Spherical k-means on a sample (faiss.Kmeans); fewer points than clusters -> the points."""
    import faiss

    sample = normalize(sample)
    n_clusters = max(1, min(n_clusters, sample.shape[0]))
    if n_clusters == sample.shape[0]:
        return sample.copy()
    kmeans = faiss.Kmeans(sample.shape[1], n_clusters, niter=iterations, seed=seed, spherical=True,
                          verbose=False, min_points_per_centroid=1)
    kmeans.train(sample)
    return normalize(kmeans.centroids)


def nearest_clusters(vectors: np.ndarray, centroids: np.ndarray, nprobe: int) -> np.ndarray:
    """``[n, min(nprobe, #clusters)]`` cluster ids, nearest first."""
    import faiss

    index = faiss.IndexFlatIP(centroids.shape[1])
    index.add(np.ascontiguousarray(centroids, dtype=np.float32))
    _, ids = index.search(normalize(vectors), min(nprobe, centroids.shape[0]))
    return ids.astype(np.int64)


def search(member_ids: np.ndarray, member_vectors: np.ndarray, query_ids: np.ndarray, query_vectors: np.ndarray,
           k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-k of queries among members, the query itself excluded.

    Returns ``(neighbor_ids [q, k], similarities [q, k])`` padded with -1 / -inf when a cluster
    has fewer than k other members. Ties in similarity go to the smaller user id: members are
    indexed in id order (FAISS breaks ties by index position) and each row is re-sorted by
    (similarity desc, id), so the answer does not depend on the order rows reached the Spark group.
    """
    import faiss

    q = len(query_ids)
    member_ids = np.asarray(member_ids)
    by_id = np.argsort(member_ids, kind="stable")
    member_ids, member_vectors = member_ids[by_id], np.asarray(member_vectors)[by_id]
    out_ids = np.full((q, k), -1, dtype=np.int64)
    out_sims = np.full((q, k), -np.inf, dtype=np.float32)
    if q == 0 or len(member_ids) == 0:
        return out_ids, out_sims
    index = faiss.IndexFlatIP(member_vectors.shape[1])
    index.add(normalize(member_vectors))
    depth = min(k + 1, len(member_ids))
    sims, positions = index.search(normalize(query_vectors), depth)
    found = np.where(positions >= 0, np.asarray(member_ids)[np.maximum(positions, 0)], -1)
    for row in range(q):
        keep = (found[row] != query_ids[row]) & (found[row] >= 0)
        ids, values = found[row][keep], sims[row][keep]
        order = np.lexsort((ids, -values))
        ids, values = ids[order][:k], values[order][:k]
        out_ids[row, : ids.size] = ids
        out_sims[row, : values.size] = values
    return out_ids, out_sims


def merge_topk(ids: np.ndarray, sims: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Merge one query's candidates from several clusters: dedupe, best k by similarity."""
    ids, sims = np.asarray(ids).ravel(), np.asarray(sims, dtype=np.float32).ravel()
    valid = ids >= 0
    ids, sims = ids[valid], sims[valid]
    order = np.lexsort((ids, -sims))
    ids, sims = ids[order], sims[order]
    _, first = np.unique(ids, return_index=True)
    first = np.sort(first)
    return ids[first][:k], sims[first][:k]


def exact_topk(all_ids: np.ndarray, all_vectors: np.ndarray, query_ids: np.ndarray, query_vectors: np.ndarray,
               k: int) -> np.ndarray:
    return search(all_ids, all_vectors, query_ids, query_vectors, k)[0]


def recall_at_k(approximate: list[np.ndarray], exact: np.ndarray) -> float:
    """Mean share of the exact top-k found by the approximate search."""
    hits, total = 0, 0
    for approx, truth in zip(approximate, exact):
        truth = truth[truth >= 0]
        hits += len(set(np.asarray(approx).tolist()) & set(truth.tolist()))
        total += truth.size
    return hits / total if total else float("nan")
