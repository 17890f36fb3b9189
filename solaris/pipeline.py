"""The hourly cycle, defined once: which stages run, in which order, under which run id.

Why one definition: the precompute and enrichment DAGs, ``solaris replay``, ``solaris evaluate``,
the benchmarks and the tests all run the same chain of stages. Each of them used to spell it out
and the copies drifted (one vacuumed, one measured hit rates, one skipped coverage). Now the DAGs
build their tasks from :data:`PRECOMPUTE` / :data:`ENRICHMENT` (a DAG test checks the wiring) and
every in-process caller goes through :func:`run_cycle`.

A stage is the unit a user sees everywhere: one Airflow task (retries, logs), one ``solaris
<command>``, one ``jobs/<name>.py`` entry file with a ``run(spark, config, as_of, run_id)``.
Replays add two *measurements* that read the future (hit rate after ``score``, coverage after
``publish``); they never feed a decision and are not part of the scheduled DAGs.
"""

from __future__ import annotations

import importlib
import logging
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable, Literal

from solaris.config import SolarisConfig
from solaris.jobs import hit_rate
from solaris.jobs.candidates import CandidatesResult
from solaris.jobs.expire import ExpireResult
from solaris.jobs.hit_rate import CoverageResult, HitRateResult
from solaris.jobs.impute import ImputeResult
from solaris.jobs.item_aggregates import ItemAggregatesResult
from solaris.jobs.knn import KnnResult
from solaris.jobs.publish import PublishResult
from solaris.jobs.score import ScoreResult
from solaris.jobs.user_aggregates import UserAggregatesResult
from solaris.precompute.spark_features import tick_events
from solaris.storage.tables import batched_audit
from solaris.timeutil import default_run_id

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

Half = Literal["precompute", "enrichment"]


@dataclass(frozen=True)
class Stage:
    """One stage of the hourly cycle: task id, job module, its half and its upstream stages."""

    name: str  # Airflow task id, key in CycleResult, module solaris.jobs.<name>
    half: Half  # which DAG runs it, and so which run id it writes under
    upstream: tuple[str, ...]  # stages of the same half that must finish first
    doc: str  # one line for the task's doc_md

    def module(self) -> Any:
        return importlib.import_module(f"solaris.jobs.{self.name}")


PRECOMPUTE: tuple[Stage, ...] = (
    Stage(
        "candidates",
        "precompute",
        (),
        "Speculate the pairs of the next horizon (sql/candidates.sql) into `candidates`.",
    ),
    Stage(
        "score",
        "precompute",
        ("candidates",),
        "FM + verifier scoring UDF, verifier rule, TTL MERGE into `pair_embeddings`.",
    ),
    Stage(
        "expire",
        "precompute",
        ("score",),
        "Delete rows with `expires_at <= as_of`; VACUUM (retention guard on) at the midnight run.",
    ),
)
ENRICHMENT: tuple[Stage, ...] = (
    Stage("user_aggregates", "enrichment", (), "Tier 3: 24 h mean of each user's pair embeddings."),
    Stage("knn", "enrichment", (), "FAISS clusters + KNN over FM user representations; recall@k in `runs`."),
    Stage(
        "impute",
        "enrichment",
        ("user_aggregates", "knn"),
        "Tier 4: impute users without an aggregate from their neighbours.",
    ),
    Stage("item_aggregates", "enrichment", (), "Tiers 5-6: 24 h item means; other items from the FM item space."),
    Stage("publish", "enrichment", ("impute", "item_aggregates"), "Quality gate, then the atomic snapshot manifest."),
)
CYCLE: tuple[Stage, ...] = PRECOMPUTE + ENRICHMENT
STAGE_NAMES: tuple[str, ...] = tuple(stage.name for stage in CYCLE)
# The replay measurement whose success row in `runs` marks a replayed tick as done.
LAST_MEASURE = "coverage"


def run_ids(as_of: datetime) -> dict[str, str]:
    """Run id of each half at ``as_of``: every stage of one hour shares it, so reruns replace."""
    return {half: default_run_id(half, as_of) for half in ("precompute", "enrichment")}


def tick_schedule(start: datetime, end: datetime, step_hours: float = 1.0) -> list[datetime]:
    """Ticks ``start, start + step, ...`` strictly before ``end``."""
    if step_hours <= 0:
        raise ValueError("step_hours must be positive")
    ticks, current = [], start
    while current < end:
        ticks.append(current)
        current += timedelta(hours=step_hours)
    return ticks


@dataclass(frozen=True)
class CycleResult:
    """Typed result of each stage that ran at one tick (None: not run) and its wall seconds."""

    as_of: datetime
    candidates: CandidatesResult | None = None
    score: ScoreResult | None = None
    hit_rate: HitRateResult | None = None
    expire: ExpireResult | None = None
    user_aggregates: UserAggregatesResult | None = None
    knn: KnnResult | None = None
    impute: ImputeResult | None = None
    item_aggregates: ItemAggregatesResult | None = None
    publish: PublishResult | None = None
    coverage: CoverageResult | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    # in the caller's ``observe`` hooks (a benchmark's counters): not the tick's, so not in ``seconds``
    observer_seconds: float = 0.0

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())


def run_cycle(
    spark: "SparkSession",
    config: SolarisConfig,
    as_of: datetime,
    *,
    stages: tuple[str, ...] | list[str] | None = None,
    measure: bool = False,
    vacuum: bool = False,
    observe: Callable[[str], AbstractContextManager[Any]] | None = None,
) -> CycleResult:
    """Run the hourly stages at ``as_of`` in one Spark session, in the defined order.

    ``stages``: a subset (kept in cycle order), e.g. to stop before ``publish``. ``measure``: also
    the replay measurements (hit rate of the run's pairs, coverage of the next hour's requests
    through the snapshot just published). ``vacuum``: let ``expire`` VACUUM (a replay does it once,
    at its last tick: VACUUM lists every file and costs seconds, not worth it every hour).
    ``observe``: a context manager factory entered around each stage (and measurement) with its
    name, e.g. ``bench/cycle.py`` counting the Spark jobs and Delta commits each one makes.
    """
    wanted = STAGE_NAMES if stages is None else tuple(stages)
    unknown = set(wanted) - set(STAGE_NAMES)
    if unknown:
        raise KeyError(f"unknown stages {sorted(unknown)}; stages: {', '.join(STAGE_NAMES)}")
    ids = run_ids(as_of)
    results: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    observed = 0.0  # seconds inside the observe hooks around the stages

    def timed(name: str, call: Callable[[], Any]) -> None:
        nonlocal observed
        entered = time.perf_counter()
        with observe(name) if observe is not None else nullcontext():
            started = time.perf_counter()
            results[name] = call()
            seconds[name] = time.perf_counter() - started
        observed += time.perf_counter() - entered - seconds[name]

    block_started = time.perf_counter()
    # the tick's `runs` rows in one commit (also after a failure); the events up to as_of read once
    with batched_audit(spark, config), tick_events(spark, config, as_of):
        for step in CYCLE:
            if step.name not in wanted:
                continue
            kwargs = {"vacuum": vacuum} if step.name == "expire" else {}
            # B023 below: timed() calls each lambda at once, inside this iteration
            timed(step.name, lambda: step.module().run(spark, config, as_of, ids[step.half], **kwargs))  # noqa: B023
            if measure and step.name == "score":
                timed("hit_rate", lambda: hit_rate.run(spark, config, as_of, ids["precompute"]))
            if measure and step.name == "publish":
                manifest = results["publish"].manifest
                timed(LAST_MEASURE, lambda: hit_rate.coverage(spark, config, as_of, manifest, ids["enrichment"]))  # noqa: B023
    # what the block spent outside its stages: the tick's one `runs` commit, caching and dropping
    # the tick's events - less the observer's own time, which a tick without a benchmark never pays
    seconds["runs_audit"] = time.perf_counter() - block_started - sum(seconds.values()) - observed
    cycle = CycleResult(as_of=as_of, seconds=seconds, observer_seconds=observed, **results)
    log.info(
        "cycle at %s: %.1fs (%s)",
        as_of,
        cycle.total_seconds,
        ", ".join(f"{name} {value:.1f}s" for name, value in seconds.items()),
    )
    return cycle
