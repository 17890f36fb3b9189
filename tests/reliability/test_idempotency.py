"""Every job of the hourly cycle, rerun for the same run id / as-of, leaves every table unchanged.

"Unchanged" is measured as (row count, order-independent hash of every column) per table, plus the
``runs`` audit rows (ignoring their own timestamps) and what the resolver serves from the snapshot.
"""

from __future__ import annotations

import json

import numpy as np
from deltalake import DeltaTable

from solaris.pipeline import STAGE_NAMES
from solaris.serving.resolver import load_snapshot
from solaris.serving.snapshots import latest_manifest_path
from tests.reliability.conftest import CYCLE_TABLES, T0, checksums, hours, run_cycle


def _runs(config):
    """The audit rows (read on the driver, as the checksums are), their own timestamps left out."""
    columns = ["run_id", "job", "status", "rows_in", "rows_out", "rows_quarantined"]
    table = DeltaTable(config.table_path("runs")).to_pyarrow_table(columns=columns)
    return sorted(tuple(row[name] for name in columns) for row in table.to_pylist())


def _served(config, sample):
    tables = load_snapshot(latest_manifest_path(config.warehouse / "snapshots"))
    vectors, tiers, _ = tables.resolve(sample["user_id"], sample["item_id"], sample["ts"])
    return vectors, tiers


def test_rerunning_each_stage_changes_no_table(spark, fresh_world):
    config = fresh_world(source="pending")  # hour T0 served, T0+1h done up to publish
    as_of = T0 + hours(1)  # a second hour, so refresh/expiry paths hold real rows
    run_cycle(spark, config, as_of, stages=["publish"])
    before = checksums(spark, config)
    assert all(before[name] and before[name][0] > 0 for name in ("candidates", "pair_embeddings", "user_embeddings",
                                                                  "user_neighbors", "imputed_embeddings",
                                                                  "item_embeddings"))
    runs_before = _runs(config)
    events = spark.read.format("delta").load(config.table_path("events")).where(
        f"ts > TIMESTAMP '{as_of:%Y-%m-%d %H:%M:%S}'").limit(300).toPandas()
    users = spark.read.format("delta").load(config.table_path("user_neighbors")).select("user_id").limit(200).toPandas()
    sample = {"user_id": np.r_[events.user_id.to_numpy(), users.user_id.to_numpy()],
              "item_id": np.r_[events.item_id.to_numpy(), np.ones(len(users), dtype=np.int64)]}
    sample["ts"] = np.full(len(sample["user_id"]), (as_of + hours(0.5)).timestamp())
    served_before = _served(config, sample)
    manifest_before = json.loads(latest_manifest_path(config.warehouse / "snapshots").read_text())

    for stage in STAGE_NAMES:
        run_cycle(spark, config, as_of, stages=[stage])
        after = checksums(spark, config)
        changed = [name for name in CYCLE_TABLES if after[name] != before[name]]
        assert not changed, f"rerunning {stage} changed {changed}"
        assert _runs(config) == runs_before, f"rerunning {stage} changed the runs audit rows"

    vectors, tiers = _served(config, sample)
    np.testing.assert_array_equal(tiers, served_before[1])  # bit-exact: integer tiers
    # bit-exact: checksum-equal tables; the resolver copies their vectors
    np.testing.assert_array_equal(vectors, served_before[0])
    manifest_after = json.loads(latest_manifest_path(config.warehouse / "snapshots").read_text())
    assert manifest_after["snapshot_id"] == manifest_before["snapshot_id"]
    assert manifest_after["row_counts"] == manifest_before["row_counts"]
    assert manifest_after["coverage"] == manifest_before["coverage"]
    assert (tiers > 0).any() and len(set(tiers.tolist())) > 1
