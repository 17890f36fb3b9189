"""KNN over FM user representations with FAISS (pure: numpy + faiss, no Spark).

The distributed design (``solaris.stages.knn``) is an inverted-file (IVF) index whose lists are Spark groups:
k-means centroids are trained on a driver sample and broadcast; every user is a *member* of its
nearest cluster and a *query* in its ``nprobe`` nearest clusters; each cluster is searched exactly
inside one ``applyInPandas`` group; the per-cluster answers are merged into a global top-k per
user. Vectors are L2-normalised, so inner product = cosine similarity.

How ``nprobe`` is chosen (:func:`choose_nprobe`): with exact search inside each probed cluster, a
true neighbour is found *iff* its cluster is among the query's ``nprobe`` nearest centroids. So on
the driver sample one exact search gives, for every (query, true neighbour) pair, the probe rank at
which the neighbour's cluster is reached; the recall of every ``nprobe`` at once follows
(:func:`recall_by_nprobe`) and the smallest ``nprobe`` reaching the target recall is used.
:func:`recall_at_k` then checks the written result against exact search on a query sample.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

NO_ID = -1


def normalize(vectors: np.ndarray) -> np.ndarray:
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def default_clusters(n_users: int) -> int:
    """IVF list count tuned to n: about 2*sqrt(n), capped (see BENCHMARKS / bench/knn.py)."""
    return int(max(1, min(8192, round(2.0 * np.sqrt(max(n_users, 1))))))


def train_centroids(sample: np.ndarray, n_clusters: int, seed: int, iterations: int = 20) -> np.ndarray:
    """Spherical k-means on a sample (faiss.Kmeans); fewer points than clusters -> the points."""
    import faiss

    sample = normalize(sample)
    n_clusters = max(1, min(n_clusters, sample.shape[0]))
    if n_clusters == sample.shape[0]:
        return sample.copy()
    kmeans = faiss.Kmeans(sample.shape[1], n_clusters, niter=iterations, seed=seed, spherical=True,
                          verbose=False, min_points_per_centroid=1, max_points_per_centroid=1 << 30)
    kmeans.train(sample)
    centroids = kmeans.centroids
    assert centroids is not None, "faiss.Kmeans.train sets the centroids"
    return normalize(centroids)


def nearest_clusters(vectors: np.ndarray, centroids: np.ndarray, nprobe: int) -> np.ndarray:
    """``[n, min(nprobe, #clusters)]`` cluster ids, nearest first (ties: smaller cluster id)."""
    import faiss

    index = faiss.IndexFlatIP(centroids.shape[1])
    index.add(np.ascontiguousarray(centroids, dtype=np.float32))
    _, ids = index.search(normalize(vectors), min(nprobe, centroids.shape[0]))
    return ids.astype(np.int64)


def _sort_rows(ids: np.ndarray, sims: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: drop ``NO_ID`` entries, order by (similarity desc, id asc), keep k, pad -1 / -inf."""
    ids = np.asarray(ids, dtype=np.int64)
    sims = np.asarray(sims, dtype=np.float32)
    invalid = ids < 0
    sort_ids = np.where(invalid, np.iinfo(np.int64).max, ids)
    sort_sims = np.where(invalid, np.inf, -sims)
    order = np.lexsort((sort_ids, sort_sims), axis=-1)[:, :k]
    ids = np.take_along_axis(np.where(invalid, NO_ID, ids), order, axis=1)
    sims = np.take_along_axis(np.where(invalid, -np.inf, sims).astype(np.float32), order, axis=1)
    if ids.shape[1] < k:
        pad = k - ids.shape[1]
        ids = np.pad(ids, ((0, 0), (0, pad)), constant_values=NO_ID)
        sims = np.pad(sims, ((0, 0), (0, pad)), constant_values=-np.inf)
    return ids, sims


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
    member_ids = np.asarray(member_ids, dtype=np.int64)
    query_ids = np.asarray(query_ids, dtype=np.int64)
    if q == 0 or len(member_ids) == 0:
        return np.full((q, k), NO_ID, dtype=np.int64), np.full((q, k), -np.inf, dtype=np.float32)
    by_id = np.argsort(member_ids, kind="stable")
    member_ids, member_vectors = member_ids[by_id], np.asarray(member_vectors)[by_id]
    index = faiss.IndexFlatIP(member_vectors.shape[1])
    index.add(normalize(member_vectors))
    sims, positions = index.search(normalize(query_vectors), min(k + 1, len(member_ids)))
    found = np.where(positions >= 0, member_ids[np.maximum(positions, 0)], NO_ID)
    found = np.where(found == query_ids[:, None], NO_ID, found)
    return _sort_rows(found, sims, k)


def merge_topk(ids: np.ndarray, sims: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Merge one query's candidates from several clusters/partitions: dedupe, best k by similarity."""
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


def recall_at_k(approximate: Sequence[np.ndarray] | np.ndarray, exact: np.ndarray) -> float:
    """Mean share of the exact top-k found by the approximate search (``-1`` padding ignored)."""
    hits, total = 0, 0
    for approx, truth in zip(approximate, exact, strict=True):  # one approximate list per exact row
        truth = np.asarray(truth)
        truth = truth[truth >= 0]
        approx = np.asarray(approx)
        hits += int(np.isin(truth, approx[approx >= 0]).sum())
        total += truth.size
    return hits / total if total else float("nan")


def probe_ranks(neighbor_clusters: np.ndarray, probes: np.ndarray) -> np.ndarray:
    """Rank at which each true neighbour's cluster is probed (``probes.shape[1]`` = never).

    ``neighbor_clusters [q, d]``: the member cluster of each query's d exact neighbours (-1 =
    padding, returned as -1); ``probes [q, P]``: each query's clusters, nearest first.
    """
    neighbor_clusters = np.asarray(neighbor_clusters)
    probes = np.asarray(probes)
    match = probes[:, None, :] == neighbor_clusters[:, :, None]  # [q, d, P]
    ranks = np.where(match.any(axis=2), match.argmax(axis=2), probes.shape[1])
    return np.where(neighbor_clusters < 0, -1, ranks)


def recall_by_nprobe(ranks: np.ndarray, max_nprobe: int) -> np.ndarray:
    """``curve[p - 1]`` = share of true neighbours found when searching ``p`` clusters per query."""
    ranks = np.asarray(ranks).ravel()
    ranks = ranks[ranks >= 0]
    if ranks.size == 0:
        return np.ones(max_nprobe)
    counts = np.bincount(np.minimum(ranks, max_nprobe), minlength=max_nprobe + 1)[:max_nprobe]
    return np.cumsum(counts) / ranks.size


def smallest_nprobe(curve: np.ndarray, target: float) -> int:
    """Smallest p with ``curve[p - 1] >= target``; all of them if none reaches it."""
    reached = np.flatnonzero(np.asarray(curve) >= target - 1e-12)
    return int(reached[0] + 1) if reached.size else len(curve)


def sample_depth(k: int, sample_fraction: float) -> int:
    """Neighbours per query to check when the recall is estimated against a sample of the users.

    A uniform sample holding a share f of the users holds, on average, k*f of a query's true
    top-k, and they are exactly the query's top-(k*f) within the sample, so the estimate looks at
    that depth (at least 1). With f < 1 it is still an estimate (few pairs per query, hence
    :func:`calibration_queries`); the stage measures the real recall of what it wrote afterwards.
    """
    return int(max(1, min(k, round(k * min(1.0, sample_fraction)))))


def calibration_queries(k: int, sample_fraction: float, pairs: int = 20_000, minimum: int = 2000) -> int:
    """How many queries :func:`choose_nprobe` wants: enough for ``pairs`` (query, neighbour) pairs."""
    return max(minimum, -(-pairs // sample_depth(k, sample_fraction)))


def choose_nprobe(population: np.ndarray, centroids: np.ndarray, *, k: int, target: float,
                  population_fraction: float = 1.0, seed: int = 0, chunk: int = 1024) -> tuple[int, np.ndarray]:
    """Smallest nprobe whose recall@k, estimated on a driver-side population, reaches ``target``.

    ``population``: users searched among themselves, a share ``population_fraction`` of all users.
    When that is not everyone, pass users the centroids were *not* trained on: training points sit
    closer to their centroids than other users, which makes the estimate optimistic (measured on
    1M synthetic users: +0.015 with training points as queries and neighbours, +0.008 with
    held-out queries among training points). Up to :func:`calibration_queries` of them (self
    excluded) are searched exactly among the population at :func:`sample_depth`, and each true
    neighbour's cluster is compared with the clusters the query would probe. Returns ``(nprobe,
    curve)``, ``curve[p - 1]`` = estimated recall at ``nprobe = p``.
    """
    population = normalize(population)
    n, n_clusters = population.shape[0], centroids.shape[0]
    if n < 2:
        return 1, np.ones(n_clusters)
    depth = sample_depth(k, population_fraction)
    ids = np.arange(n, dtype=np.int64)
    queries = np.sort(np.random.default_rng(seed).permutation(n)[: calibration_queries(k, population_fraction)])
    member_cluster = nearest_clusters(population, centroids, 1)[:, 0]
    ranks = []
    for start in range(0, len(queries), chunk):
        rows = queries[start: start + chunk]
        truth, _ = search(ids, population, ids[rows], population[rows], depth)
        neighbor_clusters = np.where(truth >= 0, member_cluster[np.maximum(truth, 0)], -1)
        ranks.append(probe_ranks(neighbor_clusters, nearest_clusters(population[rows], centroids, n_clusters)))
    curve = recall_by_nprobe(np.concatenate(ranks, axis=0), n_clusters)
    return smallest_nprobe(curve, target), curve


# Candidate entries (user x probed cluster x k, an id and a similarity each) the driver path of
# solaris/stages/knn may hold at once: 12 bytes each, so at most ~300 MB whatever the population and nprobe.
DRIVER_CANDIDATES_MAX = 25_000_000


def fits_driver(n_users: int, nprobe: int, k: int, max_users: int) -> bool:
    """Whether ``solaris.stages.knn`` searches on the driver: at most ``max_users`` users
    (``enrichment.knn_driver_max_users``) and their candidate lists within :data:`DRIVER_CANDIDATES_MAX`.

    Why both: the vectors the driver collects grow with the users, the candidates it merges with
    users x nprobe x k, and nprobe is chosen from the recall target, so a hard population could ask
    for many probes; then the distributed search runs instead.
    """
    return 0 < n_users <= max_users and n_users * nprobe * k <= DRIVER_CANDIDATES_MAX


def ivf_search(ids: np.ndarray, vectors: np.ndarray, centroids: np.ndarray, nprobe: int,
               k: int) -> tuple[np.ndarray, np.ndarray]:
    """The stage's algorithm in one process: every user searched in its ``nprobe`` nearest clusters.

    Members of a cluster = users whose nearest centroid it is; each cluster is searched exactly for
    all the users probing it in one batch (:func:`search`), then each user's candidates are
    merged. ``solaris.stages.knn`` runs the same steps with clusters as Spark groups (or calls
    :func:`ivf_neighbours` on the driver for a small population); this version is what the unit
    tests and ``bench/knn.py`` check against exact search.
    """
    found, sims, _ = ivf_neighbours(ids, vectors, centroids, nprobe, k)
    return found, sims


def ivf_neighbours(ids: np.ndarray, vectors: np.ndarray, centroids: np.ndarray, nprobe: int,
                   k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`ivf_search` plus each user's home cluster (the one it is a member of).

    Why the vectors are passed on as given (each step normalises its own inputs): the Spark stage
    hands the decoded vectors to the same :func:`nearest_clusters` and :func:`search` calls, cluster
    by cluster, with the queries in user-id order; with ``ids`` ascending, this function repeats
    that arithmetic exactly, so the driver path of ``solaris.stages.knn`` writes the same lists.
    """
    ids = np.asarray(ids, dtype=np.int64)
    vectors = np.asarray(vectors, dtype=np.float32)
    probes = nearest_clusters(vectors, centroids, nprobe)
    n, p = probes.shape
    home = probes[:, 0]
    cand_ids = np.full((n, p * k), NO_ID, dtype=np.int64)
    cand_sims = np.full((n, p * k), -np.inf, dtype=np.float32)
    by_member = np.argsort(home, kind="stable")
    member_bounds = np.searchsorted(home[by_member], np.arange(centroids.shape[0] + 1))
    flat = probes.ravel()
    by_probe = np.argsort(flat, kind="stable")
    probe_bounds = np.searchsorted(flat[by_probe], np.arange(centroids.shape[0] + 1))
    for cluster in range(centroids.shape[0]):
        pairs = by_probe[probe_bounds[cluster]: probe_bounds[cluster + 1]]
        if pairs.size == 0:
            continue
        rows, slots = pairs // p, pairs % p
        members = by_member[member_bounds[cluster]: member_bounds[cluster + 1]]
        found, sims = search(ids[members], vectors[members], ids[rows], vectors[rows], k)
        columns = slots[:, None] * k + np.arange(k)[None, :]
        cand_ids[rows[:, None], columns] = found
        cand_sims[rows[:, None], columns] = sims
    out_ids = np.empty((n, k), dtype=np.int64)
    out_sims = np.empty((n, k), dtype=np.float32)
    for start in range(0, n, 65536):
        rows = slice(start, start + 65536)
        out_ids[rows], out_sims[rows] = _sort_rows(cand_ids[rows], cand_sims[rows], k)
    return out_ids, out_sims, home


def reusable_index(trained: Sequence[tuple[float, int]], as_of_s: float, n_users: int, max_age_hours: float,
                   max_population_change: float = 0.1) -> int | None:
    """Which stored IVF index (centroids + nprobe) a run at ``as_of_s`` may reuse, or None: train one.

    ``trained``: ``(trained_at epoch seconds, users it was trained on)`` per stored index. Eligible:
    trained at or before the as-of (never on later data: point-in-time), less than
    ``max_age_hours`` ago (the slower cadence: centroids move with tastes, not with each hour's
    events), and on a population within ``max_population_change`` of today's (drift: a grown
    population needs more clusters, ~2*sqrt(n)). The newest eligible one wins, so a rerun of an
    hour picks the same index as its first run. ``max_age_hours <= 0`` disables reuse.
    """
    if max_age_hours <= 0:
        return None
    best: int | None = None
    for position, (trained_at_s, trained_users) in enumerate(trained):
        fresh = 0 <= as_of_s - trained_at_s < max_age_hours * 3600.0
        similar = abs(n_users - trained_users) <= max_population_change * max(trained_users, 1)
        if fresh and similar and (best is None or trained_at_s > trained[best][0]):
            best = position
    return best
