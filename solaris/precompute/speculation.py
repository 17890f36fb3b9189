"""Speculation and verification rules (pure: no Spark import).

* :func:`candidate_params` turns the typed config and a run's as-of into the parameters of
  ``sql/candidates.sql`` (window starts as timestamps, so the SQL needs no interval arithmetic).
* :func:`effective_threshold` / :func:`verify_mask` implement the verifier rule: an absolute
  threshold, a global budget (threshold raised to the budget's quantile) and a per-user top-k,
  all of which apply when set. The Spark job uses the same threshold function, so the edge cases
  tested here (empty input, all below threshold, budget larger than input) are the job's.
* TTL arithmetic: ``expires_at = computed_at + ttl``; servable iff ``now < expires_at``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
from numpy.typing import ArrayLike

from solaris.config import CandidateConfig, VerifierConfig


def candidate_params(config: CandidateConfig, as_of: datetime) -> dict:
    hours = lambda value: timedelta(hours=value)  # noqa: E731
    return {
        "as_of": as_of,
        "lookback_start": as_of - hours(config.lookback_hours),
        "cooc_start": as_of - timedelta(days=config.cooc_days),
        "trending_start": as_of - hours(config.trending_hours),
        "recent_items": config.recent_items,
        "cooc_items_per_user": config.cooc_items_per_user,
        "cooc_neighbors": config.cooc_neighbors,
        "trending_items": config.trending_items,
        "weight_cooc": float(config.weight_cooc),
        "weight_trending": float(config.weight_trending),
        "weight_recent": float(config.weight_recent),
        "per_user": config.per_user,
        "budget": config.budget,
    }


def effective_threshold(scores: ArrayLike, rule: VerifierConfig) -> float:
    """Lowest verifier score kept: the absolute threshold, raised so at most ``budget`` pairs pass.

    Ties at the budget's boundary are all kept or all dropped together (dropped), so the result
    never depends on row order. Returns ``inf`` when nothing can pass (e.g. empty input).
    """
    scores = np.asarray(scores, dtype=np.float64)
    threshold = -np.inf if rule.threshold is None else float(rule.threshold)
    passing = np.sort(scores[scores >= threshold])[::-1]
    if passing.size == 0:
        return float("inf")
    if rule.budget is not None and passing.size > rule.budget:
        boundary = passing[rule.budget]  # first score that does not fit
        above = passing[passing > boundary]
        return float(above[-1]) if above.size else float("inf")
    return float(passing[-1]) if rule.threshold is None else max(threshold, float(passing[-1]))


def threshold_inputs(scores: np.ndarray, rule: VerifierConfig) -> np.ndarray:
    """The only scores :func:`effective_threshold` depends on (what the Spark job collects).

    With a global budget: the ``budget + 1`` highest passing scores; without: the lowest passing
    score. ``effective_threshold(threshold_inputs(s, rule), rule) == effective_threshold(s, rule)``
    for every input, so the driver never holds a copy of every score.
    """
    scores = np.asarray(scores, dtype=np.float64)
    passing = scores if rule.threshold is None else scores[scores >= float(rule.threshold)]
    if rule.budget is None:
        return passing[np.argsort(passing)[:1]]
    return np.sort(passing)[::-1][: rule.budget + 1]


def verify_mask(
    user_id: ArrayLike, item_id: ArrayLike, scores: ArrayLike, rule: VerifierConfig
) -> tuple[np.ndarray, float]:
    """Boolean mask of kept pairs and the effective threshold (the Spark job's rule, in numpy).

    Order of rules: threshold (absolute, raised by the budget), then top-k per user among the
    pairs still kept, ties broken by item id, exactly like the job's window.
    """
    scores = np.asarray(scores, dtype=np.float64)
    user_id, item_id = np.asarray(user_id), np.asarray(item_id)
    threshold = effective_threshold(scores, rule)
    keep = scores >= threshold
    if rule.top_k_per_user is not None and keep.any():
        rows = np.flatnonzero(keep)
        order = rows[np.lexsort((item_id[rows], -scores[rows], user_id[rows]))]
        users = user_id[order]
        starts = np.r_[0, np.flatnonzero(users[1:] != users[:-1]) + 1]
        rank = np.arange(order.size) - np.repeat(starts, np.diff(np.r_[starts, order.size]))
        keep[order[rank >= rule.top_k_per_user]] = False
    return keep, threshold


def expires_at(computed_at: datetime, ttl_hours: float) -> datetime:
    return computed_at + timedelta(hours=ttl_hours)


def is_servable(now: datetime, expiry: datetime) -> bool:
    """docs/architecture.md §2: a value is servable at ``now`` iff ``now < expires_at``."""
    return now < expiry
