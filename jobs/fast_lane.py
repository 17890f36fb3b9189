"""Fast lane: candidates -> score -> publish, between hourly runs, for users whose session just started.

At ``--as-of t`` (a few minutes past an hour, e.g. :15/:30/:45; the DAG runs every
``fast_lane.interval_minutes``):

1. picks the fast-lane users (``solaris.precompute.fast_lane.select_users``): an event in
   ``(t - lookback_minutes, t]`` and none in the ``absence_hours`` before that window, at most
   ``max_users`` of them. Nothing else to do when there are none;
2. runs the hourly ``candidates`` stage for those users only (same SQL, sources, blend; per-user cap
   ``fast_lane.per_user``, budget ``max_users * per_user``) and the hourly ``score`` stage on them
   (FM + verifier, TTL MERGE into ``pair_embeddings``, rows appended to ``pair_embeddings_log``);
3. runs ``publish``: a new manifest ``snapshot-<t>`` pinning the new ``pair_embeddings`` version
   next to the last hourly enrichment's tier tables, so serving picks up the new pairs (the delta).

Every write is keyed on the run id ``fast-lane-<t>`` (never an hourly ``precompute-``/``enrichment-``
id), so rerunning a tick replaces its own candidates and leaves its pairs as they are. Only events
``<= t`` are read. On the hour it does nothing: the hourly cycle runs then and publishes
``snapshot-<t>`` itself.

    solaris fast-lane --as-of 2000-11-19T18:15:00Z
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from solaris.runtime import job_parser, run_stage

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

    from solaris.config import SolarisConfig
    from solaris.jobs.candidates import CandidatesResult
    from solaris.jobs.publish import PublishResult
    from solaris.jobs.score import ScoreResult
    from solaris.precompute.fast_lane import UserActivity

log = logging.getLogger("solaris.fast_lane")


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


def build_parser() -> argparse.ArgumentParser:
    return job_parser("solaris fast-lane", __doc__)


def lane_config(config: SolarisConfig) -> SolarisConfig:
    """The config the reused stages run with: the lane's per-user cap and a budget of
    ``max_users * per_user`` instead of the hourly ones (everything else unchanged)."""
    lane = config.fast_lane
    rules = config.precompute.candidates.model_copy(
        update={"per_user": lane.per_user, "budget": lane.max_users * lane.per_user})
    return config.model_copy(update={"precompute": config.precompute.model_copy(update={"candidates": rules})})


def user_activity(spark: SparkSession, config: SolarisConfig, as_of: datetime) -> list[UserActivity]:
    """Per user with an event in the window: events in it and the last event before it (events <= as_of).

    The Spark form of :func:`solaris.precompute.fast_lane.activity_from_events`; only users active
    in the window (minutes of traffic) reach the driver.
    """
    from pyspark.sql import functions as F

    from solaris.precompute.fast_lane import UserActivity, window_start
    from solaris.precompute.spark_features import visible_events

    start = window_start(as_of, config.fast_lane)
    events = visible_events(spark, config, as_of)
    in_window = events.where(F.col("ts") > F.lit(start)).select("user_id").distinct()
    rows = (events.join(in_window, "user_id", "left_semi").groupBy("user_id")
            .agg(F.count_if(F.col("ts") > F.lit(start)).alias("n"),
                 F.max(F.when(F.col("ts") <= F.lit(start), F.unix_seconds("ts"))).alias("last_before"))
            .collect())
    return [UserActivity(int(row["user_id"]), int(row["n"]),
                         None if row["last_before"] is None
                         else datetime.fromtimestamp(int(row["last_before"]), tz=timezone.utc))
            for row in rows]


def run(spark: SparkSession, config: SolarisConfig, as_of: datetime, run_id: str) -> FastLaneResult:
    from solaris.jobs import candidates as candidates_job
    from solaris.jobs import publish as publish_job
    from solaris.jobs import score as score_job
    from solaris.precompute.fast_lane import is_hourly_tick, select_users, window_start
    from solaris.precompute.spark_features import tick_events
    from solaris.storage.tables import RunRecord

    record = RunRecord(run_id=run_id, job="fast_lane", as_of=as_of)
    seconds: dict[str, float] = {}
    if is_hourly_tick(as_of):
        log.info("fast lane at %s: on the hour the hourly cycle runs and publishes; nothing to do", as_of)
        return FastLaneResult(skipped="hourly tick")
    with tick_events(spark, config, as_of):  # the events <= as_of read once for the selection and the stages
        started = time.perf_counter()
        selection = select_users(user_activity(spark, config, as_of), as_of, config.fast_lane)
        seconds["select"] = time.perf_counter() - started
        log.info("fast lane %s: %d users with a first event in (%s, %s] (%d new, %d returning after > %gh; "
                 "%d over max_users=%d)", run_id, len(selection.users), window_start(as_of, config.fast_lane), as_of,
                 selection.new, selection.returning, config.fast_lane.absence_hours, selection.dropped,
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
            ("candidates", lambda: candidates_job.run(spark, lane, as_of, run_id, users)),
            ("score", lambda: score_job.run(spark, lane, as_of, run_id)),
            ("publish", lambda: publish_job.run(spark, lane, as_of, run_id)),
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
    log.info("fast lane %s: %d users -> %d candidates -> %d FM passes -> %d pairs written; %s (%.1fs: %s)",
             run_id, len(selection.users), result.candidates.pairs if result.candidates else 0,
             scored.scored if scored else 0, scored.written if scored else 0,
             result.publish.manifest if result.publish else "not published", sum(seconds.values()),
             ", ".join(f"{name} {value:.1f}s" for name, value in seconds.items()))
    return result


def _report(config: SolarisConfig, result: FastLaneResult) -> str:
    if result.skipped:
        return f"fast lane: skipped ({result.skipped})"
    scored, published = result.score, result.publish
    return (f"fast lane: users={len(result.users)} (new={result.new} returning={result.returning}) "
            f"fm_pairs={scored.scored if scored else 0} written={scored.written if scored else 0} "
            f"snapshot={published.manifest if published else None}")


def main(argv: list[str] | None = None) -> int:
    from solaris.precompute.fast_lane import RUN_PREFIX

    return run_stage(
        build_parser(),
        argv,
        "fast_lane",
        RUN_PREFIX,
        run=lambda spark, config, args, run_id: run(spark, config, args.as_of, run_id),
        report=_report,
    )


if __name__ == "__main__":
    sys.exit(main())
