import numpy as np

from solaris.enrichment.items import impute_items


def test_an_item_borrows_the_similarity_weighted_mean_of_its_nearest_items_aggregates():
    # FM item space: items 1 and 2 point the same way as target 10, item 3 the opposite way
    source_ids = np.array([3, 1, 2])
    source_vectors = np.array([[-1.0, 0.0], [1.0, 0.0], [0.6, 0.8]])
    source_embeddings = np.array([[100.0, 100.0], [1.0, 0.0], [0.0, 1.0]])
    out = impute_items(np.array([10]), np.array([[2.0, 0.0]]), source_ids=source_ids,
                       source_vectors=source_vectors, source_embeddings=source_embeddings, k=3)
    assert out.item_ids.tolist() == [10]
    # weights: cos(10, 1) = 1.0, cos(10, 2) = 0.6; item 3 (cos -1) is not used
    np.testing.assert_allclose(out.embeddings[0], [1.0 / 1.6, 0.6 / 1.6], rtol=1e-6)
    assert out.n_neighbors.tolist() == [2]
    np.testing.assert_allclose(out.similarity, [0.8], rtol=1e-6)


def test_items_unrelated_to_every_aggregate_get_no_row_and_k_limits_the_neighbours():
    source_ids = np.array([1, 2, 3])
    source_vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.8, 0.2]])
    embeddings = np.eye(3)[:, :2].astype(np.float32)
    out = impute_items(np.array([7, 8]), np.array([[0.0, -1.0], [1.0, 0.05]]), source_ids=source_ids,
                       source_vectors=source_vectors, source_embeddings=embeddings, k=1, min_similarity=0.1)
    assert out.item_ids.tolist() == [8]  # item 7 is orthogonal/opposite to all sources
    assert out.n_neighbors.tolist() == [1]
    np.testing.assert_allclose(out.embeddings[0], embeddings[0])  # its single nearest item is item 1


def test_no_source_or_no_target_gives_an_empty_result_of_the_right_width():
    empty = impute_items(np.array([1]), np.ones((1, 2)), source_ids=np.empty(0, np.int64),
                         source_vectors=np.empty((0, 2)), source_embeddings=np.empty((0, 4)), k=5)
    assert empty.item_ids.size == 0 and empty.embeddings.shape == (0, 4)
    none = impute_items(np.empty(0, np.int64), np.empty((0, 2)), source_ids=np.array([1]),
                        source_vectors=np.ones((1, 2)), source_embeddings=np.ones((1, 4)), k=5)
    assert none.item_ids.size == 0 and none.embeddings.shape == (0, 4)


def test_result_does_not_depend_on_source_row_order():
    rng = np.random.default_rng(5)
    ids = np.arange(50)
    vectors = rng.standard_normal((50, 8))
    embeddings = rng.standard_normal((50, 4))
    targets = rng.standard_normal((20, 8))
    first = impute_items(np.arange(100, 120), targets, source_ids=ids, source_vectors=vectors,
                         source_embeddings=embeddings, k=5)
    order = rng.permutation(50)
    second = impute_items(np.arange(100, 120), targets, source_ids=ids[order], source_vectors=vectors[order],
                          source_embeddings=embeddings[order], k=5)
    np.testing.assert_array_equal(first.item_ids, second.item_ids)  # bit-exact: integer ids
    np.testing.assert_allclose(first.embeddings, second.embeddings, rtol=1e-6)
