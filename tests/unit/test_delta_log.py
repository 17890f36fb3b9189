"""Answers read from a Delta table's log instead of a Spark job: row counts, "may a file hold it", commit metrics,
a run's rows."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from solaris.config import StorageConfig
from solaris.storage.delta_log import DeltaLog
from solaris.storage.driver_engine import DriverEngine
from solaris.storage.table import Table


def _runs(*run_ids: str) -> pa.Table:
    return pa.table({"run_id": pa.array(list(run_ids), pa.string()),
                     "value": pa.array(range(len(run_ids)), pa.int64())})


def test_row_count_comes_from_the_file_statistics(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, _runs("precompute-a", "precompute-b"))
    write_deltalake(path, _runs("precompute-c", "precompute-c", "precompute-d"), mode="append")
    assert Table.at(path).row_count() == 5
    DeltaTable(path).delete("run_id = 'precompute-c'")
    assert Table.at(path).row_count() == 3


def test_a_pinned_version_is_counted_and_read_as_it_was(tmp_path):
    """What publish pins: the row count of version 0 from its log and its rows, after later commits."""
    import pyarrow.compute as pc

    path = str(tmp_path / "t")
    write_deltalake(path, _runs("precompute-a", "precompute-b"))
    write_deltalake(path, _runs("precompute-c", "precompute-d", "precompute-e"), mode="append")
    DeltaTable(path).delete("run_id = 'precompute-a'")
    assert [DeltaLog(path).row_count(version) for version in (0, 1, 2)] == [2, 5, 4]
    assert DeltaLog(path).row_count() == 4
    assert Table.at(path).rows(["run_id"], version=0).column("run_id").to_pylist() == ["precompute-a", "precompute-b"]
    kept = DriverEngine.read(path, ["value"], pc.field("value") >= 1, version=1)
    assert sorted(kept.column("value").to_pylist()) == [1, 1, 2]


def test_may_hold_is_false_only_when_no_file_range_contains_the_value(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, _runs("precompute-b", "precompute-d"))
    write_deltalake(path, _runs("precompute-m", "precompute-p"), mode="append")
    assert DeltaLog(path).may_hold("run_id", "precompute-c")  # inside the first file's range: maybe
    assert DeltaLog(path).may_hold("run_id", "precompute-p")
    assert not DeltaLog(path).may_hold("run_id", "precompute-a")
    assert not DeltaLog(path).may_hold("run_id", "precompute-f")  # between the two files' ranges
    assert not DeltaLog(path).may_hold("run_id", "precompute-z")
    DeltaTable(path).delete("run_id >= 'precompute-m'")
    assert not DeltaLog(path).may_hold("run_id", "precompute-p")  # removed files no longer count
    assert DeltaLog(path).may_hold("run_id", "precompute-b")
    assert DeltaLog(path).may_hold("no_such_column", "x")  # no statistics: cannot rule it out


def test_none_at_or_below_only_when_every_live_file_s_minimum_is_above_the_bound(tmp_path):
    """What lets the hourly expiry skip a DELETE that cannot match: decided from the log alone."""
    path = str(tmp_path / "t")
    t0 = datetime(2026, 1, 8, tzinfo=timezone.utc)

    def stamps(*hours: int) -> pa.Table:
        return pa.table({"expires_at": pa.array([t0 + timedelta(hours=h) for h in hours], pa.timestamp("us", "UTC"))})

    write_deltalake(path, stamps(3, 5))
    write_deltalake(path, stamps(4, 9), mode="append")
    assert DeltaLog(path).none_at_or_below("expires_at", t0 + timedelta(hours=2, minutes=59))
    assert not DeltaLog(path).none_at_or_below("expires_at", t0 + timedelta(hours=3))  # a row exactly at the bound
    assert not DeltaLog(path).none_at_or_below("expires_at", t0 + timedelta(hours=4))
    DeltaTable(path).delete(f"expires_at <= '{(t0 + timedelta(hours=3)).isoformat()}'")  # rewrites file 1
    # removed rows no longer count
    assert DeltaLog(path).none_at_or_below("expires_at", t0 + timedelta(hours=3, minutes=30))
    assert not DeltaLog(path).none_at_or_below("no_such_column", t0)  # no statistics: cannot rule it out
    DeltaTable(path).delete("true")
    assert DeltaLog(path).none_at_or_below("expires_at", t0 + timedelta(days=9))  # no live file: nothing to delete


def test_a_local_table_s_existence_is_read_from_its_log_without_spark(tmp_path):
    """No Spark session here (None): a local folder is answered by deltalake alone."""
    path = tmp_path / "t"
    assert not Table.at(str(path)).exists()  # nothing there yet
    path.mkdir()
    (path / "part-0.parquet").write_bytes(b"")
    assert not Table.at(str(path)).exists()  # a folder, but no Delta log
    write_deltalake(str(path / "x"), _runs("precompute-a"))
    assert Table.at(str(path / "x")).exists()


def test_a_small_local_table_is_read_on_the_driver_and_a_larger_or_remote_one_is_left_to_spark(tmp_path):
    """``Table.frame``: a local table within ``storage.driver_max_rows`` (the log's count) is read by
    deltalake and handed to Spark as Arrow; a larger, missing or remote one is Spark's scan."""
    path = str(tmp_path / "t")
    write_deltalake(path, _runs("precompute-a", "precompute-b"))
    write_deltalake(path, _runs("precompute-c"), mode="append")
    spark = _SparkReturning(pa.table({"from": ["spark"]}))

    def frame(where: str, bound: int, **kwargs):
        return Table.at(where, spark=spark, storage=StorageConfig(driver_max_rows=bound)).frame(**kwargs)  # type: ignore[arg-type]

    rows = frame(path, 3, columns=["run_id"])
    assert spark.created and rows is spark  # read on the driver, handed to Spark
    assert spark.created[-1].column_names == ["run_id"] and spark.created[-1].num_rows == 3
    for where, bound in ((path, 2), ("s3://bucket/t", 10), (str(tmp_path / "missing"), 10), (path, 0)):
        spark.created.clear()
        assert frame(where, bound) is spark and not spark.created, (where, bound)  # Spark's scan


def test_commit_metrics_sum_only_the_named_operation_after_the_version(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, _runs("a", "b", "c"))
    before = DeltaTable(path).version()
    assert DeltaLog(path).commit_metrics(before, "DELETE") == {}
    write_deltalake(path, _runs("d"), mode="append")
    DeltaTable(path).delete("run_id = 'a'")
    metrics = DeltaLog(path).commit_metrics(before, "DELETE")
    assert metrics and all(isinstance(value, int) for value in metrics.values())
    assert DeltaLog(path).commit_metrics(DeltaTable(path).version(), "DELETE") == {}


def test_stored_partitions_are_those_of_live_files(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, _runs("a", "b", "b"), partition_by=["run_id"])
    assert DeltaLog(path).partitions("run_id") == {"a", "b"}
    DeltaTable(path).delete("run_id = 'a'")
    assert DeltaLog(path).partitions("run_id") == {"b"}
    DeltaTable(path).delete("run_id = 'b'")
    assert DeltaLog(path).partitions("run_id") == set()  # a table without live files holds none
    write_deltalake(path, _runs("c"), mode="append")
    with pytest.raises(ValueError, match="not partitioned by 'value'"):
        DeltaLog(path).partitions("value")


def test_a_run_s_rows_are_read_from_its_live_files_without_spark(tmp_path):
    path = str(tmp_path / "t")
    rows = lambda run_ids, day: pa.table({  # noqa: E731
        "run_id": pa.array(run_ids, pa.string()), "value": pa.array(range(len(run_ids)), pa.int64()),
        "day": pa.array([day] * len(run_ids), pa.string())})
    write_deltalake(path, rows(["r1", "r1", "r2"], "2000-12-01 00:00"), partition_by=["day"])  # escaped folder
    write_deltalake(path, rows(["r2", "r3"], "2000-12-02"), mode="append", partition_by=["day"])
    assert sorted(Table.at(path).run_rows("r2", ("value", "run_id")).column("value").to_pylist()) == [0, 2]
    assert Table.at(path).run_rows("r1").num_rows == 2
    DeltaTable(path).delete("run_id = 'r1'")  # rewritten and removed files no longer count
    assert Table.at(path).run_rows("r1").num_rows == 0 and Table.at(path).run_rows("r2").num_rows == 2
    empty = Table.at(path).run_rows("nope", ("value",))
    assert empty.num_rows == 0 and empty.column_names == ["value"]


class _SparkReturning:
    """Stands in for a SparkSession whose read chain (``read.format(...).load(...).where(...)
    .select(...).toArrow()``) returns ``table``, and which records the Arrow tables it is handed
    (``createDataFrame``): which engine a read took, without a JVM."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.created: list[pa.Table] = []

    def createDataFrame(self, rows: pa.Table) -> _SparkReturning:
        self.created.append(rows)
        return self

    @property
    def read(self):
        return self

    def __getattr__(self, name):
        return lambda *args, **kwargs: self if name != "toArrow" else self.table


def test_a_run_s_rows_come_from_spark_when_the_table_is_not_a_local_folder():
    fake = _SparkReturning(pa.table({"run_id": ["r"]}))
    assert Table.at("s3a://bucket/t", spark=fake).run_rows("r").num_rows == 1  # type: ignore[arg-type]


def test_a_run_s_rows_come_from_spark_for_a_partition_column_or_a_column_pyarrow_cannot_find(tmp_path):
    spark = _SparkReturning(pa.table({"day": ["from spark"]}))
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"run_id": ["r"], "day": ["d"], "value": [1]}), partition_by=["day"])
    assert Table.at(path, spark=spark).run_rows("r", ("day",)).column("day").to_pylist() == ["from spark"]
    assert Table.at(path, spark=spark).run_rows("r", ("no_such_column",)).column("day").to_pylist() == ["from spark"]
    assert Table.at(path, spark=spark).run_rows("r", ("value",)).column("value").to_pylist() == [1]


def test_servable_rows_are_those_computed_by_and_not_expired_at_the_as_of(tmp_path):
    path = str(tmp_path / "t")
    as_of = datetime(2000, 12, 1, 3, tzinfo=timezone.utc)
    hour = timedelta(hours=1)
    # (item, computed_at, expires_at): servable at the as-of are 1 (computed at it) and 4
    rows = [(1, as_of, as_of + hour), (2, as_of + hour, as_of + 2 * hour), (3, as_of - hour, as_of),
            (4, as_of - 2 * hour, as_of + hour), (5, as_of - 3 * hour, as_of - hour)]
    stamps = pa.timestamp("us", tz="UTC")
    write_deltalake(path, pa.table({"item_id": pa.array([r[0] for r in rows], pa.int64()),
                                    "computed_at": pa.array([r[1] for r in rows], stamps),
                                    "expires_at": pa.array([r[2] for r in rows], stamps)}))
    assert sorted(Table.at(path).servable_rows(as_of, ["item_id"]).column("item_id").to_pylist()) == [1, 4]
    naive = Table.at(path).servable_rows(as_of.replace(tzinfo=None), ["item_id", "expires_at"])  # read as UTC
    assert sorted(naive.column("item_id").to_pylist()) == [1, 4] and naive.column_names == ["item_id", "expires_at"]
    DeltaTable(path).delete("item_id = 4")  # removed rows are not servable
    assert Table.at(path).servable_rows(as_of, ["item_id"]).column("item_id").to_pylist() == [1]


def _item_rows(items: list[int], value: float, computed_at: datetime, run_id: str) -> pa.Table:
    stamps = pa.timestamp("us", tz="UTC")
    return pa.table({"item_id": pa.array(items, pa.int64()), "value": pa.array([value] * len(items), pa.float64()),
                     "computed_at": pa.array([computed_at] * len(items), stamps),
                     "run_id": pa.array([run_id] * len(items), pa.string())})


def _stored(path: str) -> dict[int, tuple[float, str]]:
    table = DeltaTable(path).to_pyarrow_dataset().to_table()
    return {item: (value, run) for item, value, run in zip(table["item_id"].to_pylist(), table["value"].to_pylist(),
                                                            table["run_id"].to_pylist())}


def test_driver_rows_merge_by_the_newer_run_rule(tmp_path):
    path = str(tmp_path / "t")
    t1 = datetime(2000, 12, 1, 1, tzinfo=timezone.utc)
    t2 = t1 + timedelta(hours=1)
    DriverEngine.merge_newer(_item_rows([1, 2], 1.0, t1, "run-1"), path, ["item_id"])  # creates the table
    DriverEngine.merge_newer(_item_rows([1, 2], 9.0, t1, "run-1"), path, ["item_id"])  # a rerun: untouched
    assert _stored(path) == {1: (1.0, "run-1"), 2: (1.0, "run-1")}
    DriverEngine.merge_newer(_item_rows([2, 3], 2.0, t2, "run-2"), path, ["item_id"])  # newer: replaces, inserts
    DriverEngine.merge_newer(_item_rows([2], 0.5, t1, "run-0"), path, ["item_id"])  # a late older run: no effect
    DriverEngine.merge_newer(_item_rows([3], 3.0, t2, "run-2b"), path, ["item_id"])  # same time, other run: replaces
    assert _stored(path) == {1: (1.0, "run-1"), 2: (2.0, "run-2"), 3: (3.0, "run-2b")}


def _merge_rounds(path: str, writer: int, rounds: int, barrier) -> None:
    t0 = datetime(2000, 12, 1, tzinfo=timezone.utc)
    for round_ in range(rounds):
        barrier.wait(timeout=120)
        # both writers merge the same items at once; the later computed_at must win whatever the commit order
        # plus an item neither wrote before: two concurrent inserts of one key must not leave two rows
        DriverEngine.merge_newer(_item_rows([*range(5), 100 + round_], float(writer),
                                         t0 + timedelta(hours=2 * round_ + writer), f"w{writer}-{round_}"),
                              path, ["item_id"])


def test_two_processes_merging_the_same_items_at_once_keep_one_row_each_the_newest(tmp_path):
    import multiprocessing

    path = str(tmp_path / "t")
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    rounds = 6
    writers = [context.Process(target=_merge_rounds, args=(path, writer, rounds, barrier)) for writer in (0, 1)]
    for process in writers:
        process.start()
    for process in writers:
        process.join(timeout=300)
    assert [process.exitcode for process in writers] == [0, 0]  # creation and commit races are redone, not raised
    table = DeltaTable(path).to_pyarrow_dataset().to_table()
    new_items = [100 + round_ for round_ in range(rounds)]
    assert sorted(table["item_id"].to_pylist()) == [*range(5), *new_items]  # one row per item
    assert _stored(path) == {**{item: (1.0, f"w1-{rounds - 1}") for item in range(5)},  # the newest run's rows
                             **{item: (1.0, f"w1-{item - 100}") for item in new_items}}


def test_only_a_concurrent_writer_s_commit_failure_counts_as_a_conflict():
    from deltalake.exceptions import CommitFailedError

    from solaris.storage.engine import is_commit_conflict as _is_commit_conflict

    assert _is_commit_conflict(CommitFailedError("Commit failed: a concurrent transactions added new data."))
    assert _is_commit_conflict(CommitFailedError("Commit failed: Metadata changed since last commit."))
    assert not _is_commit_conflict(CommitFailedError("Unsupported writer features required: [DeletionVectors]"))
    assert not _is_commit_conflict(ValueError("a concurrent thing, but not a commit"))


def test_audit_keys_with_quotes_and_backslashes_are_replaced_not_duplicated(tmp_path):
    from solaris.config import load_config
    from solaris.storage.audit import RunRecord

    config = load_config(overrides=[f"warehouse={tmp_path}"])
    for rows_out in (1, 2):  # a rerun of the same odd key replaces its row (no Spark: deltalake writes it)
        RunRecord(run_id="it's a \\ run", job="score", as_of=None, rows_out=rows_out).write(None, config, "success")
    table = DeltaTable(config.table_path("runs")).to_pyarrow_dataset().to_table()
    assert table["run_id"].to_pylist() == ["it's a \\ run"] and table["rows_out"].to_pylist() == [2]
