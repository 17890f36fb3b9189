"""bench/freshness.py's pure parts: query times by age, the serving tick, the request facts, TR by age."""

from __future__ import annotations

import numpy as np
import pytest

from solaris.evaluation.bootstrap import Interval
from solaris.models import metrics
from tests.unit.bench_scripts import bench_script


@pytest.fixture(scope="module")
def freshness():
    with bench_script("freshness") as module:
        yield module


def test_ages_are_sorted_unique_minutes_with_zero_always_there(freshness):
    assert freshness.parse_ages("5,1,0,5") == (0, 1, 5)
    assert freshness.parse_ages("15, 60") == (0, 15, 60)
    with pytest.raises(ValueError, match=">= 0"):
        freshness.parse_ages("-1")


def test_a_value_of_age_a_is_computed_a_minutes_before_the_request(freshness):
    assert freshness.query_times(np.array([3600, 4000]), 5).tolist() == [3300, 3700]
    assert freshness.query_times(np.array([3600]), 0).tolist() == [3600]


def test_the_serving_tick_is_the_latest_hour_strictly_before_the_request(freshness):
    ts = np.array([3601, 5000, 7199, 7200, 7201])
    assert freshness.serving_tick_times(ts).tolist() == [3600, 3600, 3600, 3600, 7200]


def test_a_request_follows_an_event_of_its_user_strictly_before_it_within_the_limit(freshness):
    history_users = np.array([1, 1, 2, 3])
    history_ts = np.array([100, 500, 1000, 2000])
    users = np.array([1, 1, 1, 1, 2, 2, 4, 3])
    ts = np.array([100, 500, 700, 801, 1300, 1301, 900, 2000])
    # user 1 at 100: nothing before; at 500: the event at 500 is not before it, 100 is 400 s back; at 700: 200 s;
    # at 801: 301 s; user 2: 300 s (at the limit) and 301 s; user 4 never seen; user 3 only at the same second
    assert freshness.follows_within(history_users, history_ts, users, ts, 300).tolist() == [
        False, False, True, False, True, False, False, False]
    assert freshness.follows_within(np.array([], np.int64), np.array([], np.int64), users, ts).tolist() == [
        False] * users.size


def test_users_first_seen_on_the_request_day(freshness):
    day = freshness.DAY_SECONDS
    history_users = np.array([1, 1, 2, 3])
    history_ts = np.array([day - 10, day + 5, day + 100, 2 * day + 1])
    users = np.array([1, 2, 3, 9])
    ts = np.array([day + 50, day + 200, 2 * day + 60, day + 1])
    assert freshness.first_seen_that_day(history_users, history_ts, users, ts).tolist() == [False, True, True, False]


def test_share_kept_is_the_transfer_ratio_and_undefined_without_an_edge(freshness):
    kept = freshness.share_kept(np.array([1.0, 0.9, 0.9]), np.array([0.9, 0.9, 1.0]), np.array([0.95, 0.8, 0.8]))
    assert kept[0] == pytest.approx(metrics.transfer_ratio(1.0, 0.95, 0.9))
    assert np.isnan(kept[1:]).all()


def _requests(seed: int = 1):
    rng = np.random.default_rng(seed)
    users = np.repeat(np.arange(40), 25)
    truth = rng.uniform(0.05, 0.95, users.size)
    labels = (rng.uniform(size=users.size) < truth).astype(np.float32)
    vm = np.clip(0.5 + 0.2 * (truth - 0.5) + rng.normal(0, 0.05, users.size), 0.02, 0.98)
    fm = np.clip(truth + rng.normal(0, 0.05, users.size), 0.02, 0.98)
    return users, labels, {"vm_baseline": vm, "fm@0": fm, "fm@5": 0.5 * (vm + fm)}


def test_rows_hold_ne_gain_and_share_kept_with_paired_intervals(freshness):
    users, labels, predictions = _requests()
    ages = {"vm_baseline": None, "fm@0": 0.0, "fm@5": 5.0}
    rows = {row.name: row for row in freshness.variant_rows(users, labels, predictions, ages, 200, seed=3)}
    ne = {name: metrics.normalized_entropy(labels, p) for name, p in predictions.items()}
    for name, row in rows.items():
        assert row.ne.estimate == pytest.approx(ne[name])
        assert row.gain.estimate == pytest.approx(ne["vm_baseline"] - ne[name])
        assert row.ne.low <= row.ne.estimate <= row.ne.high
    assert rows["fm@5"].kept.estimate == pytest.approx(metrics.transfer_ratio(ne["vm_baseline"], ne["fm@5"],
                                                                              ne["fm@0"]))
    assert rows["fm@5"].kept.low <= rows["fm@5"].kept.estimate <= rows["fm@5"].kept.high
    # paired: the FM at the request keeps all of its edge and the VM none of it, in every draw
    assert (rows["fm@0"].kept.low, rows["fm@0"].kept.high) == pytest.approx((1.0, 1.0))
    assert (rows["vm_baseline"].kept.low, rows["vm_baseline"].kept.high) == pytest.approx((0.0, 0.0))
    assert rows["vm_baseline"].age_minutes is None and rows["fm@5"].age_minutes == 5.0
    again = freshness.variant_rows(users, labels, predictions, ages, 200, seed=3)
    assert [row.to_dict() for row in again] == [row.to_dict() for row in rows.values()]


def test_rows_need_the_vm_and_the_fm_at_the_request(freshness):
    users, labels, predictions = _requests()
    with pytest.raises(ValueError, match="fm@0"):
        freshness.variant_rows(users, labels, {"vm_baseline": predictions["vm_baseline"]}, {}, 10, seed=0)


def test_the_table_shows_estimates_intervals_and_undefined_cells(freshness):
    row = freshness.VariantRow("fm@5", 5.0, Interval(0.8512, 0.84, 0.86), Interval(0.0123, 0.01, 0.015),
                               Interval(0.68, 0.56, 0.77))
    vm = freshness.VariantRow("vm_baseline", None, Interval(0.87, 0.86, 0.88), Interval(0.0, 0.0, 0.0),
                              Interval(0.0, 0.0, 0.0))
    unbounded = freshness.VariantRow("fm@60", 60.0, Interval(0.9, 0.88, 0.92), Interval(-0.02, -0.03, -0.01),
                                     Interval(-0.79, None, None, 0.2))
    table = freshness.format_table([vm, row, unbounded])
    lines = table.splitlines()
    assert "real time" in lines[2] and "+0 [+0, +0] %" in lines[2]
    assert "5.0 m" in lines[3] and "0.8512 [0.8400, 0.8600]" in lines[3] and "+68 [+56, +77] %" in lines[3]
    assert "-79 [unbounded] %" in lines[4]
    undefined = freshness.VariantRow("fm@1", 1.0, Interval(None, None, None), Interval(None, None, None),
                                     Interval(None, None, None))
    assert "undefined" in freshness.format_table([undefined])


def test_the_plot_is_written(freshness, tmp_path):
    users, labels, predictions = _requests()
    predictions["fm@tick"] = predictions["fm@5"]
    ages = {"vm_baseline": None, "fm@0": 0.0, "fm@5": 5.0, "fm@tick": 30.0}
    rows = freshness.variant_rows(users, labels, predictions, ages, 50, seed=0)
    target = tmp_path / "freshness.png"
    freshness.plot(rows, str(target), "test", distilled=False)
    assert target.stat().st_size > 0
