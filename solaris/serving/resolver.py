"""Serving-side lookup of precomputed embeddings, by tier (no Spark, no Airflow import).

``resolve(user_ids, item_ids, now)`` returns, for every request, the best *servable* value in tier
order pair (1) -> user aggregate (2) -> KNN-imputed (3) -> item aggregate (4) -> none (0, zero
vector), with its tier and age (codes in :mod:`solaris.tiers`). A value is servable iff
``now < expires_at`` (docs/architecture.md §2) - checked here at read time, whatever the cleanup
job has or has not deleted yet.

:class:`Resolver` holds one immutable :class:`TierTables` snapshot and swaps in a newer one
atomically (a single reference assignment): readers that already took the old snapshot finish
with it, nobody waits on a lock.

:func:`load_snapshot` reads a publish manifest (docs/architecture.md §7) and the Delta table versions it pins
with ``deltalake`` (no Spark); :meth:`Resolver.reload_if_newer` follows ``snapshots/LATEST``.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from solaris.tiers import SERVING_ORDER, TIER_IMPUTED, TIER_ITEM, TIER_NONE, TIER_PAIR, TIER_USER

__all__ = ["TIER_IMPUTED", "TIER_ITEM", "TIER_NONE", "TIER_PAIR", "TIER_USER", "Resolver", "Tier", "TierTables"]


def _seconds(value: datetime | ArrayLike) -> np.ndarray:
    """Epoch seconds (float64) from datetimes, numpy datetime64 or numbers."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return np.asarray(value.timestamp(), dtype=np.float64)
    array = np.asarray(value)
    if np.issubdtype(array.dtype, np.datetime64):
        return array.astype("datetime64[us]").astype(np.int64) / 1e6
    return array.astype(np.float64)


_MIX = np.uint64(0x9E3779B97F4A7C15)


def _key(users: np.ndarray, items: np.ndarray | None) -> np.ndarray:
    """One uint64 lookup key per row: the user id, or a mix of (user, item) for pairs."""
    u = np.asarray(users, dtype=np.int64).astype(np.uint64)
    if items is None:
        return u
    with np.errstate(over="ignore"):
        i = np.asarray(items, dtype=np.int64).astype(np.uint64)
        mixed = (u * _MIX) ^ (i + (u << np.uint64(17)) + (u >> np.uint64(13)))
        return mixed * np.uint64(0xBF58476D1CE4E5B9)


@dataclass(frozen=True)
class Tier:
    """One tier's rows, sorted by a uint64 key for binary-search lookups (pairs keep both ids to
    confirm a hit, so a hash collision can only cost a miss, never a wrong value). A tier keyed by
    one id holds it in ``users`` whether that id is a user (tiers 2, 3) or an item (tier 4)."""

    keys: np.ndarray  # uint64, sorted
    users: np.ndarray  # int64, in key order (the item id for the item tier)
    items: np.ndarray | None  # int64 in key order (pair tier) or None
    embeddings: np.ndarray  # float32 [n, D], in key order
    computed_at: np.ndarray  # epoch seconds
    expires_at: np.ndarray  # epoch seconds

    @classmethod
    def build(
        cls, keys: list[np.ndarray], embeddings: ArrayLike, computed_at: datetime | ArrayLike,
        expires_at: datetime | ArrayLike,
    ) -> "Tier":
        users = np.asarray(keys[0], dtype=np.int64)
        items = np.asarray(keys[1], dtype=np.int64) if len(keys) == 2 else None
        lookup = _key(users, items)
        order = np.argsort(lookup, kind="stable")
        lookup = lookup[order]
        if lookup.size and (lookup[1:] == lookup[:-1]).any():
            raise ValueError("tier keys must be unique (latest row per key)")
        return cls(lookup, users[order], None if items is None else items[order],
                   np.asarray(embeddings, dtype=np.float32)[order], _seconds(computed_at)[order],
                   _seconds(expires_at)[order])

    @classmethod
    def empty(cls, dim: int, keyed_by_pair: bool) -> "Tier":
        keys = [np.empty(0, np.int64)] * (2 if keyed_by_pair else 1)
        return cls.build(keys, np.zeros((0, dim), np.float32), np.empty(0), np.empty(0))

    def __len__(self) -> int:
        return int(self.keys.size)

    def find(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Row of each query in this tier, -1 when absent."""
        if not self.keys.size:
            return np.full(users.size, -1, dtype=np.int64)
        query = _key(users, items if self.items is not None else None)
        position = np.minimum(np.searchsorted(self.keys, query), self.keys.size - 1)
        found = (self.keys[position] == query) & (self.users[position] == users)
        if self.items is not None:
            found &= self.items[position] == items
        return np.where(found, position, -1)


@dataclass(frozen=True)
class TierTables:
    """An immutable serving snapshot: the tiers of one published manifest (``item_side`` keyed by item)."""

    dim: int
    pairs: Tier
    users: Tier
    imputed: Tier
    snapshot_id: str = ""
    item_side: Tier | None = None

    def _tier(self, code: int) -> Tier | None:
        return {TIER_PAIR: self.pairs, TIER_USER: self.users, TIER_IMPUTED: self.imputed,
                TIER_ITEM: self.item_side}[code]

    def resolve(
        self, user_ids: ArrayLike, item_ids: ArrayLike, now: datetime | ArrayLike
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Vectorised lookup -> ``(embeddings [n, D] float32, tier int8 [n], age_seconds float64 [n])``.

        ``now`` is one time for all requests or one per request (replays score requests at their
        own timestamps).
        """
        users = np.asarray(user_ids, dtype=np.int64)
        items = np.asarray(item_ids, dtype=np.int64)
        if users.shape != items.shape:
            raise ValueError("user_ids and item_ids must have the same length")
        n = users.size
        now_s = np.broadcast_to(_seconds(now), (n,)).astype(np.float64)
        out = np.zeros((n, self.dim), dtype=np.float32)
        tier = np.zeros(n, dtype=np.int8)
        age = np.full(n, np.nan, dtype=np.float64)
        for code in SERVING_ORDER:
            table = self._tier(code)
            open_rows = tier == TIER_NONE
            if table is None or not open_rows.any() or len(table) == 0:
                continue
            position = table.find(items, items) if code == TIER_ITEM else table.find(users, items)
            servable = open_rows & (position >= 0)
            rows = position[servable]
            candidates = np.flatnonzero(servable)
            fresh = now_s[candidates] < table.expires_at[rows]  # expired values are never served
            target = candidates[fresh]
            rows = rows[fresh]
            out[target] = table.embeddings[rows]
            tier[target] = code
            age[target] = now_s[target] - table.computed_at[rows]
        return out, tier, age


class Resolver:
    """Thread-safe holder of the current snapshot; ``swap`` never blocks readers."""

    @classmethod
    def from_snapshots(cls, directory: str | os.PathLike[str]) -> "Resolver":
        """A resolver serving the snapshot ``directory/LATEST`` points at."""
        from solaris.serving.snapshots import latest_manifest_path

        path = latest_manifest_path(Path(directory))
        if path is None:
            raise FileNotFoundError(f"no published snapshot in {directory} (no LATEST)")
        return cls(load_snapshot(path))

    def reload_if_newer(self, directory: str | os.PathLike[str]) -> bool:
        """Load and swap in the snapshot LATEST names if it is not the one being served."""
        from solaris.serving.snapshots import latest_manifest_path

        path = latest_manifest_path(Path(directory))
        if path is None or path.stem == self._tables.snapshot_id:
            return False
        self.swap(load_snapshot(path))
        return True

    def __init__(self, tables: TierTables) -> None:
        self._tables = tables
        self._swap_lock = threading.Lock()  # serialises writers only

    @property
    def tables(self) -> TierTables:
        return self._tables

    def swap(self, tables: TierTables) -> TierTables:
        """Install a newer snapshot (same dimension) and return the previous one."""
        if tables.dim != self._tables.dim:
            raise ValueError(f"snapshot dim {tables.dim} differs from the serving dim {self._tables.dim}")
        with self._swap_lock:
            previous, self._tables = self._tables, tables
        return previous

    def resolve(
        self, user_ids: ArrayLike, item_ids: ArrayLike, now: datetime | ArrayLike
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self._tables.resolve(user_ids, item_ids, now)  # one reference read: a consistent snapshot


def coverage(tiers: np.ndarray) -> dict[str, float]:
    """Share of requests served by each tier and cumulatively in serving order (tier 1, <=2, ...)."""
    tiers = np.asarray(tiers)
    n = max(tiers.size, 1)
    share = {f"tier{code}": float((tiers == code).sum() / n) for code in SERVING_ORDER}
    share["none"] = float((tiers == TIER_NONE).sum() / n)
    for position, code in enumerate(SERVING_ORDER):
        share[f"cumulative_tier{code}"] = float(np.isin(tiers, SERVING_ORDER[: position + 1]).sum() / n)
    return share


def load_tier(path: str, version: int | None, dim: int, keys: list[str]) -> Tier:
    """One tier from a pinned version of its Delta table (deltalake, no Spark), keyed by ``keys``."""
    from deltalake import DeltaTable

    from solaris.storage.embedding_codec import decode

    columns = [*keys, "embedding", "computed_at", "expires_at"]
    table = DeltaTable(path, version=version).to_pyarrow_table(columns=columns)
    return Tier.build(
        [table[key].to_numpy() for key in keys],
        decode(table["embedding"], dim),
        table["computed_at"].to_numpy(),
        table["expires_at"].to_numpy(),
    )


def load_snapshot(manifest_path: str | os.PathLike[str]) -> TierTables:
    """TierTables of a publish manifest: every tier read at the exact Delta version it pins."""
    from solaris.serving.snapshots import read_manifest

    manifest = read_manifest(Path(manifest_path))
    dim = manifest.embedding_dim
    tiers = {}
    for name, keys in TIER_TABLE_KEYS.items():
        spec = manifest.tables.get(name)
        tiers[name] = load_tier(spec.path, spec.version, dim, keys) if spec else Tier.empty(dim, len(keys) == 2)
    return TierTables(
        dim, tiers["pair_embeddings"], tiers["user_embeddings"], tiers["imputed_embeddings"], manifest.snapshot_id,
        tiers["item_embeddings"],
    )


# Tier table -> the columns that key it (a snapshot without a tier's table serves that tier empty).
TIER_TABLE_KEYS: dict[str, list[str]] = {
    "pair_embeddings": ["user_id", "item_id"],
    "user_embeddings": ["user_id"],
    "imputed_embeddings": ["user_id"],
    "item_embeddings": ["item_id"],
}
