"""The ``runs`` audit: rows of an in-process cycle are held back and written in one commit."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from solaris.storage.audit import RunRecord
from solaris.storage.table import Table

AS_OF = datetime(2026, 1, 10, 12, 0, tzinfo=timezone.utc)


def test_a_tick_writes_every_audit_row_in_one_commit_also_when_a_stage_fails(spark, make_config):
    from solaris.pipeline import open_tick

    config = make_config()
    spark.createDataFrame([(1, 10, AS_OF.replace(tzinfo=None), 1.0)], "user_id long, item_id long, ts timestamp, "
                          "label double").write.format("delta").save(config.table_path("events"))
    path = config.table_path("runs")
    with pytest.raises(RuntimeError, match="stage failed"):
        with open_tick(spark, config, AS_OF) as tick:
            RunRecord(run_id="r1", job="candidates", as_of=None, rows_out=5).write(spark, config, "success", tick)
            first = RunRecord(run_id="r1", job="score", as_of=None, rows_out=1)
            first.write(spark, config, "success", tick)
            assert not Table.at(path, spark=spark).exists()  # held back until the block ends
            RunRecord(run_id="r1", job="score", as_of=None, rows_out=2).write(spark, config, "refused", tick)
            raise RuntimeError("stage failed")
    rows = {(r.run_id, r.job): (r.status, r.rows_out) for r in spark.read.format("delta").load(path).collect()}
    assert rows == {("r1", "candidates"): ("success", 5), ("r1", "score"): ("refused", 2)}  # the last row of a job wins
    assert Table.at(path).version() == 1  # created empty (version 0), then the block's rows: one commit
    assert tick.frames == {}  # the tick's events were released too

    RunRecord(run_id="r2", job="candidates", as_of=None).write(spark, config, "success")  # outside a block: at once
    assert Table.at(path).version() == 2
    # a rerun's row replaces the earlier one of its (run_id, job), the other keys are untouched
    RunRecord(run_id="r1", job="score", as_of=None, rows_out=7).write(spark, config, "success")
    rows = sorted((r.run_id, r.job, r.status, r.rows_out) for r in spark.read.format("delta").load(path).collect())
    assert rows == [("r1", "candidates", "success", 5), ("r1", "score", "success", 7),
                    ("r2", "candidates", "success", 0)]
    assert Table.at(path).version() == 3
    assert Table.of(spark, config, "events").version() == 0  # the test's own events: the audit wrote none


def _write_rounds(warehouse: str, writer: str, rounds: int, barrier) -> None:
    """One of two processes writing the same (run_id, job) keys at the same moments, round by round."""
    from solaris.config import load_config
    from tests.world import TEST_OVERRIDES

    config = load_config(overrides=[*TEST_OVERRIDES, f"warehouse={warehouse}"])
    for round_ in range(rounds):
        barrier.wait(timeout=120)
        for job in ("candidates", "score"):
            record = RunRecord(run_id=f"r{round_}", job=job, as_of=None, details={"writer": writer})
            record.write(None, config, "success")  # no Spark: deltalake writes it


def test_two_processes_writing_the_same_keys_at_once_leave_one_row_per_key(spark, make_config):
    import multiprocessing

    config = make_config()
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    rounds = 8
    writers = [context.Process(target=_write_rounds, args=(str(config.warehouse), name, rounds, barrier))
               for name in ("a", "b")]
    for process in writers:
        process.start()
    for process in writers:
        process.join(timeout=300)
    assert [process.exitcode for process in writers] == [0, 0]  # a lost commit race is retried, not raised
    rows = [(r.run_id, r.job) for r in spark.read.format("delta").load(config.table_path("runs")).collect()]
    assert sorted(rows) == sorted({(f"r{n}", job) for n in range(rounds) for job in ("candidates", "score")})


def test_the_audit_falls_back_to_spark_when_deltalake_cannot_write_the_table(spark, make_config, monkeypatch):
    from solaris.storage.driver_engine import DriverEngine

    config = make_config()
    RunRecord(run_id="r1", job="score", as_of=None, rows_out=1).write(spark, config, "success")

    def refuse(*args):
        raise NotImplementedError("a table feature this writer lacks")

    monkeypatch.setattr(DriverEngine, "replace", staticmethod(refuse))
    RunRecord(run_id="r1", job="score", as_of=None, rows_out=2).write(spark, config, "success")  # a rerun
    RunRecord(run_id="r2", job="score", as_of=None, rows_out=3).write(spark, config, "success")
    rows = sorted((r.run_id, r.rows_out) for r in spark.read.format("delta").load(config.table_path("runs")).collect())
    assert rows == [("r1", 2), ("r2", 3)]


def test_deltalake_writes_into_a_runs_table_spark_created(spark, make_config, monkeypatch):
    """Warehouses from before the audit moved to deltalake hold a `runs` table Spark created."""
    from datetime import datetime, timezone

    from solaris.storage import audit
    from solaris.storage.spark_engine import SparkEngine

    config = make_config()
    path = config.table_path("runs")
    now = datetime(2000, 12, 1, tzinfo=timezone.utc)
    old_row = ("r0", "score", now, now, now, 1, 1, 0, "success", {"pair_embeddings": 3}, "{}")
    SparkEngine(spark).replace_where(spark.createDataFrame([old_row], audit._runs_schema()), path, "run_id = 'r0'")

    def no_spark(*args, **kwargs):
        raise AssertionError("deltalake refused a Spark-created runs table")

    monkeypatch.setattr(SparkEngine, "replace_where", no_spark)
    RunRecord(run_id="r1", job="score", as_of=now, rows_out=2, table_versions={"pair_embeddings": 4}).write(
        spark, config, "success")
    RunRecord(run_id="r0", job="score", as_of=now, rows_out=5).write(spark, config, "success")  # a rerun of r0
    rows = sorted((r.run_id, r.rows_out, dict(r.table_versions), r.as_of)
                  for r in spark.read.format("delta").load(path).collect())
    assert [row[:3] for row in rows] == [("r0", 5, {}), ("r1", 2, {"pair_embeddings": 4})]
    assert rows[0][3] == rows[1][3] == now.replace(tzinfo=None)  # the session's UTC time, as Spark wrote it
