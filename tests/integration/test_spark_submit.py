"""The ingest job under a real spark-submit, with the Delta JARs from the set-up folder."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _submit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "spark-submit.sh"), *args],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )


def test_help_works_under_spark_submit():
    done = _submit(str(ROOT / "jobs" / "ingest.py"), "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--input" in done.stdout and "--as-of" in done.stdout


@pytest.mark.slow
def test_ingest_runs_under_spark_submit_and_reads_back_without_spark(tmp_path):
    data = tmp_path / "u.data"
    data.write_text("196\t242\t3\t881250949\n186\t302\t5\t891717742\n22\t377\t1\t878887116\n")
    warehouse = tmp_path / "warehouse"
    done = _submit("--master", "local[1]", str(ROOT / "jobs" / "ingest.py"), "--input", str(data),
                   "--warehouse", str(warehouse))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "valid=3 quarantined=0" in done.stdout

    from deltalake import DeltaTable

    table = DeltaTable(str(warehouse / "events")).to_pyarrow_table()
    assert sorted(table["user_id"].to_pylist()) == [22, 186, 196]
    assert sorted(table["label"].to_pylist()) == [0.0, 0.0, 1.0]


def test_bad_input_exits_2_with_a_clear_message(tmp_path):
    done = _submit("--master", "local[1]", str(ROOT / "jobs" / "ingest.py"), "--input", str(tmp_path / "missing.csv"),
                   "--warehouse", str(tmp_path / "warehouse"))
    assert done.returncode == 2
    assert "does not exist" in done.stdout + done.stderr  # spark-submit merges the driver's stderr into stdout
