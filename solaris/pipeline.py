"""The hourly cycle, defined once: which stages run, in which order, under which run id.

Why one definition: the precompute and enrichment DAGs, ``solaris replay``, ``solaris evaluate``,
the benchmarks and the tests all run the same chain of stages. Each of them used to spell it out
and the copies drifted (one vacuumed, one measured hit rates, one skipped coverage). Now the DAGs
build their tasks from :data:`PRECOMPUTE` / :data:`ENRICHMENT` (a DAG test checks the wiring) and
every in-process caller goes through :func:`run_cycle`.

A stage is the unit a user sees everywhere: one Airflow task (retries, logs), one ``solaris
<command>``, one ``jobs/<name>.py`` entry file, one ``solaris/stages/<name>.py`` module with one
typed entry ``run(step: StepContext, *, options: <Name>Options) -> <Name>Result``. The list below
holds each :class:`Stage` as typed data: its run function, its options class and how the cycle's
:class:`CycleSettings` make them, its result class (docs/architecture.md §5: the contract).
Replays add two *measurements* that read the future (hit rate after ``score``, coverage after
``publish``), attached to the stage they follow; they never feed a decision and are not part of
the scheduled DAGs.
"""

from __future__ import annotations

import logging
import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterator, Literal, Mapping, Protocol, Sequence, TypeVar

from solaris.config import SolarisConfig
from solaris.precompute.fast_lane import UserActivity, is_hourly_tick, select_users, window_start
from solaris.precompute.spark_features import keep_visible_events, visible_events
from solaris.precompute.stream import JOB as STREAM_JOB
from solaris.stages import candidates, expire, hit_rate, impute, item_aggregates, knn, publish, score, user_aggregates
from solaris.stages.candidates import CandidatesOptions, CandidatesResult
from solaris.stages.expire import ExpireOptions, ExpireResult
from solaris.stages.hit_rate import CoverageOptions, CoverageResult, HitRateOptions, HitRateResult
from solaris.stages.impute import ImputeOptions, ImputeResult
from solaris.stages.item_aggregates import ItemAggregatesOptions, ItemAggregatesResult
from solaris.stages.knn import KnnOptions, KnnResult
from solaris.stages.publish import PublishOptions, PublishResult
from solaris.stages.score import ScoreOptions, ScoreResult
from solaris.stages.user_aggregates import UserAggregatesOptions, UserAggregatesResult
from solaris.storage.audit import RunRecord, RunsLog
from solaris.tick import StepContext, Tick
from solaris.timeutil import default_run_id

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
lane_log = logging.getLogger("solaris.fast_lane")

Half = Literal["precompute", "enrichment"]

O = TypeVar("O")  # noqa: E741 - a stage's options class
R = TypeVar("R")  # a stage's result class
F = TypeVar("F")  # the result of the stage a measurement follows
O_in = TypeVar("O_in", contravariant=True)
R_out = TypeVar("R_out", covariant=True)


class StageRun(Protocol[O_in, R_out]):
    """The contract of every stage's entry: ``run(step, *, options) -> result`` (mypy checks each one)."""

    def __call__(self, step: StepContext, *, options: O_in) -> R_out: ...


@dataclass(frozen=True)
class CycleSettings:
    """What a caller of :func:`run_cycle` chooses for the whole tick; each stage makes its options from it.

    ``measure``: run the replay measurements after the stages they follow. ``vacuum``: let ``expire``
    VACUUM (a replay does it once, at its last tick).
    """

    measure: bool = False
    vacuum: bool = False


@dataclass(frozen=True, kw_only=True)
class Measurement(Generic[F, O, R]):
    """A replay measurement run right after the stage it is attached to (reads the future; no decision).

    ``options_from``: its options from that stage's result (coverage: the manifest publish wrote).
    It writes under the run id of that stage's half and its seconds are reported under ``name``.
    """

    name: str  # key in CycleResult, job in `runs`
    command: str | None  # its `solaris --help` line when it has a jobs/<name>.py entry, else None
    run: StageRun[O, R] = field(repr=False, compare=False)
    options: type[O]
    result: type[R]
    options_from: Callable[[F], O] = field(repr=False, compare=False)


@dataclass(frozen=True, kw_only=True)
class Stage(Generic[O, R]):
    """One stage of the hourly cycle, as data: what the DAGs, the jobs and :func:`run_cycle` read.

    ``run`` is ``solaris/stages/<name>.py``'s typed entry; ``options`` / ``result`` its classes
    (``jobs/<name>.py`` calls the same ``run``; ``solaris.cli`` lists ``command``);
    ``options_from`` makes the options from the cycle's :class:`CycleSettings` (default: ``options()``);
    ``measurements`` run after it in replays.
    """

    name: str  # Airflow task id, key in CycleResult, entry file jobs/<name>.py
    half: Half  # which DAG runs it, and so which run id it writes under
    upstream: tuple[str, ...]  # stages of the same half that must finish first
    doc: str  # one line for the task's doc_md
    command: str  # its line in `solaris --help` (solaris <name with - for _>)
    run: StageRun[O, R] = field(repr=False, compare=False)
    options: type[O] = field(compare=False)
    result: type[R] = field(compare=False)
    options_from: Callable[[CycleSettings], O] | None = field(default=None, repr=False, compare=False)
    measurements: tuple[Measurement[R, Any, Any], ...] = field(default=(), compare=False)

    def options_for(self, settings: CycleSettings) -> O:
        """This stage's options in a cycle run with ``settings``."""
        return self.options() if self.options_from is None else self.options_from(settings)


HIT_RATE: Measurement[ScoreResult, HitRateOptions, HitRateResult] = Measurement(
    name="hit_rate", command="speculation hit rate of a run against the requests that arrived",
    run=hit_rate.run, options=HitRateOptions, result=HitRateResult,
    options_from=lambda scored: HitRateOptions())
COVERAGE: Measurement[PublishResult, CoverageOptions, CoverageResult] = Measurement(
    name="coverage", command=None, run=hit_rate.coverage, options=CoverageOptions, result=CoverageResult,
    options_from=lambda published: CoverageOptions(manifest=published.manifest))

CANDIDATES: Stage[CandidatesOptions, CandidatesResult] = Stage(
    name="candidates", half="precompute", upstream=(),
    doc="Speculate the pairs of the next horizon (sql/candidates.sql) into `candidates`.",
    command="speculate the (user, item) pairs of the next horizon",
    run=candidates.run, options=CandidatesOptions, result=CandidatesResult)
SCORE: Stage[ScoreOptions, ScoreResult] = Stage(
    name="score", half="precompute", upstream=("candidates",),
    doc="FM + verifier scoring UDF, verifier rule, TTL MERGE into `pair_embeddings`.",
    command="FM-score and verify candidates, write pair_embeddings with TTL",
    run=score.run, options=ScoreOptions, result=ScoreResult, measurements=(HIT_RATE,))
EXPIRE: Stage[ExpireOptions, ExpireResult] = Stage(
    name="expire", half="precompute", upstream=("score",),
    doc="Delete rows with `expires_at <= as_of` and history past `retention.*`; VACUUM at the midnight run.",
    command="delete expired pair embeddings and history past retention; VACUUM at midnight",
    run=expire.run, options=ExpireOptions, result=ExpireResult,
    options_from=lambda cycle: ExpireOptions(hourly_jobs=HOURLY_JOBS, vacuum=cycle.vacuum))
USER_AGGREGATES: Stage[UserAggregatesOptions, UserAggregatesResult] = Stage(
    name="user_aggregates", half="enrichment", upstream=(),
    doc="Tier 3: 24 h mean of each user's pair embeddings.",
    command="tier 3: 24 h mean of each user's pair embeddings",
    run=user_aggregates.run, options=UserAggregatesOptions, result=UserAggregatesResult)
KNN: Stage[KnnOptions, KnnResult] = Stage(
    name="knn", half="enrichment", upstream=(),
    doc="FAISS clusters + KNN over FM user representations; recall@k in `runs`.",
    command="FAISS k-means + per-cluster KNN over FM user representations",
    run=knn.run, options=KnnOptions, result=KnnResult)
IMPUTE: Stage[ImputeOptions, ImputeResult] = Stage(
    name="impute", half="enrichment", upstream=("user_aggregates", "knn"),
    doc="Tier 4: impute users without an aggregate from their neighbours.",
    command="tier 4: impute users without an aggregate from their neighbours",
    run=impute.run, options=ImputeOptions, result=ImputeResult)
ITEM_AGGREGATES: Stage[ItemAggregatesOptions, ItemAggregatesResult] = Stage(
    name="item_aggregates", half="enrichment", upstream=(),
    doc="Tiers 5-6: 24 h item means; other items from the FM item space.",
    command="tiers 5-6: 24 h item means; other items via FM item space",
    run=item_aggregates.run, options=ItemAggregatesOptions, result=ItemAggregatesResult)
PUBLISH: Stage[PublishOptions, PublishResult] = Stage(
    name="publish", half="enrichment", upstream=("impute", "item_aggregates"),
    doc="Quality gate, then the atomic snapshot manifest.",
    command="quality gate, then an atomic snapshot manifest for the resolver",
    run=publish.run, options=PublishOptions, result=PublishResult, measurements=(COVERAGE,))

PRECOMPUTE: tuple[Stage[Any, Any], ...] = (CANDIDATES, SCORE, EXPIRE)
ENRICHMENT: tuple[Stage[Any, Any], ...] = (USER_AGGREGATES, KNN, IMPUTE, ITEM_AGGREGATES, PUBLISH)
CYCLE: tuple[Stage[Any, Any], ...] = PRECOMPUTE + ENRICHMENT
STAGE_NAMES: tuple[str, ...] = tuple(stage.name for stage in CYCLE)
# The jobs of the hourly chain whose `runs` rows expire's retention trims: the stages, their
# measurements, the fast lane and the stream (which write their own rows).
HOURLY_JOBS: tuple[str, ...] = (
    *STAGE_NAMES, *(measurement.name for stage in CYCLE for measurement in stage.measurements), "fast_lane",
    STREAM_JOB)
# The replay measurement whose success row in `runs` marks a replayed tick as done.
LAST_MEASURE = COVERAGE.name


def run_ids(as_of: datetime) -> dict[str, str]:
    """Run id of each half at ``as_of``: every stage of one hour shares it, so reruns replace."""
    return {half: default_run_id(half, as_of) for half in ("precompute", "enrichment")}


@contextmanager
def open_tick(spark: "SparkSession", config: SolarisConfig, as_of: datetime, *, batch_audit: bool = True,
              events_since: datetime | None = None) -> Iterator[Tick]:
    """The context of one tick at ``as_of``, handed to every stage run inside the block.

    The tick keeps the events visible at ``as_of`` (read once for all its stages; only those after
    ``events_since`` when given: the stream's micro-batches) and, with ``batch_audit``, collects the
    stages' ``runs`` rows; when the block ends, also after a failure, its frames are unpersisted and
    the rows written in one commit (nothing is lost). The hourly cycle batches its audit; the fast
    lane writes each stage's row at once, as before.
    """
    tick = Tick(as_of, audit=[] if batch_audit else None)
    try:
        keep_visible_events(spark, config, tick, since=events_since)
        yield tick
    finally:
        tick.release()
        if tick.audit:
            RunsLog.of(spark, config).write(tick.audit)


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
    """What one tick did: each stage's (and measurement's) typed result by name, and wall seconds.

    Read a result through its stage, typed: ``cycle.result(SCORE)`` is a ``ScoreResult`` or None
    (not run); ``cycle.require(SCORE)`` when the caller ran it. A new stage needs no field here.
    """

    as_of: datetime
    results: Mapping[str, object] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    # in the caller's ``observe`` hooks (a benchmark's counters): not the tick's, so not in ``seconds``
    observer_seconds: float = 0.0

    def result(self, step: Stage[Any, R] | Measurement[Any, Any, R]) -> R | None:
        """The result of ``step`` at this tick, None when it did not run."""
        value = self.results.get(step.name)
        if value is None:
            return None
        if not isinstance(value, step.result):
            raise TypeError(f"{step.name} returned a {type(value).__name__}, not its {step.result.__name__}")
        return value

    def require(self, step: Stage[Any, R] | Measurement[Any, Any, R]) -> R:
        """The result of ``step``, which the caller ran (KeyError otherwise)."""
        value = self.result(step)
        if value is None:
            raise KeyError(f"{step.name} did not run at {self.as_of.isoformat()}")
        return value

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())


def run_cycle(
    spark: SparkSession,
    config: SolarisConfig,
    as_of: datetime,
    *,
    stages: Sequence[str] | None = None,
    measure: bool = False,
    vacuum: bool = False,
    observe: Callable[[str], AbstractContextManager[Any]] | None = None,
    definition: Sequence[Stage[Any, Any]] | None = None,
) -> CycleResult:
    """Run the hourly stages at ``as_of`` in one Spark session, in the defined order.

    ``stages``: a subset (kept in cycle order), e.g. to stop before ``publish``. ``measure``: also
    the replay measurements (hit rate of the run's pairs, coverage of the next hour's requests
    through the snapshot just published). ``vacuum``: let ``expire`` VACUUM (a replay does it once,
    at its last tick: VACUUM lists every file and costs seconds, not worth it every hour).
    ``observe``: a context manager factory entered around each stage (and measurement) with its
    name, e.g. ``bench/cycle.py`` counting the Spark jobs and Delta commits each one makes.
    ``definition``: the stage list (default :data:`CYCLE`; tests hand fake stages).

    Each stage is called through its contract, ``stage.run(step, options=...)``, with nothing
    special to any of them: its options come from ``CycleSettings(measure, vacuum)``, its
    measurements' options from its result.
    """
    chain = CYCLE if definition is None else tuple(definition)
    names = tuple(stage.name for stage in chain)
    wanted = names if stages is None else tuple(stages)
    unknown = set(wanted) - set(names)
    if unknown:
        raise KeyError(f"unknown stages {sorted(unknown)}; stages: {', '.join(names)}")
    settings = CycleSettings(measure=measure, vacuum=vacuum)
    ids = run_ids(as_of)
    results: dict[str, object] = {}
    seconds: dict[str, float] = {}
    observed = 0.0  # seconds inside the observe hooks around the stages

    def timed(name: str, call: Callable[[], object]) -> object:
        nonlocal observed
        entered = time.perf_counter()
        with observe(name) if observe is not None else nullcontext():
            started = time.perf_counter()
            results[name] = call()
            seconds[name] = time.perf_counter() - started
        observed += time.perf_counter() - entered - seconds[name]
        return results[name]

    block_started = time.perf_counter()
    # the tick's `runs` rows in one commit (also after a failure); the events up to as_of read once
    with open_tick(spark, config, as_of) as tick:
        for stage in chain:
            if stage.name not in wanted:
                continue
            step = StepContext(spark, config, as_of, ids[stage.half], tick)
            # B023 below: timed() calls each lambda at once, inside this iteration
            done = timed(stage.name, lambda: stage.run(step, options=stage.options_for(settings)))  # noqa: B023
            for measurement in stage.measurements if settings.measure else ():
                timed(measurement.name,
                      lambda: measurement.run(step, options=measurement.options_from(done)))  # noqa: B023
    # what the block spent outside its stages: the tick's one `runs` commit, caching and dropping
    # the tick's events - less the observer's own time, which a tick without a benchmark never pays
    seconds["runs_audit"] = time.perf_counter() - block_started - sum(seconds.values()) - observed
    cycle = CycleResult(as_of=as_of, results=results, seconds=seconds, observer_seconds=observed)
    log.info(
        "cycle at %s: %.1fs (%s)",
        as_of,
        cycle.total_seconds,
        ", ".join(f"{name} {value:.1f}s" for name, value in seconds.items()),
    )
    return cycle


# --- the fast lane: hourly stages for the sessions that started since the hour ------------------------


@dataclass(frozen=True)
class FastLaneResult:
    """What one fast-lane run did: the users picked, each reused stage's result, wall seconds."""

    users: list[int] = field(default_factory=list)
    new: int = 0
    returning: int = 0
    dropped: int = 0  # eligible users over fast_lane.max_users
    candidates: CandidatesResult | None = None
    score: ScoreResult | None = None
    publish: PublishResult | None = None
    skipped: str | None = None  # why nothing ran (on the hour, no fast-lane users)
    seconds: dict[str, float] = field(default_factory=dict)


def lane_config(config: SolarisConfig) -> SolarisConfig:
    """The config the reused stages run with: the lane's per-user cap and a budget of
    ``max_users * per_user`` instead of the hourly ones (everything else unchanged)."""
    lane = config.fast_lane
    rules = config.precompute.candidates.model_copy(
        update={"per_user": lane.per_user, "budget": lane.max_users * lane.per_user})
    return config.model_copy(update={"precompute": config.precompute.model_copy(update={"candidates": rules})})


def user_activity(spark: SparkSession, config: SolarisConfig, as_of: datetime, tick: Tick | None = None
                  ) -> list[UserActivity]:
    """Per user with an event in the window: events in it and the last event before it (events <= as_of).

    The Spark form of :func:`solaris.precompute.fast_lane.activity_from_events`; only users active
    in the window (minutes of traffic) reach the driver.
    """
    from pyspark.sql import functions as F

    start = window_start(as_of, config.fast_lane)
    events = visible_events(spark, config, as_of, tick)
    in_window = events.where(F.col("ts") > F.lit(start)).select("user_id").distinct()
    rows = (events.join(in_window, "user_id", "left_semi").groupBy("user_id")
            .agg(F.count_if(F.col("ts") > F.lit(start)).alias("n"),
                 F.max(F.when(F.col("ts") <= F.lit(start), F.unix_seconds("ts"))).alias("last_before"))
            .collect())
    return [UserActivity(int(row["user_id"]), int(row["n"]),
                         None if row["last_before"] is None
                         else datetime.fromtimestamp(int(row["last_before"]), tz=timezone.utc))
            for row in rows]


def run_fast_lane(spark: SparkSession, config: SolarisConfig, as_of: datetime, run_id: str) -> FastLaneResult:
    """The fast lane at ``as_of`` (``jobs/fast_lane.py`` documents it): pick the users, then the hourly
    ``candidates``, ``score`` and ``publish`` stages for them only, under the lane's run id."""
    record = RunRecord(run_id=run_id, job="fast_lane", as_of=as_of)
    seconds: dict[str, float] = {}
    if is_hourly_tick(as_of):
        lane_log.info("fast lane at %s: on the hour the hourly cycle runs and publishes; nothing to do", as_of)
        return FastLaneResult(skipped="hourly tick")
    # the events <= as_of read once for the selection and the stages; each stage's `runs` row written at once
    with open_tick(spark, config, as_of, batch_audit=False) as tick:
        started = time.perf_counter()
        selection = select_users(user_activity(spark, config, as_of, tick), as_of, config.fast_lane)
        seconds["select"] = time.perf_counter() - started
        lane_log.info("fast lane %s: %d users with a first event in (%s, %s] (%d new, %d returning after > %gh; "
                      "%d over max_users=%d)", run_id, len(selection.users), window_start(as_of, config.fast_lane),
                      as_of, selection.new, selection.returning, config.fast_lane.absence_hours, selection.dropped,
                      config.fast_lane.max_users)
        record.details = {"users": len(selection.users), "new": selection.new, "returning": selection.returning,
                          "dropped": selection.dropped}
        if not selection.users:
            record.write(spark, config, "success")
            return FastLaneResult(skipped="no fast-lane users", seconds=seconds)
        lane = lane_config(config)
        users = spark.createDataFrame([(user,) for user in selection.users], "user_id long")
        # the hourly stages through their own entries, on the lane's config and run id
        step = StepContext(spark, lane, as_of, run_id, tick)
        started = time.perf_counter()
        speculated = CANDIDATES.run(step, options=CandidatesOptions(users=users))
        seconds[CANDIDATES.name] = time.perf_counter() - started
        started = time.perf_counter()
        scored = SCORE.run(step, options=ScoreOptions())
        seconds[SCORE.name] = time.perf_counter() - started
        started = time.perf_counter()
        published = PUBLISH.run(step, options=PublishOptions())
        seconds[PUBLISH.name] = time.perf_counter() - started
    result = FastLaneResult(users=selection.users, new=selection.new, returning=selection.returning,
                            dropped=selection.dropped, seconds=seconds, candidates=speculated, score=scored,
                            publish=published)
    record.rows_in = len(selection.users)
    record.rows_out = scored.written
    record.details.update({"scored": scored.scored, "manifest": published.manifest,
                           "seconds": {name: round(value, 2) for name, value in seconds.items()}})
    record.write(spark, config, "success")
    lane_log.info("fast lane %s: %d users -> %d candidates -> %d FM passes -> %d pairs written; %s (%.1fs: %s)",
                  run_id, len(selection.users), speculated.pairs, scored.scored, scored.written, published.manifest,
                  sum(seconds.values()), ", ".join(f"{name} {value:.1f}s" for name, value in seconds.items()))
    return result
