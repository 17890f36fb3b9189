"""The incremental precompute's rules (no Spark): what one micro-batch of new events asks for.

The streaming query over ``events`` (``solaris.drivers.stream``) hands each micro-batch's events to
these functions, which decide:

* **who**: every user with an event in the batch (:func:`plan_batch`), re-speculated by the hourly
  rules from their events up to the batch's as-of;
* **when**: the batch's as-of is its newest event time, or the stream's last as-of if that is later
  (a batch of late events), so each user is computed from every event the batch brought and every
  event the stream already processed (point in time: nothing later is read), ``computed_at`` is an
  event time, as the hourly cycle's is the hour's, and the stream's as-of never goes back;
* **under which run id**: ``stream-<as-of stamp>-b<batch id>`` (:func:`run_id`). Deterministic: a
  batch that is redone after a crash has the same batch id and the same events (Spark's checkpoint
  logs a batch's offsets before it runs it), so it gets the same as-of and run id, and every table
  rule keyed on the run id (``replace_run``, ``merge_newer``, the ``runs`` upsert) makes the redo
  replace its own rows rather than add to them. The batch id keeps two batches whose newest event
  has the same time apart (a batch of late events): each replaces only its own rows.
* **which events it reads**: those in ``(as_of - window, as_of]``, with the window of
  :func:`events_window_hours`: the longest window any enabled candidate source reads (so the
  item-side views, the item-item statistics included, equal the hourly cycle's at the same as-of),
  never the whole table;
* **where the query starts** on its first run (:func:`start_plan`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterable, Literal

from solaris.config import CandidateConfig
from solaris.timeutil import utc_stamp

RUN_PREFIX = "stream"  # run ids stream-<as-of>-b<batch>: never precompute-, enrichment- or fast-lane-
SNAPSHOT_TAG = f"-{RUN_PREFIX}-b"  # what tells a stream manifest (snapshot-<as-of>-stream-b<batch>) from an hourly one
JOB = "stream"  # its own row in `runs` (one per micro-batch)
Trigger = Literal["available-now", "processing-time"]
TRIGGERS: tuple[Trigger, ...] = ("available-now", "processing-time")


@dataclass(frozen=True)
class UserEvents:
    """One user's events in a micro-batch: how many, and the newest event time."""

    user_id: int
    events: int
    newest: datetime


@dataclass(frozen=True)
class BatchPlan:
    """What one micro-batch does: the users it re-speculates (sorted), its as-of and run id.

    ``as_of`` and ``run_id`` are None for a batch without events (nothing to do).
    """

    batch_id: int
    users: list[int]
    events: int
    as_of: datetime | None
    run_id: str | None


def run_id(as_of: datetime, batch_id: int) -> str:
    """The run id of micro-batch ``batch_id`` at ``as_of``: the same for a redo of the batch, never an
    hourly or fast-lane id (those end in the stamp; this one in ``-b<batch id>``)."""
    if batch_id < 0:
        raise ValueError(f"a batch id is never negative, got {batch_id}")
    return f"{RUN_PREFIX}-{utc_stamp(as_of)}-b{batch_id}"


def snapshot_id(as_of: datetime, batch_id: int) -> str:
    """The manifest a micro-batch publishes: ``snapshot-<stamp>-stream-b<batch id>``.

    Why not the hourly ``snapshot-<stamp>``: a batch whose newest event falls exactly on the hour
    would replace the hourly cycle's manifest of that hour. Manifest names keep sorting in time
    order by their stamp (``solaris.serving.snapshots.list_manifests``).
    """
    return f"snapshot-{utc_stamp(as_of)}{SNAPSHOT_TAG}{batch_id}"


def plan_batch(batch_id: int, activity: Iterable[UserEvents], *, floor: datetime | None = None) -> BatchPlan:
    """The plan of a micro-batch from its per-user events (:class:`UserEvents`, one per user).

    ``floor``: the as-of of the stream's last processed batch (None: none yet). The as-of is the
    batch's newest event time or ``floor`` if that is later. Why: a batch of late events (event times
    before those the stream has processed) at its own newest event time would compute its users as
    of a past moment, without the later events already stored; ``pair_embeddings`` and
    ``user_embeddings`` keep the newer of two rows (``merge_newer``), so a user the stream had
    refreshed after that moment would keep values that never saw the late event, and its tier-3
    aggregate would not be replaced either. At ``floor`` the batch reads every
    stored event up to the stream's present, the late ones included, and its rows replace the
    stored ones of the same time (same ``computed_at``, another run). A redo of the batch gets the
    same as-of: the floor it sees then is at most its own as-of.
    """
    rows = sorted(activity, key=lambda user: user.user_id)
    if len({user.user_id for user in rows}) != len(rows):
        raise ValueError("one UserEvents per user")
    events = sum(user.events for user in rows)
    if not rows or events == 0:
        return BatchPlan(batch_id=batch_id, users=[], events=0, as_of=None, run_id=None)
    as_of = max(user.newest for user in rows)
    if floor is not None and floor > as_of:
        as_of = floor
    return BatchPlan(batch_id=batch_id, users=[user.user_id for user in rows], events=events, as_of=as_of,
                     run_id=run_id(as_of, batch_id))


def events_window_hours(rules: CandidateConfig) -> float:
    """How far back a micro-batch reads events: the longest window an enabled source reads.

    Every item-side view of ``sql/candidates.sql`` then sees exactly the events the hourly cycle's
    would at the same as-of: the active users (``lookback_hours``), ``trending`` and ``popular``
    (their windows), the item-item statistics of ``cooc`` / ``next`` (``cooc_days`` before their
    as-of, which lies up to ``item_stats_hours`` before the run's), the ``retrieval`` item vectors
    (``retrieval_days``). What the window cuts is what lies beyond all of them: a touched user's
    events and an item's events older than the window do not count in the per-user views (engaged
    items, activity counts) and the FM's counters (user and item event counts, history). That is
    what keeps a micro-batch from reading the whole table.
    """
    hours = [rules.lookback_hours]
    if "trending" in rules.sources:
        hours.append(rules.trending_hours)
    if "popular" in rules.sources:
        hours.append(24 * rules.popular_days)
    if {"cooc", "next"} & set(rules.sources):
        hours.append(24 * rules.cooc_days + rules.item_stats_hours)
    if "retrieval" in rules.sources:
        hours.append(24 * rules.retrieval_days)
    return float(max(hours))


def events_since(as_of: datetime, rules: CandidateConfig) -> datetime:
    """The (exclusive) start of the events a micro-batch at ``as_of`` reads."""
    return as_of - timedelta(hours=events_window_hours(rules))


@dataclass(frozen=True)
class StartPlan:
    """Where the query starts: ``record`` a start version to store (None: keep the stored one) and
    ``start`` the version to start from, or None: wait (no commit after the recorded start yet)."""

    record: int | None
    start: int | None


def start_plan(recorded: int | None, latest: int | None) -> StartPlan:
    """The start of the query over ``events`` (Delta ``startingVersion``), from the version recorded at
    its first run (``recorded``; None: this is the first run) and the table's latest version.

    The first run records ``latest + 1``: the query processes what is committed after it started,
    not the table's history (that is the hourly cycle's). Why recorded, and not Delta's
    ``startingVersion=latest``: a query that finds nothing new commits no offset, so the next run
    would start again at the then latest version and skip what arrived in between. Delta refuses a
    start version the table does not have yet, so the query starts once ``latest`` reaches it. Once
    the checkpoint holds an offset, Spark ignores the start version.
    """
    if recorded is None:
        first = 0 if latest is None else latest + 1
        return StartPlan(record=first, start=None)
    if latest is None or latest < recorded:
        return StartPlan(record=None, start=None)
    return StartPlan(record=None, start=recorded)


def trigger_options(trigger: Trigger, interval_seconds: int) -> dict[str, object]:
    """Keyword arguments of Spark's ``DataStreamWriter.trigger`` for ``trigger``."""
    if trigger == "available-now":
        return {"availableNow": True}
    if trigger == "processing-time":
        if interval_seconds < 1:
            raise ValueError(f"interval_seconds must be >= 1, got {interval_seconds}")
        return {"processingTime": f"{interval_seconds} seconds"}
    raise ValueError(f"unknown trigger {trigger!r}; one of {', '.join(TRIGGERS)}")


def has_new_events(latest: int | None, *, recorded_start: int | None, next_version: int | None,
                   pending: bool) -> bool:
    """Whether a run of the query has anything to do (the DAG's short-circuit, before any JVM).

    ``latest``: the events table's latest version (None: no table); ``next_version``: the version the
    query reads next, from its checkpoint's last committed offset (Delta's ``reservoirVersion``;
    None: no offset yet); ``pending``: a batch logged but not committed (a killed run: redo it);
    ``recorded_start``: the version recorded at the first run. Anything unknown runs: a first run
    records its start, and the query itself decides.
    """
    if pending:
        return True
    if next_version is not None:
        return latest is not None and latest >= next_version
    if recorded_start is None:
        return True
    return start_plan(recorded_start, latest).start is not None
