"""The default speculation on real Spark + Delta: a speculator fit on past ticks, its learned blend in
`candidates`, its request verifier in `score` (before the FM), and the fallback without one.

The other stage tests pin the rule-only speculation (tests/world.py); this module runs the config's
defaults, so a change of default is exercised here.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from solaris.config import CandidateConfig, VerifierConfig
from solaris.precompute.speculation import verify_mask
from solaris.precompute.speculator_store import save_speculator
from solaris.stages import candidates as candidates_job
from solaris.stages import score as score_job
from solaris.stages.train_speculator import fit
from solaris.tick import StepContext
from solaris.timeutil import default_run_id
from tests.world import T0, copy_world, world_config

# The world's config pins the rule-only speculation; these put the defaults back.
DEFAULT_SPECULATION = [
    f"precompute.candidates.sources=[{','.join(CandidateConfig().sources)}]",
    f"precompute.candidates.blend={CandidateConfig().blend}",
    f"precompute.verifier.rule={VerifierConfig().rule}",
    "precompute.speculator.ticks=3",  # the fit's quality is not the question here
]


def _run(spark, config):
    run_id = default_run_id("precompute", T0)
    step = StepContext(spark, config, T0, run_id)
    candidates = candidates_job.run(step, options=candidates_job.CandidatesOptions())
    return run_id, candidates, score_job.run(step, options=score_job.ScoreOptions())


def _score_row(spark, config, run_id) -> dict:
    runs = spark.read.format("delta").load(config.table_path("runs")).where(f"job = 'score' AND run_id = '{run_id}'")
    return json.loads(runs.collect()[0]["details"])


def test_the_defaults_are_the_learned_blend_and_the_request_verifier():
    assert CandidateConfig().blend == "learned" and VerifierConfig().rule == "request"
    assert {"next", "popular"} <= set(CandidateConfig().sources)


@pytest.mark.slow
def test_default_speculation_writes_only_pairs_the_request_model_keeps(spark, world_template, tmp_path):
    # fewer pairs per user than the world's 20 candidates, so the request rule really drops pairs
    settings = [*DEFAULT_SPECULATION, "precompute.verifier.request_top_k_per_user=5"]
    config = copy_world(world_template, tmp_path / "warehouse", *settings)
    speculator = fit(spark, config, T0)
    save_speculator(config, speculator)
    run_id = default_run_id("precompute", T0)
    candidates = candidates_job.run(StepContext(spark, config, T0, run_id), options=candidates_job.CandidatesOptions())
    assert candidates.blend == f"learned {speculator.version}"
    proposed = spark.read.format("delta").load(config.table_path("candidates")).toPandas()
    assert proposed["request_score"].notna().all()
    # a threshold that about half of the users' best pairs miss, so the per-user floor binds
    threshold = float(proposed.groupby("user_id")["request_score"].max().median())
    config = world_config(config.warehouse, *settings, f"precompute.verifier.request_threshold={threshold!r}")
    rule = config.precompute.verifier
    assert rule.active_min_per_user() == 1

    scored = score_job.run(StepContext(spark, config, T0, run_id), options=score_job.ScoreOptions())
    assert scored.rule == "request" and scored.written > 0 and scored.min_per_user == 1
    # verified before the FM: the FM scored exactly the kept pairs, not every candidate
    assert scored.scored == scored.verified == scored.written + scored.quarantined < scored.candidates
    assert scored.effective_threshold is not None and scored.effective_threshold >= rule.request_threshold

    pairs = spark.read.format("delta").load(config.table_path("pair_embeddings")).toPandas()
    joined = pairs.merge(proposed[["user_id", "item_id", "request_score"]], on=["user_id", "item_id"])
    assert len(joined) == len(pairs) and scored.quarantined == 0
    # the written verifier_score is the request model's P(requested within the TTL)
    assert (abs(joined["verifier_score"] - joined["request_score"]) < 1e-6).all()
    # exactly the pairs of the rule in numpy: threshold, top-k, and each user's best pair below it
    keep, expected_threshold = verify_mask(proposed.user_id, proposed.item_id, proposed.request_score, rule)
    assert expected_threshold == scored.effective_threshold
    assert set(zip(pairs.user_id, pairs.item_id)) == set(zip(proposed.user_id[keep], proposed.item_id[keep]))
    per_user = pairs.groupby("user_id")["verifier_score"].agg(["size", "max"])
    assert per_user["size"].max() == rule.request_top_k_per_user
    below = per_user[per_user["max"] < scored.effective_threshold]
    assert len(below) > 0 and (below["size"] == 1).all()  # the floor: one pair for users with none passing
    assert set(per_user.index) == set(proposed.user_id)  # every candidate user has pairs (tier 3)
    # the rule used and its effective threshold are in `runs`
    details = _score_row(spark, config, run_id)
    assert details["rule"] == "request" and details["effective_threshold"] == scored.effective_threshold
    assert details["min_per_user"] == 1


@pytest.mark.slow
def test_without_a_speculator_the_defaults_fall_back_to_the_relevance_rule(spark, world_template, tmp_path):
    # a relevance top-k below the world's 20 candidates per user (the request rule's is 200): it must bind
    config = copy_world(world_template, tmp_path / "warehouse", *DEFAULT_SPECULATION,
                        "precompute.verifier.top_k_per_user=5")
    rule = config.precompute.verifier

    run_id, candidates, scored = _run(spark, config)
    assert candidates.blend == "hand" and scored.rule == "relevance"
    assert scored.scored == scored.candidates  # relevance needs the FM + verifier pass of every candidate
    # the relevance rule's own threshold and top-k, not the request rule's
    assert scored.effective_threshold is not None and scored.effective_threshold >= rule.threshold
    pairs = spark.read.format("delta").load(config.table_path("pair_embeddings")).toPandas()
    assert len(pairs) > 0 and (pairs["verifier_score"] >= rule.threshold).all()
    assert pairs.groupby("user_id").size().max() == rule.top_k_per_user == 5
    assert _score_row(spark, config, run_id)["rule"] == "relevance"


@pytest.mark.slow
def test_the_evaluation_fits_a_speculator_once_per_fingerprint(spark, world_template, tmp_path, monkeypatch):
    """`solaris evaluate` gives each window's replay warehouse the speculator the schedule would have
    had: fit on the source warehouse's events, saved in the target, reused while the fingerprint holds."""
    from solaris.precompute.speculator_store import load_speculator
    from solaris.stages import train_speculator
    from solaris.stages.train_speculator import speculator_for

    fits = []
    monkeypatch.setattr(train_speculator, "fit", lambda *args: fits.append(args) or fit(*args))

    source = copy_world(world_template, tmp_path / "source", *DEFAULT_SPECULATION, "precompute.speculator.ticks=1")
    target = source.model_copy(update={"warehouse": tmp_path / "replay"})
    root = tmp_path / "replay" / "models" / "speculator"

    version = speculator_for(spark, source, target, T0, "fingerprint-a")
    speculator = load_speculator(target, T0)
    assert speculator is not None and speculator.version == version and speculator.as_of == T0.isoformat()
    assert speculator_for(spark, source, target, T0, "fingerprint-a") == version and len(fits) == 1  # reused
    assert len([folder for folder in root.iterdir() if folder.is_dir()]) == 1
    # another fingerprint (settings or data changed) fits again; the same data gives the same model
    assert speculator_for(spark, source, target, T0, "fingerprint-b") == version and len(fits) == 2
    assert (root / version / "fingerprint").read_text().strip() == "fingerprint-b"

    rules_only = target.model_copy(update={"precompute": target.precompute.model_copy(update={
        "candidates": target.precompute.candidates.model_copy(update={"blend": "hand"}),
        "verifier": target.precompute.verifier.model_copy(update={"rule": "relevance"})})})
    assert speculator_for(spark, source, rules_only, T0, "fingerprint-a") is None  # uses none, fits none
    # nothing to learn from before the first event: no speculator, and none left LATEST from before, so
    # the stages fall back as the replay's fingerprint (speculator None) says
    assert speculator_for(spark, source, target, datetime(2020, 1, 1, tzinfo=timezone.utc), "fingerprint-c") is None
    assert load_speculator(target, T0) is None
