"""bench/scheduled.py's pure parts: task phases from `airflow dags test` output, overrides as YAML."""

from __future__ import annotations

import pytest

from tests.unit.bench_scripts import bench_script


@pytest.fixture(scope="module")
def scheduled():
    with bench_script("scheduled") as module:
        yield module


HOOK = "[airflow.task.hooks.airflow.providers.apache.spark.hooks.spark_submit.SparkSubmitHook] loc=spark_submit.py:965"
OUTPUT = f"""\
2026-12-02T05:54:56.500000Z [info     ] [DAG TEST] starting task_id=candidates map_index=-1
2026-12-02T05:55:06.500000Z [info     ] 2026-12-02 05:55:06,499Z INFO solaris.spark: spark session local-1 {HOOK}
2026-12-02T05:55:40.000000Z [info     ] 2026-12-02 05:55:39,999Z INFO solaris: candidates finished in 43.4s {HOOK}
2026-12-02T05:55:42.500000Z [info     ] [DAG TEST] end task task_id=candidates map_index=-1
2026-12-02T05:55:42.600000Z [info     ] [DAG TEST] starting task_id=announce map_index=-1
2026-12-02T05:55:42.700000Z [info     ] [DAG TEST] end task task_id=announce map_index=-1
"""


def test_each_spark_task_splits_into_start_up_work_and_exit(scheduled):
    candidates, announce = scheduled.task_phases(OUTPUT.splitlines())
    assert candidates.task_id == "candidates" and candidates.seconds == pytest.approx(46.0)
    assert candidates.split() == pytest.approx((10.0, 33.5, 2.5))
    assert announce.task_id == "announce" and not announce.is_spark and announce.seconds == pytest.approx(0.1)


def test_a_task_that_never_ended_is_not_reported(scheduled):
    assert scheduled.task_phases(OUTPUT.splitlines()[:3]) == []


def test_overrides_become_the_nested_yaml_a_deployment_writes(scheduled):
    tree = scheduled.overrides_yaml(["spark.one_stage_java_options=", "spark.class_data_archive=null",
                                     "precompute.vacuum_every_hours=1"])
    assert tree == {"spark": {"one_stage_java_options": "", "class_data_archive": None},
                    "precompute": {"vacuum_every_hours": 1}}
