"""What Airflow needs to launch our jobs with spark-submit (pure: no Airflow, no Spark import).

DAG files stay wiring-only: they ask this module for the keyword arguments of each
``SparkSubmitOperator`` (application file from the installed ``solaris.jobs`` package, Delta JARs,
Python interpreter, job name) and add their own templated arguments. Params that tune the config
take their defaults from the loaded config and reach the job as ``--set`` only when a run changed
them (:class:`ConfigParams`), so editing the YAML changes what scheduled runs use. Which cluster
runs the job is the ``spark_default`` connection's business (``local[*]`` by default, a
``spark://``/``yarn``/``k8s://`` master in production).
"""

from __future__ import annotations

import logging
import os
import sys
from datetime import datetime, timedelta
from importlib.resources import files
from pathlib import Path
from typing import Any, Callable, Sequence

from solaris.config import load_config
from solaris.pipeline import Stage
from solaris.spark import delta_jars, driver_java_options
from solaris.timeutil import parse_utc

log = logging.getLogger(__name__)

JOBS_PACKAGE = "solaris.jobs"  # jobs/ in the checkout, solaris/jobs/ in an installed wheel

# Jinja for the run's logical time: the UI/CLI Param when given, else the run's logical date
# (Airflow 3 runs may have no logical date when triggered without one: fall back to run_after).
AS_OF_TEMPLATE = "{{ params.as_of or (logical_date or dag_run.run_after).strftime('%Y-%m-%dT%H:%M:%SZ') }}"


# Asset-triggered runs (enrichment) have no logical date: take the as-of the precompute run put in
# the Asset event's extra; a manual trigger's Param still wins.
ASSET_AS_OF_TEMPLATE = (
    "{{ params.as_of or ((triggering_asset_events.values() | list | first | last).extra['as_of'] "
    "if triggering_asset_events else (logical_date or dag_run.run_after).strftime('%Y-%m-%dT%H:%M:%SZ')) }}"
)

# What the as_of Param accepts (validated in the UI/CLI before a run starts): ISO-8601, UTC or offset.
AS_OF_PATTERN = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?$"

# The JSON schema of every time Param. ``format: date-time`` makes the trigger form render a UTC date
# and time picker that refuses what is not a date ("Invalid date format.") and sends RFC 3339; the
# pattern is what the REST API and ``airflow dags trigger/test`` check (jsonschema checks formats
# only with an optional package Airflow does not install), so a bad time never starts a task.
TIME_SCHEMA: dict[str, str] = {"format": "date-time", "pattern": AS_OF_PATTERN}


# Hourly DAGs retry transient failures (a busy cluster, a Delta commit conflict) with backoff.
HOURLY_DEFAULT_ARGS = {
    "retries": 2,
    "retry_delay": timedelta(minutes=1),
    "retry_exponential_backoff": True,
    "max_retry_delay": timedelta(minutes=10),
}


# The DAGs that run every few minutes (the fast lane, the stream's available-now runs): one quick
# retry, never piling up behind a slow run (the next run covers what a failed one left).
FREQUENT_DEFAULT_ARGS = {
    "retries": 1,
    "retry_delay": timedelta(minutes=1),
}


def stream_schedule() -> str:
    """Cron of the stream DAG's available-now runs: ``stream.schedule`` of the loaded config."""
    return load_config().stream.schedule


def fast_lane_schedule(interval_minutes: int | None = None) -> str:
    """Cron of the fast-lane DAG: every ``interval_minutes`` past each hour except :00.

    Why not :00: the hourly precompute runs then and publishes ``snapshot-<hour>``; a fast-lane
    run there would race it for the same snapshot id and speculate for users the hour covers.
    ``None``: ``fast_lane.interval_minutes`` of the loaded config (one source of defaults).
    """
    interval = load_config().fast_lane.interval_minutes if interval_minutes is None else interval_minutes
    if interval < 1 or 60 % interval:
        raise ValueError(f"fast_lane.interval_minutes must divide 60, got {interval}")
    minutes = ",".join(str(minute) for minute in range(interval, 60, interval))
    return f"{minutes} * * * *"


def tick_has_events(newest_event: datetime | None, as_of: datetime, window: timedelta) -> bool:
    """Whether a scheduled tick at ``as_of`` has events to work on: the events reach into its window.

    Why: the hourly schedule (and the fast lane's) runs at the wall clock's time. On a warehouse that
    replays history (the demo, an evaluation copy) or whose ingest has stopped, a tick at "now" would
    speculate from no recent events, write nothing, and the enrichment's publish gate would refuse
    the empty hour after its retries. Such a tick is skipped instead: visible as a skipped run,
    nothing written, serving keeps the last snapshot. ``None`` (the table's newest time is not known
    from its log) never skips: the jobs then decide, with their own errors.
    """
    return newest_event is None or newest_event >= as_of - window


def events_arrived(as_of: str, *, window_minutes: int) -> bool:
    """The DAGs' first task (a short-circuit): :func:`tick_has_events` on the events table's log.

    Reads only the Delta log's statistics of the configured warehouse's ``events`` (no Spark, no data
    read); a missing table is left to the jobs, whose error names it.
    """
    from deltalake.exceptions import TableNotFoundError

    from solaris.storage.table import Table

    path = load_config().table_path("events")
    tick = parse_utc(as_of)
    try:
        newest = Table.at(path).log.newest("ts")
    except TableNotFoundError:
        newest = None
    if tick_has_events(newest, tick, timedelta(minutes=window_minutes)):
        log.info("events up to %s reach the tick's window (as-of %s, %d min): running", newest, tick,
                 window_minutes)
        return True
    log.warning("the newest event (%s) is older than this tick's window (as-of %s, %d min): nothing new to "
                "work on, so the run is skipped. A warehouse of past events (the demo) is run by triggering with "
                "the as_of Param.", newest, tick, window_minutes)
    return False


def stream_events_arrived() -> bool:
    """The stream DAG's first task (a short-circuit): whether events were committed after what the
    query's checkpoint records as processed (:func:`solaris.drivers.stream.events_to_process`: the
    events table's log and the checkpoint files, no JVM). Why: an available-now run with nothing new
    would still start a Spark driver every 5 minutes."""
    from solaris.drivers.stream import events_to_process

    if events_to_process(load_config()):
        log.info("events committed after the stream's checkpoint: running")
        return True
    log.info("no events committed after the stream's checkpoint: nothing to process, the run is skipped")
    return False


def fast_lane_window_minutes() -> int:
    """The fast lane's tick window for :func:`events_arrived`: its schedule's interval, from the config."""
    return load_config().fast_lane.interval_minutes


def config_value(config: Any, dotted: str) -> Any:
    """``config_value(config, "precompute.ttl_hours")`` -> ``config.precompute.ttl_hours``."""
    value = config
    for key in dotted.split("."):
        value = getattr(value, key)
    return value


def _flag_value(value: Any) -> str:
    """A Param value as the YAML scalar ``--set`` parses back to the same value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def changed_overrides(params: Any, overrides: dict[str, tuple[str, Any]]) -> list[str]:
    """``--set key=value`` for every Param whose run value differs from its config default.

    ``overrides`` maps a Param name to (dotted config key, config default).
    """
    flags: list[str] = []
    for name, (key, default) in overrides.items():
        value = params[name]
        if value != default:
            flags += ["--set", f"{key}={_flag_value(value)}"]
    return flags


class SparkArgs(list):
    """A task's ``application_args``: Jinja strings, then ``--set`` only for the Params a run changed.

    Airflow renders a template field through its ``resolve(context)`` method when it has one: this
    list renders its own strings with the task's Jinja environment, then appends
    :func:`changed_overrides`. A scheduled run (default Params) passes no ``--set``, so the job loads
    the config's value itself; the rendered command shows only what the trigger changed.
    """

    def __init__(self, args: Sequence[str], overrides: dict[str, tuple[str, Any]]):
        super().__init__(args)
        self.overrides = overrides

    def resolve(self, context: Any) -> list[str]:
        rendered = context["task"].render_template(list(self), context)
        return rendered + changed_overrides(context["params"], self.overrides)


class ConfigParams:
    """DAG Params whose defaults are values of the loaded config (one source of defaults).

    ``ConfigParams(ttl_hours="precompute.ttl_hours")`` loads the config (``$SOLARIS_CONFIG`` or the
    packaged default) at parse time; :meth:`param` builds the Param with that default and
    :meth:`args` the ``application_args`` that pass ``--set`` only when a run changed a Param.
    """

    def __init__(self, **keys: str):
        config = load_config()
        self.keys = keys  # Param name -> dotted config key
        self.defaults = {name: config_value(config, key) for name, key in keys.items()}

    def param(self, param: Callable[..., Any], name: str, description: str = "", **schema: Any) -> Any:
        """``param`` is Airflow's ``Param`` class (passed in: this module never imports Airflow)."""
        note = f"default: config {self.keys[name]}"
        return param(self.defaults[name], description=f"{description} ({note})" if description else note, **schema)

    def args(self, *args: str, params: Sequence[str] | None = None) -> SparkArgs:
        """``application_args`` = ``args`` + ``--set`` for the named Params (default: all) a run changed."""
        names = list(self.keys) if params is None else list(params)
        return SparkArgs(args, {name: (self.keys[name], self.defaults[name]) for name in names})


def job_application(job: str) -> str:
    """The spark-submit entry file of a job: ``<job>.py`` of the installed ``solaris.jobs`` package."""
    path = files(JOBS_PACKAGE) / f"{job}.py"
    if not job.isidentifier() or not isinstance(path, Path) or not path.is_file():
        raise FileNotFoundError(f"no spark-submit entry point {job}.py in {JOBS_PACKAGE} ({path})")
    return str(path)


def stage_operators(
    operator: Callable[..., Any], stages: Sequence[Stage], application_args: list[str]
) -> dict[str, Any]:
    """One spark-submit task per pipeline stage, wired as the pipeline definition says.

    Called inside a ``with DAG(...)`` block with ``SparkSubmitOperator`` (passed in, so this module
    never imports Airflow); returns the tasks by stage name.
    """
    tasks = {
        stage.name: operator(task_id=stage.name, doc_md=stage.doc,
                             **spark_submit_kwargs(stage.name, application_args, one_stage=True))
        for stage in stages
    }
    for stage in stages:
        for upstream in stage.upstream:
            tasks[upstream] >> tasks[stage.name]
    return tasks


def spark_submit_kwargs(job: str, application_args: list[str], one_stage: bool = False) -> dict:
    """Keyword arguments for ``SparkSubmitOperator`` running ``jobs/<job>.py``.

    ``one_stage``: the job runs one hourly stage and exits (the precompute / enrichment / fast-lane
    tasks, not replay or evaluate), so its driver JVM gets the short-lived options of
    :func:`solaris.spark.driver_java_options`; spark-submit starts that JVM, so they go on its
    command line (``--conf spark.driver.extraJavaOptions``).
    """
    config = load_config()
    python = os.environ.get("PYSPARK_PYTHON") or str(Path(sys.executable))
    return {
        "application": job_application(job),
        "name": f"solaris-{job.replace('_', '-')}",
        "conn_id": "spark_default",
        "jars": ",".join(delta_jars(config.spark.jars_dir)),
        "application_args": application_args,
        "env_vars": {"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python, "TZ": "UTC"},
        "driver_memory": config.spark.driver_memory,
        "conf": {"spark.driver.extraJavaOptions": driver_java_options(config, one_stage)},
        "verbose": False,
    }
