"""The freshness curve's pure parts: features at request - age, the curve's variants, ages and results."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from solaris.config import load_config
from solaris.evaluation import freshness
from solaris.evaluation.bootstrap import ScoredRequests, bootstrap_intervals
from solaris.evaluation.protocol import FM_AT_TICK, SOLARIS_ORACLE, VARIANTS
from solaris.models.features import HistoryIndex

MINUTE = 60


def _events_on_the_edges(seed: int = 0, n: int = 600) -> tuple[np.ndarray, ...]:
    """Events whose times fall exactly on request - age for many (request, age) pairs, and 1 s either side.

    Why: an index that took an event *at* request - age (``<=`` instead of ``<``) differs from the
    rule only on such ties, which random times almost never produce.
    """
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 3 * 3600, n // 2)
    users = rng.integers(0, 6, n // 2)
    offsets = rng.choice([0, 1, 5, 15], size=n // 2) * MINUTE + rng.choice([-1, 0, 0, 1], size=n // 2)
    ts = np.concatenate([base, base + offsets])  # the second half lands on (or next to) base + age
    user = np.concatenate([users, users])
    item = rng.integers(0, 8, n)
    label = (rng.random(n) < 0.5).astype(np.float32)
    order = np.argsort(ts, kind="stable")
    return user[order], item[order], ts[order].astype(np.int64), label[order]


@pytest.mark.parametrize("age", [0, 1, 5, 15])
def test_features_at_request_minus_age_hold_only_events_strictly_before_that_moment(age):
    """Brute force per request: the user's history is the last events strictly before request - age
    (in their order), every history event is older than that moment, and the counts stop there."""
    user, item, ts, label = _events_on_the_edges()
    index = HistoryIndex(user, item, ts, label)
    length = 5
    features = freshness.features_at_age(index, user, item, ts, age_minutes=age, history_length=length)
    at = ts - age * MINUTE
    on_the_edge = 0
    for row in range(ts.size):
        mine = np.flatnonzero((user == user[row]) & (ts < at[row]))  # time-sorted, ties in stored order
        on_the_edge += int(np.any((user == user[row]) & (ts == at[row])))
        expected = item[mine[-length:]]
        mask = features.hist_mask[row]
        assert mask.sum() == expected.size, row
        assert features.hist_items[row][mask].tolist() == expected.tolist(), row
        assert np.all(features.hist_age[row][mask] > 0), row  # 0 would be an event at the query moment
        assert round(float(np.expm1(features.user_log_count[row]))) == mine.size, row
        item_count = int(np.sum((item == item[row]) & (ts < at[row])))
        assert round(float(np.expm1(features.item_pop[row]))) == item_count, row
    assert on_the_edge > 20  # the ties the rule is about are there


def test_a_value_of_age_a_is_queried_a_minutes_before_the_request():
    assert freshness.query_times(np.array([3600, 4000]), 5).tolist() == [3300, 3700]
    assert freshness.query_times(np.array([3600]), 0).tolist() == [3600]


def test_the_curve_places_the_evaluations_own_variants_and_adds_the_other_ages():
    points = freshness.curve_variants((0, 1, 5, 15, 60), (0, 1, 5))
    assert [p.variant for p in points] == [
        "fm", "fm_age1m", "fm_age5m", "fm_age15m", "fm_age60m", FM_AT_TICK,
        "solaris_oracle_age0m", "solaris_oracle_age1m", "solaris_oracle_age5m", SOLARIS_ORACLE]
    assert [p.age_minutes for p in points if p.at_tick] == [None, None]
    extra = freshness.extra_variants((1, 5, 15, 60), (0, 1, 5))  # the FM at age 0 is "fm" even when not listed
    assert not set(extra) & set(VARIANTS) and "fm" not in extra and len(extra) == 7
    assert freshness.pass_ages((0, 15, 60), (1, 5)) == (0, 1, 5, 15, 60)


def test_the_ages_are_settings_sorted_with_the_fm_at_the_request_always_there():
    curve = load_config(overrides=["evaluation.freshness.fm_ages_minutes=[60,5,5]",
                                   "evaluation.freshness.oracle_ages_minutes=[5,1]"]).evaluation.freshness
    assert curve.fm_ages_minutes == (0, 5, 60) and curve.oracle_ages_minutes == (1, 5)
    defaults = load_config().evaluation.freshness
    assert defaults.fm_ages_minutes == (0, 1, 5, 15, 60) and defaults.oracle_ages_minutes == (0, 1, 5)
    with pytest.raises((ValidationError, ValueError), match="minutes"):
        load_config(overrides=["evaluation.freshness.oracle_ages_minutes=[-1]"])


def _scored(n_users: int = 60, per_user: int = 20, seed: int = 3) -> ScoredRequests:
    """Predictions that lose the FM's edge with age: fresher values predict the labels better."""
    rng = np.random.default_rng(seed)
    users = np.repeat(np.arange(n_users), per_user)
    labels = (rng.random(users.size) < 0.4).astype(np.float32)
    signal = labels - 0.4

    def noisy(scale: float) -> np.ndarray:
        return 1 / (1 + np.exp(-(3 * signal + rng.normal(0, scale, users.size))))

    predictions = {name: noisy(2.0) for name in VARIANTS}
    predictions["fm"] = noisy(0.3)
    predictions["vm_baseline"] = noisy(1.5)
    for age, scale in ((1, 0.5), (5, 1.0), (15, 1.6), (60, 2.5)):
        predictions[freshness.fm_variant(age)] = noisy(scale)
    for age, scale in ((0, 0.6), (1, 0.8), (5, 1.2)):
        predictions[freshness.oracle_variant(age)] = noisy(scale)
    return ScoredRequests(users, labels, (predictions,))


def test_the_curve_carries_ne_and_tr_with_their_intervals_and_the_tick_at_its_median_age():
    from dataclasses import replace

    intervals = bootstrap_intervals(_scored(), resamples=200)
    t0s = ("2000-11-20T03:00:00+00:00", "2000-11-22T03:00:00+00:00")
    intervals = replace(intervals, per_window={t0: intervals.pooled for t0 in t0s})
    ages = {t0s[0]: np.array([60.0, 600.0, 1800.0]), t0s[1]: np.array([3600.0])}
    report = freshness.FreshnessReport.of((0, 1, 5, 15, 60), (0, 1, 5), intervals, ages)
    curve = report.pooled
    assert [p.variant for p in curve.points] == [p.variant for p in freshness.curve_variants((0, 1, 5, 15, 60),
                                                                                             (0, 1, 5))]
    assert curve.tick_median_age_minutes == pytest.approx(20.0)  # median of 1, 10, 30, 60 min
    assert all(p.age_minutes == pytest.approx(20.0) for p in curve.points if p.at_tick)
    assert report.per_window[t0s[1]].tick_median_age_minutes == pytest.approx(60.0)
    fm = curve.series("fm")
    assert fm[0].variant == "fm" and fm[0].transfer_ratio is None  # the reference of every TR
    ne = [p.ne.estimate for p in fm if not p.at_tick]
    assert ne == sorted(ne)  # the FM loses its edge with age here
    fresh = next(p for p in fm if p.age_minutes == 1)
    assert fresh.transfer_ratio is not None and fresh.transfer_ratio.low is not None
    assert fresh.transfer_ratio.low < fresh.transfer_ratio.estimate < fresh.transfer_ratio.high
    assert curve.vm_baseline.estimate == intervals.pooled.ne["vm_baseline"].estimate
    saved = report.to_dict()
    assert set(saved) == {"fm_ages_minutes", "oracle_ages_minutes", "pooled", "per_window"}
    assert saved["pooled"]["points"][1]["variant"] == "fm_age1m" and saved["pooled"]["points"][1]["ne"]["low"]
