"""Shared fixtures: one local SparkSession with Delta for the whole test session.

Each test gets its own warehouse folder (config is just paths), so tests stay independent while
paying the JVM start-up once. ``world_template``: the shared synthetic world with trained models
(``tests/world.py``), built once per session for every module that copies it.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from solaris.config import SolarisConfig, load_config
from tests.world import T0, TEST_OVERRIDES, build_world, run_cycle, world_config

__all__ = ["TEST_OVERRIDES", "table_checksum"]


@pytest.fixture
def make_config(tmp_path: Path):
    """Build a validated config whose warehouse lives in this test's tmp folder."""

    def factory(*overrides: str) -> SolarisConfig:
        return load_config(overrides=[*TEST_OVERRIDES, f"warehouse={tmp_path / 'warehouse'}", *overrides])

    return factory


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from solaris.spark import get_spark

    config = load_config(overrides=[*TEST_OVERRIDES, f"warehouse={tmp_path_factory.mktemp('spark')}"])
    session = get_spark(config, "tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def world_template(spark, tmp_path_factory) -> Path:
    """The shared world (:func:`tests.world.build_world`), built once per session: copy it, never change it."""
    warehouse = tmp_path_factory.mktemp("world") / "template"
    build_world(spark, warehouse)
    return warehouse


@pytest.fixture(scope="session")
def served_template(spark, world_template) -> Path:
    """The world after one complete hourly cycle at T0 (a snapshot is being served), built once per
    session for the modules that start from a served world: copy it, never change it."""
    warehouse = world_template.parent / "served"
    shutil.copytree(world_template, warehouse)
    run_cycle(spark, world_config(warehouse), T0)
    return warehouse


def table_checksum(path: str) -> tuple[int, str]:
    """(row count, order-independent digest of every row) of a Delta table: equal means same content.

    Read on the driver with ``deltalake``, the reader the resolver and the driver-side stages use: the
    tables compared are a test world's, small, and a Spark job per table (snapshot, scan, aggregate)
    made the comparisons most of the time of the tests that compare every table after every step.
    Every value's ``repr`` enters the digest (floats and bytes exactly), rows sorted, columns by name.
    """
    from deltalake import DeltaTable

    table = DeltaTable(path).to_pyarrow_table()
    names = sorted(table.column_names)
    rows = sorted(repr(tuple(row[name] for name in names)) for row in table.to_pylist())
    return len(rows), hashlib.sha256("\n".join(rows).encode()).hexdigest()
