"""Point-in-time features: nothing at or after the request time, and never the event's own label."""

import numpy as np

from solaris.models.features import (
    FEEDBACK_LEVELS,
    NO_HISTORY_RECENCY,
    HistoryIndex,
    feedback_levels,
    time_split,
    training_features,
)
from tests.tolerance import assert_close

# user 1: items 10 (t=100, liked), 11 (t=200), 12 and 13 at the same second t=300 (13 liked)
USERS = np.array([1, 1, 1, 1, 2])
ITEMS = np.array([10, 11, 12, 13, 10])
TS = np.array([100, 200, 300, 300, 250])
LABELS = np.array([1.0, 0.0, 0.0, 1.0, 1.0])


def _history(features, row):
    mask = features.hist_mask[row]
    return features.hist_items[row][mask].tolist(), features.hist_labels[row][mask].tolist()


def test_history_is_strictly_before_and_most_recent_last():
    features = training_features(USERS, ITEMS, TS, LABELS, history_length=5)
    assert _history(features, 0) == ([], [])
    assert _history(features, 1) == ([10], [1.0])
    # same-second events never see each other (neither item 12 nor 13 nor their labels)
    assert _history(features, 2) == ([10, 11], [1.0, 0.0])
    assert _history(features, 3) == ([10, 11], [1.0, 0.0])
    assert features.hist_mask[2].tolist() == [False, False, False, True, True]


def test_own_label_never_leaks_into_features():
    # Flip every label: each event's features must be identical except through *earlier* events.
    rng = np.random.default_rng(0)
    n = 2000
    users, items = rng.integers(0, 50, n), rng.integers(0, 80, n)
    ts = rng.integers(0, 10_000, n)
    labels = rng.integers(0, 2, n).astype(float)
    base = training_features(users, items, ts, labels, history_length=8)
    for row in rng.choice(n, 50, replace=False):
        flipped = labels.copy()
        flipped[row] = 1 - flipped[row]
        other = training_features(users, items, ts, flipped, history_length=8)
        affected = np.flatnonzero(np.any((base.hist_labels != other.hist_labels) & base.hist_mask, axis=1))
        # only requests strictly later than the flipped event, by the same user, may change
        assert set(affected.tolist()) <= set(np.flatnonzero((users == users[row]) & (ts > ts[row])).tolist())
        assert row not in affected


def test_history_truncates_to_last_n():
    features = training_features(USERS, ITEMS, TS, LABELS, history_length=1)
    assert _history(features, 2) == ([11], [0.0])


def test_item_popularity_and_recency_are_point_in_time():
    features = training_features(USERS, ITEMS, TS, LABELS, history_length=3)
    # item 10 seen at t=100 only before user 2's request at t=250; log1p values within the tolerance (the
    # features take numpy's array loop, which may use the CPU's SIMD log, the expectation its scalar call)
    assert_close(features.item_pop[4], np.log1p(1))
    assert features.item_pop[0] == 0.0
    assert_close(features.user_recency[1], np.log1p(100 / 3600))
    assert features.user_recency[0] == np.float32(NO_HISTORY_RECENCY)
    assert features.user_has_history.tolist() == [0, 1, 1, 1, 0]
    # counters: strictly before, smoothed (likes + 1) / (n + 2)
    assert features.user_like_rate[2] == np.float32(2 / 4)  # liked 10, not 11
    assert_close(features.user_log_count[2], np.log1p(2))
    assert features.item_like_rate[4] == np.float32(2 / 3)  # item 10 liked once before t=250
    assert features.item_like_rate[0] == np.float32(0.5)


def test_unknown_users_and_items_get_empty_features():
    index = HistoryIndex(USERS, ITEMS, TS, LABELS)
    features = index.query([99, 1], [999, 10], [1000, 1000], history_length=4)
    assert not features.hist_mask[0].any() and features.item_pop[0] == 0
    assert features.hist_mask[1].sum() == 4
    assert_close(features.item_pop[1], np.log1p(2))  # item 10 at t=100 and t=250


def test_query_after_all_events_sees_everything_before():
    index = HistoryIndex(USERS, ITEMS, TS, LABELS)
    features = index.query([1], [10], [301], history_length=10)
    assert _history(features, 0)[0] == [10, 11, 12, 13]


def test_time_split_validation_is_latest():
    ts = np.arange(100)
    train, valid = time_split(ts, 0.2)
    assert ts[train].max() < ts[valid].min() and valid.size == 20


def test_features_from_histories_match_the_history_index():
    from solaris.models.features import features_from_histories

    rng = np.random.default_rng(5)
    n = 300
    users, items = rng.integers(0, 20, n), rng.integers(0, 40, n)
    ts = rng.integers(0, 100_000, n)
    labels = rng.integers(0, 2, n).astype(np.float32)
    feedback = feedback_levels(labels, np.where(rng.random(n) < 0.8, rng.integers(1, 6, n), np.nan))
    request = 100_000
    expected = HistoryIndex(users, items, ts, labels, feedback).query(np.arange(20), np.full(20, 7),
                                                                      np.full(20, request), 6)
    # what the Spark job gathers: per user, events with ts <= as_of ordered by (ts, item) (oldest first)
    order = np.lexsort((items, ts))
    lists = [order[users[order] == u] for u in range(20)]
    offsets = np.r_[0, np.cumsum([len(rows) for rows in lists])]
    flat = np.concatenate(lists)
    user_counts = np.array([(users == u).sum() for u in range(20)])
    got = features_from_histories(np.arange(20), np.full(20, 7), hist_offsets=offsets, hist_items=items[flat],
                                  hist_labels=labels[flat], hist_feedback=feedback[flat], hist_ts=ts[flat],
                                  item_count=np.full(20, (items == 7).sum()),
                                  item_likes=np.full(20, labels[items == 7].sum()), user_count=user_counts,
                                  request_ts=request, history_length=6)
    np.testing.assert_array_equal(got.hist_mask, expected.hist_mask)  # bit-exact: boolean masks
    # bit-exact: 0/1 labels gathered, no arithmetic
    np.testing.assert_array_equal(got.hist_labels, expected.hist_labels)
    np.testing.assert_array_equal(got.hist_feedback, expected.hist_feedback)  # bit-exact: integer feedback levels
    np.testing.assert_allclose(got.hist_age, expected.hist_age, atol=1e-6)
    np.testing.assert_allclose(got.user_recency, expected.user_recency, atol=1e-6)
    assert_close(got.item_pop, expected.item_pop)  # log1p of the counts in two functions: the formula, not the bits
    for name in ("user_like_rate", "user_log_count", "item_like_rate"):
        np.testing.assert_allclose(getattr(got, name), getattr(expected, name), rtol=1e-6)
    # same-timestamp ties may order differently; the multiset of items per user must agree
    for row in range(20):
        assert sorted(got.hist_items[row][got.hist_mask[row]]) == sorted(
            expected.hist_items[row][expected.hist_mask[row]]
        )


def test_feedback_levels_keep_the_rating_and_fall_back_to_the_label():
    labels = np.array([0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    ratings = np.array([1.0, 5.0, 2.5, 3.5, np.nan, np.nan, 9.0, 0.2])
    # rated: 1 + stars (rounded half to even, clipped to 1..5); unrated: the liked bit
    assert feedback_levels(labels, ratings).tolist() == [2, 6, 3, 5, 0, 1, 6, 2]
    assert feedback_levels(labels).tolist() == [0, 1, 0, 1, 0, 1, 1, 0]
    assert feedback_levels(labels, ratings).max() < FEEDBACK_LEVELS


def test_history_tokens_carry_the_feedback_level_of_past_events_only():
    feedback = np.array([6, 2, 3, 5, 4])
    features = HistoryIndex(USERS, ITEMS, TS, LABELS, feedback).query(np.array([1]), np.array([99]),
                                                                      np.array([300]), 4)
    mask = features.hist_mask[0]
    assert features.hist_feedback[0][mask].tolist() == [6, 2]  # t=100 and t=200; t=300 is not before 300
    assert features.hist_labels[0][mask].tolist() == [1.0, 0.0]  # the counters' liked bit is unchanged
    assert (features.hist_feedback[0][~mask] == 0).all()
