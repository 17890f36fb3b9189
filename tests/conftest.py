"""Shared fixtures: one local SparkSession with Delta for the whole test session.

Each test gets its own warehouse folder (config is just paths), so tests stay independent while
paying the JVM start-up once. ``world_template``: the shared synthetic world with trained models
(``tests/world.py``), built once per session for every module that copies it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from solaris.config import SolarisConfig, load_config
from tests.world import TEST_OVERRIDES, build_world

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


def table_checksum(spark, path: str) -> tuple[int, int]:
    """(row count, order-independent content hash) of a Delta table: equal means same content."""
    frame = spark.read.format("delta").load(path)
    row = frame.selectExpr("count(*) AS n", f"sum(hash({', '.join(frame.columns)})) AS h").collect()[0]
    return row["n"], row["h"]
