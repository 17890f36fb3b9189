"""How a VM consumes the served FM values: a per-tier residual adapter on its logit.

The SOLARIS VM is a trained VM (the *body*: ids + real-time counters, exactly the baseline or the
distilled VM) plus a small additive term from what serving returned for the request::

    logit = body(x) + gain[t] * standardised FM score + shift[t] + proj[t] . standardised vector

where ``t`` is the serving tier (:mod:`solaris.tiers`) and the FM score is the serving FM's linear
head applied to the served vector: for tier 1 the FM's own logit of the pair, for an aggregate the
mean of the logits it averages (the head is linear). Tier 0 (nothing served) adds nothing.

The same module, with the vector projection off and an age slope on the gain (``AdapterSpec.age``),
is the score path of the ``channel`` design's VM (:class:`solaris.models.vm.VerticalModel`), trained
with the VM by gradient instead of fit by :func:`fit_adapter`.

Why this shape, and not the vector concatenated into the VM's first layer (``model.adapter.design:
concat``, the earlier design):

* the FM score is one number that is already the FM's best guess; a gain per tier is learnt from a
  few hundred rows, where a 71-column first layer needs far more than a day's served log;
* a zero adapter *is* the body, so the SOLARIS VM starts as the VM and can only move by what the
  served values explain; tiers of different quality get their own weights instead of sharing one
  block of weights with a one-hot that only shifts biases;
* the body is frozen: the adapter is a penalised logistic regression on top of the body's logit (a
  convex fit, deterministic), so fitting it cannot damage what the VM already knows;
* it is fit on *out-of-sample* body logits (the VM before it saw the fitting rows) and on served
  values from an FM that never saw those rows either: stacking on in-sample outputs would teach the
  adapter to trust whichever model memorised the labels;
* per tier, the fit keeps the FM score alone, the score and the vector, or nothing, whichever has the
  lowest log loss on the tier's own rows in the latest slice of the fitting window (the validation
  slice, by time): a tier's values reach the VM only where they earned it there.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from solaris.models.features import time_split
from solaris.tiers import N_TIERS, TIER_NONE

_MIN_SCALE = 1e-3  # floor of a standardisation scale: a constant input is centred, not blown up


@dataclass(frozen=True)
class AdapterSpec:
    """Shape of a :class:`TierAdapter`; stored with the model."""

    embedding_dim: int
    vector: bool = True  # a projection of the standardised vector per tier, beside the FM score
    # a per-tier slope of the score's gain in the value's encoded age (:func:`encode_age`): the gain is
    # ``gain[t] + age_gain[t] * encode_age(age)``, so a tier's score can count less the older its value
    age: bool = False

    def to_dict(self) -> dict:
        return {"arch": "tier_adapter", **asdict(self)}


def encode_age(age_seconds: torch.Tensor) -> torch.Tensor:
    """A served value's age as the models read it: ``log(1 + minutes)``, 0 when unknown (nothing served).

    Why a log of minutes: what a value is worth changes most in its first minutes (a pair value a
    minute old against one an hour old) and little between hours and days, and the log keeps a value
    days old at a scale of ~8 beside inputs of order 1. NaN (the resolver's age where nothing was
    served) and infinities read as 0: the tier says that nothing was served. A negative age (a value
    computed after its request, which the resolver never serves) is clipped to 0.
    """
    age = torch.nan_to_num(age_seconds.float(), nan=0.0, posinf=0.0, neginf=0.0).clamp(min=0.0)
    return torch.log1p(age / 60.0)


# what a tier of a fitted adapter uses (AdapterFit.choice)
OFF, SCORE, SCORE_AND_VECTOR = "off", "score", "score+vector"


@dataclass(frozen=True)
class AdapterFit:
    """What :func:`fit_adapter` chose per tier, and each candidate's log loss on the tier's validation rows.

    ``choice[t]``: :data:`OFF`, :data:`SCORE` or :data:`SCORE_AND_VECTOR`; ``validation_log_loss[t]``
    maps each candidate (``off`` = the VM alone) to its mean log loss on tier ``t``'s validation rows.
    """

    choice: dict[int, str]
    validation_rows: dict[int, int]
    validation_log_loss: dict[int, dict[str, float]]
    train_rows: int

    @property
    def kept_tiers(self) -> tuple[int, ...]:
        return tuple(t for t, used in sorted(self.choice.items()) if used != OFF)


class TierAdapter(nn.Module):
    """The per-tier residual: ``gain[t] * z_score + shift[t] + proj[t] . z_vector`` (0 for tier 0).

    With ``spec.age`` the gain is ``gain[t] + age_gain[t] * age_code`` (``age_code`` from :func:`encode_age`).

    Buffers (fixed once fit): the FM head (``head_weight``, ``head_bias``) and the per-tier centre and
    scale of the FM score and of the vector, from the rows the adapter is fit on.
    """

    head_weight: torch.Tensor
    head_bias: torch.Tensor
    score_center: torch.Tensor
    score_scale: torch.Tensor
    vector_center: torch.Tensor
    vector_scale: torch.Tensor
    enabled: torch.Tensor

    def __init__(self, spec: AdapterSpec) -> None:
        super().__init__()
        self.spec = spec
        dim = spec.embedding_dim
        self.register_buffer("head_weight", torch.zeros(dim))
        self.register_buffer("head_bias", torch.zeros(()))
        self.register_buffer("score_center", torch.zeros(N_TIERS))
        self.register_buffer("score_scale", torch.ones(N_TIERS))
        self.register_buffer("vector_center", torch.zeros(N_TIERS, dim))
        self.register_buffer("vector_scale", torch.ones(N_TIERS, dim))
        self.register_buffer("enabled", torch.zeros(N_TIERS))  # 1 where a tier's weights are in use
        self.gain = nn.Parameter(torch.zeros(N_TIERS))
        self.shift = nn.Parameter(torch.zeros(N_TIERS))
        self.proj = nn.Parameter(torch.zeros(N_TIERS, dim)) if spec.vector else None
        self.age_gain = nn.Parameter(torch.zeros(N_TIERS)) if spec.age else None

    def set_head(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        """Copy the serving FM's linear head (the map from pair embedding to click logit)."""
        with torch.no_grad():
            self.head_weight.copy_(weight.detach().reshape(-1))
            self.head_bias.copy_(bias.detach().reshape(()))

    def fm_score(self, vector: torch.Tensor) -> torch.Tensor:
        """The FM head on a served vector: the pair's FM logit (tier 1), an aggregate's mean logit."""
        return vector @ self.head_weight + self.head_bias

    def standardise(self, vectors: np.ndarray, tiers: np.ndarray) -> None:
        """Per-tier centre and scale of the FM score and the vector, from the fitting rows."""
        vector = torch.as_tensor(np.asarray(vectors, dtype=np.float32))
        tier = torch.as_tensor(np.asarray(tiers, dtype=np.int64))
        score = self.fm_score(vector)
        with torch.no_grad():
            for t in range(1, N_TIERS):
                rows = tier == t
                if int(rows.sum()) < 2:
                    continue
                self.score_center[t] = score[rows].mean()
                self.score_scale[t] = score[rows].std().clamp(min=_MIN_SCALE)
                self.vector_center[t] = vector[rows].mean(dim=0)
                self.vector_scale[t] = vector[rows].std(dim=0).clamp(min=_MIN_SCALE)

    def standardised_score(self, vector: torch.Tensor, tier: torch.Tensor) -> torch.Tensor:
        """The FM score centred and scaled by its tier's statistics (:meth:`standardise`)."""
        tier = tier.long()
        return (self.fm_score(vector) - self.score_center[tier]) / self.score_scale[tier]

    def forward(self, vector: torch.Tensor, tier: torch.Tensor, age_code: torch.Tensor | None = None) -> torch.Tensor:
        tier = tier.long()
        gain = self.gain[tier]
        if self.age_gain is not None:
            if age_code is None:
                raise ValueError("this adapter reads the served value's age (age_code)")
            gain = gain + self.age_gain[tier] * age_code
        residual = gain * self.standardised_score(vector, tier) + self.shift[tier]
        if self.proj is not None:
            z_vector = (vector - self.vector_center[tier]) / self.vector_scale[tier]
            residual = residual + (self.proj[tier] * z_vector).sum(dim=-1)
        return residual * self.enabled[tier]

    def penalty(self) -> torch.Tensor:
        """Sum of squared weights (the ridge term of :func:`fit_adapter`)."""
        total = (self.gain**2).sum() + (self.shift**2).sum()
        for extra in (self.proj, self.age_gain):
            if extra is not None:
                total = total + (extra**2).sum()
        return total


class AdaptedVM(nn.Module):
    """A VM body plus a :class:`TierAdapter`: the VM+SOLARIS model of the adapter design.

    ``forward`` takes the batch the VM takes plus ``fm_embedding`` and ``fm_tier``, as the concat
    design does, so :func:`solaris.models.training.predict` scores either.
    """

    arch = "vm_adapted"

    def __init__(self, body: nn.Module, adapter: TierAdapter) -> None:
        super().__init__()
        self.body = body
        self.adapter = adapter

    def forward(self, batch: dict) -> torch.Tensor:
        return self.body(batch) + self.adapter(batch["fm_embedding"], batch["fm_tier"])


def _log_loss_sum(logit: torch.Tensor, label: torch.Tensor) -> float:
    return float(F.binary_cross_entropy_with_logits(logit, label, reduction="sum"))


def _solve(adapter: TierAdapter, offset: torch.Tensor, label: torch.Tensor, vector: torch.Tensor,
           tier: torch.Tensor, *, l2: float, max_iterations: int) -> None:
    """Ridge logistic regression of the adapter's weights with ``offset`` fixed (L-BFGS, full batch)."""
    optimizer = torch.optim.LBFGS(adapter.parameters(), lr=1.0, max_iter=max_iterations,
                                  line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.binary_cross_entropy_with_logits(offset + adapter(vector, tier), label) + l2 * adapter.penalty()
        loss.backward()
        return loss

    # one thread: a multi-threaded reduction sums in a varying order, and L-BFGS amplifies the last bits
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        optimizer.step(closure)
    finally:
        torch.set_num_threads(threads)


def _check_inputs(spec: AdapterSpec, *, body_logits: np.ndarray, labels: np.ndarray, ts_seconds: np.ndarray,
                  vectors: np.ndarray, tiers: np.ndarray) -> None:
    """One row per label in every input, vectors of the spec's width, nothing NaN or infinite."""
    if spec.age:
        raise ValueError("fit_adapter reads no ages: the age slope belongs to the channel design's score path")
    n = len(labels)
    for name, array in (("body_logits", body_logits), ("ts_seconds", ts_seconds), ("tiers", tiers)):
        if len(array) != n:
            raise ValueError(f"{name} has {len(array)} rows, labels {n}")
    if vectors.shape != (n, spec.embedding_dim):
        raise ValueError(f"vectors have shape {vectors.shape}, expected ({n}, {spec.embedding_dim})")
    if not np.isfinite(vectors).all() or not np.isfinite(body_logits).all():
        raise ValueError("adapter inputs contain NaN or infinity")


def fit_adapter(
    spec: AdapterSpec,
    fm_head: nn.Linear,
    *,
    body_logits: np.ndarray,
    labels: np.ndarray,
    ts_seconds: np.ndarray,
    vectors: np.ndarray,
    tiers: np.ndarray,
    l2: float,
    validation_fraction: float,
    min_validation_rows: int,
    max_iterations: int = 200,
) -> tuple[TierAdapter, AdapterFit]:
    """Fit a :class:`TierAdapter` on top of fixed body logits, choosing per tier what it may use.

    Candidates, each a ridge-penalised logistic regression (``mean BCE + l2 * |weights|^2``) with
    the body's logit as offset, solved by L-BFGS on the rows before the time split's validation
    slice: the FM score alone, and (with ``spec.vector``) the score and the vector. Per tier, the
    candidate with the lowest log loss on that tier's validation rows is kept; the tier is switched
    off when neither beats the body alone or it has fewer than ``min_validation_rows`` validation
    rows. ``body_logits`` must be out of sample for these rows (the VM before it saw them).
    Deterministic: no sampling, and the solver runs on one thread.
    """
    _check_inputs(spec, body_logits=body_logits, labels=labels, ts_seconds=ts_seconds, vectors=vectors, tiers=tiers)
    train, valid = time_split(ts_seconds, validation_fraction)
    offset = torch.as_tensor(np.asarray(body_logits, dtype=np.float32))
    label = torch.as_tensor(np.asarray(labels, dtype=np.float32))
    vector = torch.as_tensor(np.asarray(vectors, dtype=np.float32))
    tier = torch.as_tensor(np.asarray(tiers, dtype=np.int64))
    fit_rows, valid_rows = torch.as_tensor(train), torch.as_tensor(valid)
    served = bool((tier[fit_rows] != TIER_NONE).any())

    candidates: dict[str, TierAdapter] = {}
    for name, with_vector in ((SCORE, False), (SCORE_AND_VECTOR, True)):
        if with_vector and not spec.vector:
            continue
        candidate = TierAdapter(AdapterSpec(spec.embedding_dim, with_vector))
        candidate.set_head(fm_head.weight, fm_head.bias)
        candidate.standardise(vectors[train], tiers[train])
        with torch.no_grad():
            candidate.enabled[1:] = 1.0
        if served:
            _solve(candidate, offset[fit_rows], label[fit_rows], vector[fit_rows], tier[fit_rows], l2=l2,
                   max_iterations=max_iterations)
        candidates[name] = candidate

    adapter = TierAdapter(spec)
    adapter.set_head(fm_head.weight, fm_head.bias)
    adapter.standardise(vectors[train], tiers[train])
    choice, rows_of, losses = {}, {}, {}
    with torch.no_grad():
        base, valid_label, valid_tier = offset[valid_rows], label[valid_rows], tier[valid_rows]
        residual = {name: c(vector[valid_rows], valid_tier) for name, c in candidates.items()}
        for t in range(1, N_TIERS):
            mine = valid_tier == t
            rows_of[t] = int(mine.sum())
            choice[t] = OFF
            if rows_of[t] == 0:
                continue
            losses[t] = {OFF: _log_loss_sum(base[mine], valid_label[mine]) / rows_of[t]}
            for name, values in residual.items():
                losses[t][name] = _log_loss_sum(base[mine] + values[mine], valid_label[mine]) / rows_of[t]
            best = min(losses[t], key=lambda k: (losses[t][k], k != OFF))  # a tie keeps the tier off
            if rows_of[t] < min_validation_rows or best == OFF:
                continue
            choice[t] = best
            chosen = candidates[best]
            adapter.gain[t] = chosen.gain[t]
            adapter.shift[t] = chosen.shift[t]
            if adapter.proj is not None and chosen.proj is not None:
                adapter.proj[t] = chosen.proj[t]
            adapter.enabled[t] = 1.0
    return adapter, AdapterFit(choice, rows_of, losses, int(train.size))
