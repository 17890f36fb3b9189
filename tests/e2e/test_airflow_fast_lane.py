"""End to end through Airflow: `airflow dags test solaris_fast_lane` on the small synthetic test world.

Why the small world and not MovieLens-100K like the hourly DAGs' e2e test: the fast lane needs an
hourly cycle first (models, `user_neighbors`, a snapshot); the shared test world has one after a
single in-process cycle, far cheaper than the ML-100K replay DAG with its model training. The DAG
then runs for real: the SparkSubmitOperator spark-submits `jobs/fast_lane.py` with the world's
config (`$SOLARIS_CONFIG`, also read by the DAG's Params at parse time).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from solaris.pipeline import run_cycle
from tests.world import T0, copy_world

ROOT = Path(__file__).resolve().parents[2]
AS_OF = T0 + timedelta(minutes=30)


@pytest.mark.slow
def test_fast_lane_dag_publishes_a_snapshot_for_the_new_sessions(spark, world_template, tmp_path):
    config = copy_world(world_template, tmp_path / "warehouse", "fast_lane.absence_hours=1",
                        "fast_lane.lookback_minutes=30")
    run_cycle(spark, config, T0)
    conf_file = tmp_path / "conf" / "solaris.yaml"
    conf_file.parent.mkdir()
    conf_file.write_text(yaml.safe_dump(config.model_dump(mode="json")))

    as_of = AS_OF.strftime("%Y-%m-%dT%H:%M:%SZ")
    command = (f"source scripts/airflow-env.sh && airflow dags test solaris_fast_lane "
               f"-c '{json.dumps({'as_of': as_of})}'")
    env = {**os.environ, "SOLARIS_CONFIG": str(conf_file), "SOLARIS_WAREHOUSE": str(config.warehouse)}
    done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    db = sqlite3.connect(ROOT / "airflow_home" / "airflow.db")
    run_id, state = db.execute("SELECT run_id, state FROM dag_run WHERE dag_id='solaris_fast_lane' "
                               "ORDER BY id DESC LIMIT 1").fetchone()
    assert state == "success"
    assert dict(db.execute("SELECT task_id, state FROM task_instance WHERE dag_id='solaris_fast_lane' AND run_id=?",
                           (run_id,))) == {"fast_lane": "success"}

    from deltalake import DeltaTable

    assert (config.warehouse / "snapshots" / "LATEST").read_text().strip() == "snapshot-20260108T003000Z.json"
    runs = DeltaTable(str(config.table_path("runs"))).to_pandas()
    lane = runs[runs.run_id == "fast-lane-20260108T003000Z"]
    assert set(lane.job) == {"fast_lane", "candidates", "score", "publish"} and (lane.status == "success").all()
    details = json.loads(lane[lane.job == "fast_lane"].details.iloc[0])
    assert details["users"] > 0 and details["scored"] > 0
