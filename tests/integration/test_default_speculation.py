"""The default speculation on real Spark + Delta: a speculator fit on past ticks, its learned blend in
`candidates`, its request verifier in `score` (before the FM), and the fallback without one.

The other stage tests pin the rule-only speculation (tests/world.py); this module runs the config's
defaults, so a change of default is exercised here.
"""

from __future__ import annotations

import json

import pytest

from solaris.config import CandidateConfig, VerifierConfig
from solaris.jobs import candidates as candidates_job
from solaris.jobs import score as score_job
from solaris.jobs.candidates import save_speculator
from solaris.jobs.train_speculator import fit
from solaris.timeutil import default_run_id
from tests.world import T0, copy_world

# The world's config pins the rule-only speculation; these put the defaults back.
DEFAULT_SPECULATION = [
    f"precompute.candidates.sources=[{', '.join(CandidateConfig().sources)}]",
    f"precompute.candidates.blend={CandidateConfig().blend}",
    f"precompute.verifier.rule={VerifierConfig().rule}",
    "precompute.speculator.ticks=3",  # the fit's quality is not the question here
]


def _run(spark, config):
    run_id = default_run_id("precompute", T0)
    return run_id, candidates_job.run(spark, config, T0, run_id), score_job.run(spark, config, T0, run_id)


def _score_row(spark, config, run_id) -> dict:
    runs = spark.read.format("delta").load(config.table_path("runs")).where(f"job = 'score' AND run_id = '{run_id}'")
    return json.loads(runs.collect()[0]["details"])


def test_the_defaults_are_the_learned_blend_and_the_request_verifier():
    assert CandidateConfig().blend == "learned" and VerifierConfig().rule == "request"
    assert {"next", "popular"} <= set(CandidateConfig().sources)


@pytest.mark.slow
def test_default_speculation_writes_only_pairs_the_request_model_keeps(spark, world_template, tmp_path):
    # fewer pairs per user than the world's 20 candidates, so the request rule really drops pairs
    config = copy_world(world_template, tmp_path / "warehouse", *DEFAULT_SPECULATION,
                        "precompute.verifier.request_top_k_per_user=5")
    rule = config.precompute.verifier
    speculator = fit(spark, config, T0)
    save_speculator(config, speculator)

    run_id, candidates, scored = _run(spark, config)
    assert candidates.blend == f"learned {speculator.version}"
    assert scored.rule == "request" and scored.written > 0
    # verified before the FM: the FM scored exactly the kept pairs, not every candidate
    assert scored.scored == scored.verified == scored.written + scored.quarantined < scored.candidates
    assert scored.effective_threshold is not None and scored.effective_threshold >= rule.request_threshold

    pairs = spark.read.format("delta").load(config.table_path("pair_embeddings")).toPandas()
    proposed = spark.read.format("delta").load(config.table_path("candidates")).toPandas()
    joined = pairs.merge(proposed[["user_id", "item_id", "request_score"]], on=["user_id", "item_id"])
    assert len(joined) == len(pairs)
    # the written verifier_score is the request model's P(requested within the TTL)
    assert (abs(joined["verifier_score"] - joined["request_score"]) < 1e-6).all()
    assert (pairs["verifier_score"] >= rule.request_threshold).all()
    assert pairs.groupby("user_id").size().max() == rule.request_top_k_per_user
    # the rule used and its effective threshold are in `runs`
    details = _score_row(spark, config, run_id)
    assert details["rule"] == "request" and details["effective_threshold"] == scored.effective_threshold


@pytest.mark.slow
def test_without_a_speculator_the_defaults_fall_back_to_the_relevance_rule(spark, world_template, tmp_path):
    config = copy_world(world_template, tmp_path / "warehouse", *DEFAULT_SPECULATION)
    rule = config.precompute.verifier

    run_id, candidates, scored = _run(spark, config)
    assert candidates.blend == "hand" and scored.rule == "relevance"
    assert scored.scored == scored.candidates  # relevance needs the FM + verifier pass of every candidate
    # the relevance rule's own threshold and top-k, not the request rule's
    assert scored.effective_threshold is not None and scored.effective_threshold >= rule.threshold
    pairs = spark.read.format("delta").load(config.table_path("pair_embeddings")).toPandas()
    assert len(pairs) > 0 and (pairs["verifier_score"] >= rule.threshold).all()
    assert pairs.groupby("user_id").size().max() <= rule.top_k_per_user
    assert _score_row(spark, config, run_id)["rule"] == "relevance"
