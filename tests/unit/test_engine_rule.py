"""The engine rule (solaris.storage.engine.choose_engine) and how Table applies it, without a JVM."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from solaris.config import SolarisConfig, StorageConfig
from solaris.storage.engine import Access, Engine, choose_engine
from solaris.storage.events import Events
from solaris.storage.table import WRITE_RULES, Table

BOUND = StorageConfig(driver_max_rows=10)


def test_the_rule_in_order() -> None:
    local, remote = "/w/t", "s3://bucket/t"
    # no Spark to be had: the driver, whatever the access
    for access in Access:
        assert choose_engine(BOUND, remote, access, has_spark=False, rows=10**9) is Engine.DRIVER
    assert choose_engine(BOUND, local, Access.SPARK_PLAN, rows=1) is Engine.SPARK
    assert choose_engine(BOUND, remote, Access.WRITE_ROWS) is Engine.DRIVER
    for access in (Access.LOG, Access.ROWS, Access.FRAME):
        assert choose_engine(BOUND, remote, access, rows=1) is Engine.SPARK  # reads of object stores: Spark
        assert choose_engine(BOUND, [local, remote], access, rows=1) is Engine.SPARK
    assert choose_engine(BOUND, local, Access.ROWS, rows=10**9) is Engine.DRIVER  # wanted on the driver: no bound
    assert choose_engine(BOUND, local, Access.LOG) is Engine.DRIVER
    for access in (Access.FRAME, Access.WRITE_FRAME):
        assert choose_engine(BOUND, local, access, rows=10) is Engine.DRIVER
        assert choose_engine(BOUND, local, access, rows=11) is Engine.SPARK
        assert choose_engine(BOUND, local, access) is Engine.SPARK  # no count known
        assert choose_engine(StorageConfig(driver_max_rows=0), local, access, rows=0) is Engine.SPARK
    assert choose_engine(BOUND, remote, Access.WRITE_FRAME, rows=3) is Engine.DRIVER  # deltalake writes any path


def test_a_count_is_asked_only_when_none_is_known_and_only_up_to_the_bound_plus_one() -> None:
    asked: list[int] = []

    def count(limit: int) -> int | None:
        asked.append(limit)
        return {11: 11}.get(limit)

    assert choose_engine(BOUND, "/w/t", Access.FRAME, count=count) is Engine.SPARK and asked == [11]
    assert choose_engine(BOUND, "/w/t", Access.FRAME, rows=3, count=count) is Engine.DRIVER and asked == [11]
    assert choose_engine(BOUND, "/w/t", Access.FRAME, count=lambda limit: None) is Engine.SPARK  # unknown
    assert choose_engine(StorageConfig(driver_max_rows=0), "/w/t", Access.FRAME, count=count) is Engine.SPARK
    assert asked == [11]


class _Frame:
    """A stand-in for a Spark frame: ``limit(n).toArrow()`` and ``toArrow()`` over fixed rows."""

    def __init__(self, rows: pa.Table) -> None:
        self.rows, self.collected = rows, []

    def limit(self, n: int) -> _Frame:
        self.collected.append(n)
        return _Frame(self.rows.slice(0, n))

    def toArrow(self) -> pa.Table:
        return self.rows


def test_a_write_collects_at_most_the_bound_plus_one_rows_and_sorts_them_in_the_rule_s_order() -> None:
    pairs = Table(spark=lambda: None, name="pair_embeddings", path="/w/p",  # type: ignore[arg-type, return-value]
                  rule=WRITE_RULES["pair_embeddings"], storage=BOUND)
    frame = _Frame(pa.table({"user_id": [3, 1, 2], "item_id": [1, 1, 1]}))
    rows = pairs.collect(frame)  # type: ignore[arg-type]
    assert rows.column("user_id").to_pylist() == [1, 2, 3] and frame.collected == [11]
    many = _Frame(pa.table({"user_id": list(range(20)), "item_id": [0] * 20}))
    assert pairs.collect(many) is None and many.collected == [11]  # type: ignore[arg-type]
    assert pairs.collect(many, expected_rows=12) is None and many.collected == [11]  # type: ignore[arg-type]
    assert pairs.collect(many, expected_rows=5) is None  # type: ignore[arg-type]  # the count was short: Spark


def test_a_table_without_spark_reads_on_the_driver_and_a_spark_only_access_says_so(tmp_path) -> None:
    path = str(tmp_path / "t")
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    stamps = pa.array([t0, t0, t0 + timedelta(hours=1)], pa.timestamp("us", "UTC"))
    write_deltalake(path, pa.table({"run_id": ["a", "b", "a"], "computed_at": stamps,
                                    "expires_at": pa.array([t0 + timedelta(hours=2)] * 3, pa.timestamp("us", "UTC"))}))
    table = Table.at(path)
    assert table.exists() and table.version() == 0 and table.row_count() == 3
    assert sorted(table.rows(["run_id"], equal={"run_id": "a"}).column("run_id").to_pylist()) == ["a", "a"]
    assert table.servable_rows(t0, ["run_id"]).num_rows == 2
    assert table.run_rows("b").num_rows == 1
    with pytest.raises(RuntimeError, match="needs Spark"):
        table.scan()
    assert not Table.at(str(tmp_path / "missing")).exists()


def test_the_events_reader_reads_on_the_driver_by_the_point_in_time_rule(tmp_path) -> None:
    config = SolarisConfig(warehouse=tmp_path)
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    stamps = [t0 - timedelta(seconds=0.5), t0, t0 + timedelta(microseconds=1)]
    write_deltalake(config.table_path("events"), pa.table({
        "user_id": [1, 2, 3], "item_id": [10, 20, 30], "ts": pa.array(stamps, pa.timestamp("us", "UTC")),
        "label": pa.array([1.0, 0.0, 1.0], pa.float32())}))
    events = Events.of(None, config)
    frame = events.pandas(t0)
    seconds = int(t0.timestamp())
    assert frame["user_id"].tolist() == [1, 2] and frame["ts"].tolist() == [seconds - 1, seconds]
    assert frame["rating"].isna().all()  # a table without ratings: null, as Spark's read gives
    assert events.pandas(t0, since=t0 - timedelta(seconds=0.1))["user_id"].tolist() == [2]
    with pytest.raises(Exception, match="no events"):
        events.training(t0 - timedelta(days=1))
