"""Shared world for the reliability tests: a small synthetic warehouse with trained FM + verifier.

The world (``world_template``, ``tests/world.py``) is built once per session; every test works on
its own copy (``fresh_world``), so a test that kills a job or poisons a table cannot affect another.
``run_solaris`` calls the real ``solaris`` CLI's main in the test process; ``solaris_command`` starts
it as a process of its own where the process is the point (kills, concurrent writers).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from unittest import mock

import pytest

from solaris.pipeline import STAGE_NAMES
from tests.conftest import table_checksum
from tests.world import T0, copy_world, run_cycle, run_solaris_main, world_argv, world_config

# Every table a job of the hourly cycle writes (``runs`` is the audit log: checked separately).
CYCLE_TABLES = ("candidates", "pair_embeddings", "pair_embeddings_log", "quarantine", "user_embeddings",
                "user_neighbors", "imputed_embeddings", "item_embeddings")


@pytest.fixture(scope="session")
def pending_template(spark, served_template) -> Path:
    """The served world with the T0+1h cycle done up to (not including) publish."""
    warehouse = served_template.parent / "pending"
    shutil.copytree(served_template, warehouse)
    run_cycle(spark, world_config(warehouse), T0 + timedelta(hours=1), stages=STAGE_NAMES[:-1])
    return warehouse


@pytest.fixture
def fresh_world(world_template, served_template, pending_template, tmp_path):
    """Factory of private copies of a template warehouse, so no test can disturb another.

    ``source``: "world" (events + models), "served" (+ cycle at T0, published) or "pending"
    (+ cycle at T0+1h up to publish).
    """
    sources = {"world": world_template, "served": served_template, "pending": pending_template}

    def copy(name: str = "warehouse", *extra: str, source: str = "world"):
        return copy_world(sources[source], tmp_path / name, *extra)

    return copy


def checksums(spark, config, names=CYCLE_TABLES) -> dict:
    from solaris.storage.table import Table

    return {
        name: table_checksum(config.table_path(name)) if Table.of(spark, config, name).exists() else None
        for name in names
    }


def solaris_command(config, *args: str) -> list[str]:
    """argv of a ``solaris`` process for this warehouse (one JVM per process, like spark-submit)."""
    return [sys.executable, "-m", "solaris.cli", *world_argv(config.warehouse, *args)]


# A credential-shaped canary in every job's environment: no job log may ever contain it.
SECRET_CANARY = "canary-8d1f-credential-must-never-be-logged"
CREDENTIALS = {"AWS_SECRET_ACCESS_KEY": SECRET_CANARY, "SOLARIS_TEST_DB_PASSWORD": SECRET_CANARY}


def subprocess_env() -> dict:
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.update(CREDENTIALS)
    return env


def run_solaris(config, *args: str) -> subprocess.CompletedProcess:
    """The ``solaris`` CLI's ``main`` for this warehouse in the test process (:func:`tests.world.run_solaris_main`),
    the canary credentials in its environment."""
    with mock.patch.dict(os.environ, CREDENTIALS):
        done = run_solaris_main(world_argv(config.warehouse, *args))
    assert SECRET_CANARY not in done.stdout + done.stderr, f"solaris {args[0]} logged a secret from its environment"
    return done


def wait_until(process: subprocess.Popen, ready: Callable[[], bool], what: str, *, output: Callable[[], str],
               timeout: float) -> None:
    """Poll ``ready()`` until it holds (a file a job writes at a given point); fails with the job's
    ``output()`` if the job ends first, and after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert process.poll() is None, f"job ended (rc {process.returncode}) before {what}:\n{output()}"
        assert time.monotonic() < deadline, f"{what}: never reached"
        time.sleep(0.01)


def hours(n: float) -> timedelta:
    return timedelta(hours=n)
