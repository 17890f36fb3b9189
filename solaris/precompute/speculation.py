"""Speculation and verification rules (pure: no Spark import).

* :func:`candidate_params` turns the typed config, a run's as-of and the blend / request models into
  the parameters of ``sql/candidates.sql`` (window starts as timestamps, so the SQL needs no
  interval arithmetic).
* :class:`LinearModel`, :func:`fit_logistic`, :class:`Speculator`: the blend of the sources and the
  request model, fit on past ticks (``solaris.stages.train_speculator``) and applied in the SQL.
* :func:`busiest_ticks`: which hours to learn from (and to benchmark on): the most requesters.
* :func:`written_budget` / :func:`effective_threshold` / :func:`verify_mask` implement the verifier
  rule: an absolute threshold, a global budget (absolute or per active user; the threshold raised
  to the budget's boundary) and a per-user top-k, all of which apply when set, plus the request
  rule's per-user floor (each user's best pairs kept whatever their score). The Spark job uses the
  same functions (and :func:`locate_rank` to find the boundary), so the edge cases tested here
  (empty input, all below threshold, budget larger than input) are the job's.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from solaris.config import CandidateConfig, VerifierConfig
from solaris.timeutil import utc_stamp, window_micros

SOURCES = ("cooc", "trending", "recent", "next", "popular", "retrieval")
# The blend's inputs, in the order of the SQL's `features` view: one score per source, then the user's activity.
FEATURES = (*(f"score_{source}" for source in SOURCES), "log_events", "log_events_last_hour", "days_since_last")


@dataclass(frozen=True)
class LinearModel:
    """``bias + sum(weights[f] * x_f)`` over :data:`FEATURES` (a logit when fit by :func:`fit_logistic`)."""

    bias: float
    weights: dict[str, float]

    def vector(self) -> np.ndarray:
        return np.array([self.weights.get(name, 0.0) for name in FEATURES], dtype=np.float64)

    def logit(self, x: np.ndarray) -> np.ndarray:
        return self.bias + np.asarray(x, dtype=np.float64) @ self.vector()

    def sql_params(self, prefix: str) -> dict[str, float]:
        """``{prefix}_bias`` and ``{prefix}_<feature without score_>`` for sql/candidates.sql."""
        params = {f"{prefix}_bias": float(self.bias)}
        for name, weight in zip(FEATURES, self.vector(), strict=True):
            params[f"{prefix}_{name.removeprefix('score_')}"] = float(weight)
        return params


@dataclass(frozen=True)
class Speculator:
    """What ``train-speculator`` learned at ``as_of`` from past ticks: the blend (logit of "requested
    within the horizon") and the request model (logit of "requested within the TTL"), the verifier's
    score under rule ``request``. ``version`` is a hash of the content."""

    as_of: str
    blend: LinearModel
    request: LinearModel
    ticks: list[str] = field(default_factory=list)
    rows: int = 0
    positives: int = 0

    @property
    def version(self) -> str:
        body = json.dumps({"blend": asdict(self.blend), "request": asdict(self.request), "as_of": self.as_of},
                          sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "version": self.version}, sort_keys=True, indent=2)

    @staticmethod
    def from_json(text: str) -> Speculator:
        data = json.loads(text)
        return Speculator(as_of=data["as_of"], blend=LinearModel(**data["blend"]),
                          request=LinearModel(**data["request"]), ticks=list(data.get("ticks", [])),
                          rows=int(data.get("rows", 0)), positives=int(data.get("positives", 0)))


def hand_blend(config: CandidateConfig) -> LinearModel:
    """The hand weights of the config as a blend (the ``hand`` option and the fallback)."""
    return LinearModel(bias=0.0, weights={f"score_{source}": float(getattr(config, f"weight_{source}"))
                                          for source in SOURCES})


def candidate_params(config: CandidateConfig, as_of: datetime, blend: LinearModel | None = None,
                     request: LinearModel | None = None, restrict_users: bool = False) -> dict:
    """Parameters of sql/candidates.sql: the windows that end at the as-of as lengths in microseconds
    (the query reads the as-of from its events: ``tick_as_of``), the item statistics' period as
    timestamps, source switches, the two models.

    ``restrict_users``: only the users of the ``lane_users`` view get candidates (the fast lane).
    """
    blend = blend or hand_blend(config)
    stats_as_of = item_stats_as_of(as_of, config.item_stats_hours)
    return {
        "lookback_micros": window_micros(config.lookback_hours),
        "stats_as_of": stats_as_of,
        "cooc_start": stats_as_of - timedelta(days=config.cooc_days),
        "trending_micros": window_micros(config.trending_hours),
        "popular_micros": window_micros(24 * config.popular_days),
        "recent_items": config.recent_items,
        "cooc_items_per_user": config.cooc_items_per_user,
        "cooc_neighbors": config.cooc_neighbors,
        "trending_items": config.trending_items,
        "next_window": config.next_window,
        "next_neighbors": config.next_neighbors,
        "next_seeds": config.next_seeds,
        "popular_items": config.popular_items,
        "source_items": config.source_items,
        **{f"use_{source}": source in config.sources for source in SOURCES},
        **blend.sql_params("blend"),
        "has_request_model": request is not None,
        **(request or LinearModel(0.0, {})).sql_params("request"),
        "per_user": config.per_user,
        "budget": config.budget,
        "restrict_users": restrict_users,
    }


def item_stats_as_of(as_of: datetime, period_hours: int) -> datetime:
    """The as-of of the item-item statistics: ``as_of`` floored to ``period_hours`` (epoch-aligned, UTC).

    Never later than ``as_of``, so the statistics stay point-in-time; every run of one period gets
    the same value, so they can share one computation (``solaris.stages.candidates``)."""
    epoch = datetime(1970, 1, 1, tzinfo=as_of.tzinfo and timezone.utc)
    return as_of - (as_of - epoch) % timedelta(hours=period_hours)


def item_stats_key(view: str, stats_as_of: datetime, statements: Sequence[str]) -> str:
    """The key under which one period's item-item statistic is stored (table ``item_statistics``).

    ``statements``: the rendered SQL that computes the statistic. Why a digest of the SQL and not of
    the settings: the rendered text holds every setting that shapes the statistic (its windows, caps,
    the period's as-of) and the logic itself, so statistics computed with other settings or by an
    older query are never read as if they were this run's.
    """
    digest = hashlib.sha256("\n;\n".join(statements).encode()).hexdigest()[:16]
    return f"{view}-{utc_stamp(stats_as_of)}-{digest}"


def fit_logistic(x: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None, l2: float = 1.0,
                 iterations: int = 50) -> LinearModel:
    """Weighted L2-regularised logistic regression by Newton's method (deterministic, no randomness).

    Features are standardised for the fit (so ``l2`` treats them alike) and the weights mapped back
    to raw feature units, so the model applies to the SQL's raw columns. The bias is not penalised.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    w = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    design = np.hstack([np.ones((len(y), 1)), (x - mean) / scale])
    beta = np.zeros(design.shape[1])
    penalty = np.full(design.shape[1], float(l2))
    penalty[0] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(design @ beta, -30, 30)))
        gradient = design.T @ (w * (p - y)) + penalty * beta
        hessian = (design * (w * p * (1 - p))[:, None]).T @ design + np.diag(penalty) + 1e-9 * np.eye(len(beta))
        step = np.linalg.solve(hessian, gradient)
        beta -= step
        if np.max(np.abs(step)) < 1e-8:
            break
    coefficients = beta[1:] / scale
    return LinearModel(bias=float(beta[0] - coefficients @ mean),
                       weights={name: float(c) for name, c in zip(FEATURES, coefficients, strict=True)})


def busiest_ticks(requesters: dict[datetime, int], n_ticks: int, days: int | None = None,
                  per_day: int | None = None) -> list[datetime]:
    """Hourly ticks with the most distinct requesters in the hour after them, in time order.

    With ``days`` / ``per_day``: the ``per_day`` busiest hours of each day, over the ``days`` days
    whose chosen hours hold the most requesters (spreads the ticks over several days). Ties by time.
    """
    ranked = sorted(requesters.items(), key=lambda kv: (-kv[1], kv[0]))
    if days is None or per_day is None:
        return sorted(t for t, _ in ranked[:n_ticks])
    by_day: dict = {}
    for tick, count in ranked:
        chosen = by_day.setdefault(tick.date(), [])
        if len(chosen) < per_day:
            chosen.append((tick, count))
    best_days = sorted(by_day.items(), key=lambda kv: (-sum(c for _, c in kv[1]), kv[0]))[:days]
    return sorted(t for _, chosen in best_days for t, _ in chosen)[:n_ticks]


def written_budget(rule: VerifierConfig, active_users: int, floor_pairs: int) -> int | None:
    """Pairs the threshold may keep on top of the per-user floor, or None without a global budget.

    The global budget is the smaller of ``budget`` and (rule request) ``request_budget_per_active_user``
    x the users with candidates; it counts every written pair, the floor's included, so the floor's pairs are taken
    from it first (never below zero: the floor is kept whatever the budget).
    """
    caps = []
    if rule.budget is not None:
        caps.append(rule.budget)
    per_user = rule.active_budget_per_user()
    if per_user is not None:
        caps.append(math.floor(per_user * active_users))
    return max(0, min(caps) - floor_pairs) if caps else None


def effective_threshold(scores: ArrayLike, threshold: float | None, budget: int | None) -> float:
    """Lowest score kept among the pairs the threshold decides on (``scores``): the absolute
    ``threshold``, raised so at most ``budget`` pairs pass.

    Ties at the budget's boundary are all kept or all dropped together (dropped), so the result
    never depends on row order. Returns ``inf`` when nothing can pass (e.g. empty input).
    """
    scores = np.asarray(scores, dtype=np.float64)
    absolute = -np.inf if threshold is None else float(threshold)
    passing = np.sort(scores[scores >= absolute])[::-1]
    if passing.size == 0:
        return float("inf")
    if budget is not None and passing.size > budget:
        if budget == 0:
            return float("inf")
        boundary = passing[budget]  # first score that does not fit
        above = passing[passing > boundary]
        return float(above[-1]) if above.size else float("inf")
    return float(passing[-1]) if threshold is None else max(absolute, float(passing[-1]))


def locate_rank(counts: Sequence[tuple[Any, int]], rank: int) -> tuple[Any, int]:
    """The key holding the ``rank``-th largest value (1-based) and the value's rank within that key,
    given the count of values per key, keys ordered like their values (a histogram's buckets, or
    distinct values). How the Spark job finds a budget's boundary without collecting the scores
    above it: a bounded histogram per step, then only the boundary bucket's distinct values."""
    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}")
    for key, count in sorted(counts, key=lambda kv: kv[0], reverse=True):
        if rank <= count:
            return key, rank
        rank -= count
    raise ValueError(f"rank beyond the {sum(c for _, c in counts)} values counted")


def verify_mask(
    user_id: ArrayLike, item_id: ArrayLike, scores: ArrayLike, rule: VerifierConfig
) -> tuple[np.ndarray, float]:
    """Boolean mask of kept pairs and the effective threshold (the Spark job's rule, in numpy).

    Each user's pairs are ranked by score (ties by item id, exactly like the job's window). The
    rule's per-user floor (rank < ``active_min_per_user()``) is kept whatever its score. The other
    pairs within the per-user top-k are *eligible*: kept when at or above the effective threshold,
    the absolute threshold raised so that at most :func:`written_budget` eligible pairs pass.
    """
    scores = np.asarray(scores, dtype=np.float64)
    user_id, item_id = np.asarray(user_id), np.asarray(item_id)
    top_k, floor = rule.active_top_k(), rule.active_min_per_user()
    order = np.lexsort((item_id, -scores, user_id))
    users = user_id[order]
    starts = np.r_[0, np.flatnonzero(users[1:] != users[:-1]) + 1] if users.size else np.zeros(0, np.int64)
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size) - np.repeat(starts, np.diff(np.r_[starts, order.size]))
    in_floor = rank < floor
    eligible = ~in_floor if top_k is None else ~in_floor & (rank < top_k)
    budget = written_budget(rule, int(starts.size), int(in_floor.sum()))
    threshold = effective_threshold(scores[eligible], rule.active_threshold(), budget)
    return in_floor | (eligible & (scores >= threshold)), threshold


