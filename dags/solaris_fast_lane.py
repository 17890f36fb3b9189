"""
### SOLARIS fast lane (new sessions between hourly runs)

Every `fast_lane.interval_minutes` past the hour (:15, :30, :45 by default; the hourly precompute
owns :00), for `as_of` = the run's logical time (or the `as_of` Param of a manual trigger), one
task runs `jobs/fast_lane.py` (after `events_arrived`, which skips the tick when the warehouse's newest
event is older than the interval):

1. picks the users with an event in `(as_of - lookback_minutes, as_of]` and none in the
   `absence_hours` before (new users, or back after a long absence), at most `max_users`;
2. runs the hourly **candidates** and **score** stages for those users only (run id
   `fast-lane-<as_of>`, never an hourly run id), MERGEing their verified pairs into
   `pair_embeddings`;
3. runs **publish**: a new snapshot manifest pinning the new `pair_embeddings` version, so serving
   gets tier-1 pairs for the rest of the user's first burst instead of the item tier alone.

Runs never overlap (`max_active_runs=1`), one retry; reruns of the same tick replace their own
output. The Params default to the loaded config's values; a run passes `--set` only for the Params
its trigger changed.
"""

from __future__ import annotations

from datetime import datetime

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param, task

from solaris.orchestration import (
    AS_OF_TEMPLATE,
    FREQUENT_DEFAULT_ARGS,
    TIME_SCHEMA,
    ConfigParams,
    events_arrived,
    fast_lane_schedule,
    fast_lane_window_minutes,
    spark_submit_kwargs,
)

CONFIG = ConfigParams(max_users="fast_lane.max_users", lookback_minutes="fast_lane.lookback_minutes",
                      absence_hours="fast_lane.absence_hours")

with DAG(
    dag_id="solaris_fast_lane",
    doc_md=__doc__,
    schedule=fast_lane_schedule(),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["solaris", "fast-lane"],
    default_args=FREQUENT_DEFAULT_ARGS,
    params={
        "as_of": Param(None, type=["null", "string"], **TIME_SCHEMA,
                       description="logical time (UTC, ISO-8601); empty = the run's logical date"),
        "max_users": CONFIG.param(Param, "max_users", "fast-lane users per run", type="integer", minimum=1),
        "lookback_minutes": CONFIG.param(Param, "lookback_minutes", "window of a new session's first events",
                                         type="integer", minimum=1, maximum=60),
        "absence_hours": CONFIG.param(Param, "absence_hours", "no event this long before the window = new session",
                                      type="number", exclusiveMinimum=0),
    },
) as dag:
    fast_lane = SparkSubmitOperator(
        task_id="fast_lane", doc_md="Pick the fast-lane users, then candidates -> score -> publish.",
        **spark_submit_kwargs("fast_lane", CONFIG.args("--as-of", AS_OF_TEMPLATE), one_stage=True))
    arrived = task.short_circuit(task_id="events_arrived", doc_md="Skip the tick when no event reaches it.")(
        events_arrived)(AS_OF_TEMPLATE, window_minutes=fast_lane_window_minutes())
    arrived >> fast_lane
