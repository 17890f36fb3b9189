"""One hourly precompute cycle on real Spark + Delta: candidates -> score -> verify -> write -> expire."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
import torch

from solaris.models.checkpoint import load_checkpoint, save_checkpoint
from solaris.models.training import EventArrays
from solaris.pipeline import HOURLY_JOBS
from solaris.stages import candidates as candidates_job
from solaris.stages import expire as expire_job
from solaris.stages import score as score_job
from solaris.storage.embedding_codec import decode
from solaris.tick import StepContext
from solaris.timeutil import default_run_id
from tests.conftest import table_checksum
from tests.world import T0, copy_world

# The shared world, with a global verifier budget small enough to filter.
BUDGET = ["precompute.verifier.budget=600"]


def _table(spark, config, name):
    return spark.read.format("delta").load(config.table_path(name))


@pytest.fixture(scope="module")
def world(world_template, tmp_path_factory):
    """A private copy of the shared world (events + FM and verifier trained up to T0)."""
    return copy_world(world_template, tmp_path_factory.mktemp("pre") / "warehouse", *BUDGET)


def _cycle(spark, config, as_of, **kwargs):
    run_id = default_run_id("precompute", as_of)
    candidates = candidates_job.run(StepContext(spark, config, as_of, run_id),
                                    options=candidates_job.CandidatesOptions())
    scored = score_job.run(StepContext(spark, config, as_of, run_id), options=score_job.ScoreOptions(**kwargs))
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
    from solaris.models.common import to_tensors

    events = EventArrays.from_frame(_table(spark, config, "events").selectExpr(
        "user_id", "item_id", "unix_seconds(ts) AS ts", "label", "rating").toPandas())
    visible = events.select(events.ts <= int(T0.timestamp()))
    sample = pairs.head(20)
    features = visible.index().query(
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
    from solaris.stages import hit_rate

    figures = hit_rate.run(StepContext(spark, config, T0, run_id), options=hit_rate.HitRateOptions())
    assert figures.candidates.pairs == scored.candidates and figures.verified.pairs == scored.written
    # the same figures from the tables, in pandas: requests are the distinct pairs of (T0, T0 + 1h]
    naive = T0.replace(tzinfo=None)
    stamped = _table(spark, config, "events").select("user_id", "item_id", "ts").toPandas()
    window = stamped[(stamped.ts > naive) & (stamped.ts <= naive + timedelta(hours=config.precompute.horizon_hours))]
    requests = set(zip(window.user_id, window.item_id))
    speculated = _table(spark, config, "candidates").where(f"run_id = '{run_id}'").toPandas()
    speculated = set(zip(speculated.user_id, speculated.item_id))
    verified = set(zip(pairs.user_id, pairs.item_id))  # every pair_embeddings row is this run's so far
    assert figures.requests == len(requests) > 0
    assert figures.candidates.hits == len(requests & speculated) > 0
    assert figures.verified.hits == len(requests & verified)
    assert figures.verified.hit_rate == figures.verified.hits / figures.requests
    assert figures.candidates.precision == figures.candidates.hits / scored.candidates

    # rerun of the same run: identical table content
    before = {name: table_checksum(config.table_path(name)) for name in ("candidates", "pair_embeddings")}
    _cycle(spark, config, T0)
    assert {name: table_checksum(config.table_path(name)) for name in ("candidates", "pair_embeddings")} == before

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
    result = expire_job.run(StepContext(spark, config, cutoff, default_run_id("precompute", cutoff)),
                            options=expire_job.ExpireOptions(hourly_jobs=HOURLY_JOBS))
    remaining = _table(spark, config, "pair_embeddings").toPandas()
    assert result.expired == due and len(remaining) == len(after) - due
    assert (remaining["expires_at"] > cutoff.replace(tzinfo=None)).all()

    # readers without Spark
    from deltalake import DeltaTable

    table = DeltaTable(config.table_path("pair_embeddings")).to_pyarrow_table()
    assert table.num_rows == len(remaining)
    assert np.isfinite(decode(table["embedding"], 16)).all()


def test_spark_top_k_per_user_keeps_what_the_numpy_rule_keeps(spark, world_template, tmp_path):
    """More candidates per user than the verifier keeps, so the job's per-user window really drops
    pairs: the pairs it keeps must be those :func:`solaris.precompute.speculation.verify_mask` (the rule's numpy
    twin) keeps from the same scored candidates."""
    from solaris.precompute.speculation import verify_mask

    run_id = default_run_id("precompute", T0)
    per_user = "precompute.candidates.per_user=30"
    # Every candidate scored and written (no threshold, no cut): the scores the rule is applied to.
    everything = copy_world(world_template, tmp_path / "all", per_user, "precompute.verifier.threshold=null",
                            "precompute.verifier.top_k_per_user=null")
    ruled = copy_world(world_template, tmp_path / "ruled", per_user, "precompute.verifier.top_k_per_user=5")
    rule = ruled.precompute.verifier
    assert ruled.precompute.candidates.per_user > rule.top_k_per_user and rule.threshold == 0.3 and rule.budget is None
    for config in (everything, ruled):
        candidates_job.run(StepContext(spark, config, T0, run_id), options=candidates_job.CandidatesOptions())
    unfiltered = score_job.run(StepContext(spark, everything, T0, run_id), options=score_job.ScoreOptions())
    result = score_job.run(StepContext(spark, ruled, T0, run_id), options=score_job.ScoreOptions())

    scored = _table(spark, everything, "pair_embeddings").select("user_id", "item_id", "verifier_score").toPandas()
    assert unfiltered.quarantined == 0 and unfiltered.written == unfiltered.candidates == len(scored)
    assert result.candidates == unfiltered.candidates  # the same candidates, scored the same way
    keep, threshold = verify_mask(scored.user_id, scored.item_id, scored.verifier_score, rule)
    kept = _table(spark, ruled, "pair_embeddings").toPandas()
    assert set(zip(kept.user_id, kept.item_id)) == set(zip(scored.user_id[keep], scored.item_id[keep]))
    assert result.effective_threshold == threshold and result.written == int(keep.sum()) == len(kept)
    # the per-user cut did drop pairs: some user had more than k pairs above the threshold
    passing = scored[scored.verifier_score >= threshold]
    assert passing.groupby("user_id").size().max() > rule.top_k_per_user and len(kept) < len(passing)
    assert kept.groupby("user_id").size().max() == rule.top_k_per_user


def test_spark_sql_view_decodes_embeddings(spark, world):
    from solaris.storage.table import Table

    config = world
    rows = (
        Table.of(spark, config, "pair_embeddings").decoded_view()
        .select("embedding", "embedding_array")
        .limit(50)
        .collect()
    )
    assert rows
    for row in rows:
        np.testing.assert_array_equal(  # bit-exact: one codec's bytes decoded two ways
            np.array(row["embedding_array"], dtype=np.float32), decode([row["embedding"]], 16)[0]
        )


def test_nan_embeddings_are_quarantined_never_written(spark, world, tmp_path):
    config = world
    fm, _ = load_checkpoint(config.warehouse / "models" / "fm", "fm", 16)
    with torch.no_grad():  # poison every item's embedding row: every pair embedding becomes NaN
        fm.item_emb.table.weight.fill_(float("nan"))
    save_checkpoint(fm, config.warehouse / "models" / "fm_poisoned", {"as_of": T0.isoformat()})
    as_of = T0 + timedelta(hours=5)
    run_id = default_run_id("precompute", as_of)
    candidates_job.run(StepContext(spark, config, as_of, run_id), options=candidates_job.CandidatesOptions())
    before = table_checksum(config.table_path("pair_embeddings"))
    result = score_job.run(StepContext(spark, config, as_of, run_id),
                           options=score_job.ScoreOptions(fm_path="models/fm_poisoned"))
    assert result.written == 0 and result.quarantined == result.verified > 0
    assert table_checksum(config.table_path("pair_embeddings")) == before
    reasons = _table(spark, config, "quarantine").where(f"run_id = '{run_id}'").select("reason").distinct().collect()
    assert [r["reason"] for r in reasons] == ["non-finite embedding"]


def test_foreign_checkpoint_is_refused_before_any_write(spark, world, tmp_path):
    from solaris.models.checkpoint import CheckpointError

    config = world
    as_of = T0 + timedelta(hours=6)
    run_id = default_run_id("precompute", as_of)
    before = table_checksum(config.table_path("pair_embeddings"))
    with pytest.raises(CheckpointError):
        score_job.run(StepContext(spark, config, as_of, run_id),
                      options=score_job.ScoreOptions(fm_path="models/vm_baseline"))
    assert table_checksum(config.table_path("pair_embeddings")) == before
    assert before[0] > 0  # there were rows to lose
    assert _table(spark, config, "runs").where(f"run_id = '{run_id}'").count() == 0  # not even an audit row


@pytest.mark.parametrize("per_active_user", [None, 0.5, 3.0])
def test_spark_verifier_with_a_budget_per_active_user_keeps_what_the_numpy_rule_keeps(spark, per_active_user):
    """The job's rule (window ranks, floor, top-k, the budget's boundary found in Spark) against
    :func:`solaris.precompute.speculation.verify_mask` on the same scores, ties included."""
    import pandas as pd

    from solaris.config import VerifierConfig
    from solaris.precompute.speculation import verify_mask

    rng = np.random.default_rng(5)
    n = 3000
    frame = pd.DataFrame({"user_id": rng.integers(0, 300, n), "item_id": rng.permutation(n),
                          "request_score": np.round(rng.random(n), 3)})
    rule = VerifierConfig(rule="request", request_threshold=0.05, request_top_k_per_user=8, request_min_per_user=1,
                          request_budget_per_active_user=per_active_user)
    verified = score_job._verify(spark.createDataFrame(frame), "request_score", rule)
    keep, threshold = verify_mask(frame.user_id, frame.item_id, frame.request_score, rule)
    kept = verified.kept.toPandas()
    assert set(zip(kept.user_id, kept.item_id)) == set(zip(frame.user_id[keep], frame.item_id[keep]))
    verified.ranked.unpersist()
    assert verified.threshold == threshold and verified.rows == n
    users = frame.user_id.nunique()
    if per_active_user is None:
        assert verified.budget is None
    else:
        assert len(kept) <= max(users, per_active_user * users) and verified.budget is not None


def test_the_kth_largest_found_in_bounded_steps_equals_sorting(spark):
    """The k-th largest and the smallest value above it, as sorting finds them. Small histograms
    (4 buckets) and a small collect size force several narrowing steps, over scores with heavy ties
    and a dense cluster."""
    import pandas as pd

    rng = np.random.default_rng(9)
    values = np.concatenate([np.round(rng.random(300), 2), 0.5 + rng.random(150) * 1e-9, np.full(50, 0.25)])
    frame = spark.createDataFrame(pd.DataFrame({"s": values}))
    ordered = np.sort(values)[::-1]
    for k in (1, 2, 17, 120, 301, 320, 451, 499, 500):
        found = score_job._kth_largest(frame, "s", k, values.size, low=float(values.min()), high=float(values.max()),
                                       buckets=4, collect_below=16)
        above = values[values > ordered[k - 1]]
        assert found.value == ordered[k - 1], k
        assert found.next_above == (above.min() if above.size else None), k


def test_spark_feedback_level_is_the_numpy_rule(spark):
    from solaris.models.features import feedback_levels
    from solaris.precompute.spark_features import feedback_level

    labels = [0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0]
    ratings = [1.0, 5.0, 2.5, 3.5, None, None, 9.0, 0.2, float("nan"), 4.5]
    frame = spark.createDataFrame(list(zip(labels, ratings, strict=True)), "label double, rating double")
    got = [row[0] for row in frame.select(feedback_level()).collect()]
    expected = feedback_levels(np.array(labels), np.array([np.nan if r is None else r for r in ratings]))
    assert got == expected.tolist() == [2, 6, 3, 5, 0, 1, 6, 2, 1, 5]
