"""One seed of one window, step by step: train -> replay -> serve -> fine-tune -> predict -> score.

Why a module of its own: the steps' order and what each hands the next is read here in one function
(:func:`evaluate_seed`); :func:`seed_result` wraps it with the reuse by fingerprint and ``--force``.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from solaris.drivers.evaluate.finetune import fine_tune
from solaris.drivers.evaluate.prediction import ScoredPredictions, predict_scored
from solaris.drivers.evaluate.results import SERVED_TIER, coverage_text, save_seed, saved_seed, score_seed
from solaris.drivers.evaluate.serving import (
    aged_requests,
    fed_inputs,
    oracle_ages,
    oracle_requests,
    replay_window,
    serve_requests,
)
from solaris.drivers.evaluate.training import train_models
from solaris.drivers.evaluate.windows import EvaluationData, WindowRows
from solaris.evaluation import protocol as evaluation
from solaris.evaluation.protocol import SeedResult

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

    from solaris.config import SolarisConfig

log = logging.getLogger("solaris.evaluate")


def seed_config(config: SolarisConfig, seed_dir: Path, seed: int, n_ticks: int) -> SolarisConfig:
    """The seed's own warehouse: same settings, its own tables, models and every tick's snapshot kept."""
    return config.model_copy(
        update={
            "warehouse": seed_dir,
            "seed": seed,
            "enrichment": config.enrichment.model_copy(update={"snapshots_kept": n_ticks + 1}),
        }
    )


def replay_of(config: SolarisConfig, window_dir: Path, seed: int) -> tuple[int, Path]:
    """The seed and folder of the FM, verifier and replay that serve ``seed`` in one window.

    With ``evaluation.share_replay``: ``config.seed`` in ``<window>/replay`` for every seed;
    without it, the seed's own folder.
    """
    if config.evaluation.share_replay:
        return config.seed, window_dir / "replay"
    return seed, window_dir / f"seed-{seed}"


def evaluate_seed(
    spark: SparkSession, config: SolarisConfig, rows: WindowRows, data: EvaluationData, *, seed: int,
    seed_dir: Path, replay_seed: int, replay_dir: Path,
) -> tuple[SeedResult, ScoredPredictions]:
    """One seed of one window: train -> replay -> serve -> fine-tune -> predict -> score.

    The serving FM, verifier, teacher and replay are ``replay_seed``'s in ``replay_dir``
    (:func:`replay_of`: shared by every seed of the window with ``evaluation.share_replay``, computed
    by the first seed that needs them, then reused by fingerprint); the VMs are this seed's own.
    """
    window = rows.window
    own_config = seed_config(config, seed_dir, seed, len(window.ticks()))
    replay_config = seed_config(config, replay_dir, replay_seed, len(window.ticks()))
    log.info(
        "seed %d (replay of seed %d in %s), T0 %s: %d events up to %s (FM, verifier), %d in the tail, "
        "%d scored requests",
        seed, replay_seed, replay_dir, window.t0, rows.pre.size, window.fm_cutoff, rows.tail.size, rows.scored.size,
    )
    models = train_models(own_config, rows, data, seed=seed, seed_dir=seed_dir, replay_seed=replay_seed,
                          replay_dir=replay_dir)
    replayed = replay_window(spark, config, replay_config, rows, models=models)
    served = serve_requests(replay_config, rows, data.events)
    key = (window.t0.isoformat(), models.versions["fm"])
    if key not in data.oracle:  # one serving FM per window: every seed sharing it reuses its oracle input
        data.oracle[key] = oracle_requests(config, rows, data, models.fm)
    if key not in data.aged:  # likewise the FM's passes at the freshness curve's ages
        data.aged[key] = aged_requests(config, rows, data, models.fm)
    inputs = fed_inputs(served, data.oracle[key], seed, oracle_ages=oracle_ages(rows, data.events))
    tuned = fine_tune(own_config, rows, data, seed=seed, models=models, inputs=inputs)
    predictions = predict_scored(config, rows, data, models=models, tuned=tuned, inputs=inputs, aged=data.aged[key])
    result = score_seed(spark, replay_config, rows, data.events, seed=seed, models=models, replayed=replayed,
                        served=served, tuned=tuned, predictions=predictions)
    return result, predictions


def seed_result(
    session: Callable[[], SparkSession], config: SolarisConfig, rows: WindowRows, data: EvaluationData, *,
    seed: int, seed_dir: Path, force_cleared: set[Path], force: bool,
) -> tuple[SeedResult, dict[str, np.ndarray]]:
    """One seed of one window: its saved result when the fingerprint matches, else computed and saved.

    Returns the result and the scored predictions by variant, plus the tier that served each scored
    request under :data:`SERVED_TIER`.

    ``--force`` clears the seed's folder and its replay folder first, each once per run
    (``force_cleared``: not again for the next seed sharing the replay).
    """
    replay_seed, replay_dir = replay_of(config, seed_dir.parent, seed)
    fingerprint = evaluation.step_fingerprint(
        config, "seed", t0=rows.window.t0.isoformat(), seed=seed, data=rows.window_digest,
        replay_seed=replay_seed, variants=evaluation.VARIANTS, result_version=evaluation.SEED_RESULT_VERSION,
    )
    if force:
        for folder in {seed_dir, replay_dir} - force_cleared:
            if folder.exists():
                shutil.rmtree(folder)
            force_cleared.add(folder)
    saved = saved_seed(seed_dir, fingerprint)
    if saved is not None:
        log.info("seed %d of T0 %s already evaluated with these settings (%s): reused", seed, rows.window.t0,
                 fingerprint)
        return saved
    started = time.monotonic()
    result, predictions = evaluate_seed(session(), config, rows, data, seed=seed, seed_dir=seed_dir,
                                        replay_seed=replay_seed, replay_dir=replay_dir)
    result = result.with_wall_time(time.monotonic() - started)
    save_seed(seed_dir, fingerprint, result, predictions)
    log.info(
        "seed %d done in %.0fs: NE fm %.4f, fm at the serving tick %.4f, vm %.4f, distilled %.4f, solaris all "
        "tiers %.4f, placebo %.4f, oracle %.4f; coverage %s",
        seed, result.cost.seed_wall_s,
        *(result.variants[v].ne for v in ("fm", evaluation.FM_AT_TICK, "vm_baseline", "vm_distilled",
                                          evaluation.SOLARIS_ALL, evaluation.SOLARIS_PLACEBO,
                                          evaluation.SOLARIS_ORACLE)),
        coverage_text(result.coverage),
    )
    return result, {**predictions.by_variant, SERVED_TIER: predictions.served_tier}
