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
    monkeypatch.setattr(table_module, "driver_rows", recorder("collect", result="ROWS"))
    return recorded


def _table(name: str, max_rows: int = 100) -> Table:
    return Table(spark=None, name=name, path=f"/w/{name}", rule=WRITE_RULES[name],  # type: ignore[arg-type]
                 driver_max_rows=max_rows)


def test_every_rule_names_a_table_of_the_config_and_a_merge_has_its_key(tmp_path) -> None:
    config = SolarisConfig(warehouse=tmp_path)
    for name, rule in WRITE_RULES.items():
        assert config.table_path(name).startswith(str(tmp_path))
        assert rule.kind in ("merge_newer", "replace_run", "replace_where", "overwrite")
        assert bool(rule.keys) == (rule.kind == "merge_newer"), name
    with pytest.raises(ValueError, match="key columns"):
        WriteRule("merge_newer")


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
    events = Table(spark=None, name="events", path="/w/events", rule=None, driver_max_rows=100)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no write rule"):
        events.write("FRAME", "run-1")  # type: ignore[arg-type]


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
