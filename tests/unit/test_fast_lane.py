"""The fast lane's pure parts: who is picked at as_of, its run ids, its schedule and its budgets (no Spark)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from solaris.config import ConfigError, FastLaneConfig, load_config
from solaris.orchestration import fast_lane_schedule
from solaris.pipeline import run_ids, tick_schedule
from solaris.precompute.fast_lane import (
    UserActivity,
    absence_start,
    activity_from_events,
    is_hourly_tick,
    run_id,
    select_users,
    window_start,
)

AS_OF = datetime(2000, 11, 19, 18, 15, tzinfo=timezone.utc)
LANE = FastLaneConfig(lookback_minutes=15, absence_hours=168, max_users=10)
MIN = timedelta(minutes=1)


def _pick(events, as_of=AS_OF, config=LANE):
    return select_users(activity_from_events(events, as_of, config), as_of, config)


def test_new_and_returning_users_are_picked_recently_active_ones_are_not():
    events = [
        (1, AS_OF - 5 * MIN),  # new: first event ever inside the window
        (2, AS_OF - 3 * MIN), (2, AS_OF - timedelta(hours=169)),  # back after more than absence_hours
        (3, AS_OF - 2 * MIN), (3, AS_OF - timedelta(hours=2)),  # active two hours ago: the hourly run has them
        (4, AS_OF - timedelta(hours=3)),  # nothing in the window
    ]
    selection = _pick(events)
    assert sorted(selection.users) == [1, 2]
    assert (selection.new, selection.returning, selection.dropped) == (1, 1, 0)


def test_window_edges_are_exclusive_at_the_start_and_inclusive_at_as_of():
    start = window_start(AS_OF, LANE)
    assert start == AS_OF - 15 * MIN and absence_start(AS_OF, LANE) == start - timedelta(hours=168)
    assert _pick([(1, AS_OF)]).users == [1]  # an event at as_of counts
    assert _pick([(1, start)]).users == []  # at the window start it is before the window
    # the last earlier event exactly absence_hours before the window: absent long enough
    assert _pick([(1, AS_OF - MIN), (1, absence_start(AS_OF, LANE))]).users == [1]
    assert _pick([(1, AS_OF - MIN), (1, absence_start(AS_OF, LANE) + MIN)]).users == []


def test_events_after_as_of_are_never_read():
    """Point in time: a later first event does not make a user new, a later event does not hide one."""
    assert _pick([(1, AS_OF + MIN)]).users == []
    assert _pick([(1, AS_OF - MIN), (1, AS_OF + 2 * MIN)]).users == [1]
    activity = activity_from_events([(1, AS_OF - MIN), (1, AS_OF + MIN), (2, AS_OF + MIN)], AS_OF, LANE)
    assert activity == [UserActivity(1, 1, None)]


def test_budget_keeps_the_busiest_users_then_the_lowest_ids():
    config = FastLaneConfig(max_users=2)
    activity = [UserActivity(5, 1, None), UserActivity(3, 4, None), UserActivity(9, 4, None), UserActivity(1, 2, None)]
    selection = select_users(activity, AS_OF, config)
    assert selection.users == [3, 9] and selection.dropped == 2
    assert select_users(list(reversed(activity)), AS_OF, config) == selection  # input order does not matter


def test_run_ids_are_deterministic_and_never_an_hourly_run_id():
    for as_of in tick_schedule(AS_OF - timedelta(hours=3), AS_OF + timedelta(hours=3), 0.25):
        assert run_id(as_of) == run_id(as_of) == f"fast-lane-{as_of:%Y%m%dT%H%M%SZ}"
        hourly = {rid for tick in (as_of, as_of.replace(minute=0)) for rid in run_ids(tick).values()}
        assert run_id(as_of) not in hourly
    assert is_hourly_tick(AS_OF.replace(minute=0)) and not is_hourly_tick(AS_OF)


@pytest.mark.parametrize("interval, cron", [(15, "15,30,45 * * * *"), (20, "20,40 * * * *"), (30, "30 * * * *"),
                                            (10, "10,20,30,40,50 * * * *")])
def test_schedule_runs_between_the_hourly_runs_only(interval, cron):
    assert fast_lane_schedule(interval) == cron


def test_schedule_and_config_refuse_an_interval_that_does_not_divide_the_hour():
    with pytest.raises(ValueError):
        fast_lane_schedule(7)
    with pytest.raises(ConfigError, match="fast_lane"):
        load_config(overrides=["fast_lane.interval_minutes=7"])
    assert fast_lane_schedule() == fast_lane_schedule(load_config().fast_lane.interval_minutes)


def test_lane_config_only_changes_the_candidate_budgets():
    from solaris.pipeline import lane_config

    config = load_config(overrides=["fast_lane.max_users=30", "fast_lane.per_user=7"])
    lane = lane_config(config)
    assert (lane.precompute.candidates.per_user, lane.precompute.candidates.budget) == (7, 210)
    restored = lane.precompute.candidates.model_copy(update={"per_user": config.precompute.candidates.per_user,
                                                            "budget": config.precompute.candidates.budget})
    assert restored == config.precompute.candidates
    assert lane.model_copy(update={"precompute": config.precompute}) == config
