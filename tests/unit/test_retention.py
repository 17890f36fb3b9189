"""Retention of the tables the hourly chain appends to: the config refuses a retention shorter than
what a reader needs, and the expire's delete predicates (no Spark here)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from solaris.config import ConfigError, load_config, retention_shortfalls
from solaris.pipeline import HOURLY_JOBS, LAST_MEASURE, STAGE_NAMES
from solaris.stages.expire import RetentionRule, retention_rules

AS_OF = datetime(2000, 12, 2, 1, 0, tzinfo=timezone.utc)


def test_defaults_cover_every_reader():
    config = load_config()
    assert retention_shortfalls(config) == []
    keep = config.retention
    assert keep.pair_embeddings_log_hours >= max(config.enrichment.window_hours, config.enrichment.item_window_hours)
    assert keep.candidates_hours > config.precompute.horizon_hours
    assert keep.runs_hours >= config.evaluation.tail_hours + config.evaluation.eval_hours


@pytest.mark.parametrize(("overrides", "named"), [
    (["retention.pair_embeddings_log_hours=12"], r"retention\.pair_embeddings_log_hours.*enrichment\.window_hours"),
    (["enrichment.item_window_hours=72"], r"retention\.pair_embeddings_log_hours.*enrichment\.item_window_hours"),
    (["retention.candidates_hours=1"], r"retention\.candidates_hours.*precompute\.horizon_hours"),
    (["precompute.horizon_hours=3"], r"retention\.candidates_hours.*precompute\.horizon_hours"),
    (["evaluation.eval_hours=200"], r"retention\.runs_hours.*evaluation\.tail_hours"),
])
def test_a_retention_shorter_than_its_reader_needs_is_refused_with_both_keys(overrides, named):
    with pytest.raises(ConfigError, match=named):
        load_config(overrides=overrides)


def test_longer_windows_pass_with_a_longer_retention():
    config = load_config(overrides=["enrichment.item_window_hours=72", "retention.pair_embeddings_log_hours=72"])
    assert config.retention.pair_embeddings_log_hours == 72


def test_the_moved_log_retention_key_says_where_it_went():
    with pytest.raises(ConfigError, match=r"retention\.pair_embeddings_log_hours"):
        load_config(overrides=["enrichment.log_retention_hours=48"])


def test_rules_delete_at_or_before_the_cutoff_and_prune_partitions():
    rules = {rule.table: rule for rule in retention_rules(load_config(), HOURLY_JOBS)}
    assert set(rules) == {"candidates", "pair_embeddings_log", "quarantine", "runs"}
    assert rules["candidates"].predicate(AS_OF) == (
        "run_date <= DATE '2000-12-01' AND as_of <= TIMESTAMP '2000-12-01 23:00:00.000000'")
    assert rules["pair_embeddings_log"].predicate(AS_OF) == (
        "computed_date <= DATE '2000-11-30' AND computed_at <= TIMESTAMP '2000-11-30 01:00:00.000000'")
    assert rules["quarantine"].cutoff(AS_OF) == datetime(2000, 11, 25, 1, tzinfo=timezone.utc)
    runs = rules["runs"].predicate(AS_OF)
    assert runs.startswith("as_of <= TIMESTAMP '2000-11-25 01:00:00.000000' AND job IN (")
    assert "'hit_rate'" in runs and "'ingest'" not in runs and "train" not in runs


def test_runs_retention_covers_exactly_the_hourly_chain_jobs():
    """The audit rows trimmed are those of the stages, the replay measurements, the fast lane and the
    stream; ingest and training rows (id modes, model versions) are kept."""
    assert set(HOURLY_JOBS) == {*STAGE_NAMES, "hit_rate", LAST_MEASURE, "fast_lane", "stream"}


def test_retention_is_read_from_the_config():
    config = load_config(overrides=["retention.candidates_hours=5", "retention.runs_hours=100"])
    rules = {rule.table: rule for rule in retention_rules(config, HOURLY_JOBS)}
    assert rules["candidates"].hours == 5 and rules["runs"].hours == 100
    assert RetentionRule("t", "ts", 1.5).predicate(AS_OF) == "ts <= TIMESTAMP '2000-12-01 23:30:00.000000'"
