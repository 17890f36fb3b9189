"""Knowledge-transfer evaluation on time splits: replay SOLARIS, score every variant, decide with intervals.

Windows: the T0s given (``--as-of T0 [T0 ...]`` or ``evaluation.t0s``), each refused with a one-line
reason below ``evaluation.min_requests`` / ``min_users`` / ``min_training_events``; with none given,
the ``evaluation.windows`` densest non-overlapping windows of the data (most distinct requesting
users first). For each window and seed (docs/evaluation.md):

1. ``train_models``: the serving FM, the verifier (baseline VM) and a distilled VM
   (``model.distillation.teacher``) on events up to ``T0 - tail``;
2. ``replay_window``: the hourly precompute + enrichment over ``[T0 - tail, T0 + eval)`` exactly as
   the schedule runs it, in the seed's own warehouse folder;
3. ``serve_requests``: every request of ``(tick, tick + 1h]`` resolved through the snapshot
   published at ``tick`` (only what serving would have held); ``oracle_requests``: the serving FM's
   exact pair embedding for every request, from the history as of its tick (the ceiling's input);
   ``aged_requests``: the serving FM fed the history up to request - age for the freshness curve's
   ages (``evaluation.freshness``), one pass per age over the scored requests;
4. ``fine_tune``: the VM variants fine-tuned on the tail's requests, warm-started from step 1, with
   the same rows, budget and learning rate (``evaluation.finetune_learning_rate``), one thread, the
   warm start kept when no epoch beats it; every VM+SOLARIS model on the input it is scored with:
   what serving returned, nothing (the control), the served values permuted within each tier (the
   placebo), the exact pair (the oracle);
5. ``predict_scored``: the requests of ``(T0, T0 + eval]`` scored by the FM (upper bound), the VMs
   of step 1 (not fine-tuned) and every fine-tuned variant, the SOLARIS model fed tier 1 only /
   tiers 1-2 / ... / every tier, and the freshness curve (the FM by age, the oracle model fed the
   FM's pair of each oracle age);
6. ``score_seed``: metrics, coverage, hit rates and costs (a :class:`SeedResult`).

Then 95 % intervals by bootstrap over users, paired across variants, pooled over seeds and windows
(``solaris.evaluation.bootstrap``). Writes ``<warehouse>/evaluation/<name>/``: ``metrics.json``,
``report.md`` (opening with verdict lines) and PNG plots.

Reuse: a checkpoint, a replay or a seed's result is reused only when its fingerprint matches (the
config sections it depends on, as-of, seed, a digest of the events, upstream model versions);
anything else is recomputed. ``--force`` recomputes everything; ``--quick`` is the CI preset.

    solaris evaluate                                    # the densest window(s) of the data
    solaris evaluate --as-of 2000-11-20T03:00:00Z 2000-08-03T04:00:00Z
    solaris evaluate --as-of 2026-01-03T12:00:00Z --quick
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, cast

import numpy as np

from solaris import provenance
from solaris.drivers import replay
from solaris.evaluation import freshness
from solaris.evaluation import protocol as evaluation
from solaris.evaluation.bootstrap import ScoredRequests, bootstrap_intervals
from solaris.evaluation.protocol import (
    VM_THREADS,
    SeedResult,
    cumulative_key,
    step_fingerprint,
)
from solaris.evaluation.report import EvaluationSummary, WindowSummary, interval_text, verdict_lines, write_report
from solaris.progress import Progress, progress
from solaris.runtime import JobInputError
from solaris.serving.resolver import load_snapshot
from solaris.serving.snapshots import SNAPSHOTS_DIR
from solaris.stages.train_speculator import speculator_for
from solaris.storage.tables import events_until, events_until_on_driver, refuse_no_events, table_exists
from solaris.tiers import SERVING_ORDER, TIER_PAIR
from solaris.timeutil import utc_stamp

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from pyspark.sql import SparkSession
    from torch import nn

    from solaris.config import SolarisConfig, TrainingConfig
    from solaris.evaluation.bootstrap import BootstrapIntervals
    from solaris.evaluation.protocol import EvaluationWindow
    from solaris.models.features import Features, HistoryIndex
    from solaris.models.fm import FoundationModel
    from solaris.models.training import EventArrays
    from solaris.models.vm import VerticalModel

log = logging.getLogger("solaris.evaluate")

END_OF_TIME = datetime(9999, 12, 31, tzinfo=timezone.utc)  # read every event (window choice needs them all)
SCORED_FILE = "scored.npz"  # per seed: every variant's predictions on the scored requests (for the bootstrap)
SERVED_TIER = "served_tier"  # ...and, beside them in the same file, the tier that served each scored request
# coverage keys of tiers 1..k for every k, in serving order (solaris.evaluation.protocol.cumulative_key)
COVERAGE_KEYS = tuple(cumulative_key(k) for k in SERVING_ORDER)
FINE_TUNED = 7  # models step 4 makes per seed: 2 fine-tuned VMs, then 5 VM+SOLARIS models (FineTunedVMs)


def coverage_text(shares: Mapping[str, float]) -> str:
    """"tier1 3.1%, tiers1-2 6.7%, ...": the cumulative coverage in serving order, as printed and logged."""
    return ", ".join(f"{'tier1' if key == 'tiers1' else key} {shares[key]:.1%}" for key in COVERAGE_KEYS)

def summary_lines(summary: EvaluationSummary) -> list[str]:
    """What ``solaris evaluate`` prints when it is done: pooled NE and AUC per variant, the coverage,
    the verdicts, and where the report is."""
    pooled = summary.intervals.pooled
    lines = [f"{name:<24} NE {interval_text(cell, 4, signed=False)}"
             + (f"  AUC {interval_text(pooled.auc[name], 4, signed=False)}" if name in pooled.auc else "")
             for name, cell in pooled.ne.items()]  # the freshness curve's variants: NE (and TR in the report)
    lines.append("coverage " + coverage_text({key: summary.coverage[key].mean or 0.0 for key in COVERAGE_KEYS}))
    lines += verdict_lines(summary.intervals)
    lines.append(f"report: {summary.output}/report.md (metrics.json, *.png)")
    return lines


# CI-sized evaluation: one window, few ticks, one epoch, two seeds (so mean ± std still means something).
QUICK_OVERRIDES = [
    "evaluation.seeds=2", "evaluation.windows=1", "evaluation.tail_hours=3", "evaluation.eval_hours=2",
    "model.training.max_epochs=1", "enrichment.knn_recall_sample=50", "evaluation.bootstrap_resamples=200",
    "evaluation.min_requests=100", "evaluation.min_users=20", "evaluation.min_training_events=1000",
]


def _arrays(spark: Callable[[], SparkSession], config: SolarisConfig, end: datetime) -> EventArrays:
    """Events up to ``end`` as driver arrays: read with deltalake, with Spark only when deltalake cannot."""
    from solaris.models.training import EventArrays

    frame = events_until_on_driver(config, end)
    if frame is None:
        frame = events_until(spark(), config, end)
    return EventArrays.from_frame(refuse_no_events(frame, config, end))


def _started_once(spark: SparkSession | Callable[[], SparkSession]) -> Callable[[], SparkSession]:
    """The session, or a factory of it called at most once: the first step that needs Spark starts it."""
    if not callable(spark):
        return lambda: spark
    started: list[SparkSession] = []

    def session() -> SparkSession:
        if not started:
            started.append(spark())
        return started[0]

    return session


def _seed_config(config: SolarisConfig, seed_dir: Path, seed: int, n_ticks: int) -> SolarisConfig:
    """The seed's own warehouse: same settings, its own tables, models and every tick's snapshot kept."""
    return config.model_copy(
        update={
            "warehouse": seed_dir,
            "seed": seed,
            "enrichment": config.enrichment.model_copy(update={"snapshots_kept": n_ticks + 1}),
        }
    )


@dataclass(frozen=True)
class WindowRows:
    """Rows of the (time-sorted) event arrays in each part of one window, and digests of its data."""

    window: EvaluationWindow
    pre: np.ndarray  # ts <= fm_cutoff: trains the FM, the verifier and the distilled VM
    tail: np.ndarray  # (fm_cutoff, T0]: replayed, fine-tunes the VM variants
    scored: np.ndarray  # (T0, end]: scored
    training_digest: str  # of the events <= fm_cutoff (what the checkpoints learn from)
    window_digest: str  # of the events <= end (what the replay and the scoring read)

    @classmethod
    def of(cls, events: EventArrays, window: EvaluationWindow) -> WindowRows:
        import numpy as np

        cutoff, t0, end = (t.timestamp() for t in (window.fm_cutoff, window.t0, window.end))
        pre = np.flatnonzero(events.ts <= cutoff)
        tail = np.flatnonzero((events.ts > cutoff) & (events.ts <= t0))
        scored = np.flatnonzero((events.ts > t0) & (events.ts <= end))
        for name, rows in (("before the tail", pre), ("in the tail", tail), ("in the evaluation window", scored)):
            if rows.size < 10:
                raise JobInputError(
                    f"window T0={window.t0.isoformat()}: only {rows.size} events {name}; choose another T0 "
                    "or longer windows"
                )
        upto = np.flatnonzero(events.ts <= end)

        return cls(window, pre, tail, scored, events.select(pre).digest(), events.select(upto).digest())


@dataclass(frozen=True)
class EvaluationData:
    """The events every window reads, their point-in-time features, and the history index behind them.

    ``oracle``: the oracle's input per (window T0, serving FM version), computed once and shared by
    the seeds that share the FM; ``aged``: the serving FM's passes at the freshness curve's ages over
    the scored requests (:func:`aged_requests`), keyed and shared the same way.
    """

    events: EventArrays
    features: Features  # each event's features at its own time (history strictly before it)
    index: HistoryIndex  # queries features at other times (the oracle's serving ticks, request - age)
    oracle: dict[tuple[str, str], np.ndarray]
    aged: dict[tuple[str, str], AgedRequests] = field(default_factory=dict)

    @classmethod
    def of(cls, events: EventArrays, history_length: int) -> EvaluationData:
        index = events.index()
        features = index.query(events.user_id, events.item_id, events.ts, history_length)  # = events.features
        return cls(events, features, index, {})


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


@dataclass(frozen=True)
class TrainedModels:
    """Step 1: the models trained on events <= fm_cutoff.

    ``fm`` and ``verifier`` serve the replay (the replay's seed); ``baseline`` and ``distilled`` are
    this seed's VMs, the warm starts of the fine-tuned variants. Without a shared replay, or for the
    replay's own seed, ``baseline`` is the verifier.
    """

    fm: nn.Module
    verifier: VerticalModel
    baseline: VerticalModel
    distilled: VerticalModel
    versions: dict[str, str]  # role -> checkpoint version (content hash)
    reused: tuple[str, ...]  # roles whose checkpoint was reused (fingerprint matched)
    seconds: float

    @property
    def serving_versions(self) -> dict[str, str]:
        """The checkpoints the replayed jobs load: what the replay's tables depend on."""
        return {"fm": self.versions["fm"], "vm_baseline": self.versions["verifier"]}


@dataclass(frozen=True)
class ReplayOutcome:
    """Step 2: the hourly cycle replayed over the window in the replay's warehouse."""

    seed: int  # the seed of the replay's FM and verifier (shared by every seed with evaluation.share_replay)
    ticks: int
    ticks_run: int  # 0 when every tick of a replay with the same fingerprint was already done
    cleared: bool  # tables of a replay with other settings were dropped first
    seconds: float


@dataclass(frozen=True)
class TickServing:
    tick: str
    scored_window: bool
    requests: int
    coverage: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {"tick": self.tick, "scored_window": self.scored_window, "requests": self.requests, **self.coverage}


@dataclass(frozen=True)
class ServedFeatures:
    """Step 3: the FM embedding, tier and age serving returned for every tail and scored request."""

    vectors: np.ndarray  # [tail + scored, D]
    tiers: np.ndarray
    n_tail: int
    per_tick: tuple[TickServing, ...]
    seconds: float
    ages: np.ndarray  # seconds from the value's computation to the request; NaN where nothing was served

    def tail(self) -> tuple[np.ndarray, np.ndarray]:
        return self.vectors[: self.n_tail], self.tiers[: self.n_tail]

    def scored(self) -> tuple[np.ndarray, np.ndarray]:
        return self.vectors[self.n_tail :], self.tiers[self.n_tail :]


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


@dataclass(frozen=True)
class FineTunedVMs:
    """Step 4: the VM variants fine-tuned on the tail's requests (same rows, budget and rate).

    The VM+SOLARIS models follow ``model.adapter.design``: with ``adapter``, the fine-tuned VM (the
    baseline, or the distilled VM for ``solaris_distilled``) plus a tier adapter fit on the tail's
    served values (:func:`solaris.models.training.adapt_vm`; ``adapters`` records what each tier uses);
    with ``concat``, a VM fine-tuned with the vector in its first layer; with ``channel``, a VM
    fine-tuned with the vector, FM score, age and tier as inputs and a per-tier score path.
    """

    baseline: VerticalModel
    distilled: VerticalModel
    solaris: nn.Module  # on what serving returned
    solaris_distilled: nn.Module
    control: nn.Module  # on nothing served
    placebo: nn.Module  # on the served vectors permuted within each tier
    oracle: nn.Module  # on the exact pair for every request
    seconds: float
    adapters: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ScoredPredictions:
    """Step 5: every variant's probability on each scored request, and the tier that served it."""

    by_variant: dict[str, np.ndarray]
    served_tier: np.ndarray
    seconds: float


def _point_latest(root: Path, version: str) -> None:
    pointer = root / ".LATEST.tmp"
    pointer.write_text(version + "\n")
    pointer.replace(root / "LATEST")


def _trained(
    root: Path, role: str, dim: int | None, fingerprint: str, train: Callable[[], tuple[nn.Module, dict[str, Any]]]
) -> tuple[nn.Module, str, bool]:
    """The checkpoint under ``root`` whose metadata carries ``fingerprint``, else a newly trained one.

    Every version under ``root`` is a candidate (switching a setting back reuses the old model);
    ``LATEST`` is pointed at the one returned, since the replayed jobs load ``LATEST``.
    Returns the model, its version and whether it was reused.
    """
    from solaris.models.checkpoint import METADATA, load_checkpoint, save_checkpoint

    if root.is_dir():
        for folder in sorted(p for p in root.iterdir() if (p / METADATA).is_file()):
            if json.loads((folder / METADATA).read_text()).get("fingerprint") == fingerprint:
                model, meta = load_checkpoint(folder, role, dim)
                _point_latest(root, meta["version"])
                log.info("reusing %s checkpoint %s (fingerprint %s)", role, meta["version"], fingerprint)
                return model, str(meta["version"]), True
    log.info("training %s (fingerprint %s: no checkpoint with these settings, as-of, seed and data)",
             role, fingerprint)
    model, metadata = train()
    folder = save_checkpoint(model, root, {**metadata, "fingerprint": fingerprint})
    return model, folder.name, False


def _teacher_logits(
    config: SolarisConfig, rows: WindowRows, events: EventArrays, features: Features, fm: nn.Module,
    fm_version: str, replay_seed: int, replay_dir: Path,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Soft labels for the distilled VMs on events <= fm_cutoff, computed once per replay and cached.

    Why cached: the cross-fitted teacher trains ``teacher_folds`` FMs, an FM-side cost that every VM
    seed sharing the replay would otherwise pay again. Keyed like a checkpoint (settings, as-of,
    replay seed, data, and the served FM's version for ``in-sample``).
    """
    from solaris.models.training import distillation_teacher_logits

    in_sample = config.model.distillation.teacher == "in-sample"
    fingerprint = step_fingerprint(
        config, "teacher", as_of=rows.window.fm_cutoff.isoformat(), seed=replay_seed, data=rows.training_digest,
        fm=fm_version if in_sample else None,
    )
    path = replay_dir / "teacher" / f"{fingerprint}.npz"
    if path.is_file():
        with np.load(path) as saved:
            log.info("reusing the distillation teacher's soft labels (fingerprint %s)", fingerprint)
            return saved["logits"], json.loads(str(saved["used"]))
    logits, used = distillation_teacher_logits(
        events.select(rows.pre), config, replay_seed, features.take(rows.pre), fm
    )
    used = {**used, "teacher_seed": replay_seed}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as handle:
        np.savez(handle, logits=logits, used=np.array(json.dumps(used)))
    tmp.replace(path)
    return logits, used


def _vm_training(config: SolarisConfig, **update: Any) -> TrainingConfig:
    """``model.training`` as the evaluation trains its VMs: one thread (the same seed gives the same VM)."""
    return config.model.training.model_copy(update={**update, "threads": VM_THREADS})


def finetune_training(config: SolarisConfig, threads: int = VM_THREADS) -> TrainingConfig:
    """The fine-tune on the tail every VM variant gets (step 4): ``model.training`` with the
    ``evaluation.finetune_*`` batch and rate; ``bench/fm_gap.py --tail-finetune`` applies it to the FM too."""
    settings = config.evaluation
    return config.model.training.model_copy(update={
        "batch_size": settings.finetune_batch_size, "learning_rate": settings.finetune_learning_rate,
        "threads": threads})


def train_models(
    config: SolarisConfig, rows: WindowRows, data: EvaluationData, *, seed: int, seed_dir: Path,
    replay_seed: int, replay_dir: Path,
) -> TrainedModels:
    """Step 1: serving FM and verifier (the replay's seed), this seed's VMs; all reused by fingerprint.

    The serving models live under ``replay_dir/models`` (the replayed jobs load them from there);
    this seed's baseline and distilled VMs under ``seed_dir/models``. The distilled VMs' soft labels
    come from ``model.distillation.teacher`` (cross-fitted fold FMs, or the served FM in-sample),
    computed once per replay. The VMs train on one thread (:data:`VM_THREADS`, part of their fingerprint).
    """
    from solaris.models.training import train_fm, train_vm, training_metadata

    started = time.monotonic()
    cutoff = rows.window.fm_cutoff
    events, features = data.events, data.features
    events_pre, features_pre = events.select(rows.pre), features.take(rows.pre)
    vm_training = _vm_training(config)

    def inputs(of_seed: int) -> dict[str, Any]:
        return {"as_of": cutoff.isoformat(), "seed": of_seed, "data": rows.training_digest}

    def vm_inputs(of_seed: int) -> dict[str, Any]:
        return {**inputs(of_seed), "vm_threads": VM_THREADS}

    def fit_fm() -> tuple[nn.Module, dict[str, Any]]:
        result = train_fm(events, config, replay_seed, features=features, rows=rows.pre)
        return result.model, training_metadata("fm", cutoff, replay_seed, events_pre, result, config=config)

    def fit_vm(of_seed: int) -> Callable[[], tuple[nn.Module, dict[str, Any]]]:
        def fit() -> tuple[nn.Module, dict[str, Any]]:
            result = train_vm(events_pre, config, of_seed, "baseline", features=features_pre, training=vm_training)
            return result.model, training_metadata("vm_baseline", cutoff, of_seed, events_pre, result, config=config)
        return fit

    serving = replay_dir / "models"
    fm, fm_version, fm_reused = _trained(
        serving / "fm", "fm", config.model.embedding_dim, step_fingerprint(config, "fm", **inputs(replay_seed)),
        fit_fm,
    )
    verifier, verifier_version, verifier_reused = _trained(
        serving / "vm_baseline", "vm", None, step_fingerprint(config, "vm_baseline", **vm_inputs(replay_seed)),
        fit_vm(replay_seed),
    )
    if seed == replay_seed:
        baseline, baseline_version, baseline_reused = verifier, verifier_version, verifier_reused
    else:
        baseline, baseline_version, baseline_reused = _trained(
            seed_dir / "models" / "vm_baseline", "vm", None,
            step_fingerprint(config, "vm_baseline", **vm_inputs(seed)), fit_vm(seed),
        )

    def fit_distilled() -> tuple[nn.Module, dict[str, Any]]:
        teacher, used = _teacher_logits(config, rows, events, features, fm, fm_version, replay_seed, replay_dir)
        result = train_vm(events_pre, config, seed, "distilled", teacher_logits=teacher, features=features_pre,
                          training=vm_training)
        in_sample = {"teacher_fm": fm_version} if config.model.distillation.teacher == "in-sample" else {}
        return result.model, training_metadata("vm_distilled", cutoff, seed, events_pre, result, config=config,
                                               models=in_sample, **used)

    # in-sample soft labels are the served FM's own: its version is an input of the distilled VM
    distilled_inputs = {
        **vm_inputs(seed), "teacher_seed": replay_seed,
        "fm": fm_version if config.model.distillation.teacher == "in-sample" else None,
    }
    distilled, distilled_version, distilled_reused = _trained(
        seed_dir / "models" / "vm_distilled", "vm", None,
        step_fingerprint(config, "vm_distilled", **distilled_inputs), fit_distilled,
    )
    flags = {"fm": fm_reused, "verifier": verifier_reused, "vm_baseline": baseline_reused,
             "vm_distilled": distilled_reused}
    versions = {"fm": fm_version, "verifier": verifier_version, "vm_baseline": baseline_version,
                "vm_distilled": distilled_version}
    return TrainedModels(
        fm, cast("VerticalModel", verifier), cast("VerticalModel", baseline), cast("VerticalModel", distilled),
        versions, tuple(role for role, flag in flags.items() if flag), time.monotonic() - started,
    )


def _clear_replay(config: SolarisConfig, seed_config: SolarisConfig) -> bool:
    """Drop the seed warehouse's tables and snapshots (not its models); True when there was any."""
    import shutil

    folders = [Path(seed_config.table_path(name)) for name in type(config.tables).model_fields]
    folders.append(Path(seed_config.warehouse) / SNAPSHOTS_DIR)
    existing = [folder for folder in folders if folder.exists()]
    for folder in existing:
        shutil.rmtree(folder)
    return bool(existing)


def replay_window(
    spark: SparkSession, config: SolarisConfig, seed_config: SolarisConfig, rows: WindowRows,
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
    target = seed_config.table_path("events")
    if not table_exists(spark, target):
        spark.read.format("delta").load(config.table_path("events")).write.format("delta").save(target)
    ticks = window.ticks()
    cycles = replay.run(spark, seed_config, ticks[0], window.end, window.step_hours)
    return ReplayOutcome(seed_config.seed, len(ticks), len(cycles), cleared, time.monotonic() - started)


def serve_requests(seed_config: SolarisConfig, rows: WindowRows, events: EventArrays) -> ServedFeatures:
    """Step 3: resolve every tail and scored request through the snapshot published at its tick."""
    import numpy as np

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
            TickServing(tick.isoformat(), tick >= window.t0, int(mine.size),
                        evaluation.coverage_by_tier(tiers[mine]) if mine.size else {})
        )
    return ServedFeatures(vectors, tiers, int(rows.tail.size), tuple(per_tick), time.monotonic() - started, ages)


def oracle_requests(config: SolarisConfig, rows: WindowRows, data: EvaluationData, fm: nn.Module) -> np.ndarray:
    """The oracle's input: the serving FM's exact pair embedding for every tail and scored request.

    Computed as the score job would have at the request's serving tick: features from the history
    strictly before the tick (:meth:`EvaluationWindow.serving_tick_times`), so nothing at or after
    the request reaches it. Tier 1 on every request: what SOLARIS could transfer with full coverage.
    """
    from solaris.models.training import predict

    served_rows = np.concatenate([rows.tail, rows.scored])
    events = data.events
    at_tick = rows.window.serving_tick_times(events.ts[served_rows])
    if not np.all(at_tick < events.ts[served_rows]):  # the rule the served embeddings obey too
        raise RuntimeError("an oracle query time is not strictly before its request")
    features = data.index.query(events.user_id[served_rows], events.item_id[served_rows], at_tick,
                                config.model.history_length)
    _fm_threads(config)
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
    _fm_threads(config)
    probabilities, vectors = {}, {}
    for age in freshness.pass_ages(ages.fm_ages_minutes, ages.oracle_ages_minutes):
        features = data.features.take(scored) if age == 0 else freshness.features_at_age(
            data.index, events.user_id[scored], events.item_id[scored], events.ts[scored], age,
            config.model.history_length)
        probabilities[age], vector = freshness.fm_pass(fm, features)
        if age in ages.oracle_ages_minutes:
            vectors[age] = vector
    seconds = time.monotonic() - started
    log.info("freshness curve: %d FM passes over %d scored requests (ages %s min) in %.1f s", len(probabilities),
             scored.size, ", ".join(map(str, probabilities)), seconds)
    return AgedRequests(probabilities, vectors, int(scored.size), seconds)


def _fm_threads(config: SolarisConfig) -> None:
    """The FM predicts on ``model.training.threads`` (the VMs' fits leave torch on one thread)."""
    import torch

    torch.set_num_threads(config.model.training.threads)


def fine_tune(
    config: SolarisConfig, rows: WindowRows, data: EvaluationData, *, seed: int, models: TrainedModels,
    inputs: FedInputs,
) -> FineTunedVMs:
    """Step 4: fine-tune every VM variant on the tail, warm-started from step 1, with one budget.

    Same rows, batch size, epochs, early stopping and ``evaluation.finetune_learning_rate`` for every
    variant, on one thread; the warm start is kept when no epoch beats it on validation NE
    (``keep_initial``). The distilled variants' soft labels on the tail are the serving FM's (it never
    saw the tail). Each VM+SOLARIS model learns from the input it is scored with (:class:`FedInputs`).
    """
    from solaris.models.training import adapt_vm, predict, train_vm

    started = time.monotonic()
    training = finetune_training(config)
    events_tail, features_tail = data.events.select(rows.tail), data.features.take(rows.tail)
    report = progress(f"fine-tuning seed {seed}'s VMs", total=FINE_TUNED, unit="model", log=log)
    _fm_threads(config)
    _, tail_teacher, _ = predict(models.fm, features_tail, with_embeddings=True)

    def tuned(variant: str, base: VerticalModel, fed: str | None = None, **extra: Any) -> VerticalModel:
        if fed is not None:
            extra["fm_embedding"], extra["fm_tier"], ages = inputs.tail[fed]
            if config.model.adapter.design == "channel":
                extra.update(fm_age=ages, fm_head=cast("FoundationModel", models.fm).head)
        result = train_vm(events_tail, config, seed, variant, init_from=base, features=features_tail,
                          training=training, keep_initial=True, **extra)
        report.advance(metric=f"VM[{variant}]" + (f" on {fed}" if fed else ""))
        return cast("VerticalModel", result.model)

    baseline = tuned("baseline", models.baseline)
    distilled = tuned("distilled", models.distilled, teacher_logits=tail_teacher)
    if config.model.adapter.design in ("concat", "channel"):
        return FineTunedVMs(
            baseline=baseline,
            distilled=distilled,
            solaris=tuned("solaris", models.baseline, evaluation.SOLARIS_ALL),
            solaris_distilled=tuned("solaris_distilled", models.distilled, evaluation.SOLARIS_ALL,
                                    teacher_logits=tail_teacher),
            control=tuned("solaris", models.baseline, evaluation.SOLARIS_NONE),
            placebo=tuned("solaris", models.baseline, evaluation.SOLARIS_PLACEBO),
            oracle=tuned("solaris", models.baseline, evaluation.SOLARIS_ORACLE),
            seconds=time.monotonic() - started,
        )
    fits: dict[str, Any] = {}

    def adapted(name: str, body: VerticalModel, reference: VerticalModel, fed: str) -> nn.Module:
        # the adapter is fit on the VM of step 1 (it never saw the tail), then put on the fine-tuned VM
        vectors, tiers, _ = inputs.tail[fed]
        model, fitted = adapt_vm(config, body, cast("FoundationModel", models.fm), reference=reference,
                                 features=features_tail, labels=events_tail.label, ts_seconds=events_tail.ts,
                                 fm_embedding=vectors, fm_tier=tiers)
        fits[name] = {"choice": {str(t): used for t, used in fitted.choice.items()},
                      "validation_rows": {str(t): n for t, n in fitted.validation_rows.items()},
                      "validation_log_loss": {str(t): cell for t, cell in fitted.validation_log_loss.items()}}
        log.info("adapter of %s: per tier %s (validation rows %s)", name, fitted.choice, fitted.validation_rows)
        report.advance(metric=f"adapter of {name}")
        return model

    return FineTunedVMs(
        baseline=baseline,
        distilled=distilled,
        solaris=adapted(evaluation.SOLARIS_ALL, baseline, models.baseline, evaluation.SOLARIS_ALL),
        solaris_distilled=adapted("solaris_distilled", distilled, models.distilled, evaluation.SOLARIS_ALL),
        control=adapted(evaluation.SOLARIS_NONE, baseline, models.baseline, evaluation.SOLARIS_NONE),
        placebo=adapted(evaluation.SOLARIS_PLACEBO, baseline, models.baseline, evaluation.SOLARIS_PLACEBO),
        oracle=adapted(evaluation.SOLARIS_ORACLE, baseline, models.baseline, evaluation.SOLARIS_ORACLE),
        seconds=time.monotonic() - started,
        adapters=fits,
    )


def fm_head_probabilities(fm: nn.Module, embeddings: np.ndarray) -> np.ndarray:
    """The FM's click probability from its pair embeddings (its linear head), e.g. the oracle's vectors."""
    import torch

    head = cast("FoundationModel", fm).head
    with torch.inference_mode():
        logits = head(torch.as_tensor(np.ascontiguousarray(embeddings, dtype=np.float32))).squeeze(-1)
    return torch.sigmoid(logits).numpy()


def predict_scored(
    config: SolarisConfig, rows: WindowRows, data: EvaluationData, *, models: TrainedModels, tuned: FineTunedVMs,
    inputs: FedInputs, aged: AgedRequests,
) -> ScoredPredictions:
    """Step 5: every variant on the scored requests; the SOLARIS model fed tiers up to 1, 2, ... too.

    The freshness curve's variants too (:mod:`solaris.evaluation.freshness`): the FM at each age from
    ``aged``, and the oracle model fed the FM's exact pair at each of its ages (tier 1, that age).
    """
    from solaris.models.training import predict

    started = time.monotonic()
    features_scored = data.features.take(rows.scored)

    def fed(model: nn.Module, vectors: np.ndarray, tiers: np.ndarray, ages: np.ndarray) -> np.ndarray:
        return predict(model, features_scored, {"fm_embedding": vectors, "fm_tier": tiers,
                                                "fm_age": ages.astype(np.float32)})

    _fm_threads(config)
    by_variant = {"fm": aged.probabilities[0],
                  evaluation.FM_AT_TICK: fm_head_probabilities(models.fm, inputs.scored[evaluation.SOLARIS_ORACLE][0])}
    for name, model in ((evaluation.PRETRAINED["vm_baseline"], models.baseline), ("vm_baseline", tuned.baseline),
                        (evaluation.PRETRAINED["vm_distilled"], models.distilled), ("vm_distilled", tuned.distilled)):
        by_variant[name] = predict(model, features_scored)
    served_vectors, served_tiers, served_ages = inputs.scored[evaluation.SOLARIS_ALL]
    for name in evaluation.ABLATION:
        vectors, tiers = evaluation.served_up_to_tier(served_vectors, served_tiers, evaluation.SOLARIS_MAX_TIER[name])
        by_variant[name] = fed(tuned.solaris, vectors, tiers, evaluation.ages_where_served(served_ages, tiers))
    by_variant["solaris_distilled"] = fed(tuned.solaris_distilled, served_vectors, served_tiers, served_ages)
    for name, fed_model in ((evaluation.SOLARIS_NONE, tuned.control), (evaluation.SOLARIS_PLACEBO, tuned.placebo),
                            (evaluation.SOLARIS_ORACLE, tuned.oracle)):
        by_variant[name] = fed(fed_model, *inputs.scored[name])
    curve = config.evaluation.freshness
    for age in curve.fm_ages_minutes:
        by_variant[freshness.fm_variant(age)] = aged.probabilities[age]
    pair = np.full(rows.scored.size, TIER_PAIR, dtype=np.int64)
    for age in curve.oracle_ages_minutes:
        by_variant[freshness.oracle_variant(age)] = fed(tuned.oracle, aged.vectors[age], pair,
                                                        np.full(rows.scored.size, 60.0 * age))
    return ScoredPredictions(by_variant, served_tiers, time.monotonic() - started)


def score_seed(
    spark: SparkSession, seed_config: SolarisConfig, rows: WindowRows, events: EventArrays, *, seed: int,
    models: TrainedModels, replayed: ReplayOutcome, served: ServedFeatures, tuned: FineTunedVMs,
    predictions: ScoredPredictions,
) -> SeedResult:
    """Step 6: the seed's metrics, coverage, replay figures and costs (saved as result.json)."""
    labels = events.label[rows.scored]
    per_tick = [tick.to_dict() for tick in served.per_tick]
    hit_rates, fm_cost = _replay_figures(spark, seed_config, rows.window, per_tick, rows.scored.size)
    return SeedResult(
        seed=seed,
        t0=rows.window.t0.isoformat(),
        variants=evaluation.variant_metrics(labels, predictions.by_variant),
        coverage=evaluation.coverage_by_tier(served.scored()[1]),
        tail_coverage=evaluation.coverage_by_tier(served.tail()[1]),
        per_tick=tuple({**row, **hit_rates.get(row["tick"], {})} for row in per_tick),
        cost=evaluation.Cost(
            fm_pairs_scored=float(fm_cost["fm_pairs_scored"]),
            fm_users_represented=float(fm_cost["fm_users_represented"]),
            fm_passes_per_request=float(fm_cost["fm_passes_per_request"]),
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
    seed_config = _seed_config(config, seed_dir, seed, len(window.ticks()))
    replay_config = _seed_config(config, replay_dir, replay_seed, len(window.ticks()))
    log.info(
        "seed %d (replay of seed %d in %s), T0 %s: %d events up to %s (FM, verifier), %d in the tail, "
        "%d scored requests",
        seed, replay_seed, replay_dir, window.t0, rows.pre.size, window.fm_cutoff, rows.tail.size, rows.scored.size,
    )
    models = train_models(seed_config, rows, data, seed=seed, seed_dir=seed_dir, replay_seed=replay_seed,
                          replay_dir=replay_dir)
    replayed = replay_window(spark, config, replay_config, rows, models)
    served = serve_requests(replay_config, rows, data.events)
    key = (window.t0.isoformat(), models.versions["fm"])
    if key not in data.oracle:  # one serving FM per window: every seed sharing it reuses its oracle input
        data.oracle[key] = oracle_requests(config, rows, data, models.fm)
    if key not in data.aged:  # likewise the FM's passes at the freshness curve's ages
        data.aged[key] = aged_requests(config, rows, data, models.fm)
    inputs = fed_inputs(served, data.oracle[key], seed, oracle_ages=oracle_ages(rows, data.events))
    tuned = fine_tune(seed_config, rows, data, seed=seed, models=models, inputs=inputs)
    predictions = predict_scored(config, rows, data, models=models, tuned=tuned, inputs=inputs, aged=data.aged[key])
    result = score_seed(spark, replay_config, rows, data.events, seed=seed, models=models, replayed=replayed,
                        served=served, tuned=tuned, predictions=predictions)
    return result, predictions


def _replay_figures(
    spark: SparkSession, cfg: SolarisConfig, window: EvaluationWindow, per_tick: list[dict], n_scored: int
) -> tuple[dict[str, dict], dict[str, float]]:
    """Hit rates per tick and FM passes spent in the scored window, from the seed's ``runs`` table."""
    from pyspark.sql import functions as F

    runs: pd.DataFrame = (
        spark.read.format("delta")
        .load(cfg.table_path("runs"))
        .where(F.col("status") == "success")
        .where(F.col("job").isin("hit_rate", "score", "knn"))
        .where((F.col("as_of") >= F.lit(window.fm_cutoff)) & (F.col("as_of") < F.lit(window.end)))
        .select("job", F.date_format("as_of", "yyyy-MM-dd'T'HH:mm:ss").alias("as_of"), "rows_in", "details")
        .toPandas()
    )
    hit_rates, pairs, users = {}, 0, 0
    tick_of = {t["tick"][:19]: t["tick"] for t in per_tick}  # runs' as_of (second precision) -> tick key
    scored_ticks = {row["tick"][:19] for row in per_tick if row["scored_window"]}
    for row in runs.itertuples():
        details = json.loads(row.details)
        tick = tick_of.get(row.as_of)
        if row.job == "hit_rate" and tick:
            hit_rates[tick] = {
                "candidates_hit_rate": details.get("candidates_hit_rate"),
                "verified_hit_rate": details.get("verified_hit_rate"),
            }
        elif row.as_of in scored_ticks:
            # FM passes: `scored` (under the request rule only the kept pairs; rows_in = candidates)
            pairs += int(details.get("scored") or row.rows_in) if row.job == "score" else 0
            users += int(row.rows_in) if row.job == "knn" else 0
    return hit_rates, {
        "fm_pairs_scored": pairs,
        "fm_users_represented": users,
        "fm_passes_per_request": evaluation.fm_passes_per_request(pairs, users, n_scored),
    }


def choose_windows(config: SolarisConfig, events: EventArrays, t0s: list[datetime] | None) -> list[datetime]:
    """T0s given (``--as-of``, else ``evaluation.t0s``), each checked against the minimums; or, with
    none given, the densest non-overlapping windows of the data (:func:`densest_windows`)."""
    settings = config.evaluation
    minimums = (settings.min_requests, settings.min_users, settings.min_training_events)
    given = sorted(t0s or settings.t0s)
    if given:
        for t0 in given:
            density = evaluation.density_at(events.ts, events.user_id, t0, settings.tail_hours, settings.eval_hours)
            reason = density.refusal(*minimums)
            if reason:
                raise JobInputError(reason)
            log.info("window T0 %s: %d scored requests from %d users", t0, density.requests, density.users)
        return given
    picked = evaluation.densest_windows(
        events.ts, events.user_id, settings.tail_hours, settings.eval_hours, settings.step_hours,
        settings.windows, *minimums,
    )
    if not picked:
        raise JobInputError(
            f"no {settings.eval_hours:g} h window with >= {settings.min_requests:,} requests from >= "
            f"{settings.min_users:,} users after >= {settings.min_training_events:,} events; lower "
            "evaluation.min_requests / min_users or pass --as-of"
        )
    for density in picked:
        log.info("densest window T0 %s: %d scored requests from %d users", density.t0, density.requests,
                 density.users)
    return [density.t0 for density in picked]


def _saved_seed(seed_dir: Path, fingerprint: str) -> tuple[SeedResult, dict[str, np.ndarray]] | None:
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


def _save_seed(seed_dir: Path, fingerprint: str, result: SeedResult, predictions: ScoredPredictions) -> None:
    seed_dir.mkdir(parents=True, exist_ok=True)
    with open(seed_dir / f".{SCORED_FILE}.tmp", "wb") as handle:
        np.savez(handle, **predictions.by_variant, **{SERVED_TIER: predictions.served_tier})  # type: ignore[arg-type]
    (seed_dir / f".{SCORED_FILE}.tmp").replace(seed_dir / SCORED_FILE)
    tmp = seed_dir / ".result.json.tmp"
    tmp.write_text(json.dumps({"fingerprint": fingerprint, "result": result.to_dict()}, indent=2, default=str))
    tmp.replace(seed_dir / "result.json")


def _seed_result(
    session: Callable[[], SparkSession], config: SolarisConfig, rows: WindowRows, data: EvaluationData, *,
    seed: int, seed_dir: Path, force_cleared: set[Path], force: bool,
) -> tuple[SeedResult, dict[str, np.ndarray]]:
    """One seed of one window: its saved result when the fingerprint matches, else computed and saved.

    Returns the result and the scored predictions by variant, plus the tier that served each scored
    request under :data:`SERVED_TIER`.

    ``--force`` clears the seed's folder and its replay folder first, each once per run
    (``force_cleared``: not again for the next seed sharing the replay).
    """
    import shutil

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
    saved = _saved_seed(seed_dir, fingerprint)
    if saved is not None:
        log.info("seed %d of T0 %s already evaluated with these settings (%s): reused", seed, rows.window.t0,
                 fingerprint)
        return saved
    started = time.monotonic()
    result, predictions = evaluate_seed(session(), config, rows, data, seed=seed, seed_dir=seed_dir,
                                        replay_seed=replay_seed, replay_dir=replay_dir)
    result = result.with_wall_time(time.monotonic() - started)
    _save_seed(seed_dir, fingerprint, result, predictions)
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


@dataclass(frozen=True)
class WindowOutcome:
    """Every seed of one window: their results and the scored requests' predictions (for the bootstrap)."""

    window: EvaluationWindow
    results: tuple[SeedResult, ...]
    scored: ScoredRequests
    tick_ages: np.ndarray  # seconds from the serving tick to each scored request: where the tick sits on the curve


def _evaluate_window(
    session: Callable[[], SparkSession], config: SolarisConfig, data: EvaluationData, window: EvaluationWindow, *,
    seeds: list[int], out_dir: Path, force: bool, force_cleared: set[Path], report: Progress,
) -> WindowOutcome:

    rows = WindowRows.of(data.events, window)
    log.info("window T0 %s: FM trained up to %s, replay %d ticks to %s, %d seeds",
             window.t0, window.fm_cutoff, len(window.ticks()), window.end, len(seeds))
    results, per_seed_predictions = [], []
    for seed in seeds:
        result, predictions = _seed_result(
            session, config, rows, data, seed=seed, seed_dir=out_dir / utc_stamp(window.t0) / f"seed-{seed}",
            force_cleared=force_cleared, force=force,
        )
        results.append(result)
        per_seed_predictions.append(predictions)
        report.advance(metric=f"T0 {window.t0:%Y-%m-%d %H:%M}Z seed {seed} done")
    events = data.events
    # one replay serves every seed of the window (share_replay): the first seed's tiers are the window's;
    # without it each seed has its own, and the per-tier strata are left out
    tiers = [predictions.pop(SERVED_TIER, None) for predictions in per_seed_predictions]
    first = tiers[0]
    same_tiers = first is not None and all(t is not None and np.array_equal(t, first) for t in tiers)
    scored = ScoredRequests(events.user_id[rows.scored], events.label[rows.scored], tuple(per_seed_predictions),
                            first if same_tiers else None)
    return WindowOutcome(window, tuple(results), scored, oracle_ages(rows, events)[rows.tail.size:])


def _intervals(config: SolarisConfig, outcomes: list[WindowOutcome]) -> BootstrapIntervals:
    """User-bootstrap intervals pooled over every window, and per window when there are several."""
    from dataclasses import replace

    settings = config.evaluation
    started = time.monotonic()
    intervals = bootstrap_intervals(ScoredRequests.concatenate([o.scored for o in outcomes]),
                                    settings.bootstrap_resamples, config.seed, settings.confidence)
    if len(outcomes) > 1:
        intervals = replace(intervals, per_window={
            o.window.t0.isoformat(): bootstrap_intervals(o.scored, settings.bootstrap_resamples, config.seed,
                                                         settings.confidence).pooled
            for o in outcomes
        })
    log.info("user-bootstrap intervals (%d resamples) in %.0fs", settings.bootstrap_resamples,
             time.monotonic() - started)
    return intervals


def run(
    spark: SparkSession | Callable[[], SparkSession], config: SolarisConfig,
    t0s: list[datetime] | datetime | None = None, name: str | None = None, force: bool = False,
) -> EvaluationSummary:
    """Evaluate every window and seed (reusing what was computed with the same fingerprint), then report.

    ``spark``: a session, or a function that starts one. The events are read without Spark, so given a
    function, a rerun whose seeds all have results (the report regenerated, another seed count) never
    starts a JVM; the first seed that has to be computed starts it.
    """
    settings = config.evaluation
    session = _started_once(spark)
    events = _arrays(session, config, END_OF_TIME)
    chosen = choose_windows(config, events, [t0s] if isinstance(t0s, datetime) else t0s)
    windows = [evaluation.EvaluationWindow(t, settings.tail_hours, settings.eval_hours, settings.step_hours)
               for t in chosen]
    out_dir = config.resolve_under_warehouse(Path(settings.output) / (name or evaluation.default_name(chosen)))
    out_dir.mkdir(parents=True, exist_ok=True)
    data = EvaluationData.of(events.select(np.flatnonzero(events.ts <= max(w.end for w in windows).timestamp())),
                             config.model.history_length)
    seeds = list(range(config.seed, config.seed + settings.seeds))
    wall, cleared = time.monotonic(), set[Path]()
    with progress("evaluation", total=len(windows) * len(seeds), unit="seed", log=log, interval=0) as report:
        outcomes = [_evaluate_window(session, config, data, window, seeds=seeds, out_dir=out_dir, force=force,
                                     force_cleared=cleared, report=report) for window in windows]
    intervals = _intervals(config, outcomes)
    per_seed = tuple(result for o in outcomes for result in o.results)
    curve = settings.freshness
    freshness_report = freshness.FreshnessReport.of(
        curve.fm_ages_minutes, curve.oracle_ages_minutes, intervals,
        {o.window.t0.isoformat(): o.tick_ages for o in outcomes})
    summary = EvaluationSummary.of(
        evaluation.aggregate_seeds(list(per_seed)),
        output=str(out_dir),
        t0=tuple(w.t0.isoformat() for w in windows),
        windows=tuple(
            WindowSummary(o.window.t0.isoformat(), o.window.fm_cutoff.isoformat(), o.window.end.isoformat(),
                          int(o.scored.labels.size), int(np.unique(o.scored.users).size))
            for o in outcomes
        ),
        scored_requests=intervals.n_requests,
        scored_users=intervals.n_users,
        settings=settings,
        warehouse=str(config.warehouse),
        seeds=tuple(seeds),
        intervals=intervals,
        per_seed=per_seed,
        wall_s=time.monotonic() - wall,
        adapter=config.model.adapter,
        freshness=freshness_report,
        provenance=provenance.collect(config, data.events.digest(), {
            f"{result.t0} seed {result.seed} {role}": str(version)
            for result in per_seed for role, version in dict(result.models.get("versions", {})).items()
        }),
    )
    log.info("provenance: %s", summary.provenance.describe() if summary.provenance else "n/a")
    paths = write_report(out_dir, summary)
    log.info("evaluation written: %s", ", ".join(str(p) for p in paths))
    return summary
