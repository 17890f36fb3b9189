"""The ``runs`` audit: rows of an in-process cycle are held back and written in one commit."""

from __future__ import annotations

import pytest

from solaris.storage.tables import RunRecord, batched_audit, table_exists, table_version


def test_batched_audit_writes_every_row_in_one_commit_also_when_a_stage_fails(spark, make_config):
    config = make_config()
    path = config.table_path("runs")
    with pytest.raises(RuntimeError, match="stage failed"):
        with batched_audit(spark, config):
            RunRecord(run_id="r1", job="candidates", as_of=None, rows_out=5).write(spark, config, "success")
            first = RunRecord(run_id="r1", job="score", as_of=None, rows_out=1)
            first.write(spark, config, "success")
            assert not table_exists(spark, path)  # held back until the block ends
            RunRecord(run_id="r1", job="score", as_of=None, rows_out=2).write(spark, config, "refused")
            raise RuntimeError("stage failed")
    rows = {(r.run_id, r.job): (r.status, r.rows_out) for r in spark.read.format("delta").load(path).collect()}
    assert rows == {("r1", "candidates"): ("success", 5), ("r1", "score"): ("refused", 2)}  # the last row of a job wins
    assert table_version(spark, path) == 0  # created with the block's rows: one commit

    RunRecord(run_id="r2", job="candidates", as_of=None).write(spark, config, "success")  # outside a block: at once
    assert table_version(spark, path) == 1
    # a rerun's row replaces the earlier one of its (run_id, job), the other keys are untouched
    RunRecord(run_id="r1", job="score", as_of=None, rows_out=7).write(spark, config, "success")
    rows = sorted((r.run_id, r.job, r.status, r.rows_out) for r in spark.read.format("delta").load(path).collect())
    assert rows == [("r1", "candidates", "success", 5), ("r1", "score", "success", 7),
                    ("r2", "candidates", "success", 0)]
    assert table_version(spark, path) == 2
    assert table_version(spark, config.table_path("events")) is None
