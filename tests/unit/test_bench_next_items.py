"""bench/next_items.py's pure parts: point-in-time inputs, transitions, training windows, hit counting."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pandas as pd
import pytest

from tests.unit.bench_scripts import bench_script

H = 3600


@pytest.fixture(scope="module")
def bench():
    with bench_script("next_items") as module:
        yield module


def _events(bench, rows):
    return bench.Events.from_frame(pd.DataFrame(rows, columns=["user_id", "item_id", "ts"]))


def test_events_are_coded_and_read_in_sequence_order(bench):
    events = _events(bench, [(7, 30, 5), (7, 10, 1), (9, 20, 2), (7, 20, 1)])
    assert events.n_users == 2 and events.n_items == 3
    # user 7's sequence by time, ties by item id: 10, 20 (both at 1), then 30
    assert events.user.tolist() == [0, 0, 0, 1] and events.item.tolist() == [0, 1, 2, 1]
    assert events.until(1).item.tolist() == [0, 1] and sorted(events.between(1, 5).ts.tolist()) == [2, 5]


def test_transitions_count_the_next_events_of_the_same_user_only(bench):
    events = _events(bench, [(1, 0, 1), (1, 1, 2), (1, 2, 3), (2, 2, 4), (2, 0, 5)])
    one = bench.transition_counts(events, 1).toarray()
    assert one[0, 1] == 1 and one[1, 2] == 1 and one[2, 0] == 1 and one.sum() == 3  # not 2 -> 2 across users
    two = bench.transition_counts(events, 2).toarray()
    assert two[0, 2] == 1 and two.sum() == 4


def test_training_windows_align_inputs_with_their_next_items(bench):
    events = _events(bench, [(1, i, i) for i in range(5)])
    pad = events.n_items
    windows = bench.training_windows(events, length=3, targets=2, pad=pad)
    # inputs are the first 3 of each window: every item is an input exactly once, the last items with padded targets
    assert windows.tolist() == [[2, 3, 4, pad, pad], [pad, 0, 1, 2, 3]]
    assert bench.training_windows(_events(bench, [(1, 0, 0)]), 3, 2, pad).shape == (0, 5)  # nothing to predict
    assert bench.sequences(events, np.array([0]), 3, pad).tolist() == [[2, 3, 4]]


def test_hits_skip_engaged_items_and_count_within_each_budget(bench):
    scores = np.array([[0.9, 0.8, 0.7, 0.1]])
    engaged = np.array([[True, False, False, False]])
    truth = np.array([[True, False, True, True]])
    # ranking without the engaged item 0: 1, 2, 3 -> hits at 1: 0, at 2: 1, at 3: 2
    assert bench.hits_per_user(scores, engaged, truth, (1, 2, 3)).tolist() == [[0, 1, 2]]
    order = bench.ranking(scores, engaged, 3)
    assert order.tolist() == [[1, 2, 3]]
    assert bench.next_item_hits(order, np.array([2]), k=2).tolist() == [True]
    assert bench.next_item_hits(order, np.array([3]), k=2).tolist() == [False]


def test_scores_at_t_ignore_every_event_after_t(bench):
    rows = [(u, (u * 3 + k) % 6, 10 * k + u) for u in range(4) for k in range(5)]
    base = _events(bench, rows)
    later = _events(bench, rows + [(0, 5, 1000), (1, 4, 1001), (3, 0, 2000)])
    users = np.array([0, 1, 2])
    past, past_later = base.until(30), later.until(30)
    before = bench.tick_scores(past, past.matrix(), users, 30, None, 3)
    after = bench.tick_scores(past_later, past_later.matrix(), users, 30, None, 3)
    assert before.keys() == after.keys() == {"popular", "item_knn", "transitions"}
    for name in before:
        # bit-exact: the same inputs (later events cut) through the same code and shapes
        np.testing.assert_array_equal(before[name], after[name])


def test_hourly_requesters_count_distinct_users_in_the_hour_after_each_tick(bench):
    events = _events(bench, [(1, 0, H), (1, 1, H + 10), (2, 0, 2 * H), (3, 0, 2 * H + 1)])
    counts = bench.hourly_requesters(events, 0, 3 * H)
    at = lambda t: datetime.fromtimestamp(t, timezone.utc)  # noqa: E731
    assert counts == {at(0): 1, at(H): 2, at(2 * H): 1}  # an event at exactly t + 1h belongs to tick t
