"""Step 0 of the evaluation: the events every window reads, the windows chosen, and each window's rows.

Why a module of its own: every later step indexes the same time-sorted event arrays by the rows
:class:`WindowRows` splits (pre / tail / scored), and reads the point-in-time features
:class:`EvaluationData` computes once for all windows and seeds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable

import numpy as np

from solaris.evaluation import protocol as evaluation
from solaris.models.training import EventArrays
from solaris.runtime import JobInputError
from solaris.storage.events import Events

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

    from solaris.config import SolarisConfig
    from solaris.drivers.evaluate.serving import AgedRequests
    from solaris.evaluation.protocol import EvaluationWindow
    from solaris.models.features import Features, HistoryIndex

log = logging.getLogger("solaris.evaluate")

END_OF_TIME = datetime(9999, 12, 31, tzinfo=timezone.utc)  # read every event (window choice needs them all)


def read_events(spark: Callable[[], SparkSession], config: SolarisConfig, end: datetime) -> EventArrays:
    """Events up to ``end`` as driver arrays: read with deltalake, with Spark only when deltalake cannot
    (so a rerun whose seeds all have results never starts a JVM)."""
    return EventArrays.from_frame(Events.of(spark, config).training(end))


@dataclass(frozen=True)
class WindowRows:
    """Rows of the (time-sorted) event arrays in each part of one window, and digests of its data."""

    window: EvaluationWindow
    pre: np.ndarray  # ts <= fm_cutoff: trains the FM, the verifier and the distilled VM
    tail: np.ndarray  # (fm_cutoff, T0]: replayed, fine-tunes the VM variants
    scored: np.ndarray  # (T0, end]: scored
    training_digest: str  # of the events <= fm_cutoff (what the checkpoints learn from)
    window_digest: str  # of the events <= end (what the replay and the scoring read)

    @classmethod
    def of(cls, events: EventArrays, window: EvaluationWindow) -> WindowRows:
        cutoff, t0, end = (t.timestamp() for t in (window.fm_cutoff, window.t0, window.end))
        pre = np.flatnonzero(events.ts <= cutoff)
        tail = np.flatnonzero((events.ts > cutoff) & (events.ts <= t0))
        scored = np.flatnonzero((events.ts > t0) & (events.ts <= end))
        for name, rows in (("before the tail", pre), ("in the tail", tail), ("in the evaluation window", scored)):
            if rows.size < 10:
                raise JobInputError(
                    f"window T0={window.t0.isoformat()}: only {rows.size} events {name}; choose another T0 "
                    "or longer windows"
                )
        upto = np.flatnonzero(events.ts <= end)

        return cls(window, pre, tail, scored, events.select(pre).digest(), events.select(upto).digest())


@dataclass(frozen=True)
class EvaluationData:
    """The events every window reads, their point-in-time features, and the history index behind them.

    ``oracle``: the oracle's input per (window T0, serving FM version), computed once and shared by
    the seeds that share the FM; ``aged``: the serving FM's passes at the freshness curve's ages over
    the scored requests (:func:`~solaris.drivers.evaluate.serving.aged_requests`), keyed and shared
    the same way.
    """

    events: EventArrays
    features: Features  # each event's features at its own time (history strictly before it)
    index: HistoryIndex  # queries features at other times (the oracle's serving ticks, request - age)
    oracle: dict[tuple[str, str], np.ndarray]
    aged: dict[tuple[str, str], AgedRequests] = field(default_factory=dict)

    @classmethod
    def of(cls, events: EventArrays, history_length: int) -> EvaluationData:
        index = events.index()
        features = index.query(events.user_id, events.item_id, events.ts, history_length)  # = events.features
        return cls(events, features, index, {})


def choose_windows(config: SolarisConfig, events: EventArrays, t0s: list[datetime] | None) -> list[datetime]:
    """T0s given (``--as-of``, else ``evaluation.t0s``), each checked against the minimums; or, with
    none given, the densest non-overlapping windows of the data (:func:`densest_windows`)."""
    settings = config.evaluation
    minimums = (settings.min_requests, settings.min_users, settings.min_training_events)
    given = sorted(t0s or settings.t0s)
    if given:
        for t0 in given:
            density = evaluation.density_at(events.ts, events.user_id, t0, settings.tail_hours, settings.eval_hours)
            reason = density.refusal(*minimums)
            if reason:
                raise JobInputError(reason)
            log.info("window T0 %s: %d scored requests from %d users", t0, density.requests, density.users)
        return given
    picked = evaluation.densest_windows(
        events.ts, events.user_id, tail_hours=settings.tail_hours, eval_hours=settings.eval_hours,
        step_hours=settings.step_hours, count=settings.windows, min_requests=settings.min_requests,
        min_users=settings.min_users, min_training_events=settings.min_training_events,
    )
    if not picked:
        raise JobInputError(
            f"no {settings.eval_hours:g} h window with >= {settings.min_requests:,} requests from >= "
            f"{settings.min_users:,} users after >= {settings.min_training_events:,} events; lower "
            "evaluation.min_requests / min_users or pass --as-of"
        )
    for density in picked:
        log.info("densest window T0 %s: %d scored requests from %d users", density.t0, density.requests,
                 density.users)
    return [density.t0 for density in picked]
