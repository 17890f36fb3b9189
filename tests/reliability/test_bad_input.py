"""Bad input through the real entry points: quarantine with a reason, or a clear refusal before
anything is written - never a partial table, never a NaN embedding.

Row-level cases (null/negative/non-integer ids, timestamps after the as-of, in the future or before
the floor, duplicates, out-of-range ratings) land in ``quarantine``; file-level cases (schema
drift, empty input) and model/config cases (corrupt or foreign checkpoint, wrong embedding
dimension) are refused with exit code 2 and a message naming the problem, and every table keeps
its Delta version. ``ingest --validate-only`` exits 3 on rows it would quarantine and writes nothing.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from solaris.ingest.sources import resolve_source
from solaris.stages.ingest import ingest
from solaris.storage.embedding_codec import decode
from solaris.storage.table import Table
from solaris.tick import StepContext
from tests.reliability.conftest import T0, hours, run_cycle, run_solaris, world_config

TABLES = ("events", "quarantine", "candidates", "pair_embeddings", "pair_embeddings_log", "runs")


def _versions(spark, config) -> dict:
    return {name: Table.of(spark, config, name).version() for name in TABLES}


def test_bad_rows_are_quarantined_next_to_good_rows(spark, fresh_world, tmp_path):
    config = fresh_world()
    events_before = spark.read.format("delta").load(config.table_path("events")).count()
    rows = [
        ("7", "3", "1767225600", "4"),               # good (2026-01-01)
        ("7", "3", "1767225600", "4"),               # exact duplicate of the good row
        ("", "3", "1767225600", "4"),                 # null user
        ("-5", "3", "1767225600", "4"),               # negative user
        ("8", "abc", "1767225600", "4"),              # non-integer item id
        ("8", "4", "1780272000", "4"),                # 2026-06-01: after as-of (before the wall clock)
        ("8", "7", "99999999999", "4"),               # year 5138: in the future, with or without as-of
        ("8", "8", "0", "4"),                         # epoch 0: before ingest.min_event_time
        ("8", "5", "1767225600", "11"),               # rating out of range
        ("8", "6", "not-a-time", "4"),                # unparseable timestamp
    ]
    path = tmp_path / "mixed.csv"
    pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp", "rating"]).to_csv(path, index=False)
    result = ingest(spark, config, resolve_source(str(path), id_mode="int"), T0, "ingest-mixed")
    assert (result.rows_valid, result.rows_quarantined) == (1, 9)
    quarantine = spark.read.format("delta").load(config.table_path("quarantine")).where("run_id = 'ingest-mixed'")
    assert Counter(r["reason"] for r in quarantine.collect()) == Counter([
        "duplicate event", "missing user_id", "negative user_id", "non-integer item_id", "timestamp after as-of",
        "timestamp in the future", "timestamp before floor", "rating out of range", "unparseable timestamp"])
    assert all(json.loads(r["payload"]) for r in quarantine.collect())
    assert spark.read.format("delta").load(config.table_path("events")).count() == events_before + 1


def test_validate_only_then_ingest_through_the_cli(spark, fresh_world, tmp_path):
    """The entry point spark-submit and the Airflow task run: --validate-only exits 3 and changes no
    table; the real ingest then logs the counts by reason and keeps the integer ids."""
    config = fresh_world()
    rows = [("7", "3", "1767225600", "4"), ("8", "3", "1767229200", "4"), ("-5", "3", "1767225600", "4"),
            ("abc", "3", "1767225600", "4"), ("9", "4", "99999999999", "4")]
    path = tmp_path / "ratings.csv"
    pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp", "rating"]).to_csv(path, index=False)
    before = _versions(spark, config)
    done = run_solaris(config, "ingest", "--input", str(path), "--validate-only")
    assert done.returncode == 3, done.stderr[-2000:]
    assert "5 rows read, 2 valid, 3 would be quarantined; nothing written" in done.stdout
    for line in ("1  negative user_id", "1  non-integer user_id", "1  timestamp in the future"):
        assert line in done.stdout, done.stdout
    assert _versions(spark, config) == before

    done = run_solaris(config, "ingest", "--input", str(path), "--run-id", "ingest-cli")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "WARNING solaris.ingest: user_id: 2 of 5 values are not non-negative integers" in done.stderr
    assert "read 5 rows: 2 valid, 3 quarantined {'negative user_id': 1, 'non-integer user_id': 1, " \
           "'timestamp in the future': 1}" in done.stderr
    events = spark.read.format("delta").load(config.table_path("events")).where("ingest_run_id = 'ingest-cli'")
    assert sorted(r["user_id"] for r in events.collect()) == [7, 8]


@pytest.mark.parametrize("case", ["missing column", "wrong type", "extra column", "empty", "header only"])
def test_schema_drift_and_empty_inputs(spark, fresh_world, tmp_path, case):
    config = fresh_world()
    before = _versions(spark, config)
    good = pd.DataFrame(
        {"user_id": [7, 8], "item_id": [3, 4], "timestamp": [1767225600, 1767225700], "rating": [4.0, 2.0]}
    )
    path = tmp_path / "input.parquet"
    if case == "missing column":
        good.drop(columns=["timestamp"]).to_parquet(path)
    elif case == "wrong type":  # timestamps arrive as free text
        good.assign(timestamp=["monday", "tuesday"]).to_parquet(path)
    elif case == "extra column":
        good.assign(comment=["x", "y"]).to_parquet(path)
    elif case == "empty":
        path = tmp_path / "input.csv"
        path.write_text("")
    else:
        path = tmp_path / "input.csv"
        path.write_text("user_id,item_id,timestamp,rating\n")
    done = run_solaris(config, "ingest", "--input", str(path), "--run-id", "ingest-drift")
    if case == "extra column":  # unknown columns are ignored, the rows are fine
        assert done.returncode == 0, done.stderr[-2000:]
        assert _versions(spark, config)["events"] == before["events"] + 1
        return
    assert done.returncode == 2, done.stderr[-2000:]
    expected = {"missing column": "missing column", "wrong type": "no valid rows", "empty": "empty",
                "header only": "is empty"}[case]
    assert expected in done.stderr.lower(), done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert _versions(spark, config) == before


@pytest.mark.parametrize("damage", ["truncated weights", "random bytes", "foreign model", "wrong dimension"])
def test_bad_checkpoint_or_config_is_refused_before_any_write(spark, fresh_world, damage):
    from solaris.errors import RefusedError
    from solaris.stages import score as score_job

    config = fresh_world()
    as_of = T0 + hours(1)
    run_cycle(spark, config, as_of, stages=["candidates"])
    fm = config.warehouse / "models" / "fm"
    folder = fm / (fm / "LATEST").read_text().strip()
    kwargs = {}
    if damage == "truncated weights":
        weights = folder / "weights.pt"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif damage == "random bytes":
        (folder / "weights.pt").write_bytes(np.random.default_rng(0).bytes(4096))
    elif damage == "foreign model":
        kwargs["fm_path"] = "models/vm_baseline"
    else:  # the config says 32 dimensions, the FM was trained with 16
        config = world_config(config.warehouse, "model.embedding_dim=32")
    before = _versions(spark, config)
    message = {"truncated weights": "weights.pt", "random bytes": "weights.pt", "foreign model": "fm",
               "wrong dimension": "32"}[damage]
    with pytest.raises(RefusedError, match=message):
        score_job.run(StepContext(spark, config, as_of, "precompute-20260108T010000Z"),
                      options=score_job.ScoreOptions(**kwargs))
    assert _versions(spark, config) == before


def test_every_written_embedding_is_finite(spark, fresh_world):
    config = fresh_world(source="served")  # after a full hourly cycle
    for name in ("pair_embeddings", "user_embeddings", "imputed_embeddings", "item_embeddings"):
        frame = spark.read.format("delta").load(config.table_path(name)).select("embedding").toPandas()
        vectors = decode(frame["embedding"].tolist(), config.model.embedding_dim)
        assert len(vectors) and np.isfinite(vectors).all(), name
