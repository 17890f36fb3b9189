"""Safe loading and paths: weights-only checkpoints, paths confined to the warehouse, no secrets.

Checkpoints are data from a shared folder: loading one must never run code. Paths arrive from
Airflow Params and CLI flags: they must not reach outside the warehouse. Credentials belong in
Airflow connections / the Spark environment, never in the repo or our logs.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from solaris.config import ConfigError
from solaris.stages import knn as knn_job
from solaris.stages import score as score_job
from solaris.tick import StepContext
from tests.reliability.conftest import T0, hours, run_cycle

ROOT = Path(__file__).resolve().parents[2]


def _tracked(*patterns: str) -> list[Path]:
    names = subprocess.run(
        ["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / name for name in names if (ROOT / name).is_file()]


def test_every_torch_load_is_weights_only():
    calls = []
    for path in _tracked("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch":
                keywords = {k.arg: k.value for k in node.keywords}
                safe = isinstance(keywords.get("weights_only"), ast.Constant) and keywords["weights_only"].value is True
                calls.append((f"{path.relative_to(ROOT)}:{node.lineno}", safe))
    assert calls, "expected the checkpoint loader's torch.load"
    assert [where for where, safe in calls if not safe] == []


@pytest.mark.parametrize("path", ["../../etc", "/etc", "models/../../outside", "link-out"])
def test_checkpoint_paths_cannot_escape_the_warehouse(spark, fresh_world, path, tmp_path):
    config = fresh_world()
    (config.warehouse / "link-out").symlink_to(tmp_path, target_is_directory=True)  # symlink leading outside
    run_id = "precompute-escape"
    with pytest.raises(ConfigError, match="escapes the warehouse root"):
        score_job.run(StepContext(spark, config, T0, run_id), options=score_job.ScoreOptions(fm_path=path))
    with pytest.raises(ConfigError, match="escapes the warehouse root"):
        score_job.run(StepContext(spark, config, T0, run_id), options=score_job.ScoreOptions(verifier_path=path))
    with pytest.raises(ConfigError, match="escapes the warehouse root"):
        knn_job.run(StepContext(spark, config, T0, run_id), options=knn_job.KnnOptions(fm_path=path))
    assert not (config.warehouse / "pair_embeddings").exists()


def test_table_names_and_rollback_ids_cannot_escape(fresh_world, tmp_path):
    from solaris.config import load_config

    with pytest.raises(ConfigError):
        load_config(overrides=["tables.pair_embeddings=../stolen"])
    config = fresh_world()
    outside = tmp_path / "evil.json"
    outside.write_text("{}")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "solaris.cli",
            "rollback",
            "--warehouse",
            str(config.warehouse),
            "--to",
            "../../" + str(outside.with_suffix("")),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "no manifest" in done.stderr


def test_rollback_serves_an_earlier_manifest(spark, fresh_world):
    from solaris.serving.resolver import load_snapshot
    from solaris.serving.snapshots import latest_manifest_path

    config = fresh_world(source="pending")
    run_cycle(spark, config, T0 + hours(1), stages=["publish"])
    snapshots = config.warehouse / "snapshots"
    newest = latest_manifest_path(snapshots)
    command = [sys.executable, "-m", "solaris.cli", "rollback", "--warehouse", str(config.warehouse)]
    listing = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout.split("\n")
    assert "* snapshot-20260108T010000Z" in listing and "  snapshot-20260108T000000Z" in listing
    done = subprocess.run([*command, "--to", "snapshot-20260108T000000Z"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert latest_manifest_path(snapshots).name == "snapshot-20260108T000000Z.json" != newest.name
    assert load_snapshot(latest_manifest_path(snapshots)).snapshot_id == "snapshot-20260108T000000Z"


SECRET_PATTERNS = [
    re.compile(r"AKIA[0-9A-Z]{16}"),  # AWS access key id
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"(?i)(password|passwd|secret|token|api_key)\s*[:=]\s*['\"][^'\"\s]{6,}['\"]"),
    re.compile(r"(?i)://[^/\s:@]+:[^/\s:@]+@"),  # credentials inside a URL
]


def test_no_secrets_in_tracked_files():
    hits = []
    for path in _tracked():
        if path.suffix in {".png", ".jar", ".pt"} or path.stat().st_size > 2_000_000:
            continue
        text = path.read_text(errors="ignore")
        hits += [f"{path.relative_to(ROOT)}: {m.group(0)[:40]}" for p in SECRET_PATTERNS for m in p.finditer(text)]
    assert hits == []


def test_spark_connection_and_dag_tasks_carry_no_credentials():
    from solaris.orchestration import spark_submit_kwargs

    kwargs = spark_submit_kwargs("score", ["--as-of", "{{ ds }}"])
    text = repr(kwargs).lower()
    assert kwargs["conn_id"] == "spark_default"
    assert not any(word in text for word in ("password", "secret", "token", "key="))
    setup = (ROOT / "scripts" / "airflow-setup.sh").read_text()
    assert "--conn-password" not in setup and "--conn-login" not in setup
