"""Crash safety: SIGKILL the real job process (driver + its JVM + Python workers) mid-stage.

Afterwards every reader - Spark, ``deltalake`` (no JVM) and the resolver - must see the last
complete state, and a rerun must finish with exactly the result of an uninterrupted run (checked
against a copy of the same warehouse where the job ran without interruption). The rerun and the
reference run in the tests' own session (the same stage code the CLI runs): only the killed job
needs a process of its own, and a cold JVM per rerun would double each test's time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
from deltalake import DeltaTable

from solaris.serving.resolver import load_snapshot
from solaris.serving.snapshots import latest_manifest_path
from tests.reliability.conftest import T0, checksums, hours, run_cycle, solaris_command, subprocess_env, wait_until
from tests.world import copy_world


def _data_files(table: Path) -> set[str]:
    return {str(p.relative_to(table)) for p in table.rglob("*.parquet")} if table.exists() else set()


def _commits(table: Path) -> int:
    return len(list((table / "_delta_log").glob("*.json")))


def _start(config, *args: str) -> subprocess.Popen:
    return subprocess.Popen(solaris_command(config, *args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=subprocess_env(), start_new_session=True)  # own process group: driver + JVM + workers


def _kill_when(process: subprocess.Popen, ready, timeout: float = 300) -> float:
    """SIGKILL the whole process group as soon as ``ready()`` holds; returns when it was killed."""
    wait_until(process, ready, "the kill point", output=process.stdout.read, timeout=timeout)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    return time.monotonic()


def _resolve(manifest_path, as_of):
    tables = load_snapshot(manifest_path)
    users = np.arange(1, 121, dtype=np.int64)
    return tables.resolve(
        users, np.full(len(users), 7, dtype=np.int64), np.full(len(users), (as_of + hours(0.5)).timestamp())
    )


def test_sigkill_during_the_pair_embeddings_write_then_rerun(spark, fresh_world, tmp_path):
    config = fresh_world("crashed", source="served")  # a complete hour T0 already serving
    as_of = (T0 + hours(1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    run_cycle(spark, config, T0 + hours(1), stages=["candidates"])
    reference = copy_world(config.warehouse, tmp_path / "uninterrupted")  # same state, job left to finish

    table = Path(config.table_path("pair_embeddings"))
    committed_before, files_before = _commits(table), _data_files(table)
    before = checksums(spark, config, ["pair_embeddings", "pair_embeddings_log"])
    manifest = latest_manifest_path(config.warehouse / "snapshots")
    served_before = _resolve(manifest, T0 + hours(1))

    # Spark writes (storage.driver_max_rows=0): its MERGE writes files for seconds before it
    # commits, a window a kill can hit; deltalake's writes of the same rows commit within milliseconds
    # of their files. The rerun below writes with the default, as the reference does.
    job = _start(config, "score", "--as-of", as_of, "--set", "storage.driver_max_rows=0")
    _kill_when(job, lambda: bool(_data_files(table) - files_before))  # MERGE is writing its files

    # The MERGE had not committed: its files are orphans that no reader lists.
    assert _commits(table) == committed_before
    assert checksums(spark, config, ["pair_embeddings", "pair_embeddings_log"]) == before
    delta = DeltaTable(str(table))
    assert delta.version() == committed_before - 1
    assert delta.to_pyarrow_table().num_rows == before["pair_embeddings"][0]
    assert latest_manifest_path(config.warehouse / "snapshots") == manifest
    for got, expected in zip(_resolve(manifest, T0 + hours(1)), served_before):
        # bit-exact: one snapshot read twice; the resolver copies, no arithmetic
        np.testing.assert_array_equal(got, expected)

    run_cycle(spark, config, T0 + hours(1), stages=["score"])  # the rerun
    run_cycle(spark, reference, T0 + hours(1), stages=["score"])  # uninterrupted
    names = ["pair_embeddings", "pair_embeddings_log", "candidates", "quarantine"]
    assert checksums(spark, config, names) == checksums(spark, reference, names)
    assert checksums(spark, config, ["pair_embeddings"]) != before


def _manifest_content(path: Path) -> dict:
    manifest = json.loads(path.read_text())
    for spec in manifest["tables"].values():
        spec["path"] = Path(spec["path"]).name
    return manifest


def test_sigkill_during_publish_keeps_the_previous_snapshot_then_rerun(spark, fresh_world):
    config = fresh_world("crashed", source="pending")  # T0 served; T0+1h done up to publish
    reference = fresh_world("uninterrupted", source="pending")
    t1 = T0 + hours(1)
    snapshots = config.warehouse / "snapshots"
    previous = latest_manifest_path(snapshots)
    previous_text = previous.read_text()
    as_of = t1.strftime("%Y-%m-%dT%H:%M:%SZ")

    # the gate checked by Spark (storage.driver_max_rows=0): seconds of Spark jobs after the log line, a
    # window the kill hits; on the driver the same check takes milliseconds. The rerun uses the default.
    job = _start(config, "publish", "--as-of", as_of, "--set", "storage.driver_max_rows=0")
    lines = []

    def checking() -> bool:  # the quality gate's Spark jobs are running
        line = job.stdout.readline()
        lines.append(line)
        return "checking servable rows" in line

    _kill_when(job, checking)
    assert latest_manifest_path(snapshots) == previous and previous.read_text() == previous_text
    assert sorted(p.name for p in snapshots.glob("*.json")) == [previous.name]
    users, tiers, _ = _resolve(previous, t1)
    assert (tiers > 0).any()

    run_cycle(spark, config, t1, stages=["publish"])  # the rerun
    run_cycle(spark, reference, t1, stages=["publish"])  # uninterrupted
    published = latest_manifest_path(snapshots)
    assert published != previous and published.name == latest_manifest_path(reference.warehouse / "snapshots").name
    assert _manifest_content(published) == _manifest_content(latest_manifest_path(reference.warehouse / "snapshots"))
    assert not list(snapshots.glob(".*tmp*"))
