"""The table interface: each tick table's write rule, stated once, and the engine rule of a write.

No Spark: the Delta primitives of solaris.storage.tables are replaced by recorders, so what is
checked is which primitive a stage's ``Table.write`` reaches and with which keys, partitions, order
and rows (the primitives themselves run against real Delta in the integration tests).
"""

from __future__ import annotations

import pytest

from solaris.config import SolarisConfig
from solaris.storage import table as table_module
from solaris.storage.table import COLLECT, WRITE_RULES, Table, WriteRule


@pytest.fixture()
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    recorded: list[tuple] = []

    def recorder(name: str, result: object = None):
        def record(*args, **kwargs):
            recorded.append((name, args, kwargs))
            return result
        return record

    monkeypatch.setattr(table_module, "merge_if_new_run", recorder("merge"))
    monkeypatch.setattr(table_module, "replace_run", recorder("replace"))
    monkeypatch.setattr(table_module, "merge_rows_if_new_run", recorder("merge_rows"))
    monkeypatch.setattr(table_module, "overwrite", recorder("overwrite"))
    monkeypatch.setattr(table_module, "replace_where", recorder("replace_where"))
    monkeypatch.setattr(table_module, "merge_into", recorder("merge_into"))
    monkeypatch.setattr(table_module, "upsert_rows", recorder("upsert_rows"))
    monkeypatch.setattr(table_module, "driver_rows", recorder("collect", result="ROWS"))
    return recorded


def _table(name: str, max_rows: int = 100) -> Table:
    return Table(spark=None, name=name, path=f"/w/{name}", rule=WRITE_RULES[name],  # type: ignore[arg-type]
                 driver_max_rows=max_rows)


def test_every_rule_names_a_table_of_the_config_and_a_merge_has_its_key(tmp_path) -> None:
    config = SolarisConfig(warehouse=tmp_path)
    for name, rule in WRITE_RULES.items():
        assert config.table_path(name).startswith(str(tmp_path))
        assert rule.kind in ("merge_newer", "replace_run", "replace_where", "overwrite", "upsert")
        assert bool(rule.keys) == (rule.kind in ("merge_newer", "upsert")), name
    for kind in ("merge_newer", "upsert"):
        with pytest.raises(ValueError, match="key columns"):
            WriteRule(kind)  # type: ignore[arg-type]
    # ingest's tables and the audit tables are written through the interface too
    assert {"events", "id_map", "quarantine", "runs"} <= WRITE_RULES.keys()


def test_a_merge_table_collects_in_its_order_then_merges_on_its_key(calls: list[tuple]) -> None:
    _table("pair_embeddings").write("FRAME", "run-1", expected_rows=7)  # type: ignore[arg-type]
    (collect, collect_args, _), (merge, merge_args, merge_kwargs) = calls
    assert collect == "collect" and collect_args == ("FRAME", 100, 7, ("user_id", "item_id"))
    assert merge == "merge"
    assert merge_args == ("FRAME", "/w/pair_embeddings", ["user_id", "item_id"], ["expiry_bucket"])
    assert merge_kwargs == {"rows": "ROWS"}


def test_a_per_run_table_replaces_the_run_and_given_rows_are_not_collected_again(calls: list[tuple]) -> None:
    _table("pair_embeddings_log").write("FRAME", "run-1", rows="SHARED")  # type: ignore[arg-type]
    assert calls == [("replace", ("FRAME", "/w/pair_embeddings_log", "run-1", ["computed_date"]),
                      {"rows": "SHARED"})]
    calls.clear()
    _table("candidates").write("FRAME", "run-2", rows=None)  # type: ignore[arg-type]  # None: Spark writes
    assert calls == [("replace", ("FRAME", "/w/candidates", "run-2", ["run_date"]), {"rows": None})]
    calls.clear()
    _table("candidates").write("FRAME", "run-3", rows=COLLECT)  # type: ignore[arg-type]  # the default, spelt out
    assert [name for name, _, _ in calls] == ["collect", "replace"] and calls[1][2] == {"rows": "ROWS"}


def test_driver_rows_go_to_a_merge_table_only_and_a_table_without_a_rule_refuses_writes(calls: list[tuple]) -> None:
    _table("imputed_item_embeddings").write_rows("ARROW")
    assert calls == [("merge_rows", ("ARROW", "/w/imputed_item_embeddings", ["item_id"], []), {})]
    with pytest.raises(ValueError, match="only merge_newer"):
        _table("candidates").write_rows("ARROW")
    unknown = Table(spark=None, name="other", path="/w/other", rule=None, driver_max_rows=100)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no write rule"):
        unknown.write("FRAME", "run-1")  # type: ignore[arg-type]


def test_an_upsert_table_merges_on_its_key_and_takes_driver_rows_as_an_upsert(calls: list[tuple]) -> None:
    _table("events").write("FRAME", "ingest-1")  # type: ignore[arg-type]
    assert calls == [("merge_into", ("FRAME", "/w/events", ["event_id"], ["event_date"]), {})]  # nothing collected
    calls.clear()
    fallback = object()
    _table("runs").upsert_rows("ARROW", fallback)  # type: ignore[arg-type]
    assert calls == [("upsert_rows", ("ARROW", "/w/runs", ["run_id", "job"], fallback, []), {})]
    with pytest.raises(ValueError, match="not by an upsert"):
        _table("candidates").upsert_rows("ARROW", fallback)  # type: ignore[arg-type]


def test_current_state_is_overwritten_whole_and_a_predicate_table_only_takes_a_predicate(calls: list[tuple]) -> None:
    _table("user_neighbors").write("FRAME", "run-1")  # type: ignore[arg-type]
    assert calls == [("overwrite", ("FRAME", "/w/user_neighbors"), {})]  # nothing collected
    calls.clear()
    _table("item_statistics").replace_where("FRAME", "stats_key IN ('a')")  # type: ignore[arg-type]
    assert calls == [("replace_where", ("FRAME", "/w/item_statistics", "stats_key IN ('a')", ["stats_key"]), {})]
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
    monkeypatch.setattr(table_module, "with_commit_retry", lambda write, what: deletes.append(what))
    t0 = datetime(2026, 1, 8, tzinfo=timezone.utc)
    path = str(tmp_path / "pair_embeddings")
    write_deltalake(path, pa.table({"expires_at": pa.array([t0 + timedelta(hours=3)], pa.timestamp("us", "UTC"))}))
    table = Table(spark=None, name="pair_embeddings", path=path, rule=WRITE_RULES["pair_embeddings"],  # type: ignore[arg-type]
                  driver_max_rows=100)
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

    from solaris.storage.tables import upsert_rows

    def no_spark():
        raise AssertionError("deltalake refused the table")

    path = str(tmp_path / "runs")
    keys = ["run_id", "job"]
    upsert_rows(pa.table({"run_id": ["r1", "r1", "r'2"], "job": ["score", "knn", "score"], "n": [1, 2, 3]}),
                path, keys, no_spark)
    upsert_rows(pa.table({"run_id": ["r1", "r3"], "job": ["score", "score"], "n": [10, 4]}), path, keys, no_spark)
    table = DeltaTable(path)
    assert table.version() == 2  # the creation, then one commit per upsert
    rows = sorted(tuple(row.values()) for row in table.to_pyarrow_table().to_pylist())
    assert rows == [("r'2", "score", 3), ("r1", "knn", 2), ("r1", "score", 10), ("r3", "score", 4)]
    with pytest.raises(TypeError, match="must be strings"):
        upsert_rows(pa.table({"run_id": [1], "job": ["score"], "n": [1]}), path, keys, no_spark)
