"""Step 6 of the evaluation: one seed's result (metrics, coverage, replay figures, costs), saved and reused.

Why a module of its own: ``result.json`` and ``scored.npz`` are what a rerun reuses (by fingerprint)
and what the pooled intervals and the report read; the per-tick rows get the replay's hit rates here,
typed (:class:`~solaris.evaluation.protocol.TickRow`) from the replay to the report.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

import numpy as np

from solaris.drivers.evaluate.finetune import FineTunedVMs
from solaris.drivers.evaluate.prediction import ScoredPredictions
from solaris.drivers.evaluate.serving import ReplayOutcome, ServedFeatures
from solaris.drivers.evaluate.training import TrainedModels
from solaris.drivers.evaluate.windows import WindowRows
from solaris.evaluation import protocol as evaluation
from solaris.evaluation.protocol import HitRates, SeedResult, TickRow, cumulative_key
from solaris.models.training import EventArrays
from solaris.storage.audit import RunsLog
from solaris.tiers import SERVING_ORDER

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from pyspark.sql import SparkSession

    from solaris.config import SolarisConfig
    from solaris.evaluation.protocol import EvaluationWindow

log = logging.getLogger("solaris.evaluate")

SCORED_FILE = "scored.npz"  # per seed: every variant's predictions on the scored requests (for the bootstrap)
SERVED_TIER = "served_tier"  # ...and, beside them in the same file, the tier that served each scored request
# coverage keys of tiers 1..k for every k, in serving order (solaris.evaluation.protocol.cumulative_key)
COVERAGE_KEYS = tuple(cumulative_key(k) for k in SERVING_ORDER)


def coverage_text(shares: Mapping[str, float]) -> str:
    """"tier1 3.1%, tiers1-2 6.7%, ...": the cumulative coverage in serving order, as printed and logged."""
    return ", ".join(f"{'tier1' if key == 'tiers1' else key} {shares[key]:.1%}" for key in COVERAGE_KEYS)


@dataclass(frozen=True)
class FmPasses:
    """The FM forward passes the replay spent in the scored window (the cost SOLARIS moves off the request path)."""

    pairs_scored: int
    users_represented: int
    per_request: float


def _replay_figures(
    spark: SparkSession, cfg: SolarisConfig, window: EvaluationWindow, per_tick: tuple[TickRow, ...], n_scored: int
) -> tuple[dict[str, HitRates], FmPasses]:
    """Hit rates per tick and FM passes spent in the scored window, from the seed's ``runs`` table."""
    from pyspark.sql import functions as F

    runs: pd.DataFrame = (
        RunsLog.of(spark, cfg).frame()
        .where(F.col("status") == "success")
        .where(F.col("job").isin("hit_rate", "score", "knn"))
        .where((F.col("as_of") >= F.lit(window.fm_cutoff)) & (F.col("as_of") < F.lit(window.end)))
        .select("job", F.date_format("as_of", "yyyy-MM-dd'T'HH:mm:ss").alias("as_of"), "rows_in", "details")
        .toPandas()
    )
    hit_rates, pairs, users = {}, 0, 0
    tick_of = {t.tick[:19]: t.tick for t in per_tick}  # runs' as_of (second precision) -> tick key
    scored_ticks = {row.tick[:19] for row in per_tick if row.scored_window}
    for row in runs.itertuples():
        details = json.loads(row.details)
        tick = tick_of.get(row.as_of)
        if row.job == "hit_rate" and tick:
            hit_rates[tick] = HitRates(details.get("candidates_hit_rate"), details.get("verified_hit_rate"))
        elif row.as_of in scored_ticks:
            # FM passes: `scored` (under the request rule only the kept pairs; rows_in = candidates)
            pairs += int(details.get("scored") or row.rows_in) if row.job == "score" else 0
            users += int(row.rows_in) if row.job == "knn" else 0
    return hit_rates, FmPasses(pairs, users, evaluation.fm_passes_per_request(pairs, users, n_scored))


def score_seed(
    spark: SparkSession, seed_config: SolarisConfig, rows: WindowRows, events: EventArrays, *, seed: int,
    models: TrainedModels, replayed: ReplayOutcome, served: ServedFeatures, tuned: FineTunedVMs,
    predictions: ScoredPredictions,
) -> SeedResult:
    """Step 6: the seed's metrics, coverage, replay figures and costs (saved as result.json)."""
    labels = events.label[rows.scored]
    hit_rates, fm_passes = _replay_figures(spark, seed_config, rows.window, served.per_tick, rows.scored.size)
    return SeedResult(
        seed=seed,
        t0=rows.window.t0.isoformat(),
        variants=evaluation.variant_metrics(labels, predictions.by_variant),
        coverage=evaluation.coverage_by_tier(served.scored()[1]),
        tail_coverage=evaluation.coverage_by_tier(served.tail()[1]),
        per_tick=tuple(replace(row, hit_rates=hit_rates.get(row.tick)) for row in served.per_tick),
        cost=evaluation.Cost(
            fm_pairs_scored=float(fm_passes.pairs_scored),
            fm_users_represented=float(fm_passes.users_represented),
            fm_passes_per_request=float(fm_passes.per_request),
            train_models_s=models.seconds,
            replay_s=replayed.seconds,
            resolve_s=served.seconds,
            finetune_vms_s=tuned.seconds,
            score_requests_s=predictions.seconds,
            seed_wall_s=float("nan"),  # the caller's clock: with_wall_time
        ),
        models={"versions": models.versions, "reused": list(models.reused), "adapters": dict(tuned.adapters)},
        replay={"seed": replayed.seed, "ticks": replayed.ticks, "ticks_run": replayed.ticks_run,
                "cleared": replayed.cleared},
        requests={
            "tail": int(rows.tail.size),
            "scored": int(rows.scored.size),
            "scored_users": int(np.unique(events.user_id[rows.scored]).size),
            "base_rate": float(labels.mean()),
        },
    )


def saved_seed(seed_dir: Path, fingerprint: str) -> tuple[SeedResult, dict[str, np.ndarray]] | None:
    """The seed's saved result and scored predictions when they were computed with ``fingerprint``."""
    result_path, scored_path = seed_dir / "result.json", seed_dir / SCORED_FILE
    if not (result_path.is_file() and scored_path.is_file()):
        return None
    saved = json.loads(result_path.read_text())
    if saved.get("fingerprint") != fingerprint:
        log.info("%s: computed with other settings or data (fingerprint %s, now %s): recomputing",
                 seed_dir, saved.get("fingerprint"), fingerprint)
        return None
    with np.load(scored_path) as scored:
        return SeedResult.from_dict(saved["result"]), {name: scored[name] for name in scored.files}


def save_seed(seed_dir: Path, fingerprint: str, result: SeedResult, predictions: ScoredPredictions) -> None:
    """Writes result.json and scored.npz, each through a temporary file (a killed run leaves no half file)."""
    seed_dir.mkdir(parents=True, exist_ok=True)
    with open(seed_dir / f".{SCORED_FILE}.tmp", "wb") as handle:
        np.savez(handle, **predictions.by_variant, **{SERVED_TIER: predictions.served_tier})  # type: ignore[arg-type]
    (seed_dir / f".{SCORED_FILE}.tmp").replace(seed_dir / SCORED_FILE)
    tmp = seed_dir / ".result.json.tmp"
    tmp.write_text(json.dumps({"fingerprint": fingerprint, "result": result.to_dict()}, indent=2, default=str))
    tmp.replace(seed_dir / "result.json")
