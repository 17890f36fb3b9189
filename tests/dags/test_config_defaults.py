"""One source of defaults: editing the YAML config changes what scheduled DAG runs use.

The DAGs' Params take their defaults from the loaded config and the tasks pass ``--set`` only for
Params a trigger changed, so a scheduled run (default Params) runs the jobs with the YAML's values.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def edited_config(tmp_path, monkeypatch):
    """A deployment YAML that only holds the keys it changes, selected with $SOLARIS_CONFIG."""
    path = tmp_path / "conf" / "solaris.yaml"
    path.parent.mkdir()
    path.write_text(
        "precompute:\n  ttl_hours: 3\n  candidates: {budget: 1234}\n  verifier: {threshold: 0.7}\n"
        "model:\n  training: {max_epochs: 2}\n"
        f"spark: {{jars_dir: {ROOT / 'jars'}}}\n"
    )
    monkeypatch.setenv("SOLARIS_CONFIG", str(path))
    monkeypatch.setenv("AIRFLOW_HOME", os.environ.get("AIRFLOW_HOME", str(ROOT / "airflow_home")))
    monkeypatch.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    return path


def _rendered_args(dag, task_id: str, **changed) -> list[str]:
    task = dag.get_task(task_id)
    params = {**{key: dag.params[key] for key in dag.params}, **changed}
    context = {"params": params, "task": task, "logical_date": datetime(2026, 1, 1, 5, tzinfo=timezone.utc),
               "dag_run": SimpleNamespace(run_after=None)}
    return task.render_template(task.application_args, context)


def test_a_scheduled_run_uses_the_edited_yaml(edited_config):
    from airflow.dag_processing.dagbag import DagBag

    from solaris.config import load_config
    from solaris.runtime import add_common_args, config_from_args

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    precompute = bag.dags["solaris_precompute"]
    assert (precompute.params["ttl_hours"], precompute.params["candidate_budget"],
            precompute.params["verifier_threshold"]) == (3, 1234, 0.7)
    assert bag.dags["solaris_models"].params["max_epochs"] == 2
    assert bag.dags["solaris_replay"].params["max_epochs"] == 2

    # a scheduled run passes no --set: the job loads the YAML itself and gets the edited values
    for task_id in ("candidates", "score", "expire"):
        args = _rendered_args(precompute, task_id)
        assert args == ["--as-of", "2026-01-01T05:00:00Z"], task_id
    import argparse

    parser = argparse.ArgumentParser()
    add_common_args(parser)
    config = config_from_args(parser.parse_args(args[2:]))
    assert config == load_config(edited_config)
    assert (config.precompute.ttl_hours, config.precompute.candidates.budget) == (3, 1234)

    # a trigger that changes a Param overrides just that value
    assert _rendered_args(precompute, "score", ttl_hours=12) == [
        "--as-of", "2026-01-01T05:00:00Z", "--set", "precompute.ttl_hours=12"]
    replay = bag.dags["solaris_replay"]
    assert _rendered_args(replay, "train_fm", max_epochs=5)[2:] == ["--set", "model.training.max_epochs=5"]
    assert _rendered_args(replay, "evaluate") == ["--as-of", "2000-12-01T00:00:00Z"]
