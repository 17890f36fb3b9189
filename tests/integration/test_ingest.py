"""Ingest on real Spark + Delta: real data (ML-100K), generic CSV, bad rows, reruns, generator."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from solaris.ingest.events import stable_id
from solaris.ingest.sources import ColumnMap, SourceError, resolve_source
from solaris.jobs.ingest import ingest
from solaris.runtime import JobInputError
from tests.conftest import table_checksum


def _table(spark, config, name):
    return spark.read.format("delta").load(config.table_path(name))


def _checksum(spark, config, name):
    return table_checksum(spark, config.table_path(name))


def test_ml100k_ingest_reads_back_without_spark(spark, make_config):
    config = make_config()
    result = ingest(spark, config, resolve_source("ml-100k"), None, "ingest-ml-100k")
    assert (result.rows_in, result.rows_valid, result.rows_quarantined) == (100_000, 100_000, 0)

    from deltalake import DeltaTable

    table = DeltaTable(config.table_path("events")).to_pyarrow_table()
    assert table.num_rows == 100_000
    assert len(set(table["user_id"].to_pylist())) == 943
    assert len(set(table["item_id"].to_pylist())) == 1682
    assert set(table["label"].to_pylist()) == {0.0, 1.0}
    labels = table["label"].to_numpy()
    ratings = table["rating"].to_numpy()
    assert ((ratings >= 4) == (labels == 1.0)).all()
    assert str(table.schema.field("ts").type).startswith("timestamp")
    # integer ids kept as they are (196 is the first user of u.data)
    assert 196 in set(table["user_id"].to_pylist())


def test_generic_csv_with_string_ids_maps_them_stably(spark, make_config, tmp_path):
    path = tmp_path / "clicks.csv"
    path.write_text(
        "who,what,when,clicked,extra\n"
        "alice,Toy Story (1995),2026-01-01T10:00:00Z,1,x\n"
        "bob,Heat (1995),2026-01-01T11:00:00Z,0,y\n"
        "alice,Heat (1995),1767265200,1,z\n"
    )
    config = make_config()
    spec = resolve_source(str(path), columns=ColumnMap("who", "what", "when", None, "clicked"))
    result = ingest(spark, config, spec, None, "ingest-clicks")
    assert result.rows_valid == 3 and result.rows_quarantined == 0
    events = _table(spark, config, "events").orderBy("ts").collect()
    assert events[0]["user_id"] == stable_id("user", "alice")
    assert events[1]["item_id"] == stable_id("item", "Heat (1995)")
    assert [e["label"] for e in events] == [1.0, 0.0, 1.0]
    assert events[2]["ts"] == datetime(2026, 1, 1, 11, 0)  # epoch 1767265200 = 11:00 UTC
    id_map = {(r["namespace"], r["raw_id"]): r["id"] for r in _table(spark, config, "id_map").collect()}
    assert id_map[("user", "alice")] == stable_id("user", "alice")
    assert len(id_map) == 4  # 2 users + 2 items


BAD_ROWS = {
    "missing user_id": ",10,978300760,4",
    "missing item_id": "1,,978300760,4",
    "unparseable user_id": "u1x,10,978300760,4",
    "negative item_id": "1,-10,978300760,4",
    "unparseable timestamp": "1,10,yesterday,4",
    "timestamp after as-of": "1,11,2030-01-01T00:00:00Z,4",
    "unparseable rating": "1,12,978300760,five",
    "rating out of range": "1,13,978300760,9",
    "missing rating and label": "1,14,978300760,",
}


def test_bad_rows_are_quarantined_with_reasons(spark, make_config, tmp_path):
    good = ["1,10,978300760,4", "2,10,978300761,2", "1,10,978300760,4"]  # third = duplicate of first
    path = tmp_path / "bad.csv"
    path.write_text("user_id,item_id,timestamp,rating\n" + "\n".join(good + list(BAD_ROWS.values())) + "\n")
    config = make_config()
    as_of = datetime(2026, 1, 1, tzinfo=timezone.utc)
    result = ingest(spark, config, resolve_source(str(path), id_mode="int"), as_of, "ingest-bad")
    assert result.rows_valid == 2
    assert result.rows_in == result.rows_valid + result.rows_quarantined == len(good) + len(BAD_ROWS)
    quarantine = _table(spark, config, "quarantine").collect()
    reasons = sorted(r["reason"] for r in quarantine)
    assert reasons == sorted([*BAD_ROWS, "duplicate event"])
    by_reason = {r["reason"]: json.loads(r["payload"]) for r in quarantine}
    assert by_reason["rating out of range"]["raw_rating"] == "9"
    assert all(r["source_table"] == "events" and r["run_id"] == "ingest-bad" for r in quarantine)
    runs = _table(spark, config, "runs").where("job = 'ingest'").collect()
    assert runs[0]["rows_quarantined"] == len(BAD_ROWS) + 1 and runs[0]["status"] == "success"


def test_input_without_valid_rows_fails_and_writes_nothing(spark, make_config, tmp_path):
    path = tmp_path / "allbad.csv"
    path.write_text("user_id,item_id,timestamp,rating\n,1,2,3\nx,y,z,w\n")
    config = make_config()
    with pytest.raises(JobInputError, match="no valid rows"):
        ingest(spark, config, resolve_source(str(path), id_mode="int"), None, "ingest-allbad")
    assert not (config.warehouse / "events").exists()
    assert not (config.warehouse / "quarantine").exists()


def test_schema_drift_missing_column_is_a_clear_error(spark, make_config, tmp_path):
    path = tmp_path / "drift.csv"
    path.write_text("user,item_id,timestamp,rating\n1,2,3,4\n")
    with pytest.raises(SourceError, match="missing column.*user_id"):
        ingest(spark, make_config(), resolve_source(str(path)), None, "ingest-drift")


def test_rerun_same_run_id_leaves_tables_unchanged(spark, make_config, tmp_path):
    path = tmp_path / "ratings.dat"
    path.write_text("1::10::5::978300760\n1::11::3::978300800\n2::10::4::978300900\n3::x::4::978300900\n")
    config = make_config()
    spec = resolve_source(str(path))
    ingest(spark, config, spec, None, "ingest-r")
    before = {name: _checksum(spark, config, name) for name in ("events", "quarantine")}
    ingest(spark, config, spec, None, "ingest-r")
    after = {name: _checksum(spark, config, name) for name in ("events", "quarantine")}
    assert before == after and before["events"][0] == 3 and before["quarantine"][0] == 1


def test_generator_same_seed_same_table(spark, make_config):
    overrides = ["synthetic.n_events=5000", "synthetic.n_users=200", "synthetic.n_items=150", "synthetic.chunks=3"]
    sums = []
    for seed in (11, 11, 12):
        config = make_config(*overrides, f"seed={seed}", f"tables.events=events_{len(sums)}")
        result = ingest(spark, config, resolve_source("synthetic"), None, "ingest-syn")
        assert result.rows_quarantined == 0 and result.rows_valid > 4000
        sums.append(_checksum(spark, config, "events"))
    assert sums[0] == sums[1]
    assert sums[0] != sums[2]
