"""DAG integrity: import cleanly and fast, wire only, retries/tags/params as users expect."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from solaris.orchestration import AS_OF_TEMPLATE

ROOT = Path(__file__).resolve().parents[2]
DAGS = ROOT / "dags"


@pytest.fixture(scope="module")
def dagbag():
    os.environ.setdefault("AIRFLOW_HOME", str(ROOT / "airflow_home"))
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_no_import_errors_and_expected_dags(dagbag):
    assert dagbag.import_errors == {}
    assert {"solaris_precompute", "solaris_enrichment", "solaris_models", "solaris_replay",
            "solaris_fast_lane", "solaris_stream"} <= set(dagbag.dags)


def test_every_dag_is_documented_tagged_and_retried(dagbag):
    for dag_id, dag in dagbag.dags.items():
        assert dag.doc_md and "solaris" in dag.tags, dag_id
        for task in dag.tasks:
            assert task.retries >= 1, f"{dag_id}.{task.task_id} has no retries"


def test_precompute_never_overlaps_and_is_ordered(dagbag):
    dag = dagbag.dags["solaris_precompute"]
    assert dag.max_active_runs == 1
    assert dag.get_task("candidates").downstream_task_ids == {"score"}
    assert dag.get_task("score").downstream_task_ids == {"expire"}
    assert [outlet.uri.rstrip("/") for outlet in dag.get_task("announce").outlets] == ["solaris://pair_embeddings"]


def test_spark_tasks_ship_the_delta_jars_and_our_python(dagbag):
    for dag in dagbag.dags.values():
        for task in dag.tasks:
            if task.task_type == "SparkSubmitOperator":
                assert "delta-spark_" in task.jars and "delta-storage-" in task.jars
                assert Path(task.application).is_file()
                # every other stage is pinned to an explicit logical time; the stream's as-of is each
                # micro-batch's newest event time
                if task.task_id not in ("ingest", "stream"):
                    assert {"--as-of", "--start"} & set(task.application_args), task.task_id


def test_only_one_stage_tasks_get_the_short_lived_driver_jvm(dagbag):
    """A task that runs one hourly stage gets the C1-only JIT; replay and evaluate keep C2 for their many ticks."""
    one_stage = {"solaris_precompute", "solaris_enrichment", "solaris_fast_lane", "solaris_stream"}
    for dag_id, dag in dagbag.dags.items():
        for task in dag.tasks:
            if task.task_type == "SparkSubmitOperator":
                java = task.conf["spark.driver.extraJavaOptions"].split()
                assert "-Duser.timezone=UTC" in java, task.task_id
                assert ("-XX:TieredStopAtLevel=1" in java) == (dag_id in one_stage), f"{dag_id}.{task.task_id}"


def test_params_validation_rejects_bad_input(dagbag):
    from airflow.sdk.exceptions import ParamValidationError

    dag = dagbag.dags["solaris_precompute"]
    dag.params.validate()  # defaults are valid
    assert dag.params.get_param("as_of").resolve("2000-12-01T00:00:00Z") == "2000-12-01T00:00:00Z"
    for key, bad in (("ttl_hours", -1), ("ttl_hours", "six"), ("verifier_threshold", 1.5), ("request_min_per_user", -1),
                     ("candidate_budget", 0), ("as_of", "yesterday")):
        with pytest.raises(ParamValidationError):
            dag.params.get_param(key).resolve(bad)


def test_only_the_asset_driven_dag_is_created_unpaused(dagbag):
    """A fresh set-up completes an hour from one trigger: the enrichment DAG must run on the first Asset
    event (a paused DAG ignores it, and does not catch up when unpaused later). The scheduled DAGs stay
    paused until an operator unpauses them (Airflow's default), so nothing runs at the wall clock's hour
    before someone asks for it."""
    for dag_id, dag in dagbag.dags.items():
        expected = False if dag_id == "solaris_enrichment" else None
        assert dag.is_paused_upon_creation is expected, dag_id


@pytest.mark.parametrize("dag_id, window", [("solaris_precompute", 60), ("solaris_fast_lane", 15)])
def test_a_scheduled_tick_first_checks_that_the_events_reach_it(dagbag, dag_id, window):
    dag = dagbag.dags[dag_id]
    gate = dag.get_task("events_arrived")
    assert {task.task_id for task in dag.roots} == {"events_arrived"}
    assert gate.get_flat_relative_ids(upstream=False) == {task.task_id for task in dag.tasks} - {"events_arrived"}
    assert list(gate.op_args) == [AS_OF_TEMPLATE] and gate.op_kwargs == {"window_minutes": window}
    assert not dag.catchup  # unpausing starts at the current interval, never a backlog of past ones


def test_every_time_param_is_a_date_time_the_form_picks_and_the_api_checks(dagbag):
    from airflow.sdk.exceptions import ParamValidationError

    times = 0
    for dag in dagbag.dags.values():
        for name in ("as_of", "start", "end"):
            if name in dag.params:
                param, times = dag.params.get_param(name), times + 1
                assert param.schema["format"] == "date-time", (dag.dag_id, name)
                with pytest.raises(ParamValidationError):
                    param.resolve("not-a-time")
    assert times == 6  # as_of in four DAGs, the replay's start and end


def test_each_dag_file_parses_without_heavy_imports():
    """Parse time is dominated by imports: DAG files must not pull in torch, Spark or FAISS."""
    for path in sorted(DAGS.glob("solaris_*.py")):
        code = (
            f"import runpy, sys; runpy.run_path({str(path)!r}); "
            "print(','.join(m for m in ('torch', 'pyspark', 'faiss') if m in sys.modules))"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "AIRFLOW__CORE__LOAD_EXAMPLES": "False"})
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip().splitlines()[-1:] in ([], [""]), f"{path.name} imports {out.stdout.strip()}"


def test_enrichment_runs_on_the_pair_embeddings_asset(dagbag):
    dag = dagbag.dags["solaris_enrichment"]
    assert dag.max_active_runs == 1
    assert dag.get_task("impute").upstream_task_ids == {"user_aggregates", "knn"}
    assert dag.get_task("publish").upstream_task_ids == {"impute", "item_aggregates"}
    assert "triggering_asset_events" in dag.get_task("knn").application_args[1]


def test_replay_dag_runs_the_evaluation_only_when_asked(dagbag):
    from airflow.sdk.exceptions import ParamValidationError

    dag = dagbag.dags["solaris_replay"]
    gate = dag.get_task("evaluate_requested")
    assert gate.upstream_task_ids == {"replay"} and gate.downstream_task_ids == {"evaluate"}
    assert gate.python_callable(params={"evaluate": False}) is False
    assert gate.python_callable(params={"evaluate": True}) is True
    assert dag.params.get_param("evaluate").value is False  # the default replay does not pay for it
    args = dag.get_task("evaluate").application_args
    assert list(args) == ["--as-of", "{{ params.start }}"] and args.overrides["seeds"][0] == "evaluation.seeds"
    for key, bad in (("seeds", 0), ("eval_hours", 0), ("tail_hours", -3), ("evaluate", "yes")):
        with pytest.raises(ParamValidationError):
            dag.params.get_param(key).resolve(bad)


def test_the_speculator_the_defaults_use_is_trained_by_the_models_and_replay_dags(dagbag):
    """The default speculation (learned blend + request verifier) loads a speculator checkpoint: the
    daily models DAG writes one, and the replay trains one before its first tick."""
    models = dagbag.dags["solaris_models"].get_task("train_speculator")
    assert models.upstream_task_ids == {"train_fm"} and Path(models.application).stem == "train_speculator"
    replay = dagbag.dags["solaris_replay"]
    assert replay.get_task("train_speculator").upstream_task_ids == {"train_verifier"}
    assert replay.get_task("replay").upstream_task_ids == {"train_speculator"}
    args = replay.get_task("train_speculator").application_args  # fit for the TTL the replay runs with
    assert list(args) == ["--as-of", "{{ params.start }}"] and args.overrides["ttl_hours"][0] == "precompute.ttl_hours"


@pytest.mark.parametrize("dag_id, half", [("solaris_precompute", "PRECOMPUTE"), ("solaris_enrichment", "ENRICHMENT")])
def test_each_hourly_dag_runs_exactly_the_pipeline_definition(dagbag, dag_id, half):
    """The DAGs' stage tasks and their wiring are the ones solaris.pipeline defines for replays and tests."""
    from solaris import pipeline

    stages = getattr(pipeline, half)
    dag = dagbag.dags[dag_id]
    spark_tasks = {task.task_id for task in dag.tasks if task.task_type == "SparkSubmitOperator"}
    assert spark_tasks == {stage.name for stage in stages}
    for stage in stages:
        task = dag.get_task(stage.name)
        gate = {"events_arrived"} if "events_arrived" in dag.task_ids and not stage.upstream else set()
        assert task.upstream_task_ids == set(stage.upstream) | gate, stage.name
        assert Path(task.application).stem == stage.name
    # the definition's order is a valid execution order: every stage after its upstream ones
    seen: set[str] = set()
    for stage in stages:
        assert set(stage.upstream) <= seen, stage.name
        seen.add(stage.name)


def test_fast_lane_runs_between_the_hourly_runs_as_one_spark_task(dagbag):
    """Every interval past the hour but never on it, never overlapping, one spark-submit of jobs/fast_lane.py."""
    from airflow.sdk.exceptions import ParamValidationError

    from solaris.config import load_config
    from solaris.orchestration import fast_lane_schedule

    dag = dagbag.dags["solaris_fast_lane"]
    assert dag.max_active_runs == 1 and not dag.catchup
    expected = fast_lane_schedule(load_config().fast_lane.interval_minutes)
    assert dag.timetable.expression == expected == "15,30,45 * * * *"
    (task,) = [task for task in dag.tasks if task.task_id != "events_arrived"]
    assert task.task_type == "SparkSubmitOperator" and Path(task.application).stem == "fast_lane"
    assert list(task.application_args)[0] == "--as-of"
    assert {name: key for name, (key, _) in task.application_args.overrides.items()} == {
        "max_users": "fast_lane.max_users", "lookback_minutes": "fast_lane.lookback_minutes",
        "absence_hours": "fast_lane.absence_hours"}
    dag.params.validate()
    assert dag.params.get_param("max_users").value == load_config().fast_lane.max_users
    for key, bad in (("max_users", 0), ("lookback_minutes", 0), ("absence_hours", 0), ("as_of", "soon")):
        with pytest.raises(ParamValidationError):
            dag.params.get_param(key).resolve(bad)


def test_stream_runs_the_available_now_query_on_the_configured_schedule(dagbag):
    """One spark-submit of jobs/stream.py --trigger available-now at stream.schedule, never overlapping
    (two runs on one checkpoint would race)."""
    from solaris.config import load_config

    dag = dagbag.dags["solaris_stream"]
    assert dag.max_active_runs == 1 and not dag.catchup
    assert dag.timetable.expression == load_config().stream.schedule
    task = dag.get_task("stream")
    assert set(dag.task_ids) == {"events_arrived", "stream"} and task.upstream_task_ids == {"events_arrived"}
    assert task.task_type == "SparkSubmitOperator" and Path(task.application).stem == "stream"
    assert list(task.application_args) == ["--trigger", "available-now"]
