"""Shared world for the reliability tests: a small synthetic warehouse with trained FM + verifier.

The world (``world_template``, ``tests/world.py``) is built once per session; every test works on
its own copy (``fresh_world``), so a test that kills a job or poisons a table cannot affect another.
Subprocess helpers run the real ``solaris`` command, the same code spark-submit and Airflow run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from solaris.pipeline import STAGE_NAMES
from tests.conftest import table_checksum
from tests.world import SMALL, T0, TEST_OVERRIDES, WORLD, copy_world, set_args, world_config

# Every table a job of the hourly cycle writes (``runs`` is the audit log: checked separately).
CYCLE_TABLES = ("candidates", "pair_embeddings", "pair_embeddings_log", "quarantine", "user_embeddings",
                "user_neighbors", "imputed_embeddings", "item_embeddings")


@pytest.fixture(scope="session")
def served_template(spark, world_template) -> Path:
    """The world after one complete hourly cycle at T0: a snapshot is being served."""
    warehouse = world_template.parent / "served"
    shutil.copytree(world_template, warehouse)
    run_cycle(spark, world_config(warehouse), T0)
    return warehouse


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
    from solaris.storage.tables import table_exists

    return {
        name: table_checksum(config.table_path(name)) if table_exists(spark, config.table_path(name)) else None
        for name in names
    }


def run_cycle(spark, config, as_of, stages=None):
    """The hourly cycle in-process: the pipeline's own :func:`solaris.pipeline.run_cycle`."""
    from solaris import pipeline

    # The shared test session was built from another config: use this world's Arrow batch size, as a
    # job process would (batch composition decides the last float bits of the FM's outputs).
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(config.spark.arrow_max_records_per_batch))
    return pipeline.run_cycle(spark, config, as_of, stages=stages)


def solaris_command(config, *args: str) -> list[str]:
    """argv of the real ``solaris`` CLI for this warehouse (one JVM per process, like spark-submit)."""
    return [sys.executable, "-m", "solaris.cli", *args, "--warehouse", str(config.warehouse),
            *set_args([*TEST_OVERRIDES, *SMALL, *WORLD])]


# A credential-shaped canary in every job's environment: no job log may ever contain it.
SECRET_CANARY = "canary-8d1f-credential-must-never-be-logged"


def subprocess_env() -> dict:
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env["AWS_SECRET_ACCESS_KEY"] = env["SOLARIS_TEST_DB_PASSWORD"] = SECRET_CANARY
    return env


def run_solaris(config, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(solaris_command(config, *args), capture_output=True, text=True, timeout=timeout,
                          env=subprocess_env())
    assert SECRET_CANARY not in done.stdout + done.stderr, f"solaris {args[0]} logged a secret from its environment"
    return done


def hours(n: float) -> timedelta:
    return timedelta(hours=n)
