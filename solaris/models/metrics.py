"""Quality metrics (pure numpy), as defined in docs/architecture.md §8.

NE (normalised entropy) is log-loss divided by the entropy of the base rate: 1.0 means "no better
than always predicting the average CTR", lower is better, and it is comparable across datasets.
``transfer_ratio`` says how much of the FM's NE gain over the VM a technique recovers.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

_EPS = 1e-7


def _arrays(labels: ArrayLike, predictions: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(labels, dtype=np.float64).ravel()
    p = np.asarray(predictions, dtype=np.float64).ravel()
    if y.shape != p.shape:
        raise ValueError(f"labels and predictions differ in length: {y.size} vs {p.size}")
    if y.size == 0:
        raise ValueError("metrics need at least one example")
    if not np.isfinite(p).all():
        raise ValueError("predictions contain NaN or infinity")
    return y, p


def log_loss(labels: ArrayLike, predictions: ArrayLike) -> float:
    """Mean binary cross-entropy of probabilities (clipped away from 0 and 1)."""
    y, p = _arrays(labels, predictions)
    p = np.clip(p, _EPS, 1 - _EPS)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def base_rate_entropy(labels: ArrayLike) -> float:
    y = np.asarray(labels, dtype=np.float64).ravel()
    rate = float(np.clip(y.mean(), _EPS, 1 - _EPS))
    return float(-(rate * np.log(rate) + (1 - rate) * np.log(1 - rate)))


def normalized_entropy(labels: ArrayLike, predictions: ArrayLike) -> float:
    """NE = log-loss / entropy of the base rate of ``labels``."""
    return log_loss(labels, predictions) / base_rate_entropy(labels)


def auc(labels: ArrayLike, predictions: ArrayLike) -> float:
    """ROC AUC via the rank-sum (Mann-Whitney U) statistic; ties get their average rank."""
    y, p = _arrays(labels, predictions)
    positives = int((y == 1).sum())
    negatives = y.size - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    order = np.argsort(p, kind="mergesort")
    sorted_p = p[order]
    ranks = np.empty(y.size, dtype=np.float64)
    # average ranks over tied groups
    boundaries = np.flatnonzero(np.diff(sorted_p)) + 1
    starts = np.concatenate([[0], boundaries])
    ends = np.concatenate([boundaries, [y.size]])
    group_rank = (starts + ends + 1) / 2.0  # 1-based average rank of each tie group
    ranks[order] = np.repeat(group_rank, ends - starts)
    rank_sum = ranks[y == 1].sum()
    return float((rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives))


def calibration(labels: ArrayLike, predictions: ArrayLike) -> float:
    """Mean prediction over base rate (1.0 = calibrated on average)."""
    y, p = _arrays(labels, predictions)
    return float(p.mean() / max(y.mean(), _EPS))


def transfer_ratio(ne_vm: float, ne_x: float, ne_fm: float) -> float:
    """(NE_VM - NE_{VM+X}) / (NE_VM - NE_FM): share of the FM's gain that technique X transfers."""
    gap = ne_vm - ne_fm
    if not np.isfinite(gap) or abs(gap) < 1e-12:
        raise ValueError(f"transfer ratio undefined: NE_VM ({ne_vm}) and NE_FM ({ne_fm}) are equal")
    return float((ne_vm - ne_x) / gap)


def summary(labels: ArrayLike, predictions: ArrayLike) -> dict[str, float]:
    """All per-model metrics in one dict (what the training log and reports print)."""
    return {
        "log_loss": log_loss(labels, predictions),
        "ne": normalized_entropy(labels, predictions),
        "auc": auc(labels, predictions),
        "calibration": calibration(labels, predictions),
        "n": float(np.asarray(labels).size),
    }
