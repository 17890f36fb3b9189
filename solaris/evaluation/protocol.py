"""Knowledge-transfer evaluation: the pure parts (no Spark, no torch).

``solaris.drivers.evaluate`` trains, replays and predicts; this module decides *what* is compared and how it
is summarised, so each rule can be unit-tested on small arrays:

* :class:`EvaluationWindow` - the time split: serving FM trained up to ``T0 - tail``, replay
  ticks over ``[T0 - tail, T0 + eval)``, requests of ``(tick, tick + step]`` served by the
  snapshot published at ``tick``;
* :func:`served_up_to_tier` - the coverage ablation: keep the resolved FM embedding only when
  its tier is within the allowed ones (tiers are a fallback chain in code order, so "tiers 1-2"
  means answers of tier 3 and beyond become "nothing served");
* :func:`permuted_within_tier` - the placebo's input: served vectors shuffled among the rows of
  the same tier (same inputs' distribution, no pair information); :func:`permutation_within_tier`
  the row order behind it, which the served values' ages follow too;
* :func:`ages_where_served` - a served value's age where a tier is fed, unknown (NaN) where not;
* :meth:`EvaluationWindow.serving_tick_times` - the oracle's query times (the serving tick);
* :func:`variant_metrics` / :func:`aggregate_seeds` - per-variant metrics, transfer ratios and
  mean ± std over seeds, as the typed results :class:`SeedResult` / :class:`SeedAggregate`.

Variants (docs/evaluation.md): ``fm`` (upper bound); ``fm_at_tick`` (the FM from the history as of the
serving tick, what the oracle's vector scores through the FM's head); ``vm_baseline_pretrained`` and
``vm_distilled_pretrained`` (the VMs trained up to the cutoff, not fine-tuned); ``vm_baseline``,
``vm_distilled`` (the same, fine-tuned on the tail); then VM+SOLARIS models, each fine-tuned on
the tail with the input it is scored with: ``solaris_none`` (the control: "nothing served" on every
row), ``solaris_placebo`` (served vectors permuted within each tier), ``solaris_oracle`` (the
serving FM's exact pair embedding for every request, at its serving tick: the ceiling); and the
model fine-tuned on what serving returned, scored fed tiers up to k of :mod:`solaris.tiers`
(``solaris_tier1``, ``solaris_tiers1-2`` ... ``solaris_tiers1-6``, the last one "all tiers",
:data:`SOLARIS_ALL`); ``solaris_distilled`` (all tiers, soft labels). Beside :data:`VARIANTS`, the
freshness curve's aged variants, named by :mod:`solaris.evaluation.freshness` from the configured ages
(:func:`scored_variants`).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Generic, Iterable, Mapping, TypeVar

import numpy as np
from numpy.typing import ArrayLike

from solaris.models import metrics
from solaris.tiers import SERVING_ORDER
from solaris.timeutil import utc_stamp

if TYPE_CHECKING:  # pragma: no cover
    from solaris.config import SolarisConfig



def ablation_variant(max_tier: int) -> str:
    """Name of the VM+SOLARIS variant fed the served embeddings of tiers ``1..max_tier``."""
    return "solaris_tier1" if max_tier == 1 else f"solaris_tiers1-{max_tier}"


def cumulative_key(max_tier: int) -> str:
    """Coverage key of tiers ``1..max_tier`` in :func:`coverage_by_tier`."""
    return "tiers1" if max_tier == 1 else f"tiers1-{max_tier}"


ALL_TIERS = SERVING_ORDER[-1]
SOLARIS_ALL = ablation_variant(ALL_TIERS)  # VM+SOLARIS fed every tier: the variant the verdict is about
ABLATION = tuple(ablation_variant(tier) for tier in SERVING_ORDER)
# Control: a VM+SOLARIS model fine-tuned and scored with "nothing served" (zero vector, tier 0) on
# every row. Why: the SOLARIS model is fine-tuned with an extra input, which changes its other weights
# too; what the served values add is a variant fed tiers 1..k minus this one, not minus the baseline.
# It is trained on what it is scored on (a model fed zeros only when scored would see inputs it never
# trained on: tier 0 is a small share of the served tail).
SOLARIS_NONE = "solaris_none"
# Placebo: the same design trained and scored with the served vectors permuted within each tier: the
# inputs' distribution of SOLARIS, without the pair information. SOLARIS minus placebo is what the
# values themselves carry.
SOLARIS_PLACEBO = "solaris_placebo"
# Oracle: every request served the serving FM's exact pair embedding, computed with the history as of
# the request's serving tick (tier 1 on 100 % of the rows): what SOLARIS could transfer at all here.
SOLARIS_ORACLE = "solaris_oracle"
# the VMs of step 1 (trained up to the cutoff) scored without their fine-tune on the tail
PRETRAINED = {"vm_baseline": "vm_baseline_pretrained", "vm_distilled": "vm_distilled_pretrained"}
# The serving FM's own prediction from the history as of the request's serving tick (its head on the
# oracle's vector). ``fm`` sees the history up to the request itself, which no precomputed value can: the
# gap between the two is the FM's gain that comes from the last hour's events, out of SOLARIS's reach.
FM_AT_TICK = "fm_at_tick"
VARIANTS = (
    "fm", FM_AT_TICK, PRETRAINED["vm_baseline"], "vm_baseline", PRETRAINED["vm_distilled"], "vm_distilled",
    SOLARIS_NONE, SOLARIS_PLACEBO, *ABLATION, "solaris_distilled", SOLARIS_ORACLE,
)
# variant fed what serving returned -> highest tier of served FM embedding it receives (0: none)
SOLARIS_MAX_TIER = {
    SOLARIS_NONE: 0, **{ablation_variant(tier): tier for tier in SERVING_ORDER}, "solaris_distilled": ALL_TIERS,
}
TRANSFER_VARIANTS = tuple(v for v in VARIANTS if v not in ("fm", "vm_baseline"))
METRIC_KEYS = ("log_loss", "ne", "auc", "calibration", "transfer_ratio")
# Part of every seed result's fingerprint: a result.json of an older protocol or format is recomputed
SEED_RESULT_VERSION = 5
# The evaluation trains and fine-tunes its VMs on one thread: the same seed gives bit-identical VMs
VM_THREADS = 1


@dataclass(frozen=True)
class EvaluationWindow:
    """The time split of one evaluation (all UTC)."""

    t0: datetime
    tail_hours: float
    eval_hours: float
    step_hours: float = 1.0

    def __post_init__(self) -> None:
        for name in ("tail_hours", "eval_hours", "step_hours"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.step_hours > min(self.tail_hours, self.eval_hours):
            raise ValueError("step_hours is longer than the tail or the evaluation window")

    @property
    def fm_cutoff(self) -> datetime:
        """The serving FM and the verifier see events up to here: the tail is unseen by them."""
        return self.t0 - timedelta(hours=self.tail_hours)

    @property
    def end(self) -> datetime:
        return self.t0 + timedelta(hours=self.eval_hours)

    def ticks(self) -> list[datetime]:
        """Replay ticks: every ``step`` from ``fm_cutoff`` (included) to ``end`` (excluded)."""
        out, current, step = [], self.fm_cutoff, timedelta(hours=self.step_hours)
        while current < self.end:
            out.append(current)
            current += step
        return out

    def serving_tick(self, ts_seconds: ArrayLike) -> np.ndarray:
        """Index into :meth:`ticks` of the snapshot that serves a request at ``ts`` (-1: none).

        A request in ``(tick, tick + step]`` is served by the snapshot published at ``tick``: it
        saw only events with ``ts <= tick``, strictly before the request.
        """
        ts = np.asarray(ts_seconds, dtype=np.float64)
        start, step = self.fm_cutoff.timestamp(), self.step_hours * 3600.0
        index = np.ceil((ts - start) / step).astype(np.int64) - 1
        n_ticks = len(self.ticks())
        return np.where((ts > start) & (ts <= self.end.timestamp()) & (index < n_ticks), index, -1)

    def serving_tick_times(self, ts_seconds: ArrayLike) -> np.ndarray:
        """Epoch seconds of the tick whose snapshot serves each request: the oracle's query times.

        Features queried at these times (histories strictly before the tick) hold nothing the
        snapshot could not have held, and nothing of the request itself, which comes after its
        tick. A request no tick serves (outside the window) is an error, not a silent default.
        """
        index = self.serving_tick(ts_seconds)
        if np.any(index < 0):
            raise ValueError(f"{int((index < 0).sum())} requests are outside the window's ticks")
        ticks = np.array([tick.timestamp() for tick in self.ticks()], dtype=np.float64)
        return ticks[index].astype(np.int64)


@dataclass(frozen=True)
class WindowDensity:
    """How much a window's scored part holds: requests and distinct users in ``(T0, T0 + eval]``."""

    t0: datetime
    requests: int
    users: int
    training_events: int  # events up to the FM cutoff ``T0 - tail``

    def refusal(self, min_requests: int, min_users: int, min_training_events: int) -> str | None:
        """One-line reason the window is too thin to decide anything, or None."""
        short = [
            f"{have:,} {what} (minimum {need:,}: {key})"
            for have, need, what, key in (
                (self.requests, min_requests, "scored requests", "evaluation.min_requests"),
                (self.users, min_users, "distinct requesting users", "evaluation.min_users"),
                (self.training_events, min_training_events, "events before the FM cutoff",
                 "evaluation.min_training_events"),
            )
            if have < need
        ]
        if not short:
            return None
        return f"window T0={self.t0.isoformat()} has " + ", ".join(short) + "; choose a denser T0 or lower the minimum"


def _bucket(ts: np.ndarray, step_seconds: float) -> np.ndarray:
    """Index ``b`` of the step ``(b * step, (b + 1) * step]`` holding each timestamp."""
    return (np.ceil(np.asarray(ts, dtype=np.float64) / step_seconds) - 1).astype(np.int64)


def window_densities(
    ts: np.ndarray, users: np.ndarray, tail_hours: float, eval_hours: float, step_hours: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For every step-aligned T0 over the data: scored requests, distinct users, training events.

    Returns ``(t0_seconds, requests, users, training_events)``, one entry per candidate T0. Distinct
    users over a sliding window without a loop over users: a user active in step ``b`` counts for the
    T0s whose window holds ``b``; only the part not already counted by the user's previous active
    step is added (a difference array), so each user counts once per window.
    """
    step = step_hours * 3600.0
    span, tail = int(round(eval_hours / step_hours)), int(round(tail_hours / step_hours))
    if span < 1 or tail < 1:
        raise ValueError("eval_hours and tail_hours must be at least one step")
    buckets = _bucket(ts, step)
    first, last = int(buckets.min()), int(buckets.max())
    size = last - first + 1
    per_bucket = np.bincount(buckets - first, minlength=size)
    cumulative = np.concatenate([[0], np.cumsum(per_bucket)])
    k = np.arange(size)  # candidate T0 = (first + k) * step: scored buckets k .. k + span - 1
    requests = cumulative[np.minimum(k + span, size)] - cumulative[k]
    training = cumulative[np.clip(k - tail, 0, size)]  # buckets < k - tail: ts <= T0 - tail
    pairs = np.unique(np.stack([np.asarray(users, dtype=np.int64), buckets - first]), axis=1)
    user_of, active = pairs[0], pairs[1]
    start = active - span + 1
    same_user = np.concatenate([[False], user_of[1:] == user_of[:-1]])
    previous = np.concatenate([[0], active[:-1]])
    start = np.where(same_user, np.maximum(start, previous + 1), start)
    diff = np.zeros(size + 1, dtype=np.int64)
    np.add.at(diff, np.clip(start, 0, size), 1)
    np.add.at(diff, active + 1, -1)
    distinct = np.cumsum(diff)[:size]
    return (first + k) * step, requests, distinct, training


def densest_windows(
    ts: np.ndarray, users: np.ndarray, *, tail_hours: float, eval_hours: float, step_hours: float, count: int,
    min_requests: int, min_users: int, min_training_events: int,
) -> list[WindowDensity]:
    """Up to ``count`` non-overlapping windows with the most distinct requesting users.

    Why users first: requests of one user are correlated (bursts), so the number of users is what
    narrows the intervals. Only windows meeting every minimum qualify; windows (tail included) do
    not overlap, so no request is scored twice and no tail holds another window's scored requests.
    """
    t0s, requests, distinct, training = window_densities(ts, users, tail_hours, eval_hours, step_hours)
    eligible = (requests >= min_requests) & (distinct >= min_users) & (training >= min_training_events)
    reach = int(round((tail_hours + eval_hours) / step_hours))
    chosen: list[WindowDensity] = []
    order = np.lexsort((np.arange(t0s.size), -requests, -distinct))  # users, then requests, then earliest
    taken = np.zeros(t0s.size, dtype=bool)
    for index in order[eligible[order]]:
        if len(chosen) == count:
            break
        if taken[index]:
            continue
        chosen.append(WindowDensity(datetime.fromtimestamp(float(t0s[index]), tz=timezone.utc),
                                    int(requests[index]), int(distinct[index]), int(training[index])))
        taken[max(0, index - reach + 1) : index + reach] = True
    return sorted(chosen, key=lambda w: w.t0)


def density_at(
    ts: np.ndarray, users: np.ndarray, t0: datetime, tail_hours: float, eval_hours: float
) -> WindowDensity:
    """Requests, distinct users and training events of the window at a given T0."""
    ts = np.asarray(ts, dtype=np.float64)
    start, end = t0.timestamp(), t0.timestamp() + eval_hours * 3600.0
    scored = (ts > start) & (ts <= end)
    return WindowDensity(t0, int(scored.sum()), int(np.unique(np.asarray(users)[scored]).size),
                         int((ts <= start - tail_hours * 3600.0).sum()))


def default_name(t0s: Iterable[datetime]) -> str:
    """Output folder of an evaluation: ``t0-<stamp>[_<stamp>...]`` of its windows."""
    return "t0-" + "_".join(utc_stamp(t) for t in t0s)


def served_up_to_tier(vectors: np.ndarray, tiers: np.ndarray, max_tier: int) -> tuple[np.ndarray, np.ndarray]:
    """FM features as a model restricted to tiers ``1..max_tier`` receives them.

    Rows served by a higher tier get what serving gives when nothing is found: a zero vector and
    tier 0 (the VM's "no FM embedding" input).
    """
    tiers = np.asarray(tiers, dtype=np.int64)
    keep = (tiers >= 1) & (tiers <= max_tier)
    return np.where(keep[:, None], vectors, 0.0).astype(np.float32), np.where(keep, tiers, 0)


def ages_where_served(ages: np.ndarray, tiers: np.ndarray) -> np.ndarray:
    """Each value's age (seconds) where ``tiers`` serves one, NaN (the resolver's "no value") at tier 0.

    The age that goes with :func:`served_up_to_tier`'s output: a row it turns into "nothing served"
    loses its age with its vector.
    """
    return np.where(np.asarray(tiers) > 0, np.asarray(ages, dtype=np.float64), np.nan)


def permutation_within_tier(tiers: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The placebo's row order: for each row, a random row *of the same tier* (a permutation per tier).

    Indexing a row's served columns (vector, age) with it moves them together, so the placebo's
    value of a row is another request's value with that value's own age. Pure and seeded.
    """
    tiers = np.asarray(tiers, dtype=np.int64)
    order = np.arange(tiers.size)
    for tier in np.unique(tiers):
        rows = np.flatnonzero(tiers == tier)
        order[rows] = rng.permutation(rows)
    return order


def permuted_within_tier(vectors: np.ndarray, tiers: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The placebo's input: each row gets the vector of a random row *of the same tier*.

    Every tier keeps its multiset of vectors and every row its tier, so a model sees the same
    marginal distribution of inputs as SOLARIS (how many requests each tier serves, what its
    vectors look like) but a vector that belongs to another request's pair. Pure and seeded
    (:func:`permutation_within_tier`).
    """
    return np.asarray(vectors, dtype=np.float32)[permutation_within_tier(tiers, rng)]


def coverage_by_tier(tiers: np.ndarray) -> dict[str, float]:
    """Share of requests served by each tier, and cumulatively (tier 1, tiers 1-2, ..., all tiers).

    The shares are the resolver's own (:func:`solaris.serving.resolver.coverage`, what the replay
    logs per tick), under the report's names.
    """
    from solaris.serving.resolver import coverage

    shares = coverage(tiers)
    out = {f"tier{tier}": shares[f"tier{tier}"] for tier in SERVING_ORDER}
    out["none"] = shares["none"]
    out.update({cumulative_key(tier): shares[f"cumulative_tier{tier}"] for tier in SERVING_ORDER})
    return out


def _ratio(ne_vm: float, ne_x: float, ne_fm: float) -> float:
    """Transfer ratio, or NaN when the FM is not better than the VM (no gain to transfer: a
    ratio of two negative numbers would read as a large positive transfer)."""
    if not ne_vm - ne_fm > 0:
        return float("nan")
    return metrics.transfer_ratio(ne_vm, ne_x, ne_fm)


@dataclass(frozen=True)
class VariantMetrics:
    """One variant's metrics on one seed's scored requests (``result.json``: ``variants.<name>``)."""

    log_loss: float
    ne: float
    auc: float
    calibration: float
    n: float
    transfer_ratio: float  # NaN when the FM is not better than the VM baseline

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VariantMetrics:
        return cls(**{f.name: _float(data.get(f.name)) for f in fields(cls)})


def _float(value: Any) -> float:
    """JSON null (how NaN is written) back to NaN."""
    return float("nan") if value is None else float(value)


def scored_variants(names: Iterable[str]) -> tuple[str, ...]:
    """:data:`VARIANTS`, then any other variant among ``names`` in their order (the freshness curve's
    aged variants, :mod:`solaris.evaluation.freshness`, whose ages are settings)."""
    return (*VARIANTS, *(name for name in names if name not in VARIANTS))


def variant_metrics(labels: np.ndarray, predictions: Mapping[str, np.ndarray]) -> dict[str, VariantMetrics]:
    """Metrics of every variant on the same requests, with its transfer ratio vs VM and FM.

    Every one of :data:`VARIANTS` is required; other variants given (the curve's) are scored too.
    """
    missing = [v for v in VARIANTS if v not in predictions]
    if missing:
        raise ValueError(f"predictions missing for {missing}")
    summaries = {name: metrics.summary(labels, predictions[name]) for name in scored_variants(predictions)}
    ne_vm, ne_fm = summaries["vm_baseline"]["ne"], summaries["fm"]["ne"]
    return {
        name: VariantMetrics(log_loss=float(row["log_loss"]), ne=float(row["ne"]), auc=float(row["auc"]),
                             calibration=float(row["calibration"]), n=float(row["n"]),
                             transfer_ratio=_ratio(ne_vm, row["ne"], ne_fm))
        for name, row in summaries.items()
    }


def fm_passes_per_request(pairs_scored: int, users_represented: int, requests: int) -> float:
    """FM forward passes spent per request by precomputing, vs 1.0 for scoring every request on-path."""
    return float((pairs_scored + users_represented) / requests) if requests else float("nan")


@dataclass(frozen=True)
class MeanStd:
    """Mean and (population) std over seeds (and windows); ``None`` when no seed had a value."""

    mean: float | None
    std: float | None
    n: int

    def to_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def mean_std(values: Iterable[float | None]) -> MeanStd:
    """Mean and (population) std over seeds, ignoring NaN; ``None`` when no seed had a value."""
    array = np.asarray([v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))],
                       dtype=np.float64)
    if array.size == 0:
        return MeanStd(None, None, 0)
    return MeanStd(float(array.mean()), float(array.std()), int(array.size))


T = TypeVar("T")


@dataclass(frozen=True)
class Cost(Generic[T]):
    """What a seed cost: FM passes in the scored window and seconds per step (``Cost[float]``), or
    their mean ± std over seeds (``Cost[MeanStd]``)."""

    fm_pairs_scored: T
    fm_users_represented: T
    fm_passes_per_request: T
    train_models_s: T
    replay_s: T
    resolve_s: T
    finetune_vms_s: T
    score_requests_s: T
    seed_wall_s: T

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Cost[float]:
        return Cost(**{f.name: _float(data.get(f.name)) for f in fields(Cost)})


def _plain(value: Any) -> Any:
    """A result field as JSON-plain data: typed parts through their ``to_dict``."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


@dataclass(frozen=True)
class HitRates:
    """One tick's hit rates, from the replay's ``hit_rate`` run row (absent when the job wrote none)."""

    candidates: float | None  # the share of next-hour requests among the candidates (None: not measurable)
    verified: float | None  # ...among the verified, written pairs


@dataclass(frozen=True)
class TickRow:
    """One replay tick of one seed: the requests of the hour after it, how serving answered them, hit rates.

    Typed so the replay's producer and the report agree on fields, not string keys. ``to_dict`` is
    result.json's and metrics.json's flat row: ``tick``, ``scored_window``, ``requests``, the coverage
    shares (:func:`coverage_by_tier`, none for an hour without requests), then ``candidates_hit_rate``
    and ``verified_hit_rate`` when the replay measured them.
    """

    tick: str
    scored_window: bool
    requests: int
    coverage: Mapping[str, float]
    hit_rates: HitRates | None = None

    def to_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {"tick": self.tick, "scored_window": self.scored_window, "requests": self.requests,
                               **self.coverage}
        if self.hit_rates is not None:
            row.update(candidates_hit_rate=self.hit_rates.candidates, verified_hit_rate=self.hit_rates.verified)
        return row

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TickRow:
        fixed = {"tick", "scored_window", "requests", "candidates_hit_rate", "verified_hit_rate"}
        measured = "candidates_hit_rate" in data or "verified_hit_rate" in data
        return cls(
            tick=str(data["tick"]), scored_window=bool(data["scored_window"]), requests=int(data["requests"]),
            coverage={key: value for key, value in data.items() if key not in fixed},
            hit_rates=HitRates(data.get("candidates_hit_rate"), data.get("verified_hit_rate")) if measured else None,
        )


@dataclass(frozen=True)
class SeedResult:
    """One seed of one window (``<T0>/seed-<n>/result.json``, ``metrics.json``'s ``per_seed``).

    ``coverage`` / ``tail_coverage``: share of the scored / tail requests per tier and cumulatively
    (:func:`coverage_by_tier`); ``per_tick``: one row per replay tick (requests, coverage, hit
    rates); ``models``: checkpoint ``versions`` and the roles ``reused``; ``replay``: its seed and
    ticks; ``requests``: tail, scored, scored users, base rate.
    """

    seed: int
    t0: str
    variants: Mapping[str, VariantMetrics]
    coverage: Mapping[str, float]
    tail_coverage: Mapping[str, float]
    per_tick: tuple[TickRow, ...]
    cost: Cost[float]
    models: Mapping[str, Any]
    replay: Mapping[str, Any]
    requests: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SeedResult:
        return cls(
            seed=int(data["seed"]), t0=str(data["t0"]),
            variants={name: VariantMetrics.from_dict(row) for name, row in data["variants"].items()},
            coverage=dict(data["coverage"]), tail_coverage=dict(data["tail_coverage"]),
            per_tick=tuple(TickRow.from_dict(row) for row in data["per_tick"]), cost=Cost.from_dict(data["cost"]),
            models=dict(data["models"]), replay=dict(data["replay"]), requests=dict(data["requests"]),
        )

    def with_wall_time(self, seconds: float) -> SeedResult:
        return replace(self, cost=replace(self.cost, seed_wall_s=seconds))


@dataclass(frozen=True)
class VariantSummary:
    """One variant over seeds (and windows): mean ± std of each metric, and the transfer ratio of
    the mean NEs (robust when one seed's FM-VM gap is tiny)."""

    log_loss: MeanStd
    ne: MeanStd
    auc: MeanStd
    calibration: MeanStd
    transfer_ratio: MeanStd
    transfer_ratio_pooled: float

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class SeedAggregate:
    """Mean ± std over seeds of every variant metric, coverage share and cost figure."""

    variants: Mapping[str, VariantSummary]
    coverage: Mapping[str, MeanStd]
    cost: Cost[MeanStd]

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


def aggregate_seeds(seed_results: list[SeedResult]) -> SeedAggregate:
    """Mean ± std over seeds of every variant metric, coverage share and cost figure."""
    if not seed_results:
        raise ValueError("no seed results to aggregate")
    names = [name for name in seed_results[0].variants if all(name in r.variants for r in seed_results)]
    spread = {
        name: {key: mean_std([getattr(r.variants[name], key) for r in seed_results]) for key in METRIC_KEYS}
        for name in names
    }
    variants = {}
    for name in names:  # ratio of the mean NEs: robust when one seed's FM-VM gap is tiny
        vm, mine, fm = (spread[v]["ne"].mean for v in ("vm_baseline", name, "fm"))
        pooled = _ratio(vm, mine, fm) if vm is not None and mine is not None and fm is not None else float("nan")
        variants[name] = VariantSummary(**spread[name], transfer_ratio_pooled=pooled)
    return SeedAggregate(
        variants=variants,
        coverage={key: mean_std([r.coverage.get(key) for r in seed_results]) for key in seed_results[0].coverage},
        cost=Cost(**{f.name: mean_std([getattr(r.cost, f.name) for r in seed_results]) for f in fields(Cost)}),
    )


# Settings each cached step depends on, as dotted paths into the config. A step is reused only
# when the fingerprint of these settings, its as-of, its seed and its input data all match.
STEP_SETTINGS: dict[str, tuple[str, ...]] = {
    "fm": ("model.embedding_dim", "model.history_length", "model.fm", "model.training"),
    "vm_baseline": ("model.embedding_dim", "model.history_length", "model.vm", "model.training"),
    # the teacher (cross-fitted fold FMs or the served FM) shapes the soft labels: FM settings count
    "vm_distilled": ("model.embedding_dim", "model.history_length", "model.vm", "model.fm", "model.training",
                     "model.distillation"),
    # the distillation teacher's soft labels (cross-fitted fold FMs, or the served FM in-sample)
    "teacher": ("model.embedding_dim", "model.history_length", "model.fm", "model.training", "model.distillation"),
    # the speculator (blend + request verifier) fit on past ticks at the window's start
    "speculator": ("precompute.candidates", "precompute.speculator", "precompute.ttl_hours",
                   "precompute.horizon_hours"),
    # the replayed tables also depend on the models, through their checkpoint versions (content hashes)
    "replay": ("model.embedding_dim", "model.history_length", "precompute", "enrichment", "tables",
               "evaluation.tail_hours", "evaluation.eval_hours", "evaluation.step_hours"),
    # a seed's result: everything above plus how the variants are fine-tuned and scored
    "seed": ("model", "precompute", "enrichment", "tables", "evaluation.tail_hours", "evaluation.eval_hours",
             "evaluation.step_hours", "evaluation.finetune_batch_size", "evaluation.finetune_learning_rate",
             "evaluation.freshness"),
}


def _setting(config: SolarisConfig, dotted: str) -> Any:
    node: Any = config
    for key in dotted.split("."):
        node = getattr(node, key)
    return node.model_dump(mode="json") if hasattr(node, "model_dump") else node


def step_fingerprint(config: SolarisConfig, step: str, **inputs: Any) -> str:
    """Hash of the settings ``step`` depends on (:data:`STEP_SETTINGS`) and its other inputs.

    ``inputs`` are the as-of, the seed, the data digest, upstream checkpoint versions: anything
    JSON-plain. Two runs share a cached result exactly when their fingerprints are equal.
    """
    if step not in STEP_SETTINGS:
        raise ValueError(f"unknown step {step!r}; expected one of {sorted(STEP_SETTINGS)}")
    settings = {dotted: _setting(config, dotted) for dotted in STEP_SETTINGS[step]}
    text = json.dumps({"step": step, "settings": settings, "inputs": inputs}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]
