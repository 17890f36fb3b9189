import numpy as np

from solaris.knn import (
    default_clusters,
    exact_topk,
    merge_topk,
    nearest_clusters,
    normalize,
    recall_at_k,
    search,
    train_centroids,
)


def _clustered(n=600, dim=16, clusters=12, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim))
    labels = rng.integers(0, clusters, n)
    return normalize(centres[labels] + 0.15 * rng.standard_normal((n, dim))), np.arange(n, dtype=np.int64) + 1000


def test_search_excludes_self_and_orders_by_similarity():
    vectors, ids = _clustered(50)
    found, sims = search(ids, vectors, ids[:5], vectors[:5], k=4)
    assert found.shape == (5, 4) and not np.any(found == ids[:5, None])
    assert np.all(np.diff(sims, axis=1) <= 1e-6)


def test_small_cluster_pads():
    vectors, ids = _clustered(3)
    found, sims = search(ids, vectors, ids[:1], vectors[:1], k=5)
    assert (found[0, 2:] == -1).all() and np.isinf(sims[0, 2:]).all() and (found[0, :2] >= 0).all()


def test_merge_topk_dedupes_across_clusters():
    ids, sims = merge_topk(np.array([[5, 6, -1], [6, 7, 8]]), np.array([[0.9, 0.5, -np.inf], [0.5, 0.8, 0.1]]), 3)
    assert ids.tolist() == [5, 7, 6] and np.allclose(sims, [0.9, 0.8, 0.5])


def test_clustered_search_recall_against_exact():
    vectors, ids = _clustered()
    centroids = train_centroids(vectors, default_clusters(len(ids)), seed=1)
    assign = nearest_clusters(vectors, centroids, nprobe=2)
    member_cluster = assign[:, 0]
    approx = []
    for row in range(len(ids)):
        found, sims = [], []
        for cluster in assign[row]:
            members = member_cluster == cluster
            f, s = search(ids[members], vectors[members], ids[row:row + 1], vectors[row:row + 1], 10)
            found.append(f), sims.append(s)
        approx.append(merge_topk(np.concatenate(found), np.concatenate(sims), 10)[0])
    exact = exact_topk(ids, vectors, ids, vectors, 10)
    recall = recall_at_k(approx, exact)
    assert recall > 0.8  # clustered data; random isotropic vectors would score far lower
    assert recall_at_k(exact, exact) == 1.0


def test_kmeans_is_seeded():
    vectors, _ = _clustered()
    np.testing.assert_array_equal(train_centroids(vectors, 8, seed=3), train_centroids(vectors, 8, seed=3))


def test_search_is_independent_of_row_order_and_breaks_ties_by_id():
    # Four members at exactly the same similarity to the query: only two fit in k=2, and
    # which two must not depend on the order the rows reached the Spark group.
    query = np.array([[1.0, 0.0]], dtype=np.float32)
    tied = np.array([[0.6, 0.8], [0.6, -0.8], [0.6, 0.8], [0.6, -0.8]], dtype=np.float32)
    ids = np.array([40, 7, 23, 11])
    answers = set()
    for seed in range(6):
        order = np.random.default_rng(seed).permutation(len(ids))
        found, sims = search(ids[order], tied[order], np.array([99]), query, 2)
        answers.add((tuple(found[0].tolist()), tuple(round(float(s), 6) for s in sims[0])))
    assert answers == {((7, 11), (0.6, 0.6))}
