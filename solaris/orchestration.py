"""What Airflow needs to launch our jobs with spark-submit (pure: no Airflow, no Spark import).

DAG files stay wiring-only: they ask this module for the keyword arguments of each
``SparkSubmitOperator`` (application file, Delta JARs, Python interpreter, job name) and add their
own templated arguments. Which cluster runs the job is the ``spark_default`` connection's business
(``local[*]`` by default, a ``spark://``/``yarn``/``k8s://`` master in production).
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Sequence

from solaris.config import REPO_ROOT, load_config
from solaris.pipeline import Stage
from solaris.spark import delta_jars

JOBS_DIR = REPO_ROOT / "jobs"

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


# Hourly DAGs retry transient failures (a busy cluster, a Delta commit conflict) with backoff.
HOURLY_DEFAULT_ARGS = {
    "retries": 2,
    "retry_delay": timedelta(minutes=1),
    "retry_exponential_backoff": True,
    "max_retry_delay": timedelta(minutes=10),
}


def job_application(job: str) -> str:
    path = JOBS_DIR / f"{job}.py"
    if not path.is_file():
        raise FileNotFoundError(f"no spark-submit entry point {path}")
    return str(path)


def stage_operators(operator: Callable[..., Any], stages: Sequence[Stage], application_args: list[str]) -> dict[str, Any]:
    """One spark-submit task per pipeline stage, wired as the pipeline definition says.

    Called inside a ``with DAG(...)`` block with ``SparkSubmitOperator`` (passed in, so this module
    never imports Airflow); returns the tasks by stage name.
    """
    tasks = {stage.name: operator(task_id=stage.name, doc_md=stage.doc, **spark_submit_kwargs(stage.name, application_args))
             for stage in stages}
    for stage in stages:
        for upstream in stage.upstream:
            tasks[upstream] >> tasks[stage.name]
    return tasks


def spark_submit_kwargs(job: str, application_args: list[str]) -> dict:
    """Keyword arguments for ``SparkSubmitOperator`` running ``jobs/<job>.py``."""
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
        "verbose": False,
    }
