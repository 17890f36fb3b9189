"""Steps 2 and 3 of the evaluation: the replay, and what serving (or the oracle) gives each request.

Why together: the replay writes the snapshots and ``runs`` rows that :func:`serve_requests` resolves
and the results read; the oracle's and the freshness curve's inputs are the same serving FM queried
at other times, and :func:`fed_inputs` turns all of them into what each VM+SOLARIS model is fed.
Serving's per-tick rows are :class:`~solaris.evaluation.protocol.TickRow`, typed from here to the report.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

import numpy as np
import torch
from torch import nn

from solaris.drivers import replay
from solaris.drivers.evaluate.training import TrainedModels
from solaris.drivers.evaluate.windows import EvaluationData, WindowRows
from solaris.evaluation import freshness
from solaris.evaluation import protocol as evaluation
from solaris.evaluation.protocol import TickRow, step_fingerprint
from solaris.models.training import EventArrays, predict
from solaris.serving.resolver import load_snapshot
from solaris.serving.snapshots import SNAPSHOTS_DIR
from solaris.stages.train_speculator import speculator_for
from solaris.storage.table import Table
from solaris.tiers import TIER_PAIR
from solaris.timeutil import utc_stamp

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

    from solaris.config import SolarisConfig

log = logging.getLogger("solaris.evaluate")


@dataclass(frozen=True)
class ReplayOutcome:
    """Step 2: the hourly cycle replayed over the window in the replay's warehouse."""

    seed: int  # the seed of the replay's FM and verifier (shared by every seed with evaluation.share_replay)
    ticks: int
    ticks_run: int  # 0 when every tick of a replay with the same fingerprint was already done
    cleared: bool  # tables of a replay with other settings were dropped first
    seconds: float


@dataclass(frozen=True)
class ServedFeatures:
    """Step 3: the FM embedding, tier and age serving returned for every tail and scored request."""

    vectors: np.ndarray  # [tail + scored, D]
    tiers: np.ndarray
    n_tail: int
    per_tick: tuple[TickRow, ...]  # no hit rates yet: the results add the replay's (results.score_seed)
    seconds: float
    ages: np.ndarray  # seconds from the value's computation to the request; NaN where nothing was served

    def tail(self) -> tuple[np.ndarray, np.ndarray]:
        """Vectors and tiers of the tail's requests (what the fine-tunes learn from)."""
        return self.vectors[: self.n_tail], self.tiers[: self.n_tail]

    def scored(self) -> tuple[np.ndarray, np.ndarray]:
        """Vectors and tiers of the scored requests (what the variants are scored with)."""
        return self.vectors[self.n_tail :], self.tiers[self.n_tail :]


@dataclass(frozen=True)
class AgedRequests:
    """The serving FM at request - age over a window's scored requests: the freshness curve's input.

    ``probabilities[age]``: the FM's head on the pair vector it computed then (age 0: the FM at the
    request, the upper bound); ``vectors[age]``: that pair vector, for the ages the oracle model reads.
    """

    probabilities: Mapping[int, np.ndarray]
    vectors: Mapping[int, np.ndarray]
    rows: int  # scored requests per pass
    seconds: float


Fed = tuple[np.ndarray, np.ndarray, np.ndarray]  # (vectors [n, D], tiers [n], ages [n]) one model is fed


@dataclass(frozen=True)
class FedInputs:
    """What each VM+SOLARIS model is fine-tuned on (``tail``) and scored with (``scored``).

    By variant: :data:`SOLARIS_ALL` what serving returned (the ablation feeds this model fewer
    tiers), ``solaris_none`` nothing served, ``solaris_placebo`` the served values (vector and age)
    permuted within each tier (tail and scored rows separately), ``solaris_oracle`` the exact pair,
    tier 1 on every row, aged from its tick. Each value: ``(vectors [n, D], tiers [n], ages [n])``,
    ages in seconds, NaN where nothing is served (read by the ``channel`` design only).
    """

    tail: dict[str, Fed]
    scored: dict[str, Fed]


def _clear_replay(config: SolarisConfig, seed_config: SolarisConfig) -> bool:
    """Drop the seed warehouse's tables and snapshots (not its models); True when there was any."""
    folders = [Path(seed_config.table_path(name)) for name in type(config.tables).model_fields]
    folders.append(Path(seed_config.warehouse) / SNAPSHOTS_DIR)
    existing = [folder for folder in folders if folder.exists()]
    for folder in existing:
        shutil.rmtree(folder)
    return bool(existing)


def replay_window(
    spark: SparkSession, config: SolarisConfig, seed_config: SolarisConfig, rows: WindowRows, *,
    models: TrainedModels,
) -> ReplayOutcome:
    """Step 2: the hourly precompute + enrichment over the window, in the seed's warehouse.

    The tables belong to one replay fingerprint (settings, model versions, data, ticks), recorded in
    ``replay.json`` before the first tick runs: a rerun with the same fingerprint resumes (ticks
    already done are skipped), any other fingerprint drops the tables and replays from scratch.
    """
    started = time.monotonic()
    window = rows.window
    # the speculator the schedule would have had at the window's start: fit on the week before it
    speculator = speculator_for(
        spark, config, seed_config, window.fm_cutoff,
        step_fingerprint(seed_config, "speculator", as_of=window.fm_cutoff.isoformat(), data=rows.training_digest,
                         fm=models.serving_versions["fm"]),
    )
    versions = models.serving_versions if speculator is None else {**models.serving_versions, "speculator": speculator}
    fingerprint = step_fingerprint(
        seed_config, "replay", seed=seed_config.seed, data=rows.window_digest, models=versions,
        t0=window.t0.isoformat(),
    )
    marker = Path(seed_config.warehouse) / "replay.json"
    saved = json.loads(marker.read_text()).get("fingerprint") if marker.is_file() else None
    cleared = False
    if saved != fingerprint:
        cleared = _clear_replay(config, seed_config)
        if cleared:
            log.info("replay settings changed (fingerprint %s -> %s): tables dropped, replaying", saved, fingerprint)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"fingerprint": fingerprint, "t0": window.t0.isoformat()}))
    target = Table.at(seed_config.table_path("events"), spark=spark)
    if not target.exists():
        target.append(Table.of(spark, config, "events").scan())
    ticks = window.ticks()
    # no VACUUM: under Delta's 7-day guard it would remove none of the files this replay wrote minutes ago
    cycles = replay.run(spark, seed_config, ticks[0], window.end, step_hours=window.step_hours, vacuum=False)
    return ReplayOutcome(seed_config.seed, len(ticks), len(cycles), cleared, time.monotonic() - started)


def serve_requests(seed_config: SolarisConfig, rows: WindowRows, events: EventArrays) -> ServedFeatures:
    """Step 3: resolve every tail and scored request through the snapshot published at its tick."""
    started = time.monotonic()
    window, dim = rows.window, seed_config.model.embedding_dim
    served_rows = np.concatenate([rows.tail, rows.scored])
    tick_of = window.serving_tick(events.ts[served_rows])
    vectors = np.zeros((served_rows.size, dim), dtype=np.float32)
    tiers = np.zeros(served_rows.size, dtype=np.int64)
    ages = np.full(served_rows.size, np.nan)
    per_tick = []
    for index, tick in enumerate(window.ticks()):
        mine = np.flatnonzero(tick_of == index)
        manifest = Path(seed_config.warehouse) / SNAPSHOTS_DIR / f"snapshot-{utc_stamp(tick)}.json"
        if mine.size:
            request_rows = served_rows[mine]
            got, tier, age = load_snapshot(manifest).resolve(
                events.user_id[request_rows], events.item_id[request_rows],
                events.ts[request_rows].astype(np.float64),
            )
            if np.any((tier > 0) & ~(age > 0)):  # an embedding computed at or after its request = leakage
                raise RuntimeError(f"snapshot {manifest.name} served an embedding not older than its request")
            vectors[mine], tiers[mine], ages[mine] = got, tier, age
        per_tick.append(
            TickRow(tick.isoformat(), tick >= window.t0, int(mine.size),
                    evaluation.coverage_by_tier(tiers[mine]) if mine.size else {})
        )
    return ServedFeatures(vectors, tiers, int(rows.tail.size), tuple(per_tick), time.monotonic() - started, ages)


def fm_threads(config: SolarisConfig) -> None:
    """The FM predicts on ``model.training.threads`` (the VMs' fits leave torch on one thread)."""
    torch.set_num_threads(config.model.training.threads)


def oracle_requests(config: SolarisConfig, rows: WindowRows, data: EvaluationData, fm: nn.Module) -> np.ndarray:
    """The oracle's input: the serving FM's exact pair embedding for every tail and scored request.

    Computed as the score job would have at the request's serving tick: features from the history
    strictly before the tick (:meth:`EvaluationWindow.serving_tick_times`), so nothing at or after
    the request reaches it. Tier 1 on every request: what SOLARIS could transfer with full coverage.
    """
    served_rows = np.concatenate([rows.tail, rows.scored])
    events = data.events
    at_tick = rows.window.serving_tick_times(events.ts[served_rows])
    if not np.all(at_tick < events.ts[served_rows]):  # the rule the served embeddings obey too
        raise RuntimeError("an oracle query time is not strictly before its request")
    features = data.index.query(events.user_id[served_rows], events.item_id[served_rows], at_tick,
                                config.model.history_length)
    fm_threads(config)
    _, _, embeddings = predict(fm, features, with_embeddings=True)
    if embeddings is None:
        raise RuntimeError("the serving FM returned no pair embeddings")
    return embeddings


def oracle_ages(rows: WindowRows, events: EventArrays) -> np.ndarray:
    """Seconds from the oracle's serving tick (when its value is computed) to each tail and scored request."""
    served_rows = np.concatenate([rows.tail, rows.scored])
    ts = events.ts[served_rows]
    return (ts - rows.window.serving_tick_times(ts)).astype(np.float64)


def aged_requests(config: SolarisConfig, rows: WindowRows, data: EvaluationData, fm: nn.Module) -> AgedRequests:
    """The serving FM fed the history up to request - age, for every scored request and curve age.

    One pass per age of :func:`solaris.evaluation.freshness.pass_ages` over the scored requests (age 0
    reads the evaluation's own point-in-time features, the others query the history index at
    request - age), each batched by :func:`~solaris.models.training.predict`. Computed once per window
    and serving FM, shared by its seeds, like the oracle's input.
    """
    started = time.monotonic()
    ages = config.evaluation.freshness
    events, scored = data.events, rows.scored
    fm_threads(config)
    probabilities, vectors = {}, {}
    for age in freshness.pass_ages(ages.fm_ages_minutes, ages.oracle_ages_minutes):
        features = data.features.take(scored) if age == 0 else freshness.features_at_age(
            data.index, events.user_id[scored], events.item_id[scored], events.ts[scored], age_minutes=age,
            history_length=config.model.history_length)
        probabilities[age], vector = freshness.fm_pass(fm, features)
        if age in ages.oracle_ages_minutes:
            vectors[age] = vector
    seconds = time.monotonic() - started
    log.info("freshness curve: %d FM passes over %d scored requests (ages %s min) in %.1f s", len(probabilities),
             scored.size, ", ".join(map(str, probabilities)), seconds)
    return AgedRequests(probabilities, vectors, int(scored.size), seconds)


def fed_inputs(served: ServedFeatures, oracle: np.ndarray, seed: int, *, oracle_ages: np.ndarray) -> FedInputs:
    """The input of every VM+SOLARIS model (pure; the placebo's permutation is seeded by ``seed``).

    ``oracle_ages``: the age of each oracle value (:func:`oracle_ages`), aligned with ``oracle``.
    """
    if oracle.shape != served.vectors.shape or oracle_ages.shape != served.tiers.shape:
        raise ValueError(f"oracle embeddings {oracle.shape} (ages {oracle_ages.shape}) are not aligned with the "
                         f"served ones {served.vectors.shape}")
    rng = np.random.default_rng([seed, 1])  # its own stream: the placebo of seed s is fixed by s
    parts = {"tail": slice(0, served.n_tail), "scored": slice(served.n_tail, None)}
    fed: dict[str, dict[str, Fed]] = {}
    for part, rows in parts.items():  # tail first, then scored: each permuted within its own rows
        vectors, tiers, ages = served.vectors[rows], served.tiers[rows], served.ages[rows]
        placebo = evaluation.permutation_within_tier(tiers, rng)
        fed[part] = {
            evaluation.SOLARIS_ALL: (vectors, tiers, ages),
            evaluation.SOLARIS_NONE: (*evaluation.served_up_to_tier(vectors, tiers, 0), np.full(tiers.size, np.nan)),
            evaluation.SOLARIS_PLACEBO: (vectors[placebo].astype(np.float32), tiers, ages[placebo]),
            evaluation.SOLARIS_ORACLE: (oracle[rows], np.full(tiers.size, TIER_PAIR, dtype=np.int64),
                                        oracle_ages[rows]),
        }
    return FedInputs(fed["tail"], fed["scored"])
