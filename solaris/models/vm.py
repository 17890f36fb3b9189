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

The verifier is the baseline VM scoring candidate pairs (:func:`verifier_scores`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from solaris.models.common import NUMERIC_FEATURES, HashedEmbedding, drop_ids, mlp, numeric_features, to_tensors
from solaris.models.features import Features
from solaris.tiers import N_TIERS


@dataclass(frozen=True)
class VMSpec:
    id_buckets: int = 65_536
    id_dim: int = 8
    hidden: tuple[int, ...] = (32,)
    fm_embedding_dim: int = 0  # 0 = no FM input slot (baseline / distilled / verifier)
    # training rows whose user-id vector is zeroed, the user table then starting at zero (as the FM's);
    # 0 in checkpoints written before the field existed
    user_id_dropout: float = 0.0

    def to_dict(self) -> dict:
        return {"arch": "vm", **asdict(self)}


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
        if spec.fm_embedding_dim:
            width += spec.fm_embedding_dim + N_TIERS
        self.net = mlp([width, *spec.hidden, 1])

    def forward(self, batch: dict) -> torch.Tensor:
        parts = [
            drop_ids(self.user_emb(batch["user_id"]), self.spec.user_id_dropout, training=self.training),
            self.item_emb(batch["item_id"]),
            numeric_features(batch),
        ]
        if self.spec.fm_embedding_dim:
            embedding = batch["fm_embedding"]
            if embedding.shape[-1] != self.spec.fm_embedding_dim:
                raise ValueError(
                    f"fm_embedding has dim {embedding.shape[-1]}, model expects {self.spec.fm_embedding_dim}"
                )
            parts += [embedding, F.one_hot(batch["fm_tier"].long(), N_TIERS).float()]
        return self.net(torch.cat(parts, dim=-1)).squeeze(-1)


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
