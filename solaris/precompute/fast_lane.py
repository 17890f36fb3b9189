"""Who the fast lane serves at ``as_of``: the pure rule (no Spark), shared by the job and the bench.

Why a fast lane: MovieLens users rate in bursts, and most of a new user's requests arrive in the
hour after their first rating. The hourly cycle only speculates for users it has already seen, so
a session that starts after the hourly run is served by the item tier alone until the next hour.
The fast lane runs every ``fast_lane.interval_minutes`` between the hourly runs and covers exactly
those sessions: users with at least one event in ``(as_of - lookback, as_of]`` and no event in the
``absence_hours`` before that window (never seen before, or back after a long absence). A user
already active before the window was either picked by an earlier fast-lane run or is speculated
for by the hourly cycle, so each new session is picked once, by the first run after it starts.

Only events ``<= as_of`` may be passed in (point in time); the rule itself never reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterable

from solaris.config import FastLaneConfig
from solaris.timeutil import default_run_id

RUN_PREFIX = "fast-lane"  # run ids fast-lane-<as-of>: never precompute-/enrichment- (solaris.pipeline.run_ids)


@dataclass(frozen=True)
class UserActivity:
    """One user's events as the rule needs them: how many in the window, and the last one before it."""

    user_id: int
    events_in_window: int  # events with ts in (window_start, as_of]
    last_before: datetime | None  # latest event with ts <= window_start; None: no earlier event at all


@dataclass(frozen=True)
class FastLaneSelection:
    """The users picked (budget order) and why: new users, returning ones, and those over the budget."""

    users: list[int]
    new: int  # picked users with no event before the window
    returning: int  # picked users whose last earlier event is older than absence_hours
    dropped: int  # eligible users left out by fast_lane.max_users


def window_start(as_of: datetime, config: FastLaneConfig) -> datetime:
    """Start (exclusive) of the window whose first events make a user a fast-lane user."""
    return as_of - timedelta(minutes=config.lookback_minutes)


def absence_start(as_of: datetime, config: FastLaneConfig) -> datetime:
    """An event after this and at or before :func:`window_start` means the user is not new."""
    return window_start(as_of, config) - timedelta(hours=config.absence_hours)


def run_id(as_of: datetime) -> str:
    """The fast lane's run id at ``as_of``: deterministic (reruns replace) and never an hourly run id."""
    return default_run_id(RUN_PREFIX, as_of)


def is_hourly_tick(as_of: datetime) -> bool:
    """On the hour the hourly cycle runs (and publishes ``snapshot-<as_of>``): the fast lane stays out."""
    return as_of.minute == 0 and as_of.second == 0 and as_of.microsecond == 0


def select_users(activity: Iterable[UserActivity], as_of: datetime, config: FastLaneConfig) -> FastLaneSelection:
    """The fast-lane users at ``as_of`` within ``max_users``: most events in the window first, then user id.

    Why that order: a user with more events in the window is further into a burst that is still
    going, so more of their next requests are at stake; the user id breaks ties so reruns agree.
    """
    cutoff = absence_start(as_of, config)
    eligible = [user for user in activity
                if user.events_in_window >= 1 and (user.last_before is None or user.last_before <= cutoff)]
    eligible.sort(key=lambda user: (-user.events_in_window, user.user_id))
    picked = eligible[: config.max_users]
    new = sum(1 for user in picked if user.last_before is None)
    return FastLaneSelection(users=[user.user_id for user in picked], new=new, returning=len(picked) - new,
                             dropped=len(eligible) - len(picked))


def activity_from_events(events: Iterable[tuple[int, datetime]], as_of: datetime,
                         config: FastLaneConfig) -> list[UserActivity]:
    """Per-user :class:`UserActivity` from ``(user_id, ts)`` pairs, ignoring events after ``as_of``.

    The plain-Python twin of the Spark aggregate ``solaris.pipeline.user_activity``, used by the bench and
    the unit tests (so both sides of the rule are checked on the same inputs).
    """
    start = window_start(as_of, config)
    counts: dict[int, int] = {}
    last: dict[int, datetime] = {}
    for user, ts in events:
        if ts > as_of:
            continue
        if ts > start:
            counts[user] = counts.get(user, 0) + 1
        elif user not in last or ts > last[user]:
            last[user] = ts
    return [UserActivity(user, n, last.get(user)) for user, n in sorted(counts.items())]
