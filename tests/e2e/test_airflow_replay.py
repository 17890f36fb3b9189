"""End to end through Airflow: `airflow dags test solaris_replay` on MovieLens-100K (real data).

Runs the real DAG with the real SparkSubmitOperator (spark-submit on local[*], Delta JARs from
set-up) against a temporary warehouse, then checks the Airflow metadata DB and the tables.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_replay_dag_runs_every_task_to_success(tmp_path):
    warehouse = tmp_path / "warehouse"
    conf = {"dataset": "ml-100k", "start": "1998-03-01T00:00:00Z", "end": "1998-03-01T02:00:00Z", "max_epochs": 1}
    command = f"source scripts/airflow-env.sh && airflow dags test solaris_replay -c '{json.dumps(conf)}'"
    env = {**os.environ, "SOLARIS_WAREHOUSE": str(warehouse)}
    done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]

    db = sqlite3.connect(ROOT / "airflow_home" / "airflow.db")
    run_id, state = db.execute(
        "SELECT run_id, state FROM dag_run WHERE dag_id='solaris_replay' ORDER BY id DESC LIMIT 1").fetchone()
    states = dict(db.execute(
        "SELECT task_id, state FROM task_instance WHERE dag_id='solaris_replay' AND run_id=?", (run_id,)).fetchall())
    assert state == "success"
    assert states == {"ingest": "success", "train_fm": "success", "train_verifier": "success", "replay": "success"}

    from deltalake import DeltaTable

    assert DeltaTable(str(warehouse / "events")).to_pyarrow_dataset().count_rows() == 100_000
    runs = DeltaTable(str(warehouse / "runs")).to_pandas()
    scores = runs[runs.job == "score"]
    assert len(scores) == 2 and (scores.status == "success").all()
    pairs = DeltaTable(str(warehouse / "pair_embeddings")).to_pandas()
    assert len(pairs) > 0 and pairs["run_id"].str.startswith("precompute-19980301T0").all()
