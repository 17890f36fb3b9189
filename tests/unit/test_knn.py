import numpy as np
import pytest

from solaris.enrichment.knn import (
    choose_nprobe,
    default_clusters,
    exact_topk,
    ivf_search,
    merge_topk,
    nearest_clusters,
    normalize,
    probe_ranks,
    recall_at_k,
    recall_by_nprobe,
    sample_depth,
    search,
    smallest_nprobe,
    train_centroids,
)
from solaris.stages.knn import KnnResult
from tests.tolerance import assert_close


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
    # the one-process version of the stage gives the same lists as the query-by-query loop above
    batched, _ = ivf_search(ids, vectors, centroids, 2, 10)
    assert [row[row >= 0].tolist() for row in batched] == [row.tolist() for row in approx]


def test_kmeans_is_seeded():
    vectors, _ = _clustered()
    # bit-exact: one seed, the same sample and thread count in one process: the same k-means sums
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


def test_recall_at_k_counts_hits_over_the_exact_lists_ignoring_padding():
    exact = np.array([[1, 2, 3, 4], [5, 6, -1, -1]])
    assert recall_at_k([np.array([1, 2, 9, 8]), np.array([6, 5])], exact) == pytest.approx(4 / 6)
    assert recall_at_k([np.array([-1, -1]), np.array([-1])], exact) == 0.0


def test_probe_ranks_and_recall_curve():
    probes = np.array([[4, 1, 0], [2, 0, 1]])  # each query's clusters, nearest first
    neighbor_clusters = np.array([[4, 0, 3], [1, -1, 2]])  # cluster 3 is never probed; -1 = padding
    ranks = probe_ranks(neighbor_clusters, probes)
    assert ranks.tolist() == [[0, 2, 3], [2, -1, 0]]
    curve = recall_by_nprobe(ranks, 3)
    np.testing.assert_allclose(curve, [2 / 5, 2 / 5, 4 / 5])


def test_smallest_nprobe_reaching_the_target():
    curve = np.array([0.5, 0.9, 0.949, 0.95, 0.99])
    assert smallest_nprobe(curve, 0.95) == 4
    assert smallest_nprobe(curve, 0.5) == 1
    assert smallest_nprobe(curve, 0.999) == 5  # unreachable: search every cluster there is


def test_sample_depth_scales_with_the_sampled_share():
    assert sample_depth(10, 1.0) == 10 and sample_depth(10, 0.5) == 5
    assert sample_depth(10, 0.01) == 1 and sample_depth(10, 3.0) == 10


def test_choose_nprobe_predicts_the_recall_of_the_search_on_the_whole_sample():
    # On the whole population, "found iff its cluster is probed" is exact: the estimated curve is
    # the recall the stage's search really gets, for every nprobe.
    vectors, ids = _clustered(n=800, dim=12, clusters=10, seed=4)
    centroids = train_centroids(vectors, 30, seed=2)
    nprobe, curve = choose_nprobe(vectors, centroids, k=10, target=0.95)  # 800 <= calibration_queries: all
    exact = exact_topk(ids, vectors, ids, vectors, 10)
    assert 1 < nprobe < 30  # a non-trivial choice on this data
    for p in sorted({1, nprobe - 1, nprobe, 30}):
        measured = recall_at_k(list(ivf_search(ids, vectors, centroids, p, 10)[0]), exact)
        assert measured == pytest.approx(curve[p - 1], abs=2e-3)  # ties in float similarity aside
        assert (measured >= 0.95) == (p >= nprobe)


def test_ivf_search_probing_every_cluster_is_exact():
    """Every user's k most similar others, as exact search finds them, up to near-ties.

    Why not the same ids bit-for-bit: IVF searches each cluster's members in a batch of its own, and
    FAISS computes a batch's inner products with BLAS or with its own SIMD loop depending on the
    batch's size, so a similarity may differ in its last bits from exact search's; two neighbours
    within that of each other may swap, or trade the k-th place. What search promises is the
    similarities: the found ids' true similarities are the exact top-k's.
    """
    vectors, ids = _clustered(n=300, seed=5)
    centroids = train_centroids(vectors, 9, seed=0)
    found, sims = ivf_search(ids, vectors, centroids, 9, 7)
    exact_ids, exact_sims = search(ids, vectors, ids, vectors, 7)
    assert (found >= 0).all() and not (found == ids[:, None]).any()  # k others each, never the user itself
    assert all(len(set(row)) == len(row) for row in found.tolist())
    row_of = {user: row for row, user in enumerate(ids.tolist())}
    unit = vectors.astype(np.float64) / np.linalg.norm(vectors.astype(np.float64), axis=1, keepdims=True)
    true = np.einsum("qd,qkd->qk", unit, unit[np.vectorize(row_of.get)(found)])  # the found ids' similarities
    assert_close(true, sims)
    assert_close(sims, exact_sims)  # as good as exact search, place by place


def test_knn_result_details_keep_the_audit_keys():
    result = KnnResult(users=10, clusters=3, nprobe=2, k=5, recall=0.96, fm_version="v1", target_recall=0.95,
                       sample_recall=0.97, recall_queries=10, search_seconds=1.25)
    details = result.details()
    assert details["recall_at_5"] == 0.96 and details["search_seconds"] == 1.25 and details["nprobe"] == 2


def test_choose_nprobe_on_a_held_out_population_uses_the_scaled_depth():
    vectors, _ = _clustered(n=1200, dim=12, clusters=10, seed=6)
    sample, population = vectors[:900], vectors[900:]
    centroids = train_centroids(sample, 20, seed=0)
    nprobe, curve = choose_nprobe(population, centroids, k=10, target=0.9, population_fraction=0.25)
    assert sample_depth(10, 0.25) == 2
    truth = search(np.arange(300), population, np.arange(300), population, 2)[0]
    probes = nearest_clusters(population, centroids, nprobe)
    members = nearest_clusters(population, centroids, 1)[:, 0]
    found = np.mean([members[j] in probes[q] for q in range(300) for j in truth[q]])
    assert found == pytest.approx(curve[nprobe - 1]) and found >= 0.9
    assert nprobe == 1 or curve[nprobe - 2] < 0.9


def test_a_stored_index_is_reused_only_within_its_cadence_never_from_the_future_nor_after_drift():
    from solaris.enrichment.knn import reusable_index

    hour = 3600.0
    stored = [(0.0, 1000), (5 * hour, 1000), (30 * hour, 1000)]
    assert reusable_index(stored, 6 * hour, 1000, 24) == 1  # the newest trained at or before the as-of
    assert reusable_index(stored, 5 * hour, 1000, 24) == 1  # a rerun of the training hour reuses its own
    assert reusable_index(stored, 4 * hour, 1000, 24) == 0  # a backfill never uses an index of later data
    assert reusable_index(stored, 29.5 * hour, 1000, 24) is None  # 5h's index is 24.5h old: retrain
    assert reusable_index(stored, 6 * hour, 1200, 24) is None  # the population grew 20%: retrain
    assert reusable_index(stored, 6 * hour, 1050, 24) == 1
    assert reusable_index(stored, 6 * hour, 1000, 0) is None  # cadence 0: every run trains
    assert reusable_index([], 6 * hour, 1000, 24) is None


def test_the_samples_are_the_same_from_every_user_or_only_the_hash_selected_ones():
    """The driver path collects every user, the Spark path only those under the sample thresholds:
    both must draw the same training, held-out and query users."""
    import pandas as pd

    from solaris.config import load_config
    from solaris.stages.knn import _driver_samples, _sample_shares
    from solaris.storage.embedding_codec import encode_arrow

    enrichment = load_config(overrides=["enrichment.knn_sample=300", "enrichment.knn_recall_sample=40"]).enrichment
    rng = np.random.default_rng(5)
    n, dim = 2000, 8
    vectors = normalize(rng.normal(size=(n, dim)).astype(np.float32))
    every = pd.DataFrame({"user_id": rng.permutation(n).astype(np.int64) + 100,
                          "vector": encode_arrow(vectors).to_pylist(),
                          "u_train": rng.random(n), "u_query": rng.random(n)})
    for with_training in (True, False):
        train_share, held_share, query_share = _sample_shares(n, enrichment, with_training)
        selected = every[(every.u_train < train_share + held_share) | (every.u_query < query_share)]
        assert len(selected) < n
        full = _driver_samples(every, n, enrichment, dim, with_training)
        part = _driver_samples(selected, n, enrichment, dim, with_training)
        # bit-exact: the samples are stored vectors selected and decoded, no arithmetic
        np.testing.assert_array_equal(full[0], part[0])
        assert (full[1] is None) == (part[1] is None)
        if full[1] is not None:
            np.testing.assert_array_equal(full[1], part[1])  # bit-exact: decoded stored vectors, as above
        np.testing.assert_array_equal(full[2][0], part[2][0])  # bit-exact: integer user ids
        np.testing.assert_array_equal(full[2][1], part[2][1])  # bit-exact: decoded stored vectors, as above
        assert len(full[2][0]) == 40 and (len(full[0]) == 300) == with_training


def test_the_driver_searches_only_populations_whose_vectors_and_candidates_it_can_hold():
    from solaris.enrichment.knn import DRIVER_CANDIDATES_MAX, fits_driver

    assert fits_driver(5_000, 7, 10, max_users=50_000)
    assert not fits_driver(60_000, 7, 10, max_users=50_000)  # too many users to collect
    assert not fits_driver(5_000, 7, 10, max_users=0)  # 0: always the distributed search
    many_probes = DRIVER_CANDIDATES_MAX // (40_000 * 10) + 1
    assert not fits_driver(40_000, many_probes, 10, max_users=50_000)  # candidate lists beyond the bound
    assert fits_driver(40_000, many_probes - 1, 10, max_users=50_000)
