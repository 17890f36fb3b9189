"""bench/delta_writes.py's pure parts: the tick's commit counts and the floor they put under a tick."""

from __future__ import annotations

import pytest

from tests.unit.bench_scripts import bench_script


@pytest.fixture(scope="module")
def delta_writes():
    with bench_script("delta_writes") as module:
        yield module


def test_the_default_tick_writes_are_nine_and_parse_back_from_their_option_text(delta_writes):
    assert sum(delta_writes.TICK_WRITES.values()) == 9
    assert delta_writes.parse_writes("driver_merge_if_new_run=5, driver_replace_run=3,overwrite=1,") == \
        delta_writes.TICK_WRITES
    assert delta_writes.parse_writes("merge_if_new_run=5,replace_where=3") == {"merge_if_new_run": 5,
                                                                               "replace_where": 3}


def test_floor_is_each_kind_s_median_times_its_commits(delta_writes):
    medians = {"merge_if_new_run": 2.0, "merge_into": 1.5, "replace_where": 1.0, "overwrite": 0.5}
    assert delta_writes.floor_seconds(medians, {"merge_if_new_run": 5, "overwrite": 2}) == pytest.approx(11.0)
    medians.update(driver_merge_if_new_run=0.25, driver_replace_run=0.5)
    assert delta_writes.floor_seconds(medians, delta_writes.TICK_WRITES) == pytest.approx(3.25)


def test_an_unknown_write_kind_is_refused_by_name(delta_writes):
    with pytest.raises(SystemExit, match="unknown write kind 'upsert'"):
        delta_writes.parse_writes("upsert=3")
