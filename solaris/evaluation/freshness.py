"""The freshness curve: what an FM value is worth by its age (pure numpy; torch only in :func:`fm_pass`).

SOLARIS serves a value the FM computed before the request; whatever the user did between that moment
and the request is out of its reach. The curve feeds the FM the history up to *request - age* for a
few ages and places each on one axis with the FM at the request (age 0, the upper bound) and at the
serving tick (what the hourly pipeline computes), and does the same for the oracle (the VM+SOLARIS
oracle model fed the FM's exact pair computed at that age). Read against the VM baseline and
distillation, it says how fresh a value must be to carry the FM's edge at all.

One implementation for both users: ``solaris evaluate`` (every report) and ``bench/freshness.py``
(any warehouse with a trained FM and VM) query the features with :func:`features_at_age` and run the
FM with :func:`fm_pass`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Literal, Mapping

import numpy as np

from solaris.evaluation.bootstrap import BootstrapIntervals, Interval, IntervalSummary
from solaris.evaluation.protocol import FM_AT_TICK, SOLARIS_ORACLE

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

    from solaris.models.features import Features, HistoryIndex

Series = Literal["fm", "oracle"]
SERIES: tuple[Series, ...] = ("fm", "oracle")


def query_times(ts: np.ndarray, age_minutes: int) -> np.ndarray:
    """When a value of that age was computed: ``request - age`` (epoch seconds)."""
    return np.asarray(ts, dtype=np.int64) - 60 * int(age_minutes)


def features_at_age(index: HistoryIndex, users: np.ndarray, items: np.ndarray, ts: np.ndarray, *, age_minutes: int,
                    history_length: int) -> Features:
    """The features the FM had for each request ``age`` minutes before it.

    Everything is as of ``request - age``: the history strictly before that moment, its events' ages
    and the counters counted up to it (:meth:`HistoryIndex.query`), so an event at or after
    ``request - age`` never reaches a value of that age.
    """
    return index.query(users, items, query_times(ts, age_minutes), history_length)


def fm_pass(fm: nn.Module, features: Features) -> tuple[np.ndarray, np.ndarray]:
    """The FM's click probability and pair vector for every row, in batches.

    The probability is the FM's head on the pair vector, so it is what a value computed from these
    features would score; the vector is what the oracle model reads.
    """
    from solaris.models.training import predict

    probabilities, _, vectors = predict(fm, features, with_embeddings=True)
    if vectors is None:
        raise RuntimeError("the FM returned no pair vectors")
    return probabilities, vectors


def fm_variant(age_minutes: int) -> str:
    """The variant of the FM fed the history up to request - age; age 0 is the FM itself (``fm``)."""
    return "fm" if age_minutes == 0 else f"fm_age{age_minutes}m"


def oracle_variant(age_minutes: int) -> str:
    """The VM+SOLARIS oracle model fed the FM's exact pair computed at request - age."""
    return f"solaris_oracle_age{age_minutes}m"


@dataclass(frozen=True)
class AgedVariant:
    """One point of the curve: a variant, its series and its age (``None``: the serving tick)."""

    variant: str
    series: Series
    age_minutes: int | None

    @property
    def at_tick(self) -> bool:
        return self.age_minutes is None


def curve_variants(fm_ages: Iterable[int], oracle_ages: Iterable[int]) -> tuple[AgedVariant, ...]:
    """The curve's points in order: the FM by age then at the tick, the oracle by age then at the tick.

    The FM at age 0 (``fm``), the FM at the tick and the oracle at the tick are the evaluation's own
    variants, placed on the curve, not computed twice.
    """
    fm = [AgedVariant(fm_variant(age), "fm", age) for age in sorted(set(fm_ages) | {0})]
    oracle = [AgedVariant(oracle_variant(age), "oracle", age) for age in sorted(set(oracle_ages))]
    return (*fm, AgedVariant(FM_AT_TICK, "fm", None), *oracle, AgedVariant(SOLARIS_ORACLE, "oracle", None))


def extra_variants(fm_ages: Iterable[int], oracle_ages: Iterable[int]) -> tuple[str, ...]:
    """The curve's variants the evaluation computes on top of its own (every age but the FM's 0)."""
    own = {"fm", FM_AT_TICK, SOLARIS_ORACLE}
    return tuple(point.variant for point in curve_variants(fm_ages, oracle_ages) if point.variant not in own)


def pass_ages(fm_ages: Iterable[int], oracle_ages: Iterable[int]) -> tuple[int, ...]:
    """The ages the FM runs at over the scored requests: one pass each, shared by both series (0 included:
    its probabilities are the upper bound, its vectors the fresh oracle's)."""
    return tuple(sorted(set(fm_ages) | set(oracle_ages) | {0}))


@dataclass(frozen=True)
class CurvePoint:
    """A point of the curve on one set of requests: NE and TR (``None`` for the FM at age 0, the
    reference of every TR), each with its paired user-bootstrap interval."""

    variant: str
    series: Series
    age_minutes: float  # the serving tick: the median age of its values on these requests
    at_tick: bool
    ne: Interval
    transfer_ratio: Interval | None

    def to_dict(self) -> dict[str, Any]:
        return {"variant": self.variant, "series": self.series, "age_minutes": self.age_minutes,
                "at_tick": self.at_tick, "ne": self.ne.to_dict(),
                "transfer_ratio": None if self.transfer_ratio is None else self.transfer_ratio.to_dict()}


@dataclass(frozen=True)
class FreshnessCurve:
    """The curve on one set of requests (pooled, or one window), with the VMs it is read against."""

    points: tuple[CurvePoint, ...]
    vm_baseline: Interval  # NE
    vm_distilled: Interval  # NE
    tick_median_age_minutes: float

    def series(self, name: Series) -> tuple[CurvePoint, ...]:
        return tuple(point for point in self.points if point.series == name)

    def to_dict(self) -> dict[str, Any]:
        return {"points": [point.to_dict() for point in self.points], "vm_baseline": self.vm_baseline.to_dict(),
                "vm_distilled": self.vm_distilled.to_dict(), "tick_median_age_minutes": self.tick_median_age_minutes}

    @classmethod
    def of(cls, intervals: IntervalSummary, variants: Iterable[AgedVariant], tick_ages_seconds: np.ndarray
           ) -> FreshnessCurve:
        """The curve from one :class:`IntervalSummary`; the tick's points at the median age of its values."""
        tick_minutes = float(np.median(np.asarray(tick_ages_seconds, dtype=np.float64)) / 60)
        points = tuple(
            CurvePoint(point.variant, point.series, tick_minutes if point.at_tick else float(point.age_minutes or 0),
                       point.at_tick, intervals.ne[point.variant], intervals.transfer_ratio.get(point.variant))
            for point in variants if point.variant in intervals.ne
        )
        return cls(points, intervals.ne["vm_baseline"], intervals.ne["vm_distilled"], tick_minutes)


@dataclass(frozen=True)
class FreshnessReport:
    """The curve pooled over every window (and seed), and per window (by T0) when there are several."""

    fm_ages_minutes: tuple[int, ...]
    oracle_ages_minutes: tuple[int, ...]
    pooled: FreshnessCurve
    per_window: Mapping[str, FreshnessCurve] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {"fm_ages_minutes": list(self.fm_ages_minutes), "oracle_ages_minutes": list(self.oracle_ages_minutes),
               "pooled": self.pooled.to_dict()}
        if self.per_window:
            out["per_window"] = {t0: curve.to_dict() for t0, curve in self.per_window.items()}
        return out

    @classmethod
    def of(cls, fm_ages: tuple[int, ...], oracle_ages: tuple[int, ...], intervals: BootstrapIntervals,
           tick_ages_seconds: Mapping[str, np.ndarray]) -> FreshnessReport:
        """``tick_ages_seconds``: by window T0, the age of the serving tick's value for each scored request."""
        variants = curve_variants(fm_ages, oracle_ages)
        pooled_ages = np.concatenate([np.asarray(ages, dtype=np.float64) for ages in tick_ages_seconds.values()])
        return cls(
            tuple(fm_ages), tuple(oracle_ages), FreshnessCurve.of(intervals.pooled, variants, pooled_ages),
            {t0: FreshnessCurve.of(cell, variants, tick_ages_seconds[t0]) for t0, cell in intervals.per_window.items()},
        )
