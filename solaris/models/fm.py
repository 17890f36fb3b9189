"""The foundation model (FM): heavy, accurate, too slow for the online path.

Architecture (docs/architecture.md §8):

* hashed user / item id embeddings (large tables); the user's is dropped on a share of training
  rows (``user_id_dropout``), so the FM generalises to users it never trained on from their history;
* a time-aware history encoder: each of the user's last N events (strictly before the request) is
  its item embedding + a "liked" embedding + a projection of its age; optionally one
  self-attention transformer layer over them (``self_attention``, off by default), then *target
  attention* with the candidate item as query;
* a deep interaction tower over [user, item, target interest, user summary, item x interest, the
  VM's real-time counters]
  whose last hidden layer is the **pair embedding** (D = ``model.embedding_dim``); the click
  logit is a linear head on it, so the embedding carries what the FM knows about the pair;
* :meth:`FoundationModel.user_representation`: a D-dim user-only vector (no item), used for KNN.

Deterministic given the seed; runs on CPU or CUDA (the caller moves it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from solaris.models.common import NUMERIC_FEATURES, HashedEmbedding, drop_ids, mlp, numeric_features
from solaris.models.features import FEEDBACK_LEVELS


@dataclass(frozen=True)
class FMSpec:
    """Everything needed to rebuild the network; stored in the checkpoint's config.json."""

    embedding_dim: int = 64
    history_length: int = 32
    id_buckets: int = 65_536
    d_model: int = 64
    heads: int = 2
    tower: tuple[int, ...] = (256, 128)
    dropout: float = 0.1
    # Share of training rows whose user-id vector is replaced by the zero vector ("unknown user").
    # Why: most requests in a dense window come from users the FM never trained on; their hashed
    # bucket holds an untrained vector. Trained to do without the id on some rows, and with the id
    # table starting at zero (an untouched bucket *is* "unknown"), the FM leans on history instead
    # of memorising ids. 0 keeps the id on every row (and the table's random start).
    user_id_dropout: float = 0.0
    # One self-attention layer over the history before target attention. False: the history tokens
    # go straight to target attention (DIN-style), which costs a fraction of the compute per event
    # and so affords longer histories.
    self_attention: bool = True
    # What a history token says about the user's reaction to its item. "rating": the event's
    # feedback level (a 1-5 rating when the source has one, else liked or not; features.feedback_levels);
    # "label": only whether it was liked (checkpoints written before the choice existed).
    history_feedback: str = "label"

    def to_dict(self) -> dict:
        return {"arch": "fm", **asdict(self)}


class FoundationModel(nn.Module):
    arch = "fm"

    def __init__(self, spec: FMSpec) -> None:
        super().__init__()
        self.spec = spec
        d = spec.d_model
        self.user_emb = HashedEmbedding(spec.id_buckets, d, salt=1)
        if spec.user_id_dropout > 0:
            nn.init.zeros_(self.user_emb.table.weight)
        self.item_emb = HashedEmbedding(spec.id_buckets, d, salt=2)
        if spec.history_feedback not in ("rating", "label"):
            raise ValueError(f"history_feedback must be 'rating' or 'label', not {spec.history_feedback!r}")
        # one vector per feedback level (named for the liked bit it held first: checkpoints keep the name)
        self.liked_emb = nn.Embedding(FEEDBACK_LEVELS if spec.history_feedback == "rating" else 2, d)
        self.age_proj = nn.Linear(1, d)
        self.position = nn.Parameter(torch.zeros(spec.history_length, d))
        self.encoder = (
            nn.TransformerEncoderLayer(
                d_model=d, nhead=spec.heads, dim_feedforward=2 * d, dropout=spec.dropout, batch_first=True
            )
            if spec.self_attention
            else None
        )
        self.target_attention = nn.MultiheadAttention(d, spec.heads, dropout=spec.dropout, batch_first=True)
        self.user_summary = mlp([2 * d, 2 * d, spec.embedding_dim], dropout=spec.dropout, final_activation=False)
        self.tower = mlp(
            [4 * d + spec.embedding_dim + len(NUMERIC_FEATURES), *spec.tower, spec.embedding_dim],
            dropout=spec.dropout, final_activation=True
        )
        self.head = nn.Linear(spec.embedding_dim, 1)

    def _encode_history(
        self, hist_items: torch.Tensor, hist_feedback: torch.Tensor, hist_age: torch.Tensor, hist_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        tokens = (
            self.item_emb(hist_items)
            + self.liked_emb(hist_feedback)
            + self.age_proj(hist_age.unsqueeze(-1))
            + self.position[-hist_items.shape[1]:]
        )
        padding = ~hist_mask
        # A row with no history would make attention softmax over nothing (NaN): give it one
        # visible (zero) slot and zero its output afterwards.
        empty = padding.all(dim=1)
        if empty.any():
            padding = padding.clone()
            padding[empty, -1] = False
        encoded = tokens if self.encoder is None else self.encoder(tokens, src_key_padding_mask=padding)
        encoded = encoded * hist_mask.unsqueeze(-1)
        return encoded, padding, empty

    def _user_parts(
        self, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        encoded, padding, empty = self._encode_history(
            batch["hist_items"],
            batch["hist_feedback"] if self.spec.history_feedback == "rating" else batch["hist_labels"].long(),
            batch["hist_age"], batch["hist_mask"],
        )
        counts = batch["hist_mask"].sum(dim=1, keepdim=True).clamp(min=1)
        pooled = encoded.sum(dim=1) / counts
        user = drop_ids(self.user_emb(batch["user_id"]), self.spec.user_id_dropout, training=self.training)
        summary = self.user_summary(torch.cat([user, pooled], dim=-1))
        return user, encoded, padding, empty, summary

    def user_representation(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """D-dim user-only vector from id + history (no item): the KNN space of tiers 2 and 4."""
        return self._user_parts(batch)[-1]

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(pair_embedding [n, D], logit [n])`` for a feature batch of tensors."""
        user, encoded, padding, empty, summary = self._user_parts(batch)
        item = self.item_emb(batch["item_id"])
        interest, _ = self.target_attention(
            item.unsqueeze(1), encoded, encoded, key_padding_mask=padding, need_weights=False
        )
        interest = interest.squeeze(1) * (~empty).unsqueeze(-1)
        pair = self.tower(torch.cat([user, item, interest, item * interest, summary, numeric_features(batch)], dim=-1))
        return pair, self.head(pair).squeeze(-1)
