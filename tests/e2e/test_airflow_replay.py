"""End to end through Airflow on MovieLens-100K (real data): the replay DAG, then the next hour
from the trigger form of the Airflow UI, in a real browser.

Runs the real DAGs with the real SparkSubmitOperator (spark-submit on local[*], Delta JARs from
set-up) against one temporary warehouse, then checks the Airflow metadata DB and the tables. One
warehouse for every DAG: each needs what the ones before it wrote (models, a published snapshot),
as in a deployment; the ingest task is also the suite's spark-submit run of a job on real data.
The replay covers one hour (one tick; the hourly DAGs then run the next one), the least that runs
every task. The next hour is what an operator does on a fresh set-up: sign in to the UI that
``scripts/airflow-ui.sh`` serves, open ``solaris_precompute``'s trigger form, pick ``as_of``, trigger;
the precompute run's Asset event then runs ``solaris_enrichment`` (created unpaused) and a snapshot is
published without another click. The form's defaults are kept ("Unpause on trigger" checked), so the
hourly schedule also starts at the wall clock's hour: its run is skipped by ``events_arrived`` (the
warehouse's events end in 1998). Each test gets an Airflow home of its own, set up as ``make setup``
does. ``$SOLARIS_SCREENSHOTS`` keeps the screenshots (docs/img/ holds the ones docs/operations.md shows).
The fast-lane DAG's one task chains these hourly stages' code: its wiring, schedule and Params are
checked in tests/dags, its job through its entry point in tests/integration/test_fast_lane.py.

The deployment's config is the packaged default plus a YAML that only sizes the run for a test
(selected with ``$SOLARIS_CONFIG`` as a deployment would; ``$SOLARIS_HOME`` anchors its relative
paths at the checkout): the speculator learns from 1 past tick instead of 8, shuffles use 2
partitions, the FM and the VM have the small sizes of ``tests.world.SMALL`` (FM 16-d, history 8;
the FM's mini-batch pinned to 2,048, what it trained with before its own default of 256, which
takes 8 times the steps), and the tasks that are not one hourly stage (ingest, training, replay)
the JIT options of the tests' own sessions (``tests.world.TEST_SESSION_JAVA_OPTIONS``), as every
other test's Spark and models do.
Every task and code path of the defaults still runs.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.e2e.airflow_ui import AirflowUI, logged_in_page
from tests.world import TEST_SESSION_JAVA_OPTIONS

ROOT = Path(__file__).resolve().parents[2]


TEST_DEPLOYMENT = f"""\
model:
  embedding_dim: 16
  history_length: 8
  fm: {{id_buckets: 1024, d_model: 16, tower: [32], batch_size: 2048}}
  vm: {{id_buckets: 16384}}
precompute:
  speculator: {{ticks: 1}}
spark: {{shuffle_partitions: 2, session_java_options: "{TEST_SESSION_JAVA_OPTIONS}"}}
"""


def _deployment_env(tmp_path: Path, warehouse: Path) -> dict[str, str]:
    """The environment of every DAG run of the test: its warehouse, the deployment YAML (written once) and
    an Airflow home of its own, set up as `make setup` sets up the checkout's."""
    deployment = tmp_path / "conf" / "solaris.yaml"
    deployment.parent.mkdir()
    deployment.write_text(TEST_DEPLOYMENT)
    env = {**os.environ, "SOLARIS_WAREHOUSE": str(warehouse), "SOLARIS_CONFIG": str(deployment),
           "SOLARIS_HOME": str(ROOT), "SOLARIS_AIRFLOW_HOME": str(tmp_path / "airflow_home")}
    done = subprocess.run(["bash", "scripts/airflow-setup.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return env


def _dags_test(dag_id: str, conf: dict, env: dict[str, str]) -> dict[str, str]:
    """Run `airflow dags test` and return the task states the metadata DB recorded for that run."""
    command = f"source scripts/airflow-env.sh && airflow dags test {dag_id} -c '{json.dumps(conf)}'"
    done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    db = sqlite3.connect(Path(env["SOLARIS_AIRFLOW_HOME"]) / "airflow.db")
    run_id, state = db.execute(
        "SELECT run_id, state FROM dag_run WHERE dag_id=? ORDER BY id DESC LIMIT 1", (dag_id,)).fetchone()
    assert state == "success"
    return dict(db.execute("SELECT task_id, state FROM task_instance WHERE dag_id=? AND run_id=?", (dag_id, run_id)))


@pytest.mark.slow
def test_replay_dag_then_the_next_hour_from_the_trigger_form_in_a_browser(tmp_path):
    warehouse = tmp_path / "warehouse"
    conf = {"dataset": "ml-100k", "start": "1998-03-01T01:00:00Z", "end": "1998-03-01T02:00:00Z", "max_epochs": 1}
    env = _deployment_env(tmp_path, warehouse)
    states = _dags_test("solaris_replay", conf, env)
    assert states == {"ingest": "success", "train_fm": "success", "train_verifier": "success",
                      "train_speculator": "success", "replay": "success", "evaluate_requested": "success",
                      "evaluate": "skipped"}  # evaluate Param defaults to off

    from deltalake import DeltaTable

    assert DeltaTable(str(warehouse / "events")).to_pyarrow_dataset().count_rows() == 100_000
    runs = DeltaTable(str(warehouse / "runs")).to_pandas()
    scores = runs[runs.job == "score"]
    assert len(scores) == 1 and (scores.status == "success").all()
    # the default speculation: the speculator trained by the DAG, its request verifier before the FM
    assert [json.loads(details)["rule"] for details in scores.details] == ["request"]
    assert (runs.job == "train_speculator").sum() == 1
    assert len(json.loads(runs[runs.job == "train_speculator"].details.iloc[0])["ticks"]) == 1  # the deployment YAML

    shots = Path(os.environ.get("SOLARIS_SCREENSHOTS", tmp_path / "screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    with AirflowUI.running(env, tmp_path / "airflow_home") as ui:
        # the REST API (as `airflow dags trigger`) refuses a bad time, or any bad Param, before a run exists
        for bad in ({"as_of": "not-a-time"}, {"ttl_hours": -1}):
            status, body = ui.request("POST", "/api/v2/dags/solaris_precompute/dagRuns",
                                      {"logical_date": None, "conf": bad})
            assert status == 400 and f"Invalid input for param {next(iter(bad))}" in body["detail"], (status, body)
        assert ui.runs("solaris_precompute") == []

        with logged_in_page(ui) as page:
            page.goto(f"{ui.url}/dags/solaris_precompute")
            page.get_by_role("button", name="Trigger").first.click()
            as_of = page.locator("label", has_text="as_of").locator("xpath=../..").get_by_test_id("datetime-input")
            as_of.click()
            picker = page.locator('[data-scope="popover"][data-part="content"][data-state="open"]')
            picker_id = picker.get_attribute("id")  # the same element once closed, for the wait below
            picker.get_by_placeholder("YYYY/MM/DD").fill("not-a-time")  # the form refuses it: no value is set
            refusal = picker.get_by_text("Invalid date format.")
            refusal.wait_for()
            assert as_of.inner_text().strip() == "Select date and time"  # the Param got no value
            page.screenshot(path=shots / "trigger-form-refuses-a-bad-time.png")
            picker.get_by_placeholder("YYYY/MM/DD").fill("1998/03/01")
            picker.get_by_placeholder("HH:mm").fill("02:00")
            assert refusal.count() == 0
            page.keyboard.press("Escape")
            # hidden once its closing animation ends (the open-state locator lets go when the animation starts)
            page.locator(f'[id="{picker_id}"]').wait_for(state="hidden")
            assert as_of.inner_text().strip() == "Mar 01, 1998 02:00"
            page.get_by_text("Unpause solaris_precompute on trigger").wait_for()  # left checked, as it comes
            page.screenshot(path=shots / "trigger-form.png")
            page.get_by_role("button", name="Trigger").last.click()
            page.wait_for_url("**/dags/solaris_precompute/runs/manual__*")
            # the form fires "unpause" beside the trigger without awaiting it: leaving the page early cancels it
            ui.wait_until_unpaused("solaris_precompute", timeout_s=60)
            # an open Airflow page polls the API every few seconds: the browser idles while the runs run
            page.goto("about:blank")

            precompute = ui.wait_for_run("solaris_precompute", "manual", timeout_s=900)
            assert precompute["conf"]["as_of"] == "1998-03-01T02:00:00.000Z"
            assert precompute["state"] == "success", ui.task_states("solaris_precompute", precompute["dag_run_id"])
            enrichment = ui.wait_for_run("solaris_enrichment", "asset_triggered", timeout_s=900)
            assert set(ui.task_states("solaris_enrichment", enrichment["dag_run_id"]).values()) == {"success"}
            assert enrichment["state"] == "success"
            page.goto(f"{ui.url}/dags/solaris_enrichment/runs/{enrichment['dag_run_id']}")
            page.get_by_text("5 Task Instances").wait_for()
            page.screenshot(path=shots / "enrichment-run.png")

        # "Unpause on trigger" started the hourly schedule at the wall clock's hour: skipped, nothing written
        scheduled = [run for run in ui.runs("solaris_precompute") if run["run_type"] == "scheduled"]
        assert scheduled, "unpausing on trigger should have started the hourly schedule"
        for run in scheduled:
            states = ui.task_states("solaris_precompute", run["dag_run_id"])
            assert states == {"events_arrived": "success", "candidates": "skipped", "score": "skipped",
                              "expire": "skipped", "announce": "skipped"}, states
        assert {run["run_type"] for run in ui.runs("solaris_enrichment")} == {"asset_triggered"}

    pairs = DeltaTable(str(warehouse / "pair_embeddings")).to_pandas()
    assert len(pairs) > 0 and pairs["run_id"].str.startswith("precompute-19980301T0").all()
    latest = (warehouse / "snapshots" / "LATEST").read_text().strip()
    assert latest == "snapshot-19980301T020000Z.json"
    coverage = DeltaTable(str(warehouse / "runs")).to_pandas().query("job == 'coverage'")
    assert len(coverage) == 1  # one per replayed tick
