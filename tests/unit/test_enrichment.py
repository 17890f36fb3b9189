import numpy as np
import pytest

from solaris.enrichment import aggregate_user, impute_from_neighbors

AS_OF = 100 * 3600


def test_plain_mean_and_count():
    vectors = np.array([[1.0, 0.0], [3.0, 2.0]], dtype=np.float32)
    result = aggregate_user(vectors, np.array([AS_OF - 3600, AS_OF]), AS_OF)
    np.testing.assert_allclose(result.embedding, [2.0, 1.0])
    assert result.n_pairs == 2 and result.embedding.dtype == np.float32


def test_recency_weighting_halves_per_half_life():
    vectors = np.array([[0.0], [3.0]])
    # the older vector is exactly one half-life old: weights 0.5 and 1 -> (0*0.5 + 3*1) / 1.5 = 2
    result = aggregate_user(vectors, np.array([AS_OF - 6 * 3600, AS_OF]), AS_OF, mode="recency", half_life_hours=6)
    np.testing.assert_allclose(result.embedding, [2.0])


def test_l2_normalisation_and_degenerate_inputs():
    result = aggregate_user(np.array([[3.0, 4.0]]), np.array([AS_OF]), AS_OF, l2_normalize=True)
    np.testing.assert_allclose(result.embedding, [0.6, 0.8], rtol=1e-6)
    assert aggregate_user(np.zeros((0, 2)), np.array([]), AS_OF) is None
    assert aggregate_user(np.array([[np.nan, 1.0]]), np.array([AS_OF]), AS_OF) is None
    assert aggregate_user(np.array([[0.0, 0.0]]), np.array([AS_OF]), AS_OF, l2_normalize=True) is None
    with pytest.raises(ValueError, match="mode"):
        aggregate_user(np.ones((1, 2)), np.array([AS_OF]), AS_OF, mode="median")


def test_nan_rows_are_skipped_not_averaged():
    vectors = np.array([[1.0, 1.0], [np.inf, 0.0], [3.0, 3.0]])
    result = aggregate_user(vectors, np.full(3, AS_OF), AS_OF)
    np.testing.assert_allclose(result.embedding, [2.0, 2.0])
    assert result.n_pairs == 2


def test_imputation_weights_by_similarity_and_skips_neighbors_without_embedding():
    sims = np.array([0.9, 0.3, 0.8, 0.05])
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [9.0, 9.0], [5.0, 5.0]])
    has = np.array([True, True, False, True])
    result = impute_from_neighbors(sims, vectors, has, min_neighbors=2, min_similarity=0.1)
    np.testing.assert_allclose(result.embedding, [0.9 / 1.2, 0.3 / 1.2], rtol=1e-6)
    assert result.n_neighbors == 2 and result.mean_similarity == pytest.approx(0.6)


def test_imputation_refuses_too_few_or_dissimilar_neighbors():
    vectors = np.ones((3, 2))
    assert impute_from_neighbors(np.array([0.9, 0.8, 0.7]), vectors, np.array([True, False, False]), min_neighbors=2) is None
    assert impute_from_neighbors(np.array([0.05, 0.02, 0.01]), vectors, np.ones(3, bool), min_neighbors=1,
                                 min_similarity=0.1) is None
    assert impute_from_neighbors(np.array([-0.5, -0.2, -0.1]), vectors, np.ones(3, bool), min_neighbors=1) is None
