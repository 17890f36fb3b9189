"""User-bootstrap intervals of the evaluation (pure numpy, no Spark)."""

from __future__ import annotations

import numpy as np
import pytest

from solaris.evaluation import bootstrap
from solaris.evaluation.protocol import SOLARIS_ALL, VARIANTS
from solaris.models import metrics
from tests.tolerance import assert_far_apart


def _clustered(rng: np.random.Generator, n_users: int, per_user: int, user_sd: float) -> tuple[np.ndarray, ...]:
    """Values with a strong per-user effect (bursty users), true mean 0."""
    users = np.repeat(np.arange(n_users), per_user)
    values = rng.normal(0, user_sd, n_users)[users] + rng.normal(0, 1, users.size)
    return users, values


def _mean_interval(users: np.ndarray, values: np.ndarray, rng: np.random.Generator) -> bootstrap.Interval:
    codes, n_users = bootstrap.user_codes(users)
    counts = bootstrap.resample_counts(n_users, 300, rng)
    sums, sizes = np.bincount(codes, values, n_users), np.bincount(codes, minlength=n_users)
    return bootstrap.percentile_interval(values.mean(), counts @ sums / (counts @ sizes))


def test_user_resampling_covers_a_known_mean_where_request_resampling_does_not():
    rng = np.random.default_rng(0)
    covered_users, covered_requests = 0, 0
    trials = 150
    for _ in range(trials):
        users, values = _clustered(rng, n_users=40, per_user=25, user_sd=1.0)
        covered_users += bool(_mean_interval(users, values, rng).includes_zero)
        # the same with every request its own "user": treats a burst as independent draws
        covered_requests += bool(_mean_interval(np.arange(values.size), values, rng).includes_zero)
    assert covered_users / trials >= 0.88  # nominal 95 %
    assert covered_requests / trials < 0.6  # far too narrow: why the evaluation resamples users


def test_resample_counts_draw_every_user_slot_once_per_resample():
    counts = bootstrap.resample_counts(7, 20, np.random.default_rng(1))
    assert counts.shape == (20, 7) and (counts.sum(axis=1) == 7).all() and (counts >= 0).all()


def test_weighted_metrics_match_the_plain_ones_and_duplicated_users():
    rng = np.random.default_rng(2)
    users = rng.integers(0, 30, 300)
    labels = (rng.random(300) < 0.4).astype(np.float64)
    predictions = np.round(np.clip(0.4 + 0.3 * (labels - 0.4) + rng.normal(0, 0.2, 300), 0.01, 0.99), 1)  # ties
    codes, n_users = bootstrap.user_codes(users)
    ones = np.ones((1, n_users), dtype=np.int64)
    assert bootstrap.weighted_ne(labels, predictions, codes, ones)[0] == pytest.approx(
        metrics.normalized_entropy(labels, predictions))
    assert bootstrap.weighted_auc(labels, predictions, codes, ones)[0] == pytest.approx(
        metrics.auc(labels, predictions))
    # drawing user u k times = repeating u's requests k times
    counts = rng.integers(0, 3, (1, n_users))
    repeat = counts[0][codes]
    assert bootstrap.weighted_ne(labels, predictions, codes, counts)[0] == pytest.approx(
        metrics.normalized_entropy(np.repeat(labels, repeat), np.repeat(predictions, repeat)))
    assert bootstrap.weighted_auc(labels, predictions, codes, counts, chunk=1)[0] == pytest.approx(
        metrics.auc(np.repeat(labels, repeat), np.repeat(predictions, repeat)))


def _requests(rng: np.random.Generator, n_seeds: int = 2) -> bootstrap.ScoredRequests:
    users = np.repeat(np.arange(60), 10)
    labels = (rng.random(users.size) < 0.5).astype(np.float64)
    seeds = []
    for _ in range(n_seeds):
        weak = labels - 0.5 + rng.normal(0, 1.2, users.size)
        strong = labels - 0.5 + rng.normal(0, 0.4, users.size)
        predictions = {name: 1 / (1 + np.exp(-weak)) for name in VARIANTS}
        predictions["fm"] = 1 / (1 + np.exp(-3 * strong))
        predictions[SOLARIS_ALL] = 1 / (1 + np.exp(-(weak + strong) / 1.5))
        seeds.append(predictions)
    return bootstrap.ScoredRequests(users, labels, tuple(seeds))


def test_paired_resampling_keeps_the_same_users_for_both_variants():
    requests = _requests(np.random.default_rng(3))
    out = bootstrap.bootstrap_intervals(requests, resamples=200, seed=1).pooled
    # vm_distilled predicts exactly like vm_baseline: paired, every resample's difference is exactly 0
    same = out.ne_vs_baseline["vm_distilled"]
    assert same.low == same.high == same.estimate == 0.0
    # a variant with part of the FM's signal: its NE gain over the VM is clearly positive
    assert out.ne_vs_baseline[SOLARIS_ALL].high < 0
    assert out.fm_vm_gap.low > 0
    ratio = out.transfer_ratio[SOLARIS_ALL]
    assert 0 < ratio.low <= ratio.estimate <= ratio.high < 1.5
    comparison = out.comparisons[f"{SOLARIS_ALL}-vs-vm_distilled"]
    assert comparison.transfer_ratio_difference.low > 0  # SOLARIS-like transfers more than the (VM-like) distilled
    assert comparison.ne_difference.high < 0  # ...and so has the lower NE


def test_intervals_are_deterministic_under_a_seed_and_pooled_is_the_mean_of_seeds():
    requests = _requests(np.random.default_rng(4))
    first = bootstrap.bootstrap_intervals(requests, resamples=100, seed=7)
    assert first == bootstrap.bootstrap_intervals(requests, resamples=100, seed=7)
    assert first != bootstrap.bootstrap_intervals(requests, resamples=100, seed=8)
    per_seed = [s.ne["fm"].estimate for s in first.per_seed]
    assert first.pooled.ne["fm"].estimate == pytest.approx(np.mean(per_seed))
    assert first.n_users == 60 and first.n_requests == 600 and len(first.per_seed) == 2


def test_transfer_ratio_interval_is_unbounded_when_the_fm_gap_is_noise():
    rng = np.random.default_rng(5)
    users = np.repeat(np.arange(50), 8)
    labels = (rng.random(users.size) < 0.5).astype(np.float64)
    same = 1 / (1 + np.exp(-(labels - 0.5 + rng.normal(0, 1, users.size))))
    predictions = {name: same for name in VARIANTS}
    predictions["fm"] = np.clip(same + rng.normal(0, 0.01, users.size), 0.01, 0.99)  # no real gain
    out = bootstrap.bootstrap_intervals(bootstrap.ScoredRequests(users, labels, (predictions,)), 200).pooled
    ratio = out.transfer_ratio[SOLARIS_ALL]
    assert ratio.low is None and ratio.high is None and ratio.undefined_share > 0.025


def test_windows_concatenate_with_the_same_seeds_only():
    rng = np.random.default_rng(6)
    a, b = _requests(rng), _requests(rng)
    both = bootstrap.ScoredRequests.concatenate([a, b])
    assert both.labels.size == a.labels.size + b.labels.size and len(both.predictions) == 2
    with pytest.raises(ValueError):
        bootstrap.ScoredRequests.concatenate([a, _requests(rng, n_seeds=1)])
    with pytest.raises(ValueError):
        bootstrap.ScoredRequests(a.users, a.labels, ({"fm": a.labels[:-1]},))


def test_auc_through_the_user_pair_matrix_equals_the_request_weighted_one(monkeypatch):
    rng = np.random.default_rng(11)
    users = rng.integers(0, 45, 700)
    labels = (rng.random(700) < 0.6).astype(np.float64)
    predictions = np.round(np.clip(0.5 + 0.2 * (labels - 0.6) + rng.normal(0, 0.2, 700), 0, 1), 2)  # many ties
    codes, n_users = bootstrap.user_codes(users)
    counts = bootstrap.resample_counts(n_users, 30, rng)
    by_pairs = bootstrap.weighted_auc(labels, predictions, codes, counts)
    monkeypatch.setattr(bootstrap, "PAIR_MATRIX_MAX_USERS", 0)  # many users: weights per request instead
    by_requests = bootstrap.weighted_auc(labels, predictions, codes, counts, chunk=7)
    assert np.allclose(by_pairs, by_requests, rtol=0, atol=1e-12)
    # resamples differ: by far more than two rows of one matrix product may differ in their last bits
    assert_far_apart(by_pairs[0], by_pairs[1])


def test_cluster_interval_collapses_when_every_cluster_has_the_same_ratio():
    totals = np.array([[10.0, 2.0], [30.0, 6.0], [5.0, 1.0]])  # requests, hits: 20 % in every cluster
    interval = bootstrap.cluster_interval(totals, lambda s: s[..., 1] / s[..., 0], n_resamples=200)
    assert interval.estimate == pytest.approx(0.2)
    assert interval.low == pytest.approx(0.2) and interval.high == pytest.approx(0.2)


def test_cluster_interval_brackets_the_pooled_ratio_and_widens_with_fewer_clusters():
    rng = np.random.default_rng(3)
    requests = rng.integers(1, 50, size=400).astype(float)
    hits = rng.binomial(requests.astype(int), rng.uniform(0.05, 0.4, size=400)).astype(float)
    totals = np.column_stack([requests, hits])
    rate = lambda s: s[..., 1] / s[..., 0]  # noqa: E731
    many = bootstrap.cluster_interval(totals, rate, seed=1)
    few = bootstrap.cluster_interval(totals[:40], rate, seed=1)
    assert many.estimate == pytest.approx(hits.sum() / requests.sum())
    assert many.low < many.estimate < many.high
    assert (few.high - few.low) > (many.high - many.low)
    assert bootstrap.cluster_interval(totals, rate, seed=1) == many  # deterministic under a seed


def test_cluster_interval_is_unbounded_when_the_denominator_is_mostly_zero():
    totals = np.array([[0.0, 0.0]] * 30 + [[1.0, 1.0]])  # one cluster holds every request
    interval = bootstrap.cluster_interval(totals, lambda s: s[..., 1] / s[..., 0], n_resamples=500)
    assert interval.estimate == pytest.approx(1.0)
    assert not interval.bounded


def test_the_report_states_the_controls_the_ceiling_and_the_fine_tune_with_intervals():
    from solaris.evaluation.protocol import PRETRAINED, SOLARIS_NONE, SOLARIS_ORACLE, SOLARIS_PLACEBO

    for pair in ((SOLARIS_ALL, SOLARIS_PLACEBO), (SOLARIS_ALL, SOLARIS_NONE), (SOLARIS_ORACLE, "vm_distilled"),
                 (SOLARIS_ORACLE, SOLARIS_PLACEBO), ("vm_baseline", PRETRAINED["vm_baseline"]),
                 (SOLARIS_ALL, "vm_distilled")):
        assert pair in bootstrap.COMPARISONS, pair
    assert all(a in VARIANTS and b in VARIANTS for a, b in bootstrap.COMPARISONS)
    out = bootstrap.bootstrap_intervals(_requests(np.random.default_rng(7)), resamples=50, seed=1).pooled
    comparison = out.comparisons[f"{SOLARIS_ORACLE}-vs-{SOLARIS_PLACEBO}"]
    assert (comparison.variant, comparison.reference) == (SOLARIS_ORACLE, SOLARIS_PLACEBO)
    assert comparison.ne_difference.bounded and comparison.to_dict()["ne_difference"].keys() == {
        "estimate", "low", "high", "undefined_share"}


def test_tier_strata_compare_the_variants_on_the_requests_each_tier_served():
    from solaris.evaluation.protocol import SOLARIS_ORACLE, SOLARIS_PLACEBO

    rng = np.random.default_rng(8)
    requests = _requests(rng)
    tiers = np.where(np.arange(requests.labels.size) % 3 == 0, 1, 3)  # tier 1 on a third of the requests
    for predictions in requests.predictions:  # on tier 1 the served values help; on tier 3 they are noise
        weak = predictions[SOLARIS_PLACEBO]
        predictions[SOLARIS_ALL] = np.where(tiers == 1, predictions["fm"], weak)
        predictions[SOLARIS_ORACLE] = predictions["fm"]
    requests = bootstrap.ScoredRequests(requests.users, requests.labels, requests.predictions, tiers)
    strata = bootstrap.bootstrap_intervals(requests, resamples=200, seed=1).per_tier
    assert set(strata) == {"1", "3"}
    assert strata["1"].requests == 200 and strata["1"].share == pytest.approx(1 / 3)
    versus_placebo = f"{SOLARIS_ALL}-vs-{SOLARIS_PLACEBO}"
    assert strata["1"].ne_difference[versus_placebo].high < 0  # the pair's values carry signal
    assert strata["3"].ne_difference[versus_placebo].estimate == 0.0  # identical predictions: no difference
    assert strata["3"].ne_difference[f"{SOLARIS_ALL}-vs-{SOLARIS_ORACLE}"].low > 0  # far from the ceiling there
    assert strata["1"].ne_difference[f"{SOLARIS_ALL}-vs-{SOLARIS_ORACLE}"].estimate == 0.0
    restored = bootstrap.BootstrapIntervals.from_dict(
        bootstrap.bootstrap_intervals(requests, resamples=20, seed=1).to_dict())
    assert restored.per_tier["1"] == bootstrap.bootstrap_intervals(requests, resamples=20, seed=1).per_tier["1"]
    with pytest.raises(ValueError, match="tiers"):
        bootstrap.ScoredRequests(requests.users, requests.labels, requests.predictions, tiers[:-1])


def test_a_tier_of_a_few_users_gets_estimates_and_no_interval():
    """A user bootstrap over a handful of users is no uncertainty estimate (NE explodes in resamples
    of nearly one label): below MIN_STRATUM_USERS users the tier keeps its estimates, not bounds."""
    rng = np.random.default_rng(9)
    requests = _requests(rng)
    few = bootstrap.MIN_STRATUM_USERS - 1
    tiers = np.where(requests.users < few, 4, 1)  # tier 4: the requests of the first few users
    requests = bootstrap.ScoredRequests(requests.users, requests.labels, requests.predictions, tiers)
    strata = bootstrap.bootstrap_intervals(requests, resamples=200, seed=1).per_tier
    assert strata["4"].users == few and strata["1"].users == 60 - few
    for stratum, bounded in ((strata["4"], False), (strata["1"], True)):
        for interval in (*stratum.ne.values(), *stratum.ne_difference.values()):
            assert interval.estimate is not None and np.isfinite(interval.estimate)
            assert (interval.low is not None and interval.high is not None) == bounded
