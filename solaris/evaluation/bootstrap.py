"""Confidence intervals for the evaluation by bootstrap over users (pure numpy).

Why users and not requests: a user's requests come in bursts (tens to hundreds in an hour) and
share the user's taste, so they are strongly correlated; resampling requests would treat them as
independent and make every interval too narrow. Here each resample draws users with replacement
and keeps all of a drawn user's requests (weighted by how often the user was drawn).

Why paired: every variant is scored on the same requests, so one draw of users is applied to all
variants and all seeds at once. A difference between two variants is computed within each resample,
and the between-user noise they share cancels - the interval of a difference is much narrower than
what two separate intervals suggest.

Pooled statistics average the per-seed metric over seeds (the model variance is averaged, not
resampled: with 3 seeds there is too little to resample), on the requests of every window
concatenated; per-seed intervals use the same resamples, one seed at a time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from solaris.evaluation.protocol import (
    ABLATION,
    FM_AT_TICK,
    PRETRAINED,
    SOLARIS_ALL,
    SOLARIS_NONE,
    SOLARIS_ORACLE,
    SOLARIS_PLACEBO,
    TRANSFER_VARIANTS,
    VARIANTS,
    scored_variants,
)
from solaris.progress import progress
from solaris.tiers import SERVING_ORDER

log = logging.getLogger("solaris.evaluation.bootstrap")
_EPS = 1e-7
BASELINE, UPPER_BOUND = "vm_baseline", "fm"
# (variant, reference) pairs the report states a verdict on: difference of NE and of transfer ratio
COMPARISONS: tuple[tuple[str, str], ...] = (
    # the ceiling's own input: the FM limited to the history as of the serving tick, against the FM and the VM
    (FM_AT_TICK, UPPER_BOUND),
    (FM_AT_TICK, "vm_baseline"),
    # against distillation: all tiers, the distilled variant, tier 1 and the ceiling
    (SOLARIS_ALL, "vm_distilled"),
    ("solaris_distilled", "vm_distilled"),
    (ABLATION[0], "vm_distilled"),
    (SOLARIS_ORACLE, "vm_distilled"),
    # what the served values add: against the control (trained and scored with nothing served) and the
    # placebo (trained and scored with the served values permuted within each tier)
    (SOLARIS_ALL, SOLARIS_NONE),
    (SOLARIS_ALL, SOLARIS_PLACEBO),
    (ABLATION[0], SOLARIS_NONE),
    (SOLARIS_ORACLE, SOLARIS_PLACEBO),
    # what the fine-tune on the tail does to the VMs
    ("vm_baseline", PRETRAINED["vm_baseline"]),
    ("vm_distilled", PRETRAINED["vm_distilled"]),
    # what each tier adds to the ones before (the model fine-tuned on every tier)
    *zip(ABLATION[1:], ABLATION[:-1], strict=True),
)


@dataclass(frozen=True)
class Interval:
    """A point estimate on the data as observed and its bootstrap percentile interval.

    ``low``/``high`` are ``None`` when the statistic was undefined in more than half of the
    ``1 - confidence`` tail mass of resamples (e.g. a transfer ratio when the FM did not beat the VM
    in many resamples): the interval is then unbounded and is reported as such.
    """

    estimate: float | None
    low: float | None
    high: float | None
    undefined_share: float = 0.0

    @property
    def bounded(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def includes_zero(self) -> bool:
        return not self.bounded or (self.low is not None and self.high is not None and self.low <= 0 <= self.high)

    def to_dict(self) -> dict[str, float | None]:
        return {"estimate": self.estimate, "low": self.low, "high": self.high, "undefined_share": self.undefined_share}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Interval:
        return cls(data["estimate"], data["low"], data["high"], float(data.get("undefined_share") or 0.0))


@dataclass(frozen=True)
class Comparison:
    """A paired difference ``variant - reference``: of NE (negative: the variant is better) and of TR."""

    variant: str
    reference: str
    ne_difference: Interval
    transfer_ratio_difference: Interval

    @property
    def key(self) -> str:
        return f"{self.variant}-vs-{self.reference}"

    def to_dict(self) -> dict[str, Any]:
        return {"variant": self.variant, "reference": self.reference, "ne_difference": self.ne_difference.to_dict(),
                "transfer_ratio_difference": self.transfer_ratio_difference.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Comparison:
        return cls(data["variant"], data["reference"], Interval.from_dict(data["ne_difference"]),
                   Interval.from_dict(data["transfer_ratio_difference"]))


def _intervals(data: Mapping[str, Any]) -> dict[str, Interval]:
    return {name: Interval.from_dict(cell) for name, cell in data.items()}


@dataclass(frozen=True)
class IntervalSummary:
    """Every interval the report states, for one set of predictions (pooled, one seed or one window).

    ``ne`` per variant, ``auc`` per variant of :data:`VARIANTS`; ``fm_vm_gap`` = NE_VM - NE_FM;
    ``ne_vs_baseline`` = NE_variant - NE_VM; ``transfer_ratio`` per variant of :data:`TRANSFER_VARIANTS`
    and of the freshness curve (:mod:`solaris.evaluation.freshness`); ``comparisons`` by
    ``<variant>-vs-<reference>`` (:data:`COMPARISONS`).
    """

    ne: Mapping[str, Interval]
    auc: Mapping[str, Interval]
    fm_vm_gap: Interval
    ne_vs_baseline: Mapping[str, Interval]
    transfer_ratio: Mapping[str, Interval]
    comparisons: Mapping[str, Comparison]

    def to_dict(self) -> dict[str, Any]:
        return {
            "ne": {k: v.to_dict() for k, v in self.ne.items()},
            "auc": {k: v.to_dict() for k, v in self.auc.items()},
            "fm_vm_gap": self.fm_vm_gap.to_dict(),
            "ne_vs_baseline": {k: v.to_dict() for k, v in self.ne_vs_baseline.items()},
            "transfer_ratio": {k: v.to_dict() for k, v in self.transfer_ratio.items()},
            "comparisons": {k: v.to_dict() for k, v in self.comparisons.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IntervalSummary:
        return cls(
            _intervals(data["ne"]), _intervals(data["auc"]), Interval.from_dict(data["fm_vm_gap"]),
            _intervals(data["ne_vs_baseline"]), _intervals(data["transfer_ratio"]),
            {k: Comparison.from_dict(v) for k, v in data["comparisons"].items()},
        )


# (variant, reference) pairs compared on the scored requests one tier served: what the tier's values
# carry (against the placebo and the VM fed nothing) and how far it stays from the ceiling
TIER_COMPARISONS: tuple[tuple[str, str], ...] = (
    (SOLARIS_ALL, SOLARIS_PLACEBO),
    (SOLARIS_ALL, SOLARIS_NONE),
    (SOLARIS_ALL, SOLARIS_ORACLE),
    ("solaris_distilled", "vm_distilled"),
)


@dataclass(frozen=True)
class TierStratum:
    """The scored requests a tier served (pooled over seeds): their share and paired ΔNE intervals.

    ``ne_difference`` by ``<variant>-vs-<reference>`` (:data:`TIER_COMPARISONS`); ``ne`` per variant
    on these requests. ``SOLARIS_ALL - oracle`` is the distance from the ceiling on them.
    """

    tier: int
    requests: int
    users: int
    share: float
    ne: Mapping[str, Interval]
    ne_difference: Mapping[str, Interval]

    @property
    def bootstrapped(self) -> bool:
        """Whether its intervals were bootstrapped (:func:`has_enough_users`), or it holds estimates only."""
        return has_enough_users(self.users)

    def to_dict(self) -> dict[str, Any]:
        return {"tier": self.tier, "requests": self.requests, "users": self.users, "share": self.share,
                "ne": {k: v.to_dict() for k, v in self.ne.items()},
                "ne_difference": {k: v.to_dict() for k, v in self.ne_difference.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TierStratum:
        return cls(int(data["tier"]), int(data["requests"]), int(data["users"]), float(data["share"]),
                   _intervals(data["ne"]), _intervals(data["ne_difference"]))


@dataclass(frozen=True)
class BootstrapIntervals:
    """The user-bootstrap intervals of an evaluation (``metrics.json``'s ``intervals``).

    ``pooled``: statistics averaged over seeds on every window's requests; ``per_seed``: one seed at
    a time (same resamples); ``per_window``: by window T0, pooled over seeds (with more than one window);
    ``per_tier``: the requests each serving tier answered, pooled over seeds (when the tiers are known).
    """

    resamples: int
    confidence: float
    n_requests: int
    n_users: int
    n_seeds: int
    pooled: IntervalSummary
    per_seed: tuple[IntervalSummary, ...]
    per_window: Mapping[str, IntervalSummary] = field(default_factory=dict)
    per_tier: Mapping[str, TierStratum] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {"resamples": self.resamples, "confidence": self.confidence, "n_requests": self.n_requests,
               "n_users": self.n_users, "n_seeds": self.n_seeds, "pooled": self.pooled.to_dict(),
               "per_seed": [cell.to_dict() for cell in self.per_seed]}
        if self.per_window:
            out["per_window"] = {t0: cell.to_dict() for t0, cell in self.per_window.items()}
        if self.per_tier:
            out["per_tier"] = {tier: cell.to_dict() for tier, cell in self.per_tier.items()}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BootstrapIntervals:
        return cls(
            int(data["resamples"]), float(data["confidence"]), int(data["n_requests"]), int(data["n_users"]),
            int(data["n_seeds"]), IntervalSummary.from_dict(data["pooled"]),
            tuple(IntervalSummary.from_dict(cell) for cell in data["per_seed"]),
            {t0: IntervalSummary.from_dict(cell) for t0, cell in data.get("per_window", {}).items()},
            {tier: TierStratum.from_dict(cell) for tier, cell in data.get("per_tier", {}).items()},
        )


def percentile_interval(estimate: float, replicates: np.ndarray, confidence: float = 0.95) -> Interval:
    """Percentile interval of ``replicates`` (NaN = undefined in that resample)."""
    values = np.asarray(replicates, dtype=np.float64)
    finite = values[np.isfinite(values)]
    undefined = 1.0 - finite.size / values.size if values.size else 1.0
    point = float(estimate) if np.isfinite(estimate) else None
    if finite.size == 0 or undefined > (1.0 - confidence) / 2:
        return Interval(point, None, None, undefined)
    tail = 100 * (1.0 - confidence) / 2
    low, high = np.percentile(finite, [tail, 100 - tail])
    return Interval(point, float(low), float(high), undefined)


def user_codes(users: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense user index of every request (0..n_users-1) and the number of distinct users."""
    uniques, codes = np.unique(np.asarray(users), return_inverse=True)
    return codes.astype(np.int64), int(uniques.size)


def resample_counts(n_users: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``[n_resamples, n_users]``: how many times each user is drawn (with replacement) per resample."""
    draws = rng.integers(0, n_users, size=(n_resamples, n_users))
    offsets = (np.arange(n_resamples, dtype=np.int64) * n_users)[:, None]
    return np.bincount((draws + offsets).ravel(), minlength=n_resamples * n_users).reshape(n_resamples, n_users)


def _entropy(rate: np.ndarray) -> np.ndarray:
    rate = np.clip(rate, _EPS, 1 - _EPS)
    return -(rate * np.log(rate) + (1 - rate) * np.log(1 - rate))


def weighted_ne(labels: np.ndarray, predictions: np.ndarray, codes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """NE in each resample: requests weighted by their user's draw count (``counts[b, user]``).

    Log-loss and base rate are sums over users, so each resample is a matrix product over users.
    """
    y = np.asarray(labels, dtype=np.float64)
    p = np.clip(np.asarray(predictions, dtype=np.float64), _EPS, 1 - _EPS)
    n_users = counts.shape[1]
    loss = np.bincount(codes, -(y * np.log(p) + (1 - y) * np.log(1 - p)), minlength=n_users)
    positives = np.bincount(codes, y, minlength=n_users)
    requests = np.bincount(codes, minlength=n_users).astype(np.float64)
    weight = counts @ requests
    with np.errstate(invalid="ignore", divide="ignore"):
        return (counts @ loss / weight) / _entropy(counts @ positives / weight)


# A serving tier that answered the requests of fewer users than this gets estimates, no interval. Why: a
# user bootstrap over a handful of users draws resamples whose requests are nearly all positive (or
# all negative), where NE's denominator (the base rate's entropy) is close to 0 and NE explodes; such a
# percentile interval is an artefact of the few draws, not an uncertainty.
MIN_STRATUM_USERS = 20


def has_enough_users(users: int) -> bool:
    """A stratum of ``users`` distinct users is bootstrapped (:data:`MIN_STRATUM_USERS`)."""
    return users >= MIN_STRATUM_USERS

PAIR_MATRIX_MAX_USERS = 4000  # above this the users x users matrix is too big: weight requests instead


def user_pair_concordance(
    labels: np.ndarray, predictions: np.ndarray, codes: np.ndarray, n_users: int, block: int = 64
) -> np.ndarray:
    """``A[u, v]``: pairs (positive request of u, negative request of v) ranked right, ties half.

    Why: the AUC of a resample that draws user ``u`` ``c_u`` times is ``c^T A c / (c.P * c.N)``, so
    once ``A`` is known each resample is a product of small matrices instead of a pass over every
    request. Built block of users by block (cumulative negatives per tie group), no loop per user.
    """
    y = np.asarray(labels, dtype=np.float64) > 0.5
    p = np.asarray(predictions, dtype=np.float64)
    order = np.argsort(p, kind="mergesort")
    sorted_p = p[order]
    group = np.concatenate([[0], np.cumsum(np.diff(sorted_p) != 0)])  # tie group of each sorted request
    n_groups = int(group[-1]) + 1 if group.size else 0
    sorted_codes, sorted_y = codes[order], y[order]
    neg_group, neg_user = group[~sorted_y], sorted_codes[~sorted_y]
    pos_group, pos_user = group[sorted_y], sorted_codes[sorted_y]
    by_user = np.argsort(pos_user, kind="stable")
    pos_group, pos_user = pos_group[by_user], pos_user[by_user]
    users_with_pos, starts = np.unique(pos_user, return_index=True)
    out = np.zeros((n_users, n_users), dtype=np.float64)
    if pos_user.size == 0:
        return out
    for first in range(0, n_users, block):
        width = min(block, n_users - first)
        mine = (neg_user >= first) & (neg_user < first + width)
        # [user of the block, tie group]: each user's row contiguous, so the running sums over groups
        # (the long axis) read memory in order
        cells = (neg_user[mine] - first) * n_groups + neg_group[mine]
        negatives = np.bincount(cells, minlength=width * n_groups).reshape(width, n_groups).astype(np.float64)
        ranked = np.cumsum(negatives, axis=1)
        ranked -= 0.5 * negatives  # below the group + half of its ties
        out[users_with_pos, first : first + width] = np.add.reduceat(ranked[:, pos_group], starts, axis=1).T
    return out


def weighted_auc(
    labels: np.ndarray, predictions: np.ndarray, codes: np.ndarray, counts: np.ndarray, chunk: int = 64
) -> np.ndarray:
    """ROC AUC in each resample, requests weighted by their user's draw count; ties count half.

    With few enough users, through :func:`user_pair_concordance`; otherwise the requests are sorted
    once and each resample sums its weights over tie groups. NaN when a resample has no positive or
    no negative.
    """
    y = np.asarray(labels, dtype=np.float64)
    n_users = counts.shape[1]
    if n_users <= PAIR_MATRIX_MAX_USERS:
        pairs = user_pair_concordance(y, predictions, codes, n_users)
        weights = counts.astype(np.float64)
        positives = weights @ np.bincount(codes, y, minlength=n_users)
        negatives = weights @ np.bincount(codes, 1 - y, minlength=n_users)
        with np.errstate(invalid="ignore", divide="ignore"):
            total = positives * negatives
            return np.where(total > 0, ((weights @ pairs) * weights).sum(axis=1) / total, np.nan)
    return _weighted_auc_by_request(y, predictions, codes, counts, chunk)


def _weighted_auc_by_request(
    y: np.ndarray, predictions: np.ndarray, codes: np.ndarray, counts: np.ndarray, chunk: int
) -> np.ndarray:
    order = np.argsort(np.asarray(predictions, dtype=np.float64), kind="mergesort")
    sorted_p, sorted_y, sorted_codes = np.asarray(predictions)[order], y[order], codes[order]
    starts = np.concatenate([[0], np.flatnonzero(np.diff(sorted_p)) + 1])
    out = np.empty(counts.shape[0], dtype=np.float64)
    for first in range(0, counts.shape[0], chunk):
        weights = counts[first : first + chunk][:, sorted_codes].astype(np.float64)
        positive = np.add.reduceat(weights * sorted_y, starts, axis=1)
        negative = np.add.reduceat(weights * (1 - sorted_y), starts, axis=1)
        below = np.cumsum(negative, axis=1) - negative
        total = positive.sum(axis=1) * negative.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[first : first + chunk] = np.where(
                total > 0, (positive * (below + 0.5 * negative)).sum(axis=1) / total, np.nan
            )
    return out


@dataclass(frozen=True)
class ScoredRequests:
    """The scored requests of an evaluation and every seed's predictions on them.

    ``predictions[s][variant]`` are seed ``s``'s probabilities, aligned with ``users``/``labels``
    (the requests are the same for every seed; the models differ). ``served_tier``: the tier that
    served each request (the same for every seed: one replay per window), for the per-tier strata.
    """

    users: np.ndarray
    labels: np.ndarray
    predictions: tuple[dict[str, np.ndarray], ...]
    served_tier: np.ndarray | None = None

    def __post_init__(self) -> None:
        if not self.predictions:
            raise ValueError("no seed predictions")
        for seed_predictions in self.predictions:
            for variant, values in seed_predictions.items():
                if np.asarray(values).shape != np.asarray(self.labels).shape:
                    raise ValueError(f"predictions of {variant} are not aligned with the labels")
        if self.served_tier is not None and np.asarray(self.served_tier).shape != np.asarray(self.labels).shape:
            raise ValueError("served tiers are not aligned with the labels")

    @staticmethod
    def concatenate(parts: Iterable["ScoredRequests"]) -> "ScoredRequests":
        """Requests of several windows as one set (same seeds in each; users keep their ids)."""
        parts = list(parts)
        n_seeds = {len(p.predictions) for p in parts}
        if len(n_seeds) != 1:
            raise ValueError("every window needs predictions from the same seeds")
        tiers = [p.served_tier for p in parts]
        return ScoredRequests(
            np.concatenate([p.users for p in parts]),
            np.concatenate([p.labels for p in parts]),
            tuple(
                {v: np.concatenate([p.predictions[s][v] for p in parts]) for v in parts[0].predictions[s]}
                for s in range(n_seeds.pop())
            ),
            None if any(t is None for t in tiers) else np.concatenate([t for t in tiers if t is not None]),
        )


def transfer_ratios(ne_vm: np.ndarray, ne_fm: np.ndarray, ne_variant: np.ndarray) -> np.ndarray:
    """``(NE_VM - NE_variant) / (NE_VM - NE_FM)`` per resample; NaN where the FM does not beat the VM (no
    edge to transfer), so such resamples count as undefined (:func:`percentile_interval`)."""
    ne_vm, ne_fm = np.asarray(ne_vm, dtype=np.float64), np.asarray(ne_fm, dtype=np.float64)
    gap = ne_vm - ne_fm
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(gap > 0, (ne_vm - np.asarray(ne_variant, dtype=np.float64)) / np.where(gap > 0, gap, 1.0),
                        np.nan)


def _transfer(ne: dict[str, np.ndarray], variant: str) -> np.ndarray:
    return transfer_ratios(ne[BASELINE], ne[UPPER_BOUND], ne[variant])


def _summarise(
    estimate: dict[str, dict[str, np.ndarray]], replicates: dict[str, dict[str, np.ndarray]], confidence: float
) -> IntervalSummary:
    """Intervals of every statistic the report uses, from per-variant NE/AUC (estimate and resamples)."""

    def interval(fn: Callable[..., Any], *args: str) -> Interval:
        return percentile_interval(float(fn(estimate, *args)), fn(replicates, *args), confidence)

    variants = list(estimate["ne"])
    comparisons = [
        Comparison(
            variant, reference,
            ne_difference=interval(lambda m, a, b: m["ne"][a] - m["ne"][b], variant, reference),
            transfer_ratio_difference=interval(
                lambda m, a, b: _transfer(m["ne"], a) - _transfer(m["ne"], b), variant, reference
            ),
        )
        for variant, reference in COMPARISONS
        if variant in variants and reference in variants
    ]
    return IntervalSummary(
        ne={v: interval(lambda m, v: m["ne"][v], v) for v in variants},
        auc={v: interval(lambda m, v: m["auc"][v], v) for v in estimate["auc"]},
        fm_vm_gap=interval(lambda m: m["ne"][BASELINE] - m["ne"][UPPER_BOUND]),
        ne_vs_baseline={v: interval(lambda m, v: m["ne"][v] - m["ne"][BASELINE], v) for v in variants
                        if v != BASELINE},
        transfer_ratio={v: interval(lambda m, v: _transfer(m["ne"], v), v) for v in variants
                        if v in TRANSFER_VARIANTS or v not in VARIANTS},
        comparisons={comparison.key: comparison for comparison in comparisons},
    )


def tier_strata(
    requests: ScoredRequests, codes: np.ndarray, counts: np.ndarray, confidence: float
) -> dict[str, TierStratum]:
    """:class:`TierStratum` of every serving tier that answered scored requests (same user draws).

    ``counts`` row 0 is the data as observed, the others the resamples (as in
    :func:`bootstrap_intervals`); NE is averaged over seeds, then differenced within each resample.
    A tier of fewer than :data:`MIN_STRATUM_USERS` users gets its estimates without intervals.
    """
    if requests.served_tier is None:
        return {}
    served = np.asarray(requests.served_tier)
    present = {v for pair in TIER_COMPARISONS for v in pair}
    for predictions in requests.predictions:
        present &= set(predictions)
    variants = sorted(present)
    out = {}
    for tier in SERVING_ORDER:
        rows = np.flatnonzero(served == tier)
        if rows.size == 0:
            continue
        users = int(np.unique(codes[rows]).size)
        draws = counts if has_enough_users(users) else counts[:1]  # the estimate only
        ne = {v: np.mean([weighted_ne(requests.labels[rows], p[v][rows], codes[rows], draws)
                          for p in requests.predictions], axis=0) for v in variants}
        out[str(tier)] = TierStratum(
            tier=tier, requests=int(rows.size), users=users, share=float(rows.size / served.size),
            ne={v: percentile_interval(float(values[0]), values[1:], confidence) for v, values in ne.items()},
            ne_difference={
                f"{a}-vs-{b}": percentile_interval(float(ne[a][0] - ne[b][0]), ne[a][1:] - ne[b][1:], confidence)
                for a, b in TIER_COMPARISONS if a in ne and b in ne
            },
        )
    return out


def bootstrap_intervals(
    requests: ScoredRequests, resamples: int = 1000, seed: int = 0, confidence: float = 0.95
) -> BootstrapIntervals:
    """User-bootstrap intervals pooled over seeds (``pooled``) and for each seed (``per_seed``).

    One set of user draws serves every variant and seed (paired). Deterministic given ``seed``.
    """
    if resamples < 1:
        raise ValueError("resamples must be positive")
    codes, n_users = user_codes(requests.users)
    # row 0: the data as observed (every user once), then the resamples: one pass gives both
    counts = np.vstack([np.ones((1, n_users), dtype=np.int64),
                        resample_counts(n_users, resamples, np.random.default_rng(seed))])
    variants = [v for v in scored_variants(requests.predictions[0]) if all(v in p for p in requests.predictions)]
    per_seed_estimate, per_seed_replicates = [], []
    report = progress(f"user bootstrap ({resamples} resamples)", total=len(requests.predictions) * len(variants),
                      unit="seed x variant", log=log)
    for predictions in requests.predictions:
        estimate: dict[str, dict[str, np.ndarray]] = {"ne": {}, "auc": {}}
        replicates: dict[str, dict[str, np.ndarray]] = {"ne": {}, "auc": {}}
        for v in variants:
            # AUC (the costly statistic) for the evaluation's own variants; the freshness curve reads NE and TR
            for metric, fn in (("ne", weighted_ne), ("auc", weighted_auc))[: 2 if v in VARIANTS else 1]:
                values = fn(requests.labels, predictions[v], codes, counts)
                estimate[metric][v], replicates[metric][v] = values[0], values[1:]
            report.advance()
        per_seed_estimate.append(estimate)
        per_seed_replicates.append(replicates)

    def mean_over_seeds(per_seed: list[dict[str, dict[str, np.ndarray]]]) -> dict[str, dict[str, np.ndarray]]:
        return {m: {v: np.mean([s[m][v] for s in per_seed], axis=0) for v in per_seed[0][m]} for m in ("ne", "auc")}

    return BootstrapIntervals(
        resamples=resamples,
        confidence=confidence,
        n_requests=int(codes.size),
        n_users=n_users,
        n_seeds=len(requests.predictions),
        pooled=_summarise(mean_over_seeds(per_seed_estimate), mean_over_seeds(per_seed_replicates), confidence),
        per_seed=tuple(_summarise(e, r, confidence)
                       for e, r in zip(per_seed_estimate, per_seed_replicates, strict=True)),
        per_tier=tier_strata(requests, codes, counts, confidence),
    )


def cluster_interval(
    totals: np.ndarray,
    statistic: Callable[[np.ndarray], np.ndarray],
    n_resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> Interval:
    """Interval of a statistic of additive per-cluster totals, by resampling clusters.

    ``totals`` has one row per cluster (e.g. per user: requests, hits, FM passes summed over every
    tick) and one column per quantity; ``statistic`` maps column sums (shape ``[..., quantities]``)
    to a value (a hit rate, a ratio of two hit rates). Why clusters: the same user's requests are
    correlated (bursts) within and across hours, so the user is the unit that is drawn. NaN
    (a zero denominator) marks a resample as undefined, as in :func:`percentile_interval`.
    """
    return cluster_intervals(totals, {"": statistic}, n_resamples, seed, confidence)[""]


def cluster_intervals(
    totals: np.ndarray,
    statistics: Mapping[str, Callable[[np.ndarray], np.ndarray]],
    n_resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[str, Interval]:
    """:func:`cluster_interval` of several statistics of the same totals, from one set of resamples
    (drawn and summed once; the intervals are paired, as every statistic sees the same draws)."""
    table = np.asarray(totals, dtype=np.float64)
    counts = resample_counts(table.shape[0], n_resamples, np.random.default_rng(seed)).astype(np.float64)
    observed, resampled = table.sum(axis=0), counts @ table
    out = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        for name, statistic in statistics.items():
            replicates = np.asarray(statistic(resampled), dtype=np.float64)
            out[name] = percentile_interval(float(statistic(observed)), replicates, confidence)
    return out
