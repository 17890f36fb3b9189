"""A stage's rows written from the driver with ``deltalake`` leave the table Spark's write would.

``Table.collect`` hands a stage's rows to ``deltalake`` (MERGE on the newer-run rule, or one run's
replacement) when the engine rule takes them to the driver (``storage.driver_max_rows``); Spark writes them
otherwise and when ``deltalake`` refuses the table. Both engines must leave the same rows, partition
values Spark can prune and delete on, and the same idempotent reruns.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from solaris.config import StorageConfig
from solaris.storage.driver_engine import DriverEngine
from solaris.storage.spark_engine import SparkEngine
from solaris.storage.table import COLLECT, WRITE_RULES, Table, WriteRule

T = datetime(2000, 12, 1, 3)
PAIRS = ("user_id long, item_id long, embedding binary, fm_score float, run_id string, computed_at timestamp, "
         "expires_at timestamp, expiry_bucket timestamp")


def _pairs(spark, keys, score: float, computed_at: datetime, run_id: str):
    """Rows shaped like ``pair_embeddings`` (a timestamp partition column, binary embeddings)."""
    expires = computed_at + timedelta(hours=6)
    bucket = expires.replace(minute=0, second=0, microsecond=0)
    return spark.createDataFrame(
        [(user, item, bytes([user % 256, item % 256]) * 4, score + user, run_id, computed_at, expires, bucket)
         for user, item in keys], PAIRS)


def _table(spark, path, rule: WriteRule = WRITE_RULES["pair_embeddings"], bound: int = 1000) -> Table:
    return Table.at(path, spark=spark, storage=StorageConfig(driver_max_rows=bound), rule=rule)


def _merge(spark, path, frame, *, driver: bool, keys=("user_id", "item_id"), partition_by=("expiry_bucket",)):
    """Merge by the newer-run rule; ``driver``: rows collected (deltalake writes them), else Spark's MERGE."""
    rule = WriteRule("merge_newer", keys=keys, partition_by=partition_by)
    _table(spark, path, rule).write(frame, "", rows=COLLECT if driver else None)


def _replace_run(spark, path, frame, run_id, *, driver: bool, partition_by=()):
    _table(spark, path, WriteRule("replace_run", partition_by=partition_by)).write(
        frame, run_id, rows=COLLECT if driver else None)


def _last_writer(path) -> str:
    """The engine of the table's latest commit (``delta-rs:...`` or ``Apache-Spark/...``)."""
    from deltalake import DeltaTable

    return str(DeltaTable(path).history(1)[0].get("engineInfo", ""))


def _content(spark, path):
    return sorted(tuple(row) for row in spark.read.format("delta").load(path).collect())


def _merge_rounds(spark, path, with_driver: bool):
    rounds = [
        (_pairs(spark, [(1, 1), (1, 2), (2, 1)], 1.0, T, "run-1")),
        (_pairs(spark, [(1, 1), (1, 2), (2, 1)], 9.0, T, "run-1")),  # a rerun: untouched
        (_pairs(spark, [(1, 2), (3, 3)], 2.0, T + timedelta(hours=1), "run-2")),  # newer: replaces, inserts
        (_pairs(spark, [(1, 2)], 0.5, T, "run-0")),  # a late older run: no effect
    ]
    for frame in rounds:
        _merge(spark, path, frame, driver=with_driver)


def test_a_driver_merge_leaves_what_spark_s_merge_leaves_and_spark_prunes_and_deletes_its_partitions(
        spark, tmp_path, monkeypatch):
    by_spark, by_driver = str(tmp_path / "spark"), str(tmp_path / "driver")
    _merge_rounds(spark, by_spark, with_driver=False)
    monkeypatch.setattr(SparkEngine, "ensure_table", lambda *args: pytest.fail("Spark wrote instead of deltalake"))
    _merge_rounds(spark, by_driver, with_driver=True)
    monkeypatch.undo()

    assert _content(spark, by_driver) == _content(spark, by_spark)
    assert [row[4] for row in _content(spark, by_driver)] == ["run-1", "run-2", "run-1", "run-2"]
    from deltalake import DeltaTable

    assert DeltaTable(by_driver).metadata().partition_columns == ["expiry_bucket"]
    # expire's DELETE prunes on the timestamp partition: both engines' partition values compare alike
    cutoff = "TIMESTAMP '2000-12-01 09:30:00'"
    for path in (by_spark, by_driver):
        assert spark.read.format("delta").load(path).where(f"expiry_bucket <= {cutoff}").count() == 2
        from delta.tables import DeltaTable as SparkDelta

        SparkDelta.forPath(spark, path).delete(f"expiry_bucket <= {cutoff}")
    assert _content(spark, by_driver) == _content(spark, by_spark) and len(_content(spark, by_driver)) == 2


def test_a_driver_merge_into_a_table_spark_created_then_spark_merges_again(spark, tmp_path):
    """Warehouses from before hold Spark-created tables; a large write still goes through Spark."""
    path, reference = str(tmp_path / "mixed"), str(tmp_path / "reference")
    first = _pairs(spark, [(1, 1), (2, 2)], 1.0, T, "run-1")
    second = _pairs(spark, [(2, 2), (4, 4)], 2.0, T + timedelta(hours=1), "run-2")
    third = _pairs(spark, [(4, 4), (5, 5)], 3.0, T + timedelta(hours=2), "run-3")
    for frame, driver, engine in ((first, False, "Apache-Spark"), (second, True, "delta-rs"),
                                  (third, False, "Apache-Spark")):
        _merge(spark, path, frame, driver=driver)
        assert _last_writer(path).startswith(engine)
    for frame in (first, second, third):
        _merge(spark, reference, frame, driver=False)
    assert _content(spark, path) == _content(spark, reference)


def test_a_driver_replacement_replaces_only_its_run_like_spark_s_replace_where(spark, tmp_path):
    by_spark, by_driver = str(tmp_path / "spark"), str(tmp_path / "driver")
    runs = [("r1", 3, "a"), ("r2", 2, "b"), ("r1", 1, "c")]  # r1 rerun with other rows
    for path, with_driver in ((by_spark, False), (by_driver, True)):
        for run_id, n, tag in runs:
            frame = spark.createDataFrame([(run_id, i, tag, T.date()) for i in range(n)],
                                          "run_id string, n long, tag string, run_date date")
            _replace_run(spark, path, frame, run_id, driver=with_driver, partition_by=("run_date",))
            assert _last_writer(path).startswith("delta-rs" if with_driver else "Apache-Spark")
    assert _content(spark, by_driver) == _content(spark, by_spark)
    assert sorted((row[0], row[2]) for row in _content(spark, by_driver)) == [("r1", "c"), ("r2", "b"), ("r2", "b")]


def test_driver_rows_are_left_to_spark_beyond_the_bound(spark, tmp_path):
    def collect(frame, bound: int, expected_rows=None):
        return _table(spark, str(tmp_path / "t"), bound=bound).collect(frame, expected_rows)

    frame = spark.range(5).selectExpr("id AS user_id", "id AS item_id")
    assert collect(frame, 5).num_rows == 5
    assert collect(frame, 4) is None  # collected, found too many: Spark writes
    assert collect(frame, 0) is None  # bound 0: always Spark
    assert collect(frame.where("raise_error('collected') IS NULL"), 10, expected_rows=11) is None  # not collected
    shuffled = spark.range(40).selectExpr("id % 7 AS user_id", "id AS item_id").repartition(4)
    ordered = collect(shuffled, 100)  # the rule's order (user_id, item_id): the file's, whatever Spark's
    assert list(zip(ordered.column("user_id").to_pylist(), ordered.column("item_id").to_pylist())) == \
        sorted((n % 7, n) for n in range(40))


def test_spark_writes_when_deltalake_refuses_the_table_but_a_lost_race_is_raised(spark, tmp_path, monkeypatch):
    from deltalake.exceptions import CommitFailedError

    path = str(tmp_path / "refused")
    frame = _pairs(spark, [(1, 1)], 1.0, T, "run-1")

    def refuse(*args, **kwargs):
        raise NotImplementedError("a table feature this writer lacks")

    monkeypatch.setattr(DriverEngine, "merge_newer", staticmethod(refuse))
    _merge(spark, path, frame, driver=True, partition_by=())
    assert len(_content(spark, path)) == 1 and _last_writer(path).startswith("Apache-Spark")
    replaced = str(tmp_path / "replaced")
    import deltalake

    monkeypatch.setattr(deltalake, "write_deltalake", refuse)
    _replace_run(spark, replaced, frame, "run-1", driver=True)
    assert len(_content(spark, replaced)) == 1 and _last_writer(replaced).startswith("Apache-Spark")

    def lose(*args, **kwargs):
        raise CommitFailedError("Transaction failed: a concurrent transaction deleted the same data")

    monkeypatch.setattr(DriverEngine, "merge_newer", staticmethod(lose))
    with pytest.raises(CommitFailedError):
        _merge(spark, path, frame, driver=True, partition_by=())


def test_driver_writes_checkpoint_the_log_at_spark_s_interval_and_spark_reads_from_it(spark, tmp_path):
    import json
    from pathlib import Path

    path = str(tmp_path / "checkpointed")
    for hour in range(12):
        frame = _pairs(spark, [(hour % 3, 1)], float(hour), T + timedelta(hours=hour), f"run-{hour}")
        _merge(spark, path, frame, driver=True)
    assert _last_writer(path).startswith("delta-rs")
    log_dir = Path(path) / "_delta_log"
    assert json.loads((log_dir / "_last_checkpoint").read_text())["version"] == 10
    assert (log_dir / f"{10:020d}.checkpoint.parquet").exists()
    assert sorted((row[0], row[3]) for row in _content(spark, path)) == [(0, 9.0), (1, 11.0), (2, 13.0)]


def test_a_table_deltalake_creates_has_the_columns_spark_would_create(spark, tmp_path):
    """Literal columns are non-nullable in Spark's frame; Spark's writes store every column nullable."""
    from deltalake import DeltaTable
    from pyspark.sql import functions as F

    frame = _pairs(spark, [(1, 1)], 1.0, T, "run-1").withColumn("run_id", F.lit("run-1"))
    by_spark, by_driver = str(tmp_path / "spark"), str(tmp_path / "driver")
    _merge(spark, by_spark, frame, driver=False)
    _merge(spark, by_driver, frame, driver=True)
    assert _last_writer(by_driver).startswith("delta-rs") and _last_writer(by_spark).startswith("Apache-Spark")
    assert DeltaTable(by_driver).schema().to_json() == DeltaTable(by_spark).schema().to_json()


def test_a_small_table_read_on_the_driver_is_the_frame_spark_s_reader_gives(spark, tmp_path, make_config):
    """``Table.frame``: the same columns, types and rows (all, or those servable at an as-of) whether
    ``deltalake`` reads it on the driver or Spark reads it (beyond ``storage.driver_max_rows``)."""
    config = make_config()
    path = config.table_path("pair_embeddings")
    _merge(spark, path, _pairs(spark, [(1, 10), (2, 20)], 0.5, T, "r1"), driver=False)
    _merge(spark, path, _pairs(spark, [(2, 20), (3, 30)], 0.7, T + timedelta(hours=5), "r2"), driver=True)
    on_driver = Table.of(spark, config, "pair_embeddings")
    with_spark = Table.of(spark, make_config("storage.driver_max_rows=1"), "pair_embeddings")
    for kwargs in ({}, {"servable_at": T + timedelta(hours=5)}, {"servable_at": T + timedelta(hours=8)}):
        mine, theirs = on_driver.frame(**kwargs), with_spark.frame(**kwargs)
        assert mine.schema.simpleString() == theirs.schema.simpleString(), kwargs
        assert sorted(map(tuple, mine.collect())) == sorted(map(tuple, theirs.collect())), kwargs
    assert on_driver.frame(servable_at=T + timedelta(hours=8)).count() == 2  # r1's (1, 10) expired at T + 6 h
    assert on_driver.frame(["user_id"]).columns == ["user_id"]
