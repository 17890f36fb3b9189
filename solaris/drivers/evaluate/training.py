"""Step 1 of the evaluation: the models trained on events up to the window's FM cutoff.

Why a module of its own: every checkpoint is reused by fingerprint (settings, as-of, seed, data,
upstream versions), so a rerun, another seed count or a setting switched back trains nothing; the
rules for what a checkpoint depends on live here, beside the training calls that honour them.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, cast

import numpy as np
from torch import nn

from solaris.drivers.evaluate.windows import EvaluationData, WindowRows
from solaris.evaluation.protocol import VM_THREADS, step_fingerprint
from solaris.models.checkpoint import METADATA, load_checkpoint, save_checkpoint
from solaris.models.training import distillation_teacher_logits, train_fm, train_vm, training_metadata

if TYPE_CHECKING:  # pragma: no cover
    from solaris.config import SolarisConfig, TrainingConfig
    from solaris.models.vm import VerticalModel

log = logging.getLogger("solaris.evaluate")

Fit = Callable[[], tuple[nn.Module, dict[str, Any]]]  # trains one model: (model, checkpoint metadata)
Trained = tuple[nn.Module, str, bool]  # a model, its version, whether its checkpoint was reused


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


def _point_latest(root: Path, version: str) -> None:
    """``LATEST`` names ``version``, replaced atomically: the replayed jobs load what it names."""
    pointer = root / ".LATEST.tmp"
    pointer.write_text(version + "\n")
    pointer.replace(root / "LATEST")


def _trained(root: Path, role: str, dim: int | None, fingerprint: str, train: Fit) -> Trained:
    """The checkpoint under ``root`` whose metadata carries ``fingerprint``, else a newly trained one.

    Every version under ``root`` is a candidate (switching a setting back reuses the old model);
    ``LATEST`` is pointed at the one returned, since the replayed jobs load ``LATEST``.
    Returns the model, its version and whether it was reused.
    """
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
    config: SolarisConfig, rows: WindowRows, data: EvaluationData, *, fm: nn.Module, fm_version: str,
    replay_seed: int, replay_dir: Path,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Soft labels for the distilled VMs on events <= fm_cutoff, computed once per replay and cached.

    Why cached: the cross-fitted teacher trains ``teacher_folds`` FMs, an FM-side cost that every VM
    seed sharing the replay would otherwise pay again. Keyed like a checkpoint (settings, as-of,
    replay seed, data, and the served FM's version for ``in-sample``).
    """
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
        data.events.select(rows.pre), config, replay_seed, features=data.features.take(rows.pre), served_fm=fm
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


def _inputs(rows: WindowRows, of_seed: int) -> dict[str, Any]:
    """What a checkpoint learned from, besides the settings: its fingerprint's inputs."""
    return {"as_of": rows.window.fm_cutoff.isoformat(), "seed": of_seed, "data": rows.training_digest}


def _vm_inputs(rows: WindowRows, of_seed: int) -> dict[str, Any]:
    """A VM's fingerprint inputs: the thread count too (one thread makes a seed's VM reproducible)."""
    return {**_inputs(rows, of_seed), "vm_threads": VM_THREADS}


def _fit_fm(config: SolarisConfig, rows: WindowRows, data: EvaluationData, of_seed: int) -> Fit:
    """Trains the serving FM on the rows before the tail (its features from the whole-data index)."""
    def fit() -> tuple[nn.Module, dict[str, Any]]:
        result = train_fm(data.events, config, of_seed, features=data.features, rows=rows.pre)
        return result.model, training_metadata("fm", rows.window.fm_cutoff, of_seed, data.events.select(rows.pre),
                                               result, config=config)
    return fit


def _fit_vm(config: SolarisConfig, rows: WindowRows, data: EvaluationData, of_seed: int) -> Fit:
    """Trains a baseline VM of ``of_seed`` on the rows before the tail, on one thread."""
    def fit() -> tuple[nn.Module, dict[str, Any]]:
        events_pre = data.events.select(rows.pre)
        result = train_vm(events_pre, config, of_seed, "baseline", features=data.features.take(rows.pre),
                          training=_vm_training(config))
        return result.model, training_metadata("vm_baseline", rows.window.fm_cutoff, of_seed, events_pre, result,
                                               config=config)
    return fit


def _distilled_vm(
    config: SolarisConfig, rows: WindowRows, data: EvaluationData, *, seed: int, seed_dir: Path, replay_seed: int,
    replay_dir: Path, fm: Trained,
) -> Trained:
    """This seed's distilled VM, on the teacher's soft labels (:func:`_teacher_logits`)."""
    model, fm_version, _ = fm
    in_sample = config.model.distillation.teacher == "in-sample"

    def fit() -> tuple[nn.Module, dict[str, Any]]:
        teacher, used = _teacher_logits(config, rows, data, fm=model, fm_version=fm_version,
                                        replay_seed=replay_seed, replay_dir=replay_dir)
        events_pre = data.events.select(rows.pre)
        result = train_vm(events_pre, config, seed, "distilled", teacher_logits=teacher,
                          features=data.features.take(rows.pre), training=_vm_training(config))
        return result.model, training_metadata("vm_distilled", rows.window.fm_cutoff, seed, events_pre, result,
                                               config=config, models={"teacher_fm": fm_version} if in_sample else {},
                                               **used)

    # in-sample soft labels are the served FM's own: its version is an input of the distilled VM
    inputs = {**_vm_inputs(rows, seed), "teacher_seed": replay_seed, "fm": fm_version if in_sample else None}
    return _trained(seed_dir / "models" / "vm_distilled", "vm", None,
                    step_fingerprint(config, "vm_distilled", **inputs), fit)


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
    started = time.monotonic()
    serving = replay_dir / "models"
    fm = _trained(serving / "fm", "fm", config.model.embedding_dim,
                  step_fingerprint(config, "fm", **_inputs(rows, replay_seed)),
                  _fit_fm(config, rows, data, replay_seed))
    verifier = _trained(serving / "vm_baseline", "vm", None,
                        step_fingerprint(config, "vm_baseline", **_vm_inputs(rows, replay_seed)),
                        _fit_vm(config, rows, data, replay_seed))
    baseline = verifier if seed == replay_seed else _trained(
        seed_dir / "models" / "vm_baseline", "vm", None,
        step_fingerprint(config, "vm_baseline", **_vm_inputs(rows, seed)), _fit_vm(config, rows, data, seed),
    )
    distilled = _distilled_vm(config, rows, data, seed=seed, seed_dir=seed_dir, replay_seed=replay_seed,
                              replay_dir=replay_dir, fm=fm)
    by_role = {"fm": fm, "verifier": verifier, "vm_baseline": baseline, "vm_distilled": distilled}
    return TrainedModels(
        fm[0], cast("VerticalModel", verifier[0]), cast("VerticalModel", baseline[0]),
        cast("VerticalModel", distilled[0]), {role: version for role, (_, version, _) in by_role.items()},
        tuple(role for role, (_, _, reused) in by_role.items() if reused), time.monotonic() - started,
    )
