"""Step 4 of the evaluation: every VM variant fine-tuned on the tail's requests, with one budget.

Why a module of its own: the comparison is only fair when every variant gets the same rows, batch,
epochs, early stopping and learning rate from the same warm start; the one place that fine-tunes
them all (:func:`fine_tune`) is where that holds.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, cast

import numpy as np
from torch import nn

from solaris.drivers.evaluate.serving import FedInputs, fm_threads
from solaris.drivers.evaluate.training import TrainedModels, finetune_training
from solaris.drivers.evaluate.windows import EvaluationData, WindowRows
from solaris.evaluation import protocol as evaluation
from solaris.models.training import EventArrays, adapt_vm, predict, train_vm
from solaris.progress import Progress, progress

if TYPE_CHECKING:  # pragma: no cover
    from solaris.config import SolarisConfig, TrainingConfig
    from solaris.models.features import Features
    from solaris.models.fm import FoundationModel
    from solaris.models.vm import VerticalModel

log = logging.getLogger("solaris.evaluate")

FINE_TUNED = 7  # models step 4 makes per seed: 2 fine-tuned VMs, then 5 VM+SOLARIS models (FineTunedVMs)


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
class _Tail:
    """What every fine-tune of one seed shares: the tail's rows, the budget, the models' inputs."""

    config: SolarisConfig
    seed: int
    events: EventArrays
    features: Features
    training: TrainingConfig
    models: TrainedModels
    inputs: FedInputs
    report: Progress

    def tuned(self, variant: str, base: VerticalModel, fed: str | None = None, **extra: Any) -> VerticalModel:
        """``base`` fine-tuned on the tail (kept when no epoch beats it), fed ``fed``'s values if given."""
        if fed is not None:
            extra["fm_embedding"], extra["fm_tier"], ages = self.inputs.tail[fed]
            if self.config.model.adapter.design == "channel":
                extra.update(fm_age=ages, fm_head=cast("FoundationModel", self.models.fm).head)
        result = train_vm(self.events, self.config, self.seed, variant, init_from=base, features=self.features,
                          training=self.training, keep_initial=True, **extra)
        self.report.advance(metric=f"VM[{variant}]" + (f" on {fed}" if fed else ""))
        return cast("VerticalModel", result.model)

    def adapted(self, name: str, body: VerticalModel, reference: VerticalModel, fed: str, *,
                fits: dict[str, Any]) -> nn.Module:
        """``body`` with a tier adapter fit on the VM of step 1 (it never saw the tail); its fit in ``fits``."""
        vectors, tiers, _ = self.inputs.tail[fed]
        model, fitted = adapt_vm(self.config, body, cast("FoundationModel", self.models.fm), reference=reference,
                                 features=self.features, labels=self.events.label, ts_seconds=self.events.ts,
                                 fm_embedding=vectors, fm_tier=tiers)
        fits[name] = {"choice": {str(t): used for t, used in fitted.choice.items()},
                      "validation_rows": {str(t): n for t, n in fitted.validation_rows.items()},
                      "validation_log_loss": {str(t): cell for t, cell in fitted.validation_log_loss.items()}}
        log.info("adapter of %s: per tier %s (validation rows %s)", name, fitted.choice, fitted.validation_rows)
        self.report.advance(metric=f"adapter of {name}")
        return model


def _fed_vms(tail: _Tail, *, baseline: VerticalModel, distilled: VerticalModel, teacher: np.ndarray,
             started: float) -> FineTunedVMs:
    """The ``concat`` and ``channel`` designs: each VM+SOLARIS model fine-tuned with its input."""
    base = tail.models
    return FineTunedVMs(
        baseline=baseline,
        distilled=distilled,
        solaris=tail.tuned("solaris", base.baseline, evaluation.SOLARIS_ALL),
        solaris_distilled=tail.tuned("solaris_distilled", base.distilled, evaluation.SOLARIS_ALL,
                                     teacher_logits=teacher),
        control=tail.tuned("solaris", base.baseline, evaluation.SOLARIS_NONE),
        placebo=tail.tuned("solaris", base.baseline, evaluation.SOLARIS_PLACEBO),
        oracle=tail.tuned("solaris", base.baseline, evaluation.SOLARIS_ORACLE),
        seconds=time.monotonic() - started,
    )


def _adapted_vms(tail: _Tail, *, baseline: VerticalModel, distilled: VerticalModel, started: float) -> FineTunedVMs:
    """The ``adapter`` design: the fine-tuned VMs with a tier adapter per input."""
    base, fits = tail.models, dict[str, Any]()
    served, none = evaluation.SOLARIS_ALL, evaluation.SOLARIS_NONE
    placebo, oracle = evaluation.SOLARIS_PLACEBO, evaluation.SOLARIS_ORACLE
    return FineTunedVMs(
        baseline=baseline,
        distilled=distilled,
        solaris=tail.adapted(served, baseline, base.baseline, served, fits=fits),
        solaris_distilled=tail.adapted("solaris_distilled", distilled, base.distilled, served, fits=fits),
        control=tail.adapted(none, baseline, base.baseline, none, fits=fits),
        placebo=tail.adapted(placebo, baseline, base.baseline, placebo, fits=fits),
        oracle=tail.adapted(oracle, baseline, base.baseline, oracle, fits=fits),
        seconds=time.monotonic() - started,
        adapters=fits,
    )


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
    started = time.monotonic()
    tail = _Tail(config, seed, data.events.select(rows.tail), data.features.take(rows.tail),
                 finetune_training(config), models, inputs,
                 progress(f"fine-tuning seed {seed}'s VMs", total=FINE_TUNED, unit="model", log=log))
    fm_threads(config)
    _, teacher, _ = predict(models.fm, tail.features, with_embeddings=True)
    baseline = tail.tuned("baseline", models.baseline)
    distilled = tail.tuned("distilled", models.distilled, teacher_logits=teacher)
    if config.model.adapter.design in ("concat", "channel"):
        return _fed_vms(tail, baseline=baseline, distilled=distilled, teacher=teacher, started=started)
    return _adapted_vms(tail, baseline=baseline, distilled=distilled, started=started)
