"""The vertical model (VM): the small real-time model, and the verifier.

One architecture for the four variants of docs/architecture.md §8, which differ only in inputs and loss:

* *baseline*: cheap real-time features only (hashed user/item ids in small tables, item
  popularity and like rate, user recency, activity count and recent like rate); like the FM, it
  learns without the user id on a share of its training rows (``VMSpec.user_id_dropout``), so a
  user it never trained on - most requests of a dense window - reads as a trained "unknown user";
* *distilled*: same inputs, trained on labels mixed with FM soft labels (:func:`distillation_loss`);
* *SOLARIS*: plus the FM embedding served for the pair (any tier of :mod:`solaris.tiers`) and a one-hot of its tier
  (tier 0 = nothing served, a zero vector), so the model learns how much to trust each tier;
* *SOLARIS+distilled*: both.

How a SOLARIS VM reads the served value (``model.adapter.design``, docs/models.md):

* ``concat``: the vector and the tier's one-hot widen the first layer (the new columns start at zero);
* ``channel`` (``VMSpec.channel``): the served *channel* - the vector, its FM score (the serving FM's
  head on the vector, standardised per tier), its age (:func:`~solaris.models.adapter.encode_age`)
  and its tier's one-hot - enters the first layer through zero-initialised weights of its own
  (``vector_in`` for the vector, ``signal_in`` for the score, age and tier), and a per-tier linear
  *score path* (a :class:`~solaris.models.adapter.TierAdapter` with an age slope and no vector
  projection) adds ``(gain[t] + age_gain[t] * age) * z(score) + shift[t]`` to the logit, starting at
  zero. Why: the FM score is the FM's own best guess for the pair; through the first layer alone it
  reaches the logit only via the hidden ReLU units learnt from zero at the fine-tune's rate, while a
  linear path hands it to the logit with one weight per tier, and the age slope lets a tier's score
  count less the older its value. Modules of their own (not columns of the first layer) so that the
  few weights of the score, age and tier can learn at their own rate
  (:meth:`VerticalModel.channel_parameters`).
  Both designs start as the VM they are warm-started from: every new weight is zero.

The verifier is the baseline VM scoring candidate pairs (:func:`verifier_scores`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import cast

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from solaris.models.adapter import AdapterSpec, TierAdapter, encode_age
from solaris.models.common import NUMERIC_FEATURES, HashedEmbedding, drop_ids, mlp, numeric_features, to_tensors
from solaris.models.features import Features
from solaris.tiers import N_TIERS

CHANNEL_SCALARS = 2  # the channel's inputs beside the vector and the tier's one-hot: the FM score and the age


@dataclass(frozen=True)
class VMSpec:
    id_buckets: int = 65_536
    id_dim: int = 8
    hidden: tuple[int, ...] = (32,)
    fm_embedding_dim: int = 0  # 0 = no FM input slot (baseline / distilled / verifier)
    # training rows whose user-id vector is zeroed, the user table then starting at zero (as the FM's);
    # 0 in checkpoints written before the field existed
    user_id_dropout: float = 0.0
    # the ``channel`` design (module docstring): the served vector, FM score, age and tier through their
    # own input weights, and a per-tier score path to the logit; needs ``fm_embedding_dim``
    channel: bool = False

    def to_dict(self) -> dict:
        """The spec as a checkpoint's config.json stores it; ``channel`` only when set.

        Why omit it when off: a VM without the channel then writes the config.json it wrote before the
        field existed, so its checkpoint version (a content hash, on which the evaluation's replay
        fingerprint depends) does not change; a config.json without the field loads as ``False``.
        """
        fields = asdict(self)
        if not self.channel:
            del fields["channel"]
        return {"arch": "vm", **fields}


class VerticalModel(nn.Module):
    arch = "vm"

    def __init__(self, spec: VMSpec) -> None:
        super().__init__()
        self.spec = spec
        self.user_emb = HashedEmbedding(spec.id_buckets, spec.id_dim, salt=11)
        if spec.user_id_dropout > 0:
            nn.init.zeros_(self.user_emb.table.weight)
        self.item_emb = HashedEmbedding(spec.id_buckets, spec.id_dim, salt=12)
        width = 2 * spec.id_dim + len(NUMERIC_FEATURES)
        if spec.channel and not spec.fm_embedding_dim:
            raise ValueError("the channel design needs the FM embedding slot (fm_embedding_dim > 0)")
        if spec.fm_embedding_dim and not spec.channel:
            width += spec.fm_embedding_dim + N_TIERS
        self.net = mlp([width, *spec.hidden, 1])
        self.vector_in: nn.Linear | None = None
        self.signal_in: nn.Linear | None = None
        self.score_path: TierAdapter | None = None
        if spec.channel:
            first = self.net[0]
            assert isinstance(first, nn.Linear)
            self.vector_in = nn.Linear(spec.fm_embedding_dim, first.out_features, bias=False)
            self.signal_in = nn.Linear(CHANNEL_SCALARS + N_TIERS, first.out_features, bias=False)
            nn.init.zeros_(self.vector_in.weight)
            nn.init.zeros_(self.signal_in.weight)
            self.score_path = TierAdapter(AdapterSpec(spec.fm_embedding_dim, vector=False, age=True))
            with torch.no_grad():
                self.score_path.enabled[1:] = 1.0  # every served tier; tier 0 (nothing served) adds nothing

    def set_fm_head(self, head: nn.Linear) -> None:
        """Copy the serving FM's head, which turns a served vector into the channel's FM score."""
        if self.score_path is None:
            raise ValueError("only a VM with the channel reads the FM score")
        self.score_path.set_head(head.weight, head.bias)

    def channel_parameters(self) -> list[nn.Parameter]:
        """The weights that learn at the channel's rate: the score path and the first-layer weights of
        the score, age and tier (``signal_in``); empty without the channel.

        Why apart: a fine-tune trains the VM's body at a low rate on a day of rows, which would leave
        weights that start at zero near zero; these few can then get a rate of their own. Why not
        the vector's weights (``vector_in``, which keep the body's rate, as concat's do): a D x hidden
        block of weights at a high rate fits the vector's noise on a day of rows, and absorbs the
        score's signal before the score path has moved.
        """
        if self.signal_in is None or self.score_path is None:
            return []
        return [cast(nn.Parameter, self.signal_in.weight), *self.score_path.parameters()]

    def forward(self, batch: dict) -> torch.Tensor:
        parts = [
            drop_ids(self.user_emb(batch["user_id"]), self.spec.user_id_dropout, training=self.training),
            self.item_emb(batch["item_id"]),
            numeric_features(batch),
        ]
        if not self.spec.fm_embedding_dim:
            return self.net(torch.cat(parts, dim=-1)).squeeze(-1)
        embedding = batch["fm_embedding"]
        if embedding.shape[-1] != self.spec.fm_embedding_dim:
            raise ValueError(f"fm_embedding has dim {embedding.shape[-1]}, model expects {self.spec.fm_embedding_dim}")
        tier = batch["fm_tier"].long()
        if self.vector_in is None or self.signal_in is None or self.score_path is None:  # concat
            parts += [embedding, F.one_hot(tier, N_TIERS).float()]
            return self.net(torch.cat(parts, dim=-1)).squeeze(-1)
        if "fm_age" not in batch:
            raise ValueError("the channel VM reads the served value's age: fm_age (seconds; NaN where nothing served)")
        served = self.score_path.enabled[tier]  # 0 where nothing was served: no score, no age
        age = encode_age(batch["fm_age"]) * served
        score = self.score_path.standardised_score(embedding, tier) * served
        signal = torch.cat([score[:, None], age[:, None], F.one_hot(tier, N_TIERS).float()], dim=-1)
        hidden = self.net[0](torch.cat(parts, dim=-1)) + self.vector_in(embedding) + self.signal_in(signal)
        return self.net[1:](hidden).squeeze(-1) + self.score_path(embedding, tier, age)


def distillation_loss(
    student_logit: torch.Tensor,
    labels: torch.Tensor,
    teacher_logit: torch.Tensor | None = None,
    weight: float = 0.0,
    temperature: float = 1.0,
) -> torch.Tensor:
    """(1 - w) * BCE(labels) + w * T^2 * BCE(sigmoid(teacher / T) as soft target, student / T).

    The standard Hinton KD loss written for a binary click logit; ``weight == 0`` is plain BCE.
    """
    hard = F.binary_cross_entropy_with_logits(student_logit, labels)
    if weight == 0.0 or teacher_logit is None:
        return hard
    soft_target = torch.sigmoid(teacher_logit / temperature)
    soft = F.binary_cross_entropy_with_logits(student_logit / temperature, soft_target)
    return (1.0 - weight) * hard + weight * (temperature**2) * soft


@torch.inference_mode()
def verifier_scores(
    model: VerticalModel, batch: Features | dict[str, torch.Tensor], batch_size: int = 65536
) -> np.ndarray:
    """Probability of relevance for each candidate pair, from the baseline VM (the verifier).

    ``batch`` is a :class:`solaris.models.features.Features` (or a dict of tensors); returns float32 [n].
    """
    if model.spec.fm_embedding_dim:
        raise ValueError("the verifier is the VM without FM inputs")
    model.eval()
    if isinstance(batch, dict):
        return torch.sigmoid(model(batch)).float().cpu().numpy()
    n = len(batch)
    out = np.empty(n, dtype=np.float32)
    for start in range(0, n, batch_size):
        rows = slice(start, min(start + batch_size, n))
        out[rows] = torch.sigmoid(model(to_tensors(batch, index=rows))).float().numpy()
    return out
