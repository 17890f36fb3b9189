"""Shared fixtures: one local SparkSession with Delta for the whole test session.

Each test gets its own warehouse folder (config is just paths), so tests stay independent while
paying the JVM start-up once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from solaris.config import SolarisConfig, load_config

TEST_OVERRIDES = ["spark.master=local[2]", "spark.shuffle_partitions=2", "spark.driver_memory=2g"]


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


def table_checksum(spark, path: str) -> tuple[int, int]:
    """(row count, order-independent content hash) of a Delta table: equal means same content."""
    frame = spark.read.format("delta").load(path)
    row = frame.selectExpr("count(*) AS n", f"sum(hash({', '.join(frame.columns)})) AS h").collect()[0]
    return row["n"], row["h"]
