"""Replay the hourly precompute + enrichment over a time range, hour by hour, in one Spark session.

For each tick ``t`` in ``[--start, --end)`` (step ``--step-hours``): candidates -> score/verify/
write -> hit rate against the requests that arrived in ``(t, t + horizon]`` -> expire -> user
aggregates -> KNN -> impute -> item aggregates -> publish -> coverage: the requests of ``(t, t + 1h]`` resolved
through the published snapshot at their own timestamps, share served per tier. It is what
the backfill/replay DAG and the demo run, and the engine of evaluations: every tick sees only
events with ``ts <= t``, exactly like the live hourly DAG. Ticks already done (a ``success`` row in
``runs`` for their last stage, coverage) are skipped unless ``--force``, so an interrupted replay
resumes; every stage is idempotent, so a half-done tick is simply redone.

    solaris replay --start 2000-12-01T00:00:00Z --end 2000-12-01T06:00:00Z
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from solaris.pipeline import (
    CANDIDATES,
    COVERAGE,
    EXPIRE,
    HIT_RATE,
    KNN,
    LAST_MEASURE,
    SCORE,
    run_cycle,
    run_ids,
    tick_schedule,
)
from solaris.progress import progress
from solaris.runtime import JobInputError
from solaris.storage.audit import RunsLog
from solaris.tiers import SERVING_ORDER

if TYPE_CHECKING:  # pragma: no cover
    from datetime import datetime

    from pyspark.sql import SparkSession

    from solaris.config import SolarisConfig
    from solaris.pipeline import CycleResult

log = logging.getLogger("solaris.replay")


def _done_ticks(spark: SparkSession, config: SolarisConfig, wanted: set[str]) -> set[str]:
    """The enrichment run ids among ``wanted`` whose tick is done: a ``success`` row of its last stage
    (coverage) in ``runs``.

    Read once for the whole schedule, and on the driver with ``deltalake`` when ``runs`` is a local
    folder (Spark's reader otherwise): a replay resumed, or an evaluation's seed sharing a replay
    already done, used to ask Spark once per tick, about half a second for each of a window's 48 ticks.
    """
    return RunsLog.of(spark, config).succeeded(LAST_MEASURE, wanted)


def run(spark: SparkSession, config: SolarisConfig, start: datetime, end: datetime, *, step_hours: float = 1.0,
        force: bool = False, vacuum: bool = True) -> list[CycleResult]:
    """Run :func:`solaris.pipeline.run_cycle` (with the replay measurements) at every tick.

    ``vacuum``: VACUUM once, at the last tick (Delta's 7-day guard stays on, so it removes only
    files older than that: a warehouse replayed again weeks later).
    """
    schedule = tick_schedule(start, end, step_hours)
    if not schedule:
        raise JobInputError(f"empty replay range [{start}, {end})")
    summary = []
    done = set() if force else _done_ticks(spark, config, {run_ids(tick)["enrichment"] for tick in schedule})
    todo = sum(run_ids(tick)["enrichment"] not in done for tick in schedule)
    with progress("replay", total=todo, unit="tick", log=log, interval=0) as report:  # a line every tick
        for index, tick in enumerate(schedule, 1):
            if run_ids(tick)["enrichment"] in done:
                log.info("tick %d/%d %s already done: skipped", index, len(schedule), tick)
                continue
            log.info("tick %d/%d: %s", index, len(schedule), tick)
            summary.append(run_cycle(spark, config, tick, measure=True, vacuum=vacuum and index == len(schedule)))
            report.advance(metric=tick_metric(summary[-1]))
    return summary


def tick_metric(cycle: CycleResult) -> str:
    """What a replay's progress line says of the tick just done: its time, wall seconds and coverage."""
    text = f"{cycle.as_of:%Y-%m-%d %H:%M}Z in {cycle.total_seconds:.0f}s"
    coverage = cycle.result(COVERAGE)
    if coverage is not None:
        last = SERVING_ORDER[-1]
        text += f", coverage tiers1-{last} {coverage.cumulative(last):.1%}"
    return text


def summary_line(cycle: CycleResult) -> str:
    """One printable line per replayed tick: counts, hit rates, KNN recall, coverage by tier."""
    rate = lambda value: "n/a" if value is None else f"{value:.3f}"  # noqa: E731
    # a replayed cycle runs every stage and the measurements (measure=True)
    scored, hits, knn, coverage = (cycle.require(SCORE), cycle.require(HIT_RATE), cycle.require(KNN),
                                   cycle.require(COVERAGE))
    parts = [f"as_of={cycle.as_of.isoformat()}", f"candidates={cycle.require(CANDIDATES).pairs}",
             f"verified={scored.verified}", f"written={scored.written}",
             f"quarantined={scored.quarantined}", f"expired={cycle.require(EXPIRE).expired}",
             f"requests={hits.requests}", f"candidates_hit_rate={rate(hits.candidates.hit_rate)}",
             f"verified_hit_rate={rate(hits.verified.hit_rate)}",
             f"knn_recall_at_{knn.k}={knn.recall:.3f}"]
    parts += [f"coverage_tiers1-{tier}={coverage.cumulative(tier):.3f}" for tier in SERVING_ORDER]
    parts.append(f"seconds={cycle.total_seconds:.1f}")
    return " ".join(parts)
