import re
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from solaris.config import CandidateConfig, VerifierConfig
from solaris.precompute.speculation import (
    FEATURES,
    LinearModel,
    candidate_params,
    effective_threshold,
    item_stats_as_of,
    item_stats_key,
    locate_rank,
    verify_mask,
    written_budget,
)
from solaris.storage.sql import literal, render, statements
from solaris.timeutil import default_run_id


def RELEVANCE(**settings) -> VerifierConfig:
    """The relevance rule (the rule these threshold tests were written for)."""
    return VerifierConfig(rule="relevance", **settings)

USERS = np.array([1, 1, 1, 2, 2, 3])
ITEMS = np.array([10, 11, 12, 10, 13, 14])
SCORES = np.array([0.9, 0.7, 0.4, 0.8, 0.6, 0.2])


def test_threshold_only():
    keep, threshold = verify_mask(USERS, ITEMS, SCORES, RELEVANCE(threshold=0.5))
    assert keep.tolist() == [True, True, False, True, True, False] and threshold == pytest.approx(0.6)


def test_empty_input_keeps_nothing():
    keep, threshold = verify_mask(np.array([]), np.array([]), np.array([]), RELEVANCE(threshold=0.5, budget=3))
    assert keep.size == 0 and threshold == float("inf")


def test_all_below_threshold():
    keep, threshold = verify_mask(USERS, ITEMS, SCORES, RELEVANCE(threshold=0.95))
    assert not keep.any() and threshold == float("inf")


def test_budget_larger_than_input_keeps_all_passing():
    keep, _ = verify_mask(USERS, ITEMS, SCORES, RELEVANCE(threshold=None, budget=100))
    assert keep.all()


def test_budget_raises_threshold_to_quantile():
    keep, threshold = verify_mask(USERS, ITEMS, SCORES, RELEVANCE(threshold=0.1, budget=3))
    assert keep.sum() == 3 and threshold == pytest.approx(0.7)


def test_budget_ties_are_dropped_together():
    scores = np.array([0.9, 0.5, 0.5, 0.5])
    assert effective_threshold(scores, None, 2) == pytest.approx(0.9)
    assert effective_threshold(np.array([0.5, 0.5]), None, 1) == float("inf")
    assert effective_threshold(scores, 0.1, 0) == float("inf")


def test_top_k_per_user_after_threshold_with_item_tiebreak():
    scores = np.array([0.9, 0.9, 0.4, 0.8, 0.6, 0.2])
    keep, _ = verify_mask(USERS, ITEMS, scores, RELEVANCE(threshold=0.3, top_k_per_user=1))
    assert keep.tolist() == [True, False, False, True, False, False]


def test_candidate_params_render_into_sql():
    as_of = datetime(2000, 12, 1, tzinfo=timezone.utc)
    params = candidate_params(CandidateConfig(lookback_hours=24, trending_hours=2, item_stats_hours=24), as_of)
    assert params["lookback_micros"] == 24 * 3600 * 10**6 and params["trending_micros"] == 2 * 3600 * 10**6
    sql = render("candidates", **params)
    assert "TIMESTAMP '2000-12-01 00:00:00.000000'" in sql and "{" not in sql  # the statistics' period
    # the windows that end at the as-of are read from the events, so the next hour renders the same text
    later = candidate_params(CandidateConfig(lookback_hours=24, trending_hours=2, item_stats_hours=24),
                             as_of + timedelta(hours=1))
    assert render("candidates", **later) == sql
    parts = statements(sql)
    assert parts[-1].lstrip().upper().startswith("SELECT") and len(parts) == 19


def test_a_stored_item_statistic_is_keyed_by_its_period_and_the_sql_that_computes_it():
    """Other settings render other SQL, so they never read statistics computed another way."""
    def key(config: CandidateConfig, hour: int) -> str:
        at = datetime(2000, 12, 1, hour, tzinfo=timezone.utc)
        params = candidate_params(config, at)
        views = {s.split()[5]: s for s in statements(render("candidates", **params))[:-1]}
        return item_stats_key("item_cooc", params["stats_as_of"], [views["cooc_window"], views["item_cooc"]])

    daily = CandidateConfig(item_stats_hours=24)
    assert key(daily, 3) == key(daily, 17)  # the runs of one day share it
    assert key(daily, 3).startswith("item_cooc-20001201T000000Z-")
    hourly = CandidateConfig(item_stats_hours=1)
    assert key(hourly, 3) != key(hourly, 4)  # each run its own
    assert key(daily.model_copy(update={"cooc_neighbors": 5}), 3) != key(daily, 3)
    assert key(daily.model_copy(update={"next_window": 5}), 3) == key(daily, 3)  # not an input of item_cooc
    assert key(daily.model_copy(update={"per_user": 5}), 3) == key(daily, 3)


def test_item_statistics_are_as_of_the_period_start_never_later_than_the_run():
    at = lambda *hms: datetime(2000, 12, 1, *hms, tzinfo=timezone.utc)  # noqa: E731
    assert item_stats_as_of(at(13, 0), 1) == at(13, 0) and item_stats_as_of(at(13, 30), 1) == at(13, 0)
    assert item_stats_as_of(at(13, 0), 24) == at(0, 0) == item_stats_as_of(at(0, 0), 24)
    assert item_stats_as_of(at(23, 59, 59), 6) == at(18, 0)
    assert item_stats_as_of(datetime(2000, 12, 1, 5), 24) == datetime(2000, 12, 1)  # naive stays naive
    params = candidate_params(CandidateConfig(item_stats_hours=24, cooc_days=1), at(13, 0))
    assert params["stats_as_of"] == at(0, 0) and params["cooc_start"] == datetime(2000, 11, 30, tzinfo=timezone.utc)
    # the other windows end at the run's as-of, which the query reads from its events (tick_as_of)
    assert "2000-12-01 13:00" not in render("candidates", **params)


def test_sql_rendering_refuses_unsafe_values_and_missing_params():
    with pytest.raises(TypeError):
        literal("x'; DROP TABLE events; --")
    with pytest.raises(ValueError, match="missing"):
        render("candidates", as_of=datetime(2000, 1, 1))
    assert literal(True) == "TRUE" and literal(3) == "3"
    assert literal(0.25) == "0.25D" and literal(1e-05) == "1e-05D" and literal(-2.0) == "-2.0D"


def test_the_candidates_sql_computes_in_doubles_not_decimals():
    # a fractional literal without the D suffix is a DECIMAL in Spark SQL: BigDecimal arithmetic per row
    blend = LinearModel(0.1, {name: 0.5 for name in FEATURES})
    params = candidate_params(CandidateConfig(), datetime(2000, 12, 1, tzinfo=timezone.utc), blend, blend)
    code = "\n".join(line for line in render("candidates", **params).splitlines() if not line.strip().startswith("--"))
    code = re.sub(r"TIMESTAMP '[^']*'", "", code)
    assert "0.5D" in code and not re.findall(r"(?<![\w.])\d+\.\d*(?:[eE][+-]?\d+)?(?![\dD])", code)


def test_run_ids_are_deterministic_utc():

    paris = timezone(timedelta(hours=1))
    assert default_run_id("precompute", datetime(2000, 12, 1, 1, tzinfo=paris)) == "precompute-20001201T000000Z"


def test_the_budget_counts_every_written_pair_floor_included():
    assert written_budget(VerifierConfig(budget=None, request_budget_per_active_user=None), 10, 3) is None
    assert written_budget(VerifierConfig(budget=100, request_budget_per_active_user=None), 10, 3) == 97
    assert written_budget(VerifierConfig(budget=100, request_budget_per_active_user=2.5), 10, 3) == 25 - 3
    per_user = VerifierConfig(budget=None, request_budget_per_active_user=0.5)
    assert written_budget(per_user, 10, 9) == 0  # the floor is kept anyway
    assert written_budget(per_user.model_copy(update={"rule": "relevance"}), 10, 9) is None  # request rule only


@pytest.mark.parametrize("per_active_user", [0.5, 1, 2.5, 4, 100])
def test_a_budget_per_active_user_bounds_the_written_pairs_per_user_with_candidates(per_active_user):
    rng = np.random.default_rng(11)
    users = rng.integers(0, 40, 600)
    items = rng.permutation(600)
    scores = np.round(rng.random(600), 2)  # ties, also at the budget's boundary
    rule = VerifierConfig(rule="request", request_threshold=0.05, request_top_k_per_user=10, request_min_per_user=1,
                          request_budget_per_active_user=per_active_user)
    keep, threshold = verify_mask(users, items, scores, rule)
    active = np.unique(users).size
    assert keep.sum() <= max(active, np.floor(per_active_user * active))  # the floor of 1 is kept whatever
    assert set(users[keep]) == set(users)  # every user keeps their best pair
    unlimited, _ = verify_mask(users, items, scores, rule.model_copy(update={"request_budget_per_active_user": None}))
    assert keep.sum() <= unlimited.sum() and not (keep & ~unlimited).any()  # the budget only removes pairs
    # beyond the floor, what is kept is exactly what passes the effective threshold
    per_user_rank = np.zeros(600, dtype=int)
    for user in np.unique(users):
        mine = np.flatnonzero(users == user)
        order = mine[np.lexsort((items[mine], -scores[mine]))]
        per_user_rank[order] = np.arange(order.size)
    beyond = (per_user_rank >= 1) & (per_user_rank < 10)
    assert (keep[beyond] == (scores[beyond] >= threshold)).all()


def test_locate_rank_walks_the_keys_from_the_largest():
    counts = [(0, 5), (3, 2), (1, 0), (7, 1)]
    assert locate_rank(counts, 1) == (7, 1)
    assert locate_rank(counts, 2) == (3, 1) and locate_rank(counts, 3) == (3, 2)
    assert locate_rank(counts, 4) == (0, 1) and locate_rank(counts, 8) == (0, 5)
    with pytest.raises(ValueError, match="beyond"):
        locate_rank(counts, 9)
    with pytest.raises(ValueError, match=">= 1"):
        locate_rank(counts, 0)


def test_fit_logistic_is_deterministic_and_ranks_by_the_informative_feature():
    from solaris.precompute.speculation import FEATURES, fit_logistic

    rng = np.random.default_rng(3)
    x = rng.random((2000, len(FEATURES)))
    y = (rng.random(2000) < 1 / (1 + np.exp(-(4 * x[:, FEATURES.index("score_next")] - 2)))).astype(float)
    first, second = fit_logistic(x, y), fit_logistic(x, y)
    assert first == second
    assert max(first.weights, key=lambda name: abs(first.weights[name])) == "score_next"
    assert first.weights["score_next"] > 0


def test_speculator_round_trips_and_its_sql_params_cover_the_blend():
    from solaris.precompute.speculation import LinearModel, Speculator, hand_blend

    blend = hand_blend(CandidateConfig())
    request = LinearModel(-3.0, {"log_events": 1.0})
    speculator = Speculator(as_of="2000-11-01T00:00:00+00:00", blend=blend, request=request)
    again = Speculator.from_json(speculator.to_json())
    assert again == speculator and again.version == speculator.version
    params = candidate_params(CandidateConfig(), datetime(2000, 12, 1, tzinfo=timezone.utc), blend, again.request)
    assert params["blend_cooc"] == 1.0 and params["request_bias"] == -3.0 and params["has_request_model"] is True
    render("candidates", **params)  # every placeholder filled


def test_busiest_ticks_spread_over_days_in_time_order():
    from solaris.precompute.speculation import busiest_ticks

    base = datetime(2000, 11, 1, tzinfo=timezone.utc)
    counts = {base + timedelta(hours=h): (h * 37) % 101 for h in range(24 * 5)}
    ticks = busiest_ticks(counts, 6, days=3, per_day=2)
    assert len(ticks) == 6 and ticks == sorted(ticks) and len({t.date() for t in ticks}) == 3
    assert busiest_ticks(counts, 6, days=3, per_day=2) == ticks
    assert busiest_ticks(counts, 1) == [max(counts, key=lambda t: (counts[t], -t.timestamp()))]


def test_the_request_rule_applies_its_own_threshold_and_top_k():
    """Rule request: ``request_threshold`` and ``request_top_k_per_user``, not the relevance settings
    (the same config object carries both; the score stage's fallback switches the rule, not the values)."""
    users, items = np.array([1, 1, 1, 2]), np.array([10, 11, 12, 10])
    scores = np.array([0.5, 0.3, 0.05, 0.2])
    rule = VerifierConfig(rule="request", request_threshold=0.1, request_top_k_per_user=1, threshold=0.4,
                          top_k_per_user=5)
    keep, threshold = verify_mask(users, items, scores, rule)
    # each user's best pair is the request rule's floor (1); with top-k 1 the threshold decides on nothing
    assert threshold == float("inf") and keep.tolist() == [True, False, False, True]
    keep, threshold = verify_mask(users, items, scores, rule.model_copy(update={"request_top_k_per_user": 3}))
    assert threshold == 0.3 and keep.tolist() == [True, True, False, True]  # lowest kept score >= 0.1
    keep, threshold = verify_mask(users, items, scores, rule.model_copy(update={"rule": "relevance"}))
    assert threshold == 0.5 and keep.tolist() == [True, False, False, False]  # lowest kept score >= 0.4


def test_the_request_rule_keeps_each_users_best_pairs_below_the_threshold_and_budget():
    """The per-user floor: a user whose candidates are all unlikely requests still gets their best
    ``request_min_per_user`` pairs (ties by item id), on top of the pairs the threshold and the
    budget keep; the top-k still caps the rest; the relevance rule has no floor."""
    users, items = np.array([1, 1, 1, 2, 2, 2, 3]), np.array([10, 11, 12, 12, 11, 10, 10])
    scores = np.array([0.5, 0.3, 0.2, 0.01, 0.01, 0.005, 0.001])
    rule = VerifierConfig(rule="request", request_threshold=0.1, request_top_k_per_user=2, request_min_per_user=2)
    keep, threshold = verify_mask(users, items, scores, rule)
    # user 1: the top-2 of the passing pairs; user 2: its best two (tie 0.01 broken by item id); user 3: its only pair
    assert threshold == float("inf") and keep.tolist() == [True, True, False, True, True, False, True]
    keep, _ = verify_mask(users, items, scores, rule.model_copy(update={"request_min_per_user": 0}))
    assert keep.tolist() == [True, True, False, False, False, False, False]
    keep, _ = verify_mask(users, items, scores, rule.model_copy(update={"budget": 1}))  # the budget keeps 0.5 only
    assert keep.tolist() == [True, True, False, True, True, False, True]
    keep, _ = verify_mask(users, items, scores, rule.model_copy(update={"budget": 1, "request_min_per_user": 1}))
    assert keep.tolist() == [True, False, False, False, True, False, True]
    relevance = rule.model_copy(update={"rule": "relevance", "threshold": 0.1, "top_k_per_user": 2})
    assert relevance.active_min_per_user() == 0
    assert verify_mask(users, items, scores, relevance)[0].tolist() == [True, True, False, False, False, False, False]
    # the floor never exceeds the top-k
    assert rule.model_copy(update={"request_top_k_per_user": 1}).active_min_per_user() == 1
