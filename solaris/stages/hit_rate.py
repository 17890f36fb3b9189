"""Replay measurements: speculation hit rate of a precompute run, and coverage of a snapshot.

Both read events *after* the tick, so they only make sense in replays and backfills, and never
feed a decision; :func:`solaris.pipeline.run_cycle` runs them with ``measure=True``.

Hit rate:

For the run at ``t``: of the events in ``(t, t + horizon]`` (the requests the run speculated on),
which share had their (user, item) pair among the run's candidates, and among its verified pairs
(``pair_embeddings`` rows written by the run)? Also the precision of each set. Only meaningful in
replays and backfills, where the future events are known; it reads events after ``t`` for this
measurement only, never for a decision. Run it right after ``score`` (a later run may refresh the
pairs, re-tagging them with its own run id).

    solaris hit-rate --as-of 2000-12-01T00:00:00Z
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from solaris.serving.resolver import coverage as tier_shares
from solaris.serving.resolver import load_snapshot
from solaris.storage.audit import RunRecord
from solaris.storage.events import Events
from solaris.storage.table import Table
from solaris.tick import StepContext
from solaris.tiers import SERVING_ORDER

if TYPE_CHECKING:  # pragma: no cover

    from pyspark.sql import DataFrame


log = logging.getLogger("solaris.hit_rate")


@dataclass(frozen=True)
class PairSetHits:
    """How one set of speculated pairs met the requests: size, hits, hit rate, precision."""

    pairs: int
    hits: int
    hit_rate: float | None  # hits / requests (None without requests)
    precision: float | None  # hits / pairs (None for an empty set)


@dataclass(frozen=True)
class HitRateResult:
    """Requests of ``(t, t + horizon]`` and how the run's candidates and verified pairs covered them."""

    requests: int
    horizon_end: str
    candidates: PairSetHits
    verified: PairSetHits

    def details(self) -> dict:
        """The flat ``runs.details`` layout readers of the audit table rely on."""
        flat: dict = {"requests": self.requests, "horizon_end": self.horizon_end}
        for name, hits in (("candidates", self.candidates), ("verified", self.verified)):
            flat[name], flat[f"{name}_hits"] = hits.pairs, hits.hits
            flat[f"{name}_hit_rate"], flat[f"{name}_precision"] = hits.hit_rate, hits.precision
        return flat


@dataclass(frozen=True)
class CoverageResult:
    """Requests of ``(t, t + 1h]`` resolved through the snapshot published at ``t``: share per tier."""

    requests: int
    snapshot_id: str
    shares: dict[str, float]  # tier<k>/none and cumulative_tier<k> for every tier k (resolver.coverage)

    def cumulative(self, tier: int) -> float:
        """Share of requests served by tiers 1..``tier``."""
        return self.shares.get(f"cumulative_tier{tier}", 0.0)


@dataclass(frozen=True)
class HitRateOptions:
    """None: the horizon is ``precompute.horizon_hours``; the pairs are the run's own."""


@dataclass(frozen=True)
class CoverageOptions:
    """``manifest``: the snapshot manifest whose tables serve the next hour's requests (publish's)."""

    manifest: str


def run(step: StepContext, *, options: HitRateOptions) -> HitRateResult:
    spark, config, as_of, run_id, tick = step.spark, step.config, step.as_of, step.run_id, step.tick
    from pyspark.sql import functions as F

    horizon_end = as_of + timedelta(hours=config.precompute.horizon_hours)
    keys = ["user_id", "item_id"]

    def flagged(frame: DataFrame, flag: str) -> DataFrame:
        return frame.select(*keys).distinct().withColumn(flag, F.lit(True))

    requests = flagged(Events.of(spark, config).window(since=as_of, until=horizon_end), "is_request")
    candidates = flagged(Table.of(spark, config, "candidates").scan().where(F.col("run_id") == run_id), "is_candidate")
    verified = flagged(Table.of(spark, config, "pair_embeddings").scan().where(F.col("run_id") == run_id),
                       "is_verified")
    # One pass (one Spark action) over the union of the three pair sets instead of one count each.
    both = requests.join(candidates, keys, "full_outer").join(verified, keys, "full_outer")
    request = F.coalesce(F.col("is_request"), F.lit(False))
    counts = both.agg(
        F.count_if(request).alias("requests"),
        F.count_if(F.col("is_candidate")).alias("candidates"),
        F.count_if(request & F.col("is_candidate")).alias("candidates_hits"),
        F.count_if(F.col("is_verified")).alias("verified"),
        F.count_if(request & F.col("is_verified")).alias("verified_hits"),
    ).collect()[0]
    n_requests = int(counts["requests"])

    def pair_set(name: str) -> PairSetHits:
        size, hits = int(counts[name]), int(counts[f"{name}_hits"])
        return PairSetHits(pairs=size, hits=hits, hit_rate=hits / n_requests if n_requests else None,
                           precision=hits / size if size else None)

    result = HitRateResult(requests=n_requests, horizon_end=horizon_end.isoformat(),
                           candidates=pair_set("candidates"), verified=pair_set("verified"))
    record = RunRecord(run_id=run_id, job="hit_rate", as_of=as_of, rows_in=n_requests,
                       rows_out=result.verified.hits, details=result.details())
    record.write(spark, config, "success", tick)
    log.info("run %s: %d requests in the horizon; hit rate candidates %s, verified %s", run_id, n_requests,
             percent_text(result.candidates.hit_rate), percent_text(result.verified.hit_rate))
    return result


def coverage(step: StepContext, *, options: CoverageOptions) -> CoverageResult:
    """Resolve the next hour's requests through the snapshot just published; share per tier."""
    spark, config, as_of, run_id, tick = step.spark, step.config, step.as_of, step.run_id, step.tick
    manifest_path = options.manifest
    requests = Events.of(spark, config).pandas(as_of + timedelta(hours=1), since=as_of)
    tables = load_snapshot(manifest_path)
    _, tiers, _ = tables.resolve(requests["user_id"].to_numpy(), requests["item_id"].to_numpy(),
                                 requests["ts"].to_numpy().astype("float64"))
    result = CoverageResult(requests=len(requests), snapshot_id=tables.snapshot_id,
                            shares=tier_shares(tiers) if len(requests) else {})
    RunRecord(run_id=run_id, job="coverage", as_of=as_of, rows_in=len(requests),
              details={"requests": len(requests), "snapshot": tables.snapshot_id, **result.shares}
              ).write(spark, config, "success", tick)
    log.info("coverage of %d requests in (%s, +1h] via %s: %s", len(requests), as_of, tables.snapshot_id,
             ", ".join(f"<={tier} {100 * result.cumulative(tier):.1f}%" for tier in SERVING_ORDER))
    return result


def percent_text(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"
