"""Building blocks shared by the FM and the VM, and the features -> tensors bridge."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn

from solaris.models.features import Features

_HASH_MULTIPLIER = 2654435761  # Knuth's multiplicative constant; int64 products wrap deterministically
_HASH_SALT = 0x5BD1E995


class HashedEmbedding(nn.Module):
    """Embedding of arbitrary bigint ids through a fixed hash into ``buckets`` rows.

    Why hashing: ids are 60-bit stable hashes or raw integers with no dense vocabulary, and new ids
    appear every hour; a hashed table needs no vocabulary file and never fails on an unseen id.
    """

    def __init__(self, buckets: int, dim: int, salt: int) -> None:
        super().__init__()
        self.buckets = buckets
        self.salt = salt
        self.table = nn.Embedding(buckets, dim)
        nn.init.normal_(self.table.weight, std=0.05)

    def bucket(self, ids: torch.Tensor) -> torch.Tensor:
        mixed = ids * _HASH_MULTIPLIER + self.salt * _HASH_SALT
        mixed = mixed ^ (mixed >> 29)
        return torch.remainder(mixed, self.buckets)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table(self.bucket(ids))


def drop_ids(vectors: torch.Tensor, share: float, *, training: bool) -> torch.Tensor:
    """In training, zero the id vector of a random ``share`` of the rows (``torch``'s seeded generator);
    otherwise, or with ``share`` 0, the vectors as they are (no random draw).

    Why: with the id table starting at zero, an id the model never trained on reads as the zero
    vector; dropping ids in training teaches the rest of the model what to predict for such a row
    ("unknown user"), instead of leaving an untrained random vector that differs from seed to seed.
    """
    if not training or share <= 0:
        return vectors
    keep = torch.rand(vectors.shape[0], 1, device=vectors.device) >= share
    return vectors * keep


def mlp(sizes: Sequence[int], dropout: float = 0.0, final_activation: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(nn.Linear(fan_in, fan_out))
        last = index == len(sizes) - 2
        if not last or final_activation:
            layers.append(nn.ReLU())
            if dropout and not last:
                layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers)


# Cheap real-time features an online feature store keeps (see solaris.models.features); both models use them.
NUMERIC_FEATURES = (
    "item_pop",
    "user_recency",
    "user_has_history",
    "user_like_rate",
    "user_log_count",
    "item_like_rate",
)


def numeric_features(batch: dict) -> torch.Tensor:
    """``[n, len(NUMERIC_FEATURES)]`` tensor of the dense features of a batch."""
    return torch.stack([batch[name] for name in NUMERIC_FEATURES], dim=-1)


FEATURE_DTYPES = {
    "user_id": torch.int64,
    "item_id": torch.int64,
    "hist_items": torch.int64,
    "hist_labels": torch.float32,
    "hist_feedback": torch.int64,
    "hist_age": torch.float32,
    "hist_mask": torch.bool,
    "item_pop": torch.float32,
    "user_recency": torch.float32,
    "user_has_history": torch.float32,
    "user_like_rate": torch.float32,
    "user_log_count": torch.float32,
    "item_like_rate": torch.float32,
}


def to_tensors(features: Features, device: torch.device | str = "cpu", index: np.ndarray | slice | None = None) -> dict:
    """Feature arrays (optionally a slice of rows) as a dict of tensors on ``device``."""
    batch = {}
    for name, dtype in FEATURE_DTYPES.items():
        array = getattr(features, name)
        if index is not None:
            array = array[index]
        array = np.ascontiguousarray(array)
        if not array.flags.writeable:  # Arrow zero-copy buffers are read-only; torch wants to own them
            array = array.copy()
        batch[name] = torch.from_numpy(array).to(device=device, dtype=dtype)
    return batch


def pick_device(prefer_gpu: bool = True) -> torch.device:
    """CUDA when present (and wanted), else CPU."""
    return torch.device("cuda" if prefer_gpu and torch.cuda.is_available() else "cpu")


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))
