import numpy as np
import pyarrow as pa
import pytest

from solaris.enrichment.aggregates import aggregate_users, complete_groups, group_starts, impute_users

AS_OF = 100 * 3600


def _one(user_ids, vectors, computed, **kwargs):
    """aggregate_users for inputs that should give at most one user: (embedding, n_pairs) or None."""
    result = aggregate_users(np.asarray(user_ids), np.asarray(vectors), np.asarray(computed), AS_OF, **kwargs)
    assert len(result.user_ids) <= 1
    return (result.embeddings[0], int(result.n_pairs[0])) if len(result.user_ids) else None


def test_plain_mean_and_count():
    embedding, n_pairs = _one([7, 7], np.array([[1.0, 0.0], [3.0, 2.0]], dtype=np.float32), [AS_OF - 3600, AS_OF])
    np.testing.assert_allclose(embedding, [2.0, 1.0])
    assert n_pairs == 2 and embedding.dtype == np.float32


def test_recency_weighting_halves_per_half_life():
    # the older vector is exactly one half-life old: weights 0.5 and 1 -> (0*0.5 + 3*1) / 1.5 = 2
    embedding, _ = _one([1, 1], [[0.0], [3.0]], [AS_OF - 6 * 3600, AS_OF], mode="recency", half_life_hours=6)
    np.testing.assert_allclose(embedding, [2.0])


def test_l2_normalisation_and_degenerate_inputs():
    embedding, _ = _one([1], [[3.0, 4.0]], [AS_OF], l2_normalize=True)
    np.testing.assert_allclose(embedding, [0.6, 0.8], rtol=1e-6)
    assert _one(np.zeros(0, np.int64), np.zeros((0, 2)), np.zeros(0)) is None
    assert _one([1], [[np.nan, 1.0]], [AS_OF]) is None
    assert _one([1], [[0.0, 0.0]], [AS_OF], l2_normalize=True) is None
    with pytest.raises(ValueError, match="mode"):
        _one([1], np.ones((1, 2)), [AS_OF], mode="median")
    with pytest.raises(ValueError, match="half_life"):
        _one([1], np.ones((1, 2)), [AS_OF], mode="recency", half_life_hours=0)
    with pytest.raises(ValueError, match="ascending"):
        _one([2, 1], np.ones((2, 2)), [AS_OF, AS_OF])


def test_nan_rows_are_skipped_not_averaged():
    embedding, n_pairs = _one([1, 1, 1], [[1.0, 1.0], [np.inf, 0.0], [3.0, 3.0]], np.full(3, AS_OF))
    np.testing.assert_allclose(embedding, [2.0, 2.0])
    assert n_pairs == 2


def test_many_users_per_call_each_get_their_own_mean_and_latest_row():
    ids = np.array([3, 3, 5, 8, 8, 8, 9])
    vectors = np.array([[1, 0], [3, 2], [5, 5], [np.nan, 0], [2, 2], [4, 6], [0, 0]], dtype=np.float32)
    computed = np.array([10, 30, 5, 40, 20, 20, 1]) + AS_OF - 100
    result = aggregate_users(ids, vectors, computed, AS_OF, l2_normalize=True)
    # user 9 has a zero mean -> no row under l2; user 8's NaN row is left out of the mean ...
    np.testing.assert_array_equal(result.user_ids, [3, 5, 8])  # bit-exact: integer ids
    np.testing.assert_array_equal(result.n_pairs, [2, 1, 2])  # bit-exact: integer counts
    np.testing.assert_allclose(result.embeddings, [[2 / 5**0.5, 1 / 5**0.5], [0.5**0.5] * 2, [0.6, 0.8]], rtol=1e-6)
    # ... but is still user 8's latest pair (its fm_version labels the aggregate); ties go to the later row
    np.testing.assert_array_equal(result.latest_row, [1, 2, 3])  # bit-exact: integer row numbers
    tie = aggregate_users(np.array([4, 4]), np.ones((2, 1)), np.array([AS_OF, AS_OF]), AS_OF)
    np.testing.assert_array_equal(tie.latest_row, [1])  # bit-exact: integer row numbers


def _reference_aggregate(vectors, computed, mode, half_life, l2):
    """Straightforward one-user-at-a-time definition, the oracle for the vectorised version."""
    rows = [(v, c) for v, c in zip(vectors.astype(np.float64), computed) if np.isfinite(v).all()]
    if not rows:
        return None
    total, weight_sum = np.zeros(vectors.shape[1]), 0.0
    for vector, at in rows:
        weight = 1.0 if mode == "mean" else 0.5 ** (max((AS_OF - at) / 3600.0, 0.0) / half_life)
        total, weight_sum = total + weight * vector, weight_sum + weight
    mean = total / weight_sum
    if l2:
        if np.linalg.norm(mean) == 0:
            return None
        mean = mean / np.linalg.norm(mean)
    return mean, len(rows)


@pytest.mark.parametrize("mode, l2", [("mean", False), ("recency", False), ("recency", True)])
def test_vectorised_aggregates_match_the_per_user_definition(mode, l2):
    rng = np.random.default_rng(0)
    ids = np.sort(rng.integers(0, 60, size=500))
    vectors = rng.normal(size=(500, 8)).astype(np.float32)
    vectors[rng.random(500) < 0.05, 3] = np.nan
    computed = AS_OF - rng.integers(0, 24 * 3600, size=500)
    result = aggregate_users(ids, vectors, computed, AS_OF, mode=mode, half_life_hours=6.0, l2_normalize=l2)
    expected = {user: _reference_aggregate(vectors[ids == user], computed[ids == user], mode, 6.0, l2)
                for user in np.unique(ids)}
    expected = {user: value for user, value in expected.items() if value is not None}
    assert result.user_ids.tolist() == sorted(expected)
    for user, embedding, n_pairs in zip(result.user_ids, result.embeddings, result.n_pairs):
        np.testing.assert_allclose(embedding, expected[user][0], rtol=1e-6, atol=1e-7)
        assert n_pairs == expected[user][1]
    assert result.embeddings.dtype == np.float32


def _impute_one(sims, vectors, min_neighbors=1, min_similarity=0.0):
    kwargs = {"min_neighbors": min_neighbors, "min_similarity": min_similarity}
    result = impute_users(
        np.zeros(len(sims), np.int64), np.asarray(sims), np.asarray(vectors, dtype=np.float64), **kwargs
    )
    return None if not len(result.user_ids) else (result.embeddings[0], int(result.n_neighbors[0]),
                                                  float(result.mean_similarity[0]))


def test_imputation_weights_by_similarity_and_skips_dissimilar_neighbors():
    embedding, n_neighbors, mean_similarity = _impute_one(
        [0.9, 0.3, 0.05], [[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]], min_neighbors=2, min_similarity=0.1)
    np.testing.assert_allclose(embedding, [0.9 / 1.2, 0.3 / 1.2], rtol=1e-6)
    assert n_neighbors == 2 and mean_similarity == pytest.approx(0.6)


def test_imputation_refuses_too_few_dissimilar_or_non_finite_neighbors():
    vectors = np.ones((3, 2))
    assert _impute_one([0.9], vectors[:1], min_neighbors=2) is None
    assert _impute_one([0.05, 0.02, 0.01], vectors, min_neighbors=1, min_similarity=0.1) is None
    assert _impute_one([-0.5, -0.2, -0.1], vectors, min_neighbors=1) is None
    assert _impute_one([0.9, np.nan], vectors[:2], min_neighbors=1)[1] == 1
    assert _impute_one([0.9, 0.8], [[1.0, 1.0], [np.inf, 1.0]], min_neighbors=1) is None
    assert _impute_one([], np.zeros((0, 2)), min_neighbors=1) is None


def test_imputation_of_many_users_per_call():
    ids = np.array([1, 1, 1, 4, 4, 6, 6, 6])
    sims = np.array([0.9, 0.5, 0.2, 0.8, 0.0, 0.05, 0.7, 0.6])
    vectors = np.array([[1, 0], [0, 1], [1, 1], [2, 2], [9, 9], [9, 9], [1, 3], [np.nan, 0]])
    result = impute_users(ids, sims, vectors, min_neighbors=2, min_similarity=0.1)
    # user 4 has one usable neighbour (similarity 0 never counts); user 6's usable ones include a NaN
    np.testing.assert_array_equal(result.user_ids, [1])  # bit-exact: integer ids
    np.testing.assert_allclose(result.embeddings[0], [(0.9 + 0.2) / 1.6, (0.5 + 0.2) / 1.6], rtol=1e-6)
    assert result.n_neighbors.tolist() == [3] and result.mean_similarity[0] == pytest.approx(1.6 / 3)
    loose = impute_users(ids, sims, np.nan_to_num(vectors), min_neighbors=1, min_similarity=0.1)
    np.testing.assert_array_equal(loose.user_ids, [1, 4, 6])  # bit-exact: integer ids
    # bit-exact: integer row numbers
    np.testing.assert_array_equal(loose.first_row, [0, 3, 5])  # the user's first listed neighbour
    np.testing.assert_allclose(loose.embeddings[2], [0.7 / 1.3, 2.1 / 1.3], rtol=1e-6)
    assert loose.mean_similarity.dtype == np.float32 and loose.embeddings.dtype == np.float32


def test_group_starts_and_batches_cut_only_between_users():
    np.testing.assert_array_equal(group_starts(np.array([2, 2, 3, 7, 7, 7])), [0, 2, 3])  # bit-exact: integer offsets
    ids = [1, 1, 2, 2, 2, 2, 2, 3, 4, 4]
    batches = [pa.record_batch({"user_id": pa.array(ids[i:j], pa.int64()), "x": pa.array(range(i, j))})
               for i, j in [(0, 3), (3, 5), (5, 6), (6, 6), (6, 10)]]
    tables = list(complete_groups(iter(batches), "user_id"))
    # user 1 is complete in the first batch; user 2 spans three batches and waits for user 3; user 4 ends the stream
    assert [t.column("x").to_pylist() for t in tables] == [[0, 1], [2, 3, 4, 5, 6, 7], [8, 9]]
    assert list(complete_groups(iter([]), "user_id")) == []
