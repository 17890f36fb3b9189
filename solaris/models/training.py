"""Training and batched inference for the FM and VM (pure torch + numpy, no Spark).

Jobs read events with Spark, hand plain arrays here, and save the result with
:mod:`solaris.models.checkpoint`. Keeping the loop Spark-free lets tests and benchmarks train
small models in seconds and keeps one implementation of early stopping and metrics.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Literal, Mapping, overload

import numpy as np
import pandas as pd
import torch
from torch import nn

from solaris import provenance
from solaris.config import SolarisConfig, TrainingConfig
from solaris.models import metrics
from solaris.models.adapter import AdaptedVM, AdapterFit, AdapterSpec, fit_adapter
from solaris.models.common import seed_everything, to_tensors
from solaris.models.features import Features, HistoryIndex, feedback_levels, time_split, training_features
from solaris.models.fm import FMSpec, FoundationModel
from solaris.models.vm import VerticalModel, VMSpec, distillation_loss
from solaris.progress import Progress, progress

log = logging.getLogger(__name__)

VM_VARIANTS = ("baseline", "distilled", "solaris", "solaris_distilled")


@dataclass
class TrainResult:
    model: nn.Module
    validation: dict[str, float]
    epochs: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int = 0
    seconds: float = 0.0


def _batch(
    features: Features, rows: np.ndarray, extras: dict[str, np.ndarray], device: str | torch.device
) -> dict[str, torch.Tensor]:
    batch = to_tensors(features, device, rows)
    for name, array in extras.items():
        batch[name] = torch.as_tensor(np.ascontiguousarray(array[rows])).to(device)
    return batch


def _logits(model: nn.Module, output: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return output[1] if isinstance(output, tuple) else output


@overload
def predict(
    model: nn.Module,
    features: Features,
    extras: dict[str, np.ndarray] | None = None,
    *,
    batch_size: int = 8192,
    device: str | torch.device = "cpu",
    with_embeddings: Literal[False] = False,
) -> np.ndarray: ...


@overload
def predict(
    model: nn.Module,
    features: Features,
    extras: dict[str, np.ndarray] | None = None,
    *,
    batch_size: int = 8192,
    device: str | torch.device = "cpu",
    with_embeddings: Literal[True],
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]: ...


@torch.inference_mode()
def predict(
    model: nn.Module,
    features: Features,
    extras: dict[str, np.ndarray] | None = None,
    *,
    batch_size: int = 8192,
    device: str | torch.device = "cpu",
    with_embeddings: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Probabilities (and, for the FM, pair embeddings and logits) for every row, in batches."""
    model.eval()
    extras = extras or {}
    n = len(features)
    probs = np.empty(n, dtype=np.float32)
    logits = np.empty(n, dtype=np.float32)
    embeddings: np.ndarray | None = None
    for start in range(0, n, batch_size):
        rows = np.arange(start, min(start + batch_size, n))
        output = model(_batch(features, rows, extras, device))
        logit = _logits(model, output)
        logits[rows] = logit.float().cpu().numpy()
        probs[rows] = torch.sigmoid(logit).float().cpu().numpy()
        if with_embeddings and isinstance(output, tuple):
            if embeddings is None:
                embeddings = np.empty((n, output[0].shape[-1]), dtype=np.float32)
            embeddings[rows] = output[0].float().cpu().numpy()
    return (probs, logits, embeddings) if with_embeddings else probs


def _rate_factor(schedule: str, budget_steps: int) -> Callable[[int], float]:
    """The learning rate's multiplier after ``step`` optimizer steps (``TrainingConfig.lr_schedule``)."""
    if schedule == "linear":
        return lambda step: max(0.0, 1.0 - step / max(budget_steps, 1))
    return lambda step: 1.0


@dataclass
class _Step:
    """One epoch of mini-batch steps (:func:`fit`'s inner loop), reporting the batches done.

    Why the batches: one FM epoch on a large dataset takes minutes; the report inside it keeps the
    log from going silent for that long (throttled, so short epochs add no lines).
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler
    loss_fn: Callable[[torch.Tensor, torch.Tensor, dict], torch.Tensor]
    features: Features
    labels: np.ndarray
    extras: dict[str, np.ndarray]
    device: str | torch.device
    steps: int = 0

    @classmethod
    def of(cls, model: nn.Module, training: TrainingConfig, n_rows: int, *,
           loss_fn: Callable[[torch.Tensor, torch.Tensor, dict], torch.Tensor], features: Features,
           labels: np.ndarray, extras: dict[str, np.ndarray], device: str | torch.device,
           param_groups: list[dict[str, Any]] | None = None) -> _Step:
        """Adam with ``training``'s rate (or ``param_groups``, each with its own ``lr``), and its
        schedule over the ``max_epochs`` budget of steps (the same factor for every group)."""
        parameters = param_groups if param_groups is not None else model.parameters()
        optimizer = torch.optim.Adam(parameters, lr=training.learning_rate, weight_decay=training.weight_decay)
        budget = training.max_epochs * -(-n_rows // training.batch_size)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, _rate_factor(training.lr_schedule, budget))
        return cls(model, optimizer, schedule, loss_fn, features, labels, extras, device)

    def epoch(self, order: np.ndarray, batch_size: int, report: Progress) -> float:
        """Train on ``order`` in batches of ``batch_size``; the epoch's mean training loss."""
        self.model.train()
        total, count = 0.0, 0
        batches = -(-order.size // batch_size)
        for index, start in enumerate(range(0, order.size, batch_size), 1):
            rows = order[start:start + batch_size]
            batch = _batch(self.features, rows, self.extras, self.device)
            target = torch.as_tensor(self.labels[rows], device=self.device)
            loss = self.loss_fn(_logits(self.model, self.model(batch)), target, batch)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            self.schedule.step()
            self.steps += 1
            total += float(loss.detach()) * rows.size
            count += rows.size
            report.within(index, batches, "batch")
        return total / max(count, 1)


def fit(
    model: nn.Module,
    features: Features,
    labels: np.ndarray,
    ts_seconds: np.ndarray,
    training: TrainingConfig,
    *,
    seed: int,
    extras: dict[str, np.ndarray] | None = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor, dict], torch.Tensor] | None = None,
    name: str = "model",
    device: str | torch.device = "cpu",
    keep_initial: bool = False,
    param_groups: list[dict[str, Any]] | None = None,
) -> TrainResult:
    """Mini-batch Adam with early stopping on NE of a time-based validation slice.

    ``param_groups``: the optimizer's parameter groups (torch's form; a group without ``lr`` gets
    ``training.learning_rate``), e.g. :func:`channel_parameter_groups`; None: every parameter at that rate.

    ``keep_initial``: the weights the model comes with are a candidate too (epoch 0, scored on the
    validation slice before any step), kept when no epoch beats them. Why: a fine-tune of a
    warm-started model must be able to return the warm start unchanged; without it the best model
    can only be recorded after the first epoch, which may already have moved away from a better one.
    Early stopping counts an epoch without improvement only once ``training.min_steps`` optimizer
    steps are done, unless the training is such a warm start.
    """
    seed_everything(seed)
    torch.set_num_threads(training.threads)
    extras = extras or {}
    labels = np.asarray(labels, dtype=np.float32)
    loss_fn = loss_fn or (lambda logit, y, batch: nn.functional.binary_cross_entropy_with_logits(logit, y))
    train_rows, valid_rows = time_split(ts_seconds, training.validation_fraction)
    if training.max_train_examples and train_rows.size > training.max_train_examples:
        train_rows = train_rows[-training.max_train_examples:]  # keep the most recent
    model.to(device)
    step = _Step.of(model, training, train_rows.size, loss_fn=loss_fn, features=features, labels=labels,
                     extras=extras, device=device, param_groups=param_groups)
    rng = np.random.default_rng(seed)
    started = time.monotonic()
    best_state: dict[str, Any] | None = None
    best_ne, best_epoch, stale = float("inf"), 0, 0
    min_steps = 0 if keep_initial else training.min_steps
    history: list[dict[str, float]] = []
    valid_features = features.take(valid_rows)
    valid_extras = {k: v[valid_rows] for k, v in extras.items()}
    if keep_initial:
        scores = metrics.summary(labels[valid_rows], predict(model, valid_features, valid_extras, device=device))
        history.append({"epoch": 0, "train_loss": float("nan"), **scores, "seconds": time.monotonic() - started})
        best_ne, best_state = scores["ne"], copy.deepcopy(model.state_dict())
        log.info("%s epoch 0 (initial weights): valid NE %.4f AUC %.4f", name, scores["ne"], scores["auc"])
    report = progress(f"training {name}", total=training.max_epochs, unit="epoch", log=log)
    with report:
        for epoch in range(1, training.max_epochs + 1):
            train_loss = step.epoch(rng.permutation(train_rows), training.batch_size, report)
            probs = predict(model, valid_features, valid_extras, device=device)
            scores = metrics.summary(labels[valid_rows], probs)
            history.append({"epoch": epoch, "train_loss": train_loss, **scores,
                            "seconds": time.monotonic() - started})
            report.advance(metric=f"train loss {train_loss:.4f}, valid NE {scores['ne']:.4f} AUC {scores['auc']:.4f} "
                                  f"calib {scores['calibration']:.3f}")
            if scores["ne"] < best_ne - 1e-5:
                best_ne, best_epoch, stale = scores["ne"], epoch, 0
                best_state = copy.deepcopy(model.state_dict())
            elif step.steps >= min_steps:
                stale += 1
                if stale > training.patience:
                    log.info("%s early stop after epoch %d (best epoch %d)", name, epoch, best_epoch)
                    break
            else:
                log.info("%s epoch %d not counted against patience: %d of %d optimizer steps done",
                         name, epoch, step.steps, min_steps)
    assert best_state is not None, f"{name}: no epoch improved on an infinite NE"
    model.load_state_dict(best_state)
    model.eval()
    best = next(r for r in history if r["epoch"] == best_epoch)
    return TrainResult(model, {k: best[k] for k in ("ne", "auc", "log_loss", "calibration")}, history, best_epoch,
                       time.monotonic() - started)


# --- recipes used by the jobs, benchmarks and the evaluation ------------------------------------


@dataclass(frozen=True)
class EventArrays:
    """Events as plain arrays sorted by time (what the training jobs read from Delta).

    ``feedback``: each event's :func:`~solaris.models.features.feedback_levels` (its rating level when
    the frame had a ``rating`` column); None: from the label alone.
    """

    user_id: np.ndarray
    item_id: np.ndarray
    ts: np.ndarray  # epoch seconds, int64
    label: np.ndarray  # float32
    feedback: np.ndarray | None = None  # int64

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> "EventArrays":
        frame = frame.sort_values(["ts", "user_id", "item_id"], kind="stable")
        ts = frame["ts"]
        if pd.api.types.is_datetime64_any_dtype(ts):
            ts = (pd.to_datetime(ts, utc=True) - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(seconds=1)
        label = frame["label"].to_numpy(np.float32)
        rating = frame["rating"].to_numpy(np.float64, na_value=np.nan) if "rating" in frame else None
        return cls(
            frame["user_id"].to_numpy(np.int64),
            frame["item_id"].to_numpy(np.int64),
            np.asarray(ts, dtype=np.int64),
            label,
            None if rating is None else feedback_levels(label, rating),
        )

    def __len__(self) -> int:
        return int(self.user_id.size)

    def select(self, rows: np.ndarray) -> "EventArrays":
        return EventArrays(self.user_id[rows], self.item_id[rows], self.ts[rows], self.label[rows],
                           None if self.feedback is None else self.feedback[rows])

    def index(self) -> HistoryIndex:
        return HistoryIndex(self.user_id, self.item_id, self.ts, self.label, self.feedback)

    def features(self, history_length: int) -> Features:
        """Each event's features at its own time (:func:`training_features`), feedback levels included."""
        return training_features(self.user_id, self.item_id, self.ts, self.label, history_length=history_length,
                                 feedback=self.feedback)

    def digest(self) -> str:
        """Content hash of these events (:func:`solaris.provenance.events_digest`)."""
        return provenance.events_digest(self.user_id, self.item_id, self.ts, self.label, self.feedback)


def training_metadata(
    role: str, as_of: datetime, seed: int, events: EventArrays, result: TrainResult, *, config: SolarisConfig,
    models: Mapping[str, str] | None = None, **extra: Any
) -> dict:
    """What a checkpoint records about its training (docs/architecture.md §8): as-of, data range, metrics,
    and its provenance (code, config digest, the training events' digest, the models it learned from)."""
    return {
        "role": role, "as_of": as_of.isoformat(), "seed": seed,
        "data_range": [int(events.ts.min()), int(events.ts.max())], "n_events": len(events),
        "validation": result.validation, "epochs": result.epochs, "best_epoch": result.best_epoch,
        "train_seconds": result.seconds, **extra,
        "provenance": provenance.collect(config, events.digest(), models).to_dict(),
    }


def fm_spec(config: SolarisConfig) -> FMSpec:
    fm = config.model.fm
    return FMSpec(embedding_dim=config.model.embedding_dim, history_length=config.model.history_length,
                  id_buckets=fm.id_buckets, d_model=fm.d_model, heads=fm.heads, tower=tuple(fm.tower),
                  dropout=fm.dropout, user_id_dropout=fm.user_id_dropout, self_attention=fm.self_attention,
                  history_feedback=fm.history_feedback)


def vm_spec(config: SolarisConfig, with_fm_embedding: bool = False) -> VMSpec:
    """The VM of ``model.vm``; with the FM embedding slot, read as ``model.adapter.design`` says (the
    ``channel`` design's own inputs and score path; the concat first layer for the other two)."""
    vm = config.model.vm
    return VMSpec(vm.id_buckets, vm.id_dim, tuple(vm.hidden), config.model.embedding_dim if with_fm_embedding else 0,
                  user_id_dropout=vm.user_id_dropout,
                  channel=with_fm_embedding and config.model.adapter.design == "channel")


def channel_parameter_groups(model: VerticalModel, *, body_rate: float, channel_rate: float) -> list[dict[str, Any]]:
    """Adam parameter groups: the channel's score path and score/age/tier input weights
    (:meth:`VerticalModel.channel_parameters`) at ``channel_rate``, every other weight (the body, and
    the vector's input weights as in concat) at ``body_rate``.

    Why two rates: the fine-tune's low rate keeps a warm-started body near what it learnt on the
    whole history, but the score path starts at zero and has only the tail's rows to learn from; at
    the body's rate it would end the fine-tune near zero, whatever the served values hold.
    """
    channel = model.channel_parameters()
    ids = {id(parameter) for parameter in channel}
    body = [parameter for parameter in model.parameters() if id(parameter) not in ids]
    return [{"params": body, "lr": body_rate}, {"params": channel, "lr": channel_rate}]


def _channel_setup(
    model: VerticalModel, config: SolarisConfig, training: TrainingConfig, *, fm_head: nn.Linear | None,
    fm_embedding: np.ndarray, fm_tier: np.ndarray, ts: np.ndarray,
) -> list[dict[str, Any]]:
    """Give a channel VM the FM's head and its score's per-tier centre and scale; its parameter groups.

    The statistics come from the rows before the validation slice (inputs only, no labels); a warm
    start from a channel VM gets the head and statistics of the FM and rows it is trained with now.
    """
    if fm_head is None:
        raise ValueError("the channel design needs the serving FM's head (fm_head) to score the served vectors")
    model.set_fm_head(fm_head)
    fitting, _ = time_split(ts, training.validation_fraction)
    assert model.score_path is not None
    model.score_path.standardise(fm_embedding[fitting], fm_tier[fitting])
    settings = config.model.adapter
    channel_rate = settings.channel_learning_rate or config.model.training.learning_rate
    return channel_parameter_groups(model, body_rate=training.learning_rate, channel_rate=channel_rate)


def train_fm(events: EventArrays, config: SolarisConfig, seed: int, *, device: str | torch.device = "cpu",
             features: Features | None = None,
             rows: np.ndarray | None = None, name: str = "FM") -> TrainResult:
    """Train the FM on ``events`` (or on the subset ``rows`` of them, keeping full point-in-time
    histories: ``features`` are computed over all ``events``); ``name`` is what its log lines say."""
    if features is None:
        features = events.features(config.model.history_length)
    labels, ts = events.label, events.ts
    if rows is not None:
        features, labels, ts = features.take(rows), labels[rows], ts[rows]
    seed_everything(seed)  # the initial weights too, not only the batch order: same seed, same model
    model = FoundationModel(fm_spec(config))
    training = config.model.training
    fm = config.model.fm
    training = training.model_copy(update={"max_epochs": min(training.max_epochs, fm.max_epochs),
                                           "batch_size": fm.batch_size, "lr_schedule": fm.lr_schedule})
    return fit(model, features, labels, ts, training, seed=seed, name=name, device=device)


def out_of_fold_teacher_logits(
    events: EventArrays,
    config: SolarisConfig,
    seed: int,
    *,
    features: Features,
    folds: int = 2,
    device: str | torch.device = "cpu",
) -> np.ndarray:
    """FM logits for every training example, each from an FM that never trained on it.

    Why: an FM's logits on its own training examples are partly memorised labels (on ML-1M the FM
    reaches NE 0.777 in-sample vs 0.816 held out), so distilling them mostly re-teaches the hard
    labels. Cross-fitting over contiguous time folds gives soft labels of the quality the FM has on
    traffic it has not seen - what a production teacher logs at serving time. Costs ``folds``
    extra FM trainings on ``(folds-1)/folds`` of the data each.
    """
    if folds < 2:
        raise ValueError("cross-fitting needs at least 2 folds")
    edges = np.quantile(events.ts, np.linspace(0, 1, folds + 1)[1:-1])
    fold = np.searchsorted(edges, events.ts, side="right")
    logits = np.empty(len(events), dtype=np.float32)
    with progress("cross-fitting the teacher", total=folds, unit="fold FM", log=log, interval=0) as report:
        for k in range(folds):
            held = np.flatnonzero(fold == k)
            teacher = train_fm(events, config, seed + 1000 * (k + 1), device=device, features=features,
                               rows=np.flatnonzero(fold != k),
                               name=f"teacher FM {k + 1}/{folds}")
            _, logits[held], _ = predict(teacher.model, features.take(held), device=device, with_embeddings=True)
            report.advance(metric=f"valid NE {teacher.validation['ne']:.4f}")
    return logits


def distillation_teacher_logits(
    events: EventArrays,
    config: SolarisConfig,
    seed: int,
    *,
    features: Features,
    served_fm: nn.Module,
    device: str | torch.device = "cpu",
) -> tuple[np.ndarray, dict]:
    """Soft labels for the distilled VM as ``model.distillation.teacher`` says, and what was used.

    ``in-sample``: the served FM's own logits on its training examples; ``cross-fit``:
    :func:`out_of_fold_teacher_logits` over ``teacher_folds`` (``served_fm`` then only fixes the
    role; the fold FMs have the configured architecture). The dict goes into checkpoint metadata.
    """
    kd = config.model.distillation
    if kd.teacher == "in-sample":
        _, logits, _ = predict(served_fm, features, device=device, with_embeddings=True)
        return logits, {"teacher": "in-sample"}
    log.info(
        "cross-fitting the teacher: %d FMs, each on %d of %d time folds",
        kd.teacher_folds,
        kd.teacher_folds - 1,
        kd.teacher_folds,
    )
    logits = out_of_fold_teacher_logits(events, config, seed, features=features, folds=kd.teacher_folds,
                                        device=device)
    return logits, {"teacher": "cross-fit", "teacher_folds": kd.teacher_folds}


def train_vm(
    events: EventArrays,
    config: SolarisConfig,
    seed: int,
    variant: str = "baseline",
    *,
    teacher_logits: np.ndarray | None = None,
    fm_embedding: np.ndarray | None = None,
    fm_tier: np.ndarray | None = None,
    features: Features | None = None,
    init_from: VerticalModel | None = None,
    training: TrainingConfig | None = None,
    keep_initial: bool = False,
    fm_age: np.ndarray | None = None,
    fm_head: nn.Linear | None = None,
) -> TrainResult:
    """Train one VM variant; distilled variants need the FM's logits on the same examples.

    ``init_from`` warm-starts from a trained VM (:func:`warm_start_vm`), ``training`` replaces
    ``config.model.training`` (e.g. a smaller batch for fine-tuning on a few hours of data),
    ``keep_initial`` keeps the warm start when no epoch beats it on validation NE (:func:`fit`).
    With ``model.adapter.design: channel`` the SOLARIS variants also read ``fm_age`` (each served
    value's age in seconds, NaN where nothing was served) and score the vectors with ``fm_head`` (the
    serving FM's head); the channel's new weights (:func:`channel_parameter_groups`) learn at
    ``model.adapter.channel_learning_rate`` (the pre-training rate ``model.training.learning_rate`` when
    unset), the rest at ``training``'s rate.
    """
    if variant not in VM_VARIANTS:
        raise ValueError(f"unknown VM variant {variant!r}; expected one of {VM_VARIANTS}")
    distilled = variant.endswith("distilled")
    uses_fm = variant.startswith("solaris")
    if distilled and teacher_logits is None:
        raise ValueError(f"variant {variant!r} needs the FM's teacher logits")
    if uses_fm and (fm_embedding is None or fm_tier is None):
        raise ValueError(f"variant {variant!r} needs served FM embeddings and their tiers")
    if features is None:
        features = events.features(config.model.history_length)
    extras: dict[str, np.ndarray] = {}
    if distilled:
        extras["teacher_logit"] = np.asarray(teacher_logits, dtype=np.float32)
    if uses_fm:
        extras["fm_embedding"] = np.asarray(fm_embedding, dtype=np.float32)
        extras["fm_tier"] = np.asarray(fm_tier, dtype=np.int64)
    kd = config.model.distillation

    def loss_fn(logit: torch.Tensor, target: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        teacher = batch.get("teacher_logit")
        return distillation_loss(logit, target, teacher, kd.weight if distilled else 0.0, kd.temperature)

    seed_everything(seed)
    spec = vm_spec(config, with_fm_embedding=uses_fm)
    model = warm_start_vm(init_from, spec) if init_from is not None else VerticalModel(spec)
    training = training or config.model.training
    groups = None
    if spec.channel:
        if fm_age is None:
            raise ValueError(f"variant {variant!r} of the channel design needs the served values' ages (fm_age)")
        extras["fm_age"] = np.asarray(fm_age, dtype=np.float32)
        groups = _channel_setup(model, config, training, fm_head=fm_head, fm_embedding=extras["fm_embedding"],
                                fm_tier=extras["fm_tier"], ts=events.ts)
    return fit(
        model,
        features,
        events.label,
        events.ts,
        training,
        seed=seed,
        extras=extras,
        loss_fn=loss_fn,
        name=f"VM[{variant}]",
        keep_initial=keep_initial,
        param_groups=groups,
    )


def adapt_vm(
    config: SolarisConfig,
    body: nn.Module,
    fm: FoundationModel,
    *,
    reference: nn.Module,
    features: Features,
    labels: np.ndarray,
    ts_seconds: np.ndarray,
    fm_embedding: np.ndarray,
    fm_tier: np.ndarray,
) -> tuple[AdaptedVM, AdapterFit]:
    """The VM+SOLARIS model of the adapter design: ``body`` frozen plus a tier adapter fit on a served log.

    ``features``/``labels``/``ts_seconds`` are the served log's requests, ``fm_embedding``/``fm_tier``
    what serving returned for them (from an FM that never trained on them). The adapter is fit on
    top of ``reference``'s logits, which must be out of sample for these rows (e.g. the VM before
    its fine-tune on them); the returned model puts it on ``body`` (e.g. that fine-tuned VM).
    """
    settings = config.model.adapter
    _, reference_logits, _ = predict(reference, features, with_embeddings=True)
    adapter, fitted = fit_adapter(
        AdapterSpec(config.model.embedding_dim, settings.vector), fm.head,
        body_logits=reference_logits, labels=labels, ts_seconds=ts_seconds,
        vectors=np.asarray(fm_embedding, dtype=np.float32), tiers=np.asarray(fm_tier, dtype=np.int64),
        l2=settings.l2, validation_fraction=config.model.training.validation_fraction,
        min_validation_rows=settings.min_validation_rows,
    )
    frozen = copy.deepcopy(body)
    for parameter in frozen.parameters():
        parameter.requires_grad_(False)
    model = AdaptedVM(frozen, adapter)
    model.eval()
    return model, fitted


def warm_start_vm(base: VerticalModel, spec: VMSpec) -> VerticalModel:
    """A new VM of ``spec`` initialised from ``base`` (same ids, buckets and hidden sizes).

    Why: recurring training continues from yesterday's model; adding the FM-embedding slot
    should not throw away what the VM already knows. The slot's input weights start at zero (and
    so do the ``channel`` design's input weights and score path, which ``base`` need not have), so
    the warm-started model predicts exactly like ``base`` until training finds a use for the FM.
    """
    if base.spec.fm_embedding_dim and base.spec.fm_embedding_dim != spec.fm_embedding_dim:
        raise ValueError("cannot warm-start across different FM embedding sizes")
    model = VerticalModel(spec)
    target = model.state_dict()
    for key, value in base.state_dict().items():
        if key not in target:
            raise ValueError(f"warm start: {key} not in the new model")
        if target[key].shape == value.shape:
            target[key] = value.detach().clone()
        elif value.dim() == 2 and value.shape[0] == target[key].shape[0] and value.shape[1] < target[key].shape[1]:
            widened = torch.zeros_like(target[key])  # first layer: extra FM columns at the end of the input
            widened[:, : value.shape[1]] = value
            target[key] = widened
        else:
            raise ValueError(f"warm start: {key} has shape {tuple(value.shape)}, new model {tuple(target[key].shape)}")
    model.load_state_dict(target)
    return model
