"""bench/speculation.py's pure parts: the per-budget ceiling and the acceptance intervals."""

from __future__ import annotations

import pytest

from tests.unit.bench_scripts import bench_script


@pytest.fixture(scope="module")
def speculation():
    with bench_script("speculation") as module:
        yield module


def test_reachable_caps_each_requester_at_the_budget(speculation):
    assert speculation.reachable([3, 30, 120], (10, 50)) == {10: 3 + 10 + 10, 50: 3 + 30 + 50}
    assert speculation.reachable([], (10,)) == {10: 0}


def test_acceptance_intervals_are_the_pooled_ratios(speculation):
    # requests, hits new, hits today, passes new, passes today (per_user_columns order), per user
    per_user = {1: [10, 4, 2, 20, 100], 2: [30, 6, 3, 40, 200], 3: [0, 0, 0, 10, 50]}
    intervals = speculation.acceptance_intervals(per_user)
    assert intervals["written (new) hit rate"].estimate == pytest.approx(10 / 40)
    assert intervals["written (today) hit rate"].estimate == pytest.approx(5 / 40)
    assert intervals["written (new) hit rate / today's"].estimate == pytest.approx(2.0)
    assert intervals["written (new) FM passes per covered request / today's"].estimate == pytest.approx(
        (70 / 10) / (350 / 5))
    for interval in intervals.values():
        assert interval.low is None or interval.low <= interval.estimate <= interval.high


def test_a_sweep_adds_one_hits_and_one_passes_column_per_set(speculation):
    entry = speculation.SweepEntry
    assert speculation.parse_sweep("0.01, 0.002:50,b20") == (entry(0.01), entry(0.002, 50), entry(per_active_user=20))
    assert speculation.parse_sweep("") == ()
    assert entry(per_active_user=20).update() == {"rule": "request", "request_budget_per_active_user": 20}
    assert entry(0.002, 50).update() == {"rule": "request", "request_threshold": 0.002,
                                         "request_budget_per_active_user": None, "request_top_k_per_user": 50}
    assert speculation.written_sets(speculation.parse_sweep("0.002:50,b20")) == (
        "written (new)", "written p>=0.002 k50", "written b20", "written (today)")
    names = speculation.written_sets((entry(0.01),))
    assert names == ("written (new)", "written p>=0.01", "written (today)")
    columns = speculation.per_user_columns(names)
    assert columns[0] == "requests" and len(columns) == 1 + 2 * len(names)
    per_user = {1: [10, 4, 6, 2, 20, 40, 100], 2: [30, 6, 9, 3, 40, 80, 200]}
    intervals = speculation.acceptance_intervals(per_user, names)
    assert intervals["written p>=0.01 hit rate"].estimate == pytest.approx(15 / 40)
    assert intervals["written p>=0.01 hit rate / today's"].estimate == pytest.approx(3.0)
