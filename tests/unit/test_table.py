"""The table interface: each tick table's write rule, stated once, and the engine rule of a write.

No Spark: the two engines' writes are replaced by recorders, so what is checked is which engine and
primitive a stage's ``Table.write`` reaches and with which keys, partitions and rows (the engines
themselves run against real Delta in the integration tests).
"""

from __future__ import annotations

import pytest

from solaris.config import SolarisConfig, StorageConfig
from solaris.storage.driver_engine import DriverEngine
from solaris.storage.spark_engine import SparkEngine
from solaris.storage.table import COLLECT, WRITE_RULES, Table, WriteRule


@pytest.fixture()
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    recorded: list[tuple] = []

    def recorder(name: str, result: object = None, bound: bool = True):
        def record(*args, **kwargs):
            recorded.append((name, args[1:] if bound else args, kwargs))
            return result
        return record

    monkeypatch.setattr(SparkEngine, "merge_newer", recorder("merge"))
    monkeypatch.setattr(SparkEngine, "replace_where", recorder("replace"))
    monkeypatch.setattr(SparkEngine, "overwrite", recorder("overwrite"))
    monkeypatch.setattr(SparkEngine, "upsert", recorder("merge_into"))
    monkeypatch.setattr(SparkEngine, "insert_new", recorder("insert_new"))
    monkeypatch.setattr(DriverEngine, "merge_newer", staticmethod(recorder("merge_rows", bound=False)))
    monkeypatch.setattr(DriverEngine, "replace_run", staticmethod(recorder("replace_rows", bound=False)))
    monkeypatch.setattr(DriverEngine, "replace", staticmethod(recorder("upsert_rows", bound=False)))
    monkeypatch.setattr(Table, "collect", recorder("collect", result="ROWS"))
    monkeypatch.setattr(Table, "_spark_of", lambda self, frame: SparkEngine(None))  # type: ignore[arg-type]
    monkeypatch.setattr(Table, "_spark", lambda self: SparkEngine(None))  # type: ignore[arg-type]
    return recorded


def _table(name: str, max_rows: int = 100) -> Table:
    return Table(spark=None, name=name, path=f"/w/{name}", rule=WRITE_RULES[name],
                 storage=StorageConfig(driver_max_rows=max_rows))


def test_every_rule_names_a_table_of_the_config_and_a_merge_has_its_key(tmp_path) -> None:
    config = SolarisConfig(warehouse=tmp_path)
    for name, rule in WRITE_RULES.items():
        assert config.table_path(name).startswith(str(tmp_path))
        assert rule.kind in ("merge_newer", "replace_run", "replace_where", "overwrite", "upsert", "insert_new")
        assert bool(rule.keys) == (rule.kind in ("merge_newer", "upsert", "insert_new")), name
    for kind in ("merge_newer", "upsert", "insert_new"):
        with pytest.raises(ValueError, match="key columns"):
            WriteRule(kind)  # type: ignore[arg-type]
    # ingest's tables and the audit tables are written through the interface too
    assert {"events", "id_map", "quarantine", "runs"} <= WRITE_RULES.keys()


def test_a_merge_table_collects_in_its_order_then_merges_on_its_key(calls: list[tuple]) -> None:
    _table("pair_embeddings").write("FRAME", "run-1", expected_rows=7)  # type: ignore[arg-type]
    (collect, collect_args, _), (merge, merge_args, _) = calls
    assert collect == "collect" and collect_args == ("FRAME", 7)
    assert merge == "merge_rows"  # collected: deltalake merges them
    assert merge_args == ("ROWS", "/w/pair_embeddings", ["user_id", "item_id"], ["expiry_bucket"])


def test_a_per_run_table_replaces_the_run_and_given_rows_are_not_collected_again(calls: list[tuple]) -> None:
    _table("pair_embeddings_log").write("FRAME", "run-1", rows="SHARED")  # type: ignore[arg-type]
    assert calls == [("replace_rows", ("SHARED", "/w/pair_embeddings_log", "run-1", ["computed_date"]), {})]
    calls.clear()
    _table("candidates").write("FRAME", "run-2", rows=None)  # type: ignore[arg-type]  # None: Spark writes
    assert calls == [("replace", ("FRAME", "/w/candidates", "run_id = 'run-2'", ["run_date"]), {})]
    calls.clear()
    _table("candidates").write("FRAME", "run-3", rows=COLLECT)  # type: ignore[arg-type]  # the default, spelt out
    assert [name for name, _, _ in calls] == ["collect", "replace_rows"] and calls[1][1][0] == "ROWS"


def test_a_driver_write_deltalake_refuses_is_redone_by_spark(calls: list[tuple], monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise ValueError("a table feature deltalake lacks")

    monkeypatch.setattr(DriverEngine, "merge_newer", staticmethod(refuse))
    _table("user_embeddings").write("FRAME", "run-1", rows="ROWS")  # type: ignore[arg-type]
    assert calls == [("merge", ("FRAME", "/w/user_embeddings", ["user_id"], []), {})]


def test_driver_rows_go_to_a_merge_table_only_and_a_table_without_a_rule_refuses_writes(calls: list[tuple]) -> None:
    _table("imputed_item_embeddings").write_rows("ARROW")
    assert calls == [("merge_rows", ("ARROW", "/w/imputed_item_embeddings", ["item_id"], []), {})]
    with pytest.raises(ValueError, match="only merge_newer"):
        _table("candidates").write_rows("ARROW")
    unknown = Table(spark=None, name="other", path="/w/other", rule=None)
    with pytest.raises(ValueError, match="no write rule"):
        unknown.write("FRAME", "run-1")  # type: ignore[arg-type]


def test_events_are_insert_only_on_their_key(calls: list[tuple]) -> None:
    """Events are immutable and the stream reads the table's appends: an insert-only MERGE (Spark)."""
    assert WRITE_RULES["events"].kind == "insert_new"
    _table("events").write("FRAME", "ingest-1")  # type: ignore[arg-type]
    assert calls == [("insert_new", ("FRAME", "/w/events", ["event_id"], ["event_date"]), {})]  # nothing collected
    with pytest.raises(ValueError, match="not by an upsert"):
        _table("events").upsert_rows("ARROW", lambda: None)  # type: ignore[arg-type]


def test_an_upsert_table_merges_on_its_key_and_takes_driver_rows_as_an_upsert(calls: list[tuple]) -> None:
    _table("id_map").write("FRAME", "ingest-1")  # type: ignore[arg-type]
    assert calls == [("merge_into", ("FRAME", "/w/id_map", ["namespace", "raw_id"], []), {})]  # nothing collected
    calls.clear()
    fallback = object()
    import pyarrow as pa

    rows = pa.table({"run_id": ["r1"], "job": ["score"]})
    _table("runs").upsert_rows(rows, fallback)  # type: ignore[arg-type]
    assert calls == [("upsert_rows", (rows, "/w/runs", "(run_id = 'r1' AND job = 'score')", []), {})]
    with pytest.raises(ValueError, match="not by an upsert"):
        _table("candidates").upsert_rows("ARROW", fallback)  # type: ignore[arg-type]


def test_current_state_is_overwritten_whole_and_a_predicate_table_only_takes_a_predicate(calls: list[tuple]) -> None:
    _table("user_neighbors").write("FRAME", "run-1")  # type: ignore[arg-type]
    assert calls == [("overwrite", ("FRAME", "/w/user_neighbors"), {})]  # nothing collected
    calls.clear()
    _table("item_statistics").replace_where("FRAME", "stats_key IN ('a')")  # type: ignore[arg-type]
    assert calls == [("replace", ("FRAME", "/w/item_statistics", "stats_key IN ('a')", ["stats_key"]), {})]
    with pytest.raises(ValueError, match="replace_where"):
        _table("item_statistics").write("FRAME", "run-1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not by a predicate"):
        _table("candidates").replace_where("FRAME", "true")  # type: ignore[arg-type]


def test_a_delete_bounded_below_every_live_row_runs_no_spark_job(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing at or below the bound (from the log's statistics): no DELETE is issued; a bound that a
    row reaches issues one."""
    from datetime import datetime, timedelta, timezone

    import pyarrow as pa
    from deltalake import write_deltalake

    deletes: list[str] = []
    monkeypatch.setattr(SparkEngine, "delete", lambda self, path, predicate: deletes.append(predicate))
    t0 = datetime(2026, 1, 8, tzinfo=timezone.utc)
    path = str(tmp_path / "pair_embeddings")
    write_deltalake(path, pa.table({"expires_at": pa.array([t0 + timedelta(hours=3)], pa.timestamp("us", "UTC"))}))
    table = Table(spark=lambda: None, name="pair_embeddings", path=path,  # type: ignore[arg-type, return-value]
                  rule=WRITE_RULES["pair_embeddings"])
    assert table.delete_where("expires_at <= TIMESTAMP '2026-01-08 02:00:00'", bounded_by=("expires_at", t0)) == 0
    assert deletes == []
    table.delete_where("expires_at <= TIMESTAMP '2026-01-08 03:00:00'",
                       bounded_by=("expires_at", t0 + timedelta(hours=3)))
    assert len(deletes) == 1 and "2026-01-08 03:00:00" in deletes[0]


def test_upsert_rows_replaces_the_rows_of_their_keys_in_one_commit_and_refuses_other_keys(tmp_path) -> None:
    """The driver upsert (the ``runs`` audit's write), on a real ``deltalake`` table: a key's row is
    replaced, other keys are kept, new keys are added, a quote in a key is no injection; Spark's
    fallback frame is not built while ``deltalake`` writes."""
    import pyarrow as pa
    from deltalake import DeltaTable

    def no_spark():
        raise AssertionError("deltalake refused the table")

    path = str(tmp_path / "runs")
    runs = Table.at(path, rule=WRITE_RULES["runs"])
    runs.upsert_rows(pa.table({"run_id": ["r1", "r1", "r'2"], "job": ["score", "knn", "score"], "n": [1, 2, 3]}),
                     no_spark)
    runs.upsert_rows(pa.table({"run_id": ["r1", "r3"], "job": ["score", "score"], "n": [10, 4]}), no_spark)
    table = DeltaTable(path)
    assert table.version() == 2  # the creation, then one commit per upsert
    rows = sorted(tuple(row.values()) for row in table.to_pyarrow_table().to_pylist())
    assert rows == [("r'2", "score", 3), ("r1", "knn", 2), ("r1", "score", 10), ("r3", "score", 4)]
    with pytest.raises(TypeError, match="must be strings"):
        runs.upsert_rows(pa.table({"run_id": [1], "job": ["score"], "n": [1]}), no_spark)
