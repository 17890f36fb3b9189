"""Ingest on real Spark + Delta: real data (ML-100K), generic CSV, bad rows, reruns, generator."""

from __future__ import annotations

import json
import logging
from collections import Counter
from datetime import datetime, timezone

import pandas as pd
import pytest

from solaris.ingest.events import stable_id
from solaris.ingest.sources import ColumnMap, SourceError, resolve_source
from solaris.jobs import ingest as ingest_job
from solaris.runtime import EXIT_OK, EXIT_WOULD_QUARANTINE, JobInputError
from solaris.stages.ingest import ingest
from solaris.storage.table import Table
from tests.conftest import TEST_OVERRIDES, table_checksum
from tests.world import set_args

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)  # the wall clock of the tests that pin it


def _table(spark, config, name):
    return spark.read.format("delta").load(config.table_path(name))


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
    # two events at 11:00: ordered by label too, not by the order the write left the files in
    events = _table(spark, config, "events").orderBy("ts", "label").collect()
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
    "non-integer user_id": "u1x,10,978300760,4",
    "negative item_id": "1,-10,978300760,4",
    "unparseable timestamp": "1,10,yesterday,4",
    "timestamp after as-of": "1,11,2026-06-01T00:00:00Z,4",
    "timestamp in the future": "1,15,99999999999,4",
    "timestamp before floor": "1,16,0,4",
    "unparseable rating": "1,12,978300760,five",
    "rating out of range": "1,13,978300760,-1",
    "missing rating and label": "1,14,978300760,",
}


def test_bad_rows_are_quarantined_with_reasons(spark, make_config, tmp_path):
    good = ["1,10,978300760,4", "2,10,978300761,2", "1,10,978300760,4",  # third = duplicate of first
            "1,13,978300760,4"]  # the key of a rejected row (rated -1, ordered first): still the one valid row
    path = tmp_path / "bad.csv"
    path.write_text("user_id,item_id,timestamp,rating\n" + "\n".join(good + list(BAD_ROWS.values())) + "\n")
    config = make_config()
    as_of = datetime(2026, 1, 1, tzinfo=timezone.utc)
    result = ingest(spark, config, resolve_source(str(path), id_mode="int"), as_of, "ingest-bad", now=NOW)
    assert result.rows_valid == 3
    assert result.rows_in == result.rows_valid + result.rows_quarantined == len(good) + len(BAD_ROWS)
    quarantine = _table(spark, config, "quarantine").collect()
    reasons = sorted(r["reason"] for r in quarantine)
    assert reasons == sorted([*BAD_ROWS, "duplicate event"])
    by_reason = {r["reason"]: json.loads(r["payload"]) for r in quarantine}
    assert by_reason["rating out of range"]["raw_rating"] == "-1"
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
    before = {name: table_checksum(config.table_path(name)) for name in ("events", "quarantine")}
    ingest(spark, config, spec, None, "ingest-r")
    after = {name: table_checksum(config.table_path(name)) for name in ("events", "quarantine")}
    assert before == after and before["events"][0] == 3 and before["quarantine"][0] == 1


def test_generator_same_seed_same_table(spark, make_config):
    overrides = ["synthetic.n_events=5000", "synthetic.n_users=200", "synthetic.n_items=150", "synthetic.chunks=3"]
    sums = []
    for seed in (11, 11, 12):
        config = make_config(*overrides, f"seed={seed}", f"tables.events=events_{len(sums)}")
        result = ingest(spark, config, resolve_source("synthetic"), None, "ingest-syn")
        assert result.rows_quarantined == 0 and result.rows_valid > 4000
        sums.append(table_checksum(config.table_path("events")))
    assert sums[0] == sums[1]
    assert sums[0] != sums[2]


# --- issue #48: ids stay the user's, time sanity, validate-only -------------------------------------

HEADER = "user_id,item_id,timestamp,rating"
# 30 good rows: integer users 1..10 and items 100..102, all in 2026 (epoch 1767225600 = 2026-01-01).
GOOD = [f"{u},{100 + (u + k) % 3},{1767225600 + 3600 * (3 * u + k)},{1 + (u + k) % 5}"
        for u in range(1, 11) for k in range(3)]
# raw line -> the reason it must be quarantined with (auto mode keeps the integer ids)
BAD_IDS = {
    "-5,100,1767225600,4": "negative user_id",
    "abc,100,1767225600,4": "non-integer user_id",
    "1.5,100,1767225600,4": "non-integer user_id",
    "12345678901234567890,100,1767225600,4": "non-integer user_id",  # 20 digits: not a bigint
    "3,-7,1767225600,4": "negative item_id",
    "3,x1,1767225600,4": "non-integer item_id",
}


def _write_csv(path, lines):
    path.write_text("\n".join([HEADER, *lines]) + "\n")
    return path


def _quarantined(spark, config, run_id):
    rows = _table(spark, config, "quarantine").where(f"run_id = '{run_id}'").collect()
    return Counter((",".join(json.loads(r["payload"]).get(c) or "" for c in ("raw_user", "raw_item", "raw_ts",
                                                                          "raw_rating")), r["reason"])
                   for r in rows)


def _run_details(spark, config, run_id):
    row = _table(spark, config, "runs").where(f"run_id = '{run_id}' AND job = 'ingest'").collect()[0]
    return json.loads(row["details"])


def test_a_few_bad_ids_are_quarantined_and_never_rekey_the_column(spark, make_config, tmp_path, caplog):
    path = _write_csv(tmp_path / "ratings.csv", GOOD + list(BAD_IDS))
    config = make_config()
    spec = resolve_source(str(path))  # default --id-mode auto
    with caplog.at_level(logging.WARNING, logger="solaris.ingest"):
        result = ingest(spark, config, spec, None, "ingest-ratings", now=NOW)
    assert (result.rows_in, result.rows_valid, result.rows_quarantined) == (36, 30, 6)
    assert result.rows_valid + result.rows_quarantined == len(GOOD) + len(BAD_IDS)  # nothing lost

    events = _table(spark, config, "events").collect()
    expected = Counter((int(u), int(i)) for u, i, _, _ in (line.split(",") for line in GOOD))
    assert Counter((e["user_id"], e["item_id"]) for e in events) == expected  # every good id unchanged
    assert not (config.warehouse / "id_map").exists()  # nothing hashed
    assert _quarantined(spark, config, "ingest-ratings") == Counter(BAD_IDS.items())

    details = _run_details(spark, config, "ingest-ratings")
    assert details["id_modes"]["user_id"] == {"mode": "int", "requested": "auto", "values": 36, "integer_values": 32}
    assert details["id_modes"]["item_id"] == {"mode": "int", "requested": "auto", "values": 36, "integer_values": 34}
    assert details["reasons"] == dict(Counter(BAD_IDS.values()))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("user_id: 4 of 36 values are not non-negative integers" in m for m in warnings), warnings
    assert any("item_id: 2 of 36" in m for m in warnings), warnings

    # re-ingest of the same file (same run id, as `solaris ingest` defaults it): tables unchanged
    before = {name: table_checksum(config.table_path(name)) for name in ("events", "quarantine")}
    again = ingest(spark, config, spec, None, "ingest-ratings", now=NOW)
    assert (again.rows_valid, again.rows_quarantined) == (30, 6)
    assert {name: table_checksum(config.table_path(name)) for name in ("events", "quarantine")} == before


def test_a_string_id_file_is_hashed_and_id_map_round_trips(spark, make_config, tmp_path, caplog):
    users = ["alice", "bob", "carol", "42", "dave"]  # "42" looks like an integer: hashed like its column
    items = ["Heat (1995)", "Toy Story (1995)", "sku-0007"]
    lines = [f"{u},{i},{1767225600 + 60 * n},4" for n, (u, i) in enumerate((u, i) for u in users for i in items)]
    path = _write_csv(tmp_path / "clicks.csv", lines)
    config = make_config()
    with caplog.at_level(logging.WARNING, logger="solaris.ingest"):
        result = ingest(spark, config, resolve_source(str(path)), None, "ingest-clicks", now=NOW)
    assert (result.rows_valid, result.rows_quarantined) == (15, 0)
    assert [mode.hashed for mode in result.id_modes] == [True, True]
    assert any("only 3 of 15 values" in r.getMessage() and "hashed" in r.getMessage() for r in caplog.records)

    id_map = _table(spark, config, "id_map").collect()
    back = {(r["namespace"], r["id"]): r["raw_id"] for r in id_map}
    assert len(back) == len(id_map) == len(users) + len(items)  # one row per original id, no clash
    events = _table(spark, config, "events").orderBy("ts").collect()
    round_trip = [(back[("user", e["user_id"])], back[("item", e["item_id"])]) for e in events]
    assert round_trip == [(u, i) for u in users for i in items]  # every event maps back to the user's ids
    assert all(r["id"] == stable_id(r["namespace"], r["raw_id"]) for r in id_map)
    assert _run_details(spark, config, "ingest-clicks")["id_modes"]["user_id"] == {
        "mode": "hashed", "requested": "auto", "values": 15, "integer_values": 3}


def test_explicit_string_mode_hashes_an_integer_file(spark, make_config, tmp_path):
    path = _write_csv(tmp_path / "ints.csv", GOOD[:6] + ["-5,100,1767225600,4"])
    config = make_config()
    result = ingest(spark, config, resolve_source(str(path), id_mode="string"), None, "ingest-s", now=NOW)
    assert (result.rows_valid, result.rows_quarantined) == (7, 0)  # "-5" is a fine string id
    users = {r["raw_id"]: r["id"] for r in _table(spark, config, "id_map").where("namespace = 'user'").collect()}
    assert users == {raw: stable_id("user", raw) for raw in ("1", "2", "-5")}
    assert _run_details(spark, config, "ingest-s")["id_modes"]["user_id"] == {"mode": "hashed", "requested": "string"}


# raw timestamp -> reason (None: valid) for a run whose wall clock is NOW (2026-12-01) and default settings:
# floor 1990-01-01, latest NOW + 24 h
TIMES = {
    "99999999999": "timestamp in the future",  # year 5138: unreadable by pandas if it were stored
    "99999999999999999999": "timestamp in the future",  # its microseconds overflow a bigint
    "5138-01-01T00:00:00Z": "timestamp in the future",
    "2026-12-02T00:00:01Z": "timestamp in the future",  # one second past the skew
    "1796126400": None,  # 2026-12-01T12:00Z: later than the clock, within the 24 h skew
    "631152000": None,  # 1990-01-01T00:00:00Z: exactly the floor
    "631151999.5": "timestamp before floor",
    "0": "timestamp before floor",  # the "unknown time" sentinel
    "-86400": "timestamp before floor",
    "1989-12-31T23:59:59Z": "timestamp before floor",
    "1767225600": None,
}


def _assert_readable_everywhere(config, names):
    """Every table reads with deltalake + pandas (int64 ns timestamps) and pyarrow, as downstream readers do."""
    from deltalake import DeltaTable

    for name in names:
        table = DeltaTable(config.table_path(name))
        frame = table.to_pandas()
        arrow = table.to_pyarrow_table()
        assert len(frame) == arrow.num_rows > 0, name


def test_timestamps_outside_floor_and_wall_clock_are_quarantined(spark, make_config, tmp_path):
    lines = [f"{n + 1},{200 + n},{raw},4" for n, raw in enumerate(TIMES)]
    path = _write_csv(tmp_path / "times.csv", lines)
    config = make_config()
    result = ingest(spark, config, resolve_source(str(path)), None, "ingest-times", now=NOW)  # no --as-of
    bad = Counter(reason for reason in TIMES.values() if reason)
    assert (result.rows_valid, result.rows_quarantined) == (len(TIMES) - sum(bad.values()), sum(bad.values()))
    assert result.reasons == dict(bad)
    by_ts = {json.loads(r["payload"])["raw_ts"]: r["reason"] for r in _table(spark, config, "quarantine").collect()}
    assert by_ts == {raw: reason for raw, reason in TIMES.items() if reason}
    stamps = sorted(e["ts"] for e in _table(spark, config, "events").collect())
    assert stamps == [datetime(1990, 1, 1), datetime(2026, 1, 1), datetime(2026, 12, 1, 12)]
    assert _run_details(spark, config, "ingest-times")["event_time_bounds"] == {
        "floor": "1990-01-01T00:00:00+00:00", "latest": "2026-12-02T00:00:00+00:00", "as_of_limit": None}
    _assert_readable_everywhere(config, ["events", "quarantine", "runs"])


def test_future_timestamp_is_quarantined_on_the_real_wall_clock(spark, make_config, tmp_path):
    """What the issue saw: year 5138 accepted without --as-of; now quarantined and every table stays readable."""
    path = _write_csv(tmp_path / "ratings.csv", GOOD[:5] + ["1,101,99999999999,4"])
    config = make_config()
    result = ingest(spark, config, resolve_source(str(path)), None, "ingest-future")  # wall clock read in ingest
    assert (result.rows_valid, result.rows_quarantined, result.reasons) == (5, 1, {"timestamp in the future": 1})
    _assert_readable_everywhere(config, ["events", "quarantine", "runs"])


def test_parquet_input_follows_the_same_rules(spark, make_config, tmp_path):
    """String ids in Parquet, and float64 ids / times as pandas writes an int column with a missing value."""
    frame = pd.DataFrame({
        "user_id": ["1", "2", "-5", "abc", "3", "4"],
        "item_id": [10.0, 11.0, 10.0, 10.0, float("nan"), 12.0],
        "timestamp": [1767225600.0, 1767229200.5, 1767225600.0, 1767225600.0, 1767225600.0, 99999999999.0],
        "rating": [4.0, 3.0, 4.0, 4.0, 4.0, 4.0],
    })
    path = tmp_path / "events.parquet"
    frame.to_parquet(path)
    config = make_config()
    result = ingest(spark, config, resolve_source(str(path)), None, "ingest-pq", now=NOW)
    assert result.rows_in == len(frame) and (result.rows_valid, result.rows_quarantined) == (2, 4)
    assert result.reasons == {"negative user_id": 1, "non-integer user_id": 1, "missing item_id": 1,
                              "timestamp in the future": 1}
    events = _table(spark, config, "events").orderBy("ts").collect()
    assert [(e["user_id"], e["item_id"], e["ts"]) for e in events] == [
        (1, 10, datetime(2026, 1, 1)), (2, 11, datetime(2026, 1, 1, 1, 0, 0, 500000))]
    _assert_readable_everywhere(config, ["events", "quarantine"])


def _cli(config, *args):
    return ["--warehouse", str(config.warehouse), *set_args(TEST_OVERRIDES), *args]


def _versions(spark, config):
    return {name: Table.of(spark, config, name).version() for name in ("events", "quarantine", "id_map", "runs")}


def test_validate_only_reports_and_writes_nothing(spark, make_config, tmp_path, capsys):
    bad = _write_csv(tmp_path / "bad.csv", GOOD + list(BAD_IDS) + ["1,101,99999999999,4"])
    clean = _write_csv(tmp_path / "clean.csv", GOOD)
    config = make_config()

    # a fresh warehouse: exit 3, counts and samples printed, no table created
    assert ingest_job.main(["--input", str(bad), "--validate-only", *_cli(config)]) == EXIT_WOULD_QUARANTINE == 3
    out = capsys.readouterr().out
    assert "37 rows read, 30 valid, 7 would be quarantined; nothing written" in out
    assert "3  non-integer user_id" in out and "1  timestamp in the future" in out
    assert '"raw_user": "abc"' in out and '"raw_ts": "99999999999"' in out
    assert "user_id=int (--id-mode auto: 33 of 37 values are integers)" in out
    assert not config.warehouse.exists() or not any(config.warehouse.iterdir())
    assert ingest_job.main(["--input", str(clean), "--validate-only", *_cli(config)]) == EXIT_OK
    assert "30 rows read, 30 valid, 0 would be quarantined" in capsys.readouterr().out
    assert not config.warehouse.exists() or not any(config.warehouse.iterdir())

    # an existing warehouse: every table keeps its Delta version, and the runs audit gets no row
    assert ingest_job.main(["--input", str(bad), "--run-id", "ingest-bad", *_cli(config)]) == EXIT_OK
    before = _versions(spark, config)
    assert all(before[name] is not None for name in ("events", "quarantine", "runs"))
    assert ingest_job.main(["--input", str(bad), "--validate-only", "--samples", "1", *_cli(config)]) == 3
    assert _versions(spark, config) == before  # runs included: no audit row either
    assert "exit codes" in ingest_job.build_parser().format_help()
