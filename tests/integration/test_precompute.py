"""One hourly precompute cycle on real Spark + Delta: candidates -> score -> verify -> write -> expire."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
import torch

from solaris.config import load_config
from solaris.embedding_codec import decode
from solaris.jobs import candidates as candidates_job
from solaris.jobs import expire as expire_job
from solaris.jobs import score as score_job
from solaris.jobs.ingest import ingest
from solaris.models.checkpoint import load_checkpoint, save_checkpoint
from solaris.models.training import EventArrays, train_fm, train_vm
from solaris.sources import resolve_source
from solaris.timeutil import default_run_id
from tests.conftest import TEST_OVERRIDES, table_checksum

SMALL = [
    "synthetic.n_events=8000", "synthetic.n_users=120", "synthetic.n_items=150", "synthetic.chunks=2",
    "synthetic.days=10", "model.embedding_dim=16", "model.history_length=8", "model.fm.id_buckets=1024",
    "model.fm.d_model=16", "model.fm.tower=[32]", "model.training.max_epochs=1", "model.training.batch_size=512",
    "precompute.candidates.lookback_hours=48", "precompute.candidates.per_user=20",
    "precompute.verifier.threshold=0.3", "precompute.verifier.budget=600", "precompute.ttl_hours=3", "precompute.model_batch_size=64",
    "spark.arrow_max_records_per_batch=200",
]
T0 = datetime(2026, 1, 8, 0, 0, tzinfo=timezone.utc)


def _table(spark, config, name):
    return spark.read.format("delta").load(config.table_path(name))


def _checksum(spark, config, name):
    return table_checksum(spark, config.table_path(name))


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory):
    """Events + trained FM and verifier checkpoints in a fresh warehouse."""
    config = load_config(overrides=[*TEST_OVERRIDES, f"warehouse={tmp_path_factory.mktemp('pre')}", *SMALL])
    ingest(spark, config, resolve_source("synthetic"), None, "ingest-syn")
    frame = _table(spark, config, "events").selectExpr("user_id", "item_id", "unix_seconds(ts) AS ts", "label").toPandas()
    events = EventArrays.from_frame(frame)
    train = events.select(events.ts <= int(T0.timestamp()))
    save_checkpoint(train_fm(train, config, 1).model, config.warehouse / "models" / "fm", {"as_of": T0.isoformat()})
    save_checkpoint(train_vm(train, config, 1).model, config.warehouse / "models" / "vm_baseline", {"as_of": T0.isoformat()})
    return config


def _cycle(spark, config, as_of, **kwargs):
    run_id = default_run_id("precompute", as_of)
    candidates = candidates_job.run(spark, config, as_of, run_id)
    scored = score_job.run(spark, config, as_of, run_id, **kwargs)
    return run_id, candidates, scored


def test_hourly_cycle_writes_reconciled_ttl_rows_and_is_idempotent(spark, world, tmp_path):
    config = world
    load_log = tmp_path / "loads"
    run_id, candidates, scored = _cycle(spark, config, T0, load_log_dir=str(load_log))
    assert candidates.pairs > 0 and set(candidates.by_source) & {"cooc", "cooc,trending"}
    assert candidates.pairs == scored.candidates >= scored.verified == scored.written + scored.quarantined
    assert 0 < scored.written <= 600 < scored.candidates  # the verifier's budget really filters
    assert scored.effective_threshold >= 0.3

    pairs = _table(spark, config, "pair_embeddings").toPandas()
    assert (pairs["verifier_score"] >= 0.3).all()
    assert (pairs["expires_at"] - pairs["computed_at"] == timedelta(hours=3)).all()
    assert (pairs["computed_at"] == T0.replace(tzinfo=None)).all()
    vectors = decode(pairs["embedding"].tolist(), 16)
    assert vectors.shape == (len(pairs), 16) and np.isfinite(vectors).all()

    # the stored embedding is what the FM computes from point-in-time features
    from solaris.features import HistoryIndex
    from solaris.models.common import to_tensors

    events = EventArrays.from_frame(_table(spark, config, "events").selectExpr(
        "user_id", "item_id", "unix_seconds(ts) AS ts", "label").toPandas())
    visible = events.select(events.ts <= int(T0.timestamp()))
    sample = pairs.head(20)
    features = HistoryIndex(visible.user_id, visible.item_id, visible.ts, visible.label).query(
        sample.user_id.to_numpy(), sample.item_id.to_numpy(), np.full(len(sample), int(T0.timestamp()) + 1), 8)
    fm, _ = load_checkpoint(config.warehouse / "models" / "fm", "fm", 16)
    with torch.inference_mode():
        expected, _ = fm(to_tensors(features))
    np.testing.assert_allclose(decode(sample["embedding"].tolist(), 16), expected.numpy(), atol=2e-3)

    # models were loaded once per Python worker, not per Arrow batch (200 rows -> many batches)
    loads = [line for path in load_log.glob("loads-*.log") for line in path.read_text().splitlines()]
    workers = len(list(load_log.glob("loads-*.log")))
    assert len(loads) == 2 * workers and scored.candidates / 200 > workers

    # speculation hit rate against the events that arrived in (T0, T0 + 1h]
    from solaris.jobs import hit_rate

    figures = hit_rate.run(spark, config, T0, run_id)
    assert figures.candidates.pairs == scored.candidates and figures.verified.pairs == scored.written
    assert figures.candidates.hits >= figures.verified.hits >= 0
    if figures.requests:
        assert 0 <= figures.verified.hit_rate <= figures.candidates.hit_rate <= 1

    # rerun of the same run: identical table content
    before = {name: _checksum(spark, config, name) for name in ("candidates", "pair_embeddings")}
    _cycle(spark, config, T0)
    assert {name: _checksum(spark, config, name) for name in ("candidates", "pair_embeddings")} == before

    # next hour refreshes overlapping pairs (new run id, new TTL) and keeps the others
    t1 = T0 + timedelta(hours=1)
    _cycle(spark, config, t1)
    after = _table(spark, config, "pair_embeddings").toPandas()
    key = ["user_id", "item_id"]
    assert not after.duplicated(key).any()
    merged = pairs[key + ["run_id"]].merge(after[key + ["run_id", "expires_at"]], on=key, suffixes=("_old", ""))
    refreshed = merged[merged["run_id"] == default_run_id("precompute", t1)]
    assert len(refreshed) > 0
    assert (refreshed["expires_at"] == (t1 + timedelta(hours=3)).replace(tzinfo=None)).all()

    # expiry at T0 + 3h removes exactly the rows with expires_at <= T0 + 3h
    cutoff = T0 + timedelta(hours=3)
    due = int((after["expires_at"] <= cutoff.replace(tzinfo=None)).sum())
    assert 0 < due < len(after)
    result = expire_job.run(spark, config, cutoff, default_run_id("precompute", cutoff))
    remaining = _table(spark, config, "pair_embeddings").toPandas()
    assert result.expired == due and len(remaining) == len(after) - due
    assert (remaining["expires_at"] > cutoff.replace(tzinfo=None)).all()

    # readers without Spark
    from deltalake import DeltaTable

    table = DeltaTable(config.table_path("pair_embeddings")).to_pyarrow_table()
    assert table.num_rows == len(remaining)
    assert np.isfinite(decode(table["embedding"], 16)).all()


def test_spark_sql_view_decodes_embeddings(spark, world):
    from solaris.tables import register_decoded_view

    config = world
    rows = register_decoded_view(spark, config.table_path("pair_embeddings")).select("embedding", "embedding_array").limit(50).collect()
    assert rows
    for row in rows:
        np.testing.assert_array_equal(np.array(row["embedding_array"], dtype=np.float32), decode([row["embedding"]], 16)[0])


def test_nan_embeddings_are_quarantined_never_written(spark, world, tmp_path):
    config = world
    fm, _ = load_checkpoint(config.warehouse / "models" / "fm", "fm", 16)
    with torch.no_grad():  # poison every item's embedding row: every pair embedding becomes NaN
        fm.item_emb.table.weight.fill_(float("nan"))
    save_checkpoint(fm, config.warehouse / "models" / "fm_poisoned", {"as_of": T0.isoformat()})
    as_of = T0 + timedelta(hours=5)
    run_id = default_run_id("precompute", as_of)
    candidates_job.run(spark, config, as_of, run_id)
    before = _checksum(spark, config, "pair_embeddings")
    result = score_job.run(spark, config, as_of, run_id, fm_path="models/fm_poisoned")
    assert result.written == 0 and result.quarantined == result.verified > 0
    assert _checksum(spark, config, "pair_embeddings") == before
    reasons = _table(spark, config, "quarantine").where(f"run_id = '{run_id}'").select("reason").distinct().collect()
    assert [r["reason"] for r in reasons] == ["non-finite embedding"]


def test_foreign_checkpoint_is_refused_before_any_write(spark, world, tmp_path):
    from solaris.models.checkpoint import CheckpointError

    config = world
    as_of = T0 + timedelta(hours=6)
    run_id = default_run_id("precompute", as_of)
    before = _checksum(spark, config, "pair_embeddings")
    with pytest.raises(CheckpointError):
        score_job.run(spark, config, as_of, run_id, fm_path="models/vm_baseline")
    assert _checksum(spark, config, "pair_embeddings") == before
    assert math.isfinite(before[0])
