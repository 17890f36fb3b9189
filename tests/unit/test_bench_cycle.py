"""bench/cycle.py's event-log split: per job group, jobs, busy seconds (overlaps counted once), kinds."""

from __future__ import annotations

import json

import pytest

from tests.unit.bench_scripts import bench_script


@pytest.fixture(scope="module")
def cycle():
    with bench_script("cycle") as module:
        yield module


def _job(job, start, end, group, description=None, execution=None, stage="count at x"):
    properties = {"spark.jobGroup.id": group} if group else {}
    if description:
        properties["spark.job.description"] = description
    if execution is not None:
        properties["spark.sql.execution.id"] = str(execution)
    return [json.dumps({"Event": "SparkListenerJobStart", "Job ID": job, "Submission Time": start * 1000,
                        "Properties": properties, "Stage Infos": [{"Stage Name": stage}]}),
            json.dumps({"Event": "SparkListenerJobEnd", "Job ID": job, "Completion Time": end * 1000})]


def test_busy_time_counts_overlapping_jobs_once_and_kinds_are_named(cycle):
    lines = [json.dumps({"Event": "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart",
                         "executionId": 7, "description": "save at  x"}),
             *_job(1, 10, 14, "a", description="stage-a", execution=7),  # 10-14; the SQL execution names it
             *_job(2, 12, 15, "a", execution=7),       # overlaps: busy 10-15
             *_job(3, 20, 21, "a", description="Delta: a: Filtering files"),  # busy + 1; Delta's own name
             *_job(4, 0, 100, "b"),
             *_job(5, 0, 100, None)]                   # no group: not counted
    times = cycle.job_time_by_group(lines)
    assert set(times) == {"a", "b"}
    assert times["a"].jobs == 3 and times["a"].busy_seconds == pytest.approx(6.0)
    assert times["a"].seconds_by_kind == pytest.approx({"save at x": 7.0, "Delta: a: Filtering files": 1.0})
    assert times["b"].busy_seconds == pytest.approx(100.0)
    assert times["b"].seconds_by_kind == {"count at x": pytest.approx(100.0)}
