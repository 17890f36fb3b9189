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


def test_thread_kinds_follow_the_kernel_s_15_character_names(cycle):
    kinds = {name: cycle.thread_kind(name) for name in (
        "C2 CompilerThre", "C1 CompilerThre", "Sweeper thread", "GC Thread#1", "VM Thread", "G1 Conc#0",
        "Executor task l", "Thread-42", "dag-scheduler-e", "java")}
    assert kinds == {"C2 CompilerThre": "jit", "C1 CompilerThre": "jit", "Sweeper thread": "jit",
                     "GC Thread#1": "gc", "VM Thread": "gc", "G1 Conc#0": "gc", "Executor task l": "tasks",
                     "Thread-42": "driver", "dag-scheduler-e": "other", "java": "other"}


def test_thread_cpu_counts_fields_after_the_last_parenthesis(cycle):
    # a name with a space and a parenthesis; utime 250 and stime 50 ticks at 100 ticks/s
    stat = "4711 (odd (name) x) S 1 2 3 0 -1 4194368 10 0 0 0 250 50 0 0 20 0 1 0 99 0 0"
    assert cycle.thread_cpu(stat, 100.0) == ("odd (name) x", pytest.approx(3.0))


def test_cpu_by_kind_of_this_process_and_of_no_process(cycle):
    import os
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("/proc is Linux's")
    sum(i * i for i in range(200_000))  # some CPU on this (main) thread
    totals = cycle.jvm_cpu_by_kind(os.getpid())
    assert set(totals) == set(cycle.CPU_KINDS) and totals["other"] > 0  # python's main thread is "other"
    assert cycle.jvm_cpu_by_kind(None) == {}
