"""The hourly cycle, defined once: which stages run, in which order, under which run id.

Why one definition: the precompute and enrichment DAGs, ``solaris replay``, ``solaris evaluate``,
the benchmarks and the tests all run the same chain of stages. Each of them used to spell it out
and the copies drifted (one vacuumed, one measured hit rates, one skipped coverage). Now the DAGs
build their tasks from :data:`PRECOMPUTE` / :data:`ENRICHMENT` (a DAG test checks the wiring) and
every in-process caller goes through :func:`run_cycle`.

A stage is the unit a user sees everywhere: one Airflow task (retries, logs), one ``solaris
<command>``, one ``jobs/<name>.py`` entry file, one ``solaris/stages/<name>.py`` module with a
``run(spark, config, as_of, run_id, *, tick=None)`` (the stage list holds those functions;
:func:`run_cycle` hands each the tick it opened).
Replays add two *measurements* that read the future (hit rate after ``score``, coverage after
``publish``); they never feed a decision and are not part of the scheduled DAGs.
"""

from __future__ import annotations

import logging
import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal

from solaris.config import SolarisConfig
from solaris.precompute.fast_lane import UserActivity, is_hourly_tick, select_users, window_start
from solaris.precompute.spark_features import keep_visible_events, visible_events
from solaris.stages import candidates as candidates_stage
from solaris.stages import expire as expire_stage
from solaris.stages import hit_rate
from solaris.stages import impute as impute_stage
from solaris.stages import item_aggregates as item_aggregates_stage
from solaris.stages import knn as knn_stage
from solaris.stages import publish as publish_stage
from solaris.stages import score as score_stage
from solaris.stages import user_aggregates as user_aggregates_stage
from solaris.stages.candidates import CandidatesResult
from solaris.stages.expire import ExpireResult
from solaris.stages.hit_rate import CoverageResult, HitRateResult
from solaris.stages.impute import ImputeResult
from solaris.stages.item_aggregates import ItemAggregatesResult
from solaris.stages.knn import KnnResult
from solaris.stages.publish import PublishResult
from solaris.stages.score import ScoreResult
from solaris.stages.user_aggregates import UserAggregatesResult
from solaris.storage.audit import RunRecord, RunsLog
from solaris.tick import Tick
from solaris.timeutil import default_run_id

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
lane_log = logging.getLogger("solaris.fast_lane")

Half = Literal["precompute", "enrichment"]


@dataclass(frozen=True)
class Stage:
    """One stage of the hourly cycle: task id, its half, its upstream stages and its job's ``run``."""

    name: str  # Airflow task id, key in CycleResult, entry file jobs/<name>.py
    half: Half  # which DAG runs it, and so which run id it writes under
    upstream: tuple[str, ...]  # stages of the same half that must finish first
    doc: str  # one line for the task's doc_md
    # run(spark, config, as_of, run_id, *, tick=None) of solaris/stages/<name>.py, called in-process by run_cycle
    run: Callable[..., Any] = field(repr=False, compare=False)


PRECOMPUTE: tuple[Stage, ...] = (
    Stage(
        "candidates",
        "precompute",
        (),
        "Speculate the pairs of the next horizon (sql/candidates.sql) into `candidates`.",
        candidates_stage.run,
    ),
    Stage(
        "score",
        "precompute",
        ("candidates",),
        "FM + verifier scoring UDF, verifier rule, TTL MERGE into `pair_embeddings`.",
        score_stage.run,
    ),
    Stage(
        "expire",
        "precompute",
        ("score",),
        "Delete rows with `expires_at <= as_of` and history past `retention.*`; VACUUM at the midnight run.",
        expire_stage.run,
    ),
)
ENRICHMENT: tuple[Stage, ...] = (
    Stage("user_aggregates", "enrichment", (), "Tier 3: 24 h mean of each user's pair embeddings.",
          user_aggregates_stage.run),
    Stage("knn", "enrichment", (), "FAISS clusters + KNN over FM user representations; recall@k in `runs`.",
          knn_stage.run),
    Stage(
        "impute",
        "enrichment",
        ("user_aggregates", "knn"),
        "Tier 4: impute users without an aggregate from their neighbours.",
        impute_stage.run,
    ),
    Stage("item_aggregates", "enrichment", (), "Tiers 5-6: 24 h item means; other items from the FM item space.",
          item_aggregates_stage.run),
    Stage("publish", "enrichment", ("impute", "item_aggregates"), "Quality gate, then the atomic snapshot manifest.",
          publish_stage.run),
)
CYCLE: tuple[Stage, ...] = PRECOMPUTE + ENRICHMENT
STAGE_NAMES: tuple[str, ...] = tuple(stage.name for stage in CYCLE)
# The replay measurement whose success row in `runs` marks a replayed tick as done.
LAST_MEASURE = "coverage"


def run_ids(as_of: datetime) -> dict[str, str]:
    """Run id of each half at ``as_of``: every stage of one hour shares it, so reruns replace."""
    return {half: default_run_id(half, as_of) for half in ("precompute", "enrichment")}


@contextmanager
def open_tick(spark: "SparkSession", config: SolarisConfig, as_of: datetime, *, batch_audit: bool = True
              ) -> Iterator[Tick]:
    """The context of one tick at ``as_of``, handed to every stage run inside the block.

    The tick keeps the events visible at ``as_of`` (read once for all its stages) and, with
    ``batch_audit``, collects the stages' ``runs`` rows; when the block ends, also after a failure,
    its frames are unpersisted and the rows written in one commit (nothing is lost). The hourly
    cycle batches its audit; the fast lane writes each stage's row at once, as before.
    """
    tick = Tick(as_of, audit=[] if batch_audit else None)
    try:
        keep_visible_events(spark, config, tick)
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
    with open_tick(spark, config, as_of) as tick:
        for step in CYCLE:
            if step.name not in wanted:
                continue
            kwargs = {"vacuum": vacuum} if step.name == "expire" else {}
            # B023 below: timed() calls each lambda at once, inside this iteration
            timed(step.name, lambda: step.run(spark, config, as_of, ids[step.half], tick=tick, **kwargs))  # noqa: B023
            if measure and step.name == "score":
                timed("hit_rate", lambda: hit_rate.run(spark, config, as_of, ids["precompute"], tick=tick))
            if measure and step.name == "publish":
                manifest = results["publish"].manifest
                timed(LAST_MEASURE, lambda: hit_rate.coverage(spark, config, as_of, manifest,  # noqa: B023
                                                              ids["enrichment"], tick=tick))
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
        results: dict[str, object] = {}
        for name, call in (
            ("candidates", lambda: candidates_stage.run(spark, lane, as_of, run_id, users, tick=tick)),
            ("score", lambda: score_stage.run(spark, lane, as_of, run_id, tick=tick)),
            ("publish", lambda: publish_stage.run(spark, lane, as_of, run_id, tick=tick)),
        ):
            started = time.perf_counter()
            results[name] = call()
            seconds[name] = time.perf_counter() - started
    result = FastLaneResult(users=selection.users, new=selection.new, returning=selection.returning,
                            dropped=selection.dropped, seconds=seconds, **results)  # type: ignore[arg-type]
    scored = result.score
    record.rows_in = len(selection.users)
    record.rows_out = scored.written if scored is not None else 0
    record.details.update({"scored": scored.scored if scored is not None else 0,
                           "manifest": result.publish.manifest if result.publish is not None else None,
                           "seconds": {name: round(value, 2) for name, value in seconds.items()}})
    record.write(spark, config, "success")
    lane_log.info("fast lane %s: %d users -> %d candidates -> %d FM passes -> %d pairs written; %s (%.1fs: %s)",
                  run_id, len(selection.users), result.candidates.pairs if result.candidates else 0,
                  scored.scored if scored else 0, scored.written if scored else 0,
                  result.publish.manifest if result.publish else "not published", sum(seconds.values()),
                  ", ".join(f"{name} {value:.1f}s" for name, value in seconds.items()))
    return result
