"""Serving-side lookup of precomputed embeddings, by tier (no Spark, no Airflow import).

``resolve(user_ids, item_ids, now)`` returns, for every request, the best *servable* value in tier
order pair (1) -> neighbour pair (2) -> user aggregate (3) -> KNN-imputed user (4) -> item
aggregate (5) -> item imputed from the FM's item space (6) -> none (0, zero vector), with its tier
and age (codes in :mod:`solaris.tiers`).
Tier 2 is computed here, at read time, from two pinned tables: for a missing pair (u, i), the
similarity-weighted mean of the servable pair embeddings (v, i) of u's KNN neighbours v. Doing it
at read time serves it for *any* requested item, where precomputing it would mean writing every
(user, item of a neighbour) pair every hour, almost all never requested. A value is servable iff
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
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from solaris.storage.table import Table
from solaris.storage.validity import servable_mask
from solaris.tiers import (
    SERVING_ORDER,
    TIER_IMPUTED,
    TIER_IMPUTED_ITEM,
    TIER_ITEM,
    TIER_NEIGHBOR_PAIR,
    TIER_NONE,
    TIER_PAIR,
    TIER_USER,
)

__all__ = ["TIER_IMPUTED", "TIER_IMPUTED_ITEM", "TIER_ITEM", "TIER_NEIGHBOR_PAIR", "TIER_NONE", "TIER_PAIR",
           "TIER_USER", "IdRows", "KeyIndex", "Neighbors", "Resolver", "Tier", "TierTables"]


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
_SPREAD = np.uint64(0xBF58476D1CE4E5B9)


def _ids(values: ArrayLike) -> np.ndarray:
    """int64 ids seen as uint64 (no copy): uint64 array arithmetic wraps silently."""
    return np.asarray(values, dtype=np.int64).view(np.uint64)


def _user_key(users: ArrayLike) -> np.ndarray:
    """The lookup key of a single id (user or item).

    It ends in a multiplication by an odd constant, which spreads the ids over the top bits: the
    radix directory of :class:`KeyIndex` buckets keys by their top bits, so consecutive ids must not
    all land in one bucket. Both steps (xor with a right shift, multiplication by an odd number
    modulo 2**64) are invertible, so the key is a bijection of the id: equal keys mean equal ids and
    a found key needs no re-check of the id."""
    u = _ids(users)
    return (u ^ (u >> np.uint64(29))) * _SPREAD


def _fits_32_bits(users: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Whether both ids of each pair are in [0, 2**32) (a negative int64 has its top bit set)."""
    return ((_ids(users) | _ids(items)) >> np.uint64(32)) == 0


def _pair_key(users: ArrayLike, items: ArrayLike, exact: bool) -> np.ndarray:
    """The lookup key of a (user, item) pair.

    ``exact`` (both ids below 2**32, the usual dictionary-encoded ids): ``(user << 32 | item)``
    times an odd constant, a bijection of the pair - a found key is the pair, no id re-check, and
    only the query side must be checked to fit in 32 bits. Otherwise a mix of both ids, where two
    pairs can share a key: the caller re-checks both ids of a hit."""
    u, i = _ids(users), _ids(items)
    if exact:
        return ((u << np.uint64(32)) | i) * _SPREAD
    mixed = (u * _MIX) ^ (i + (u << np.uint64(17)) + (u >> np.uint64(13)))
    return mixed * _SPREAD


_MAX_BUCKET_SCAN = 64


@dataclass(frozen=True)
class KeyIndex:
    """Sorted uint64 keys with a radix directory: bucket ``b`` (the top bits of a key) holds
    ``keys[start[b]:start[b + 1]]``, about one key per bucket. A lookup reads one or two entries where
    a binary search over millions of keys takes ~20 dependent cache misses - the difference that makes
    the neighbour-pair tier (k lookups per open request) affordable."""

    keys: np.ndarray  # uint64, sorted
    start: np.ndarray  # int64 [2**bits + 1]
    shift: int  # a key's bucket is key >> shift
    width: int  # the largest bucket
    # ``keys`` followed by ``width`` copies of its last key, so a scan of ``width`` slots from any
    # bucket start stays in bounds without a per-query clamp (a copy sits after the real key, so the
    # first match is always the real one)
    padded: np.ndarray = field(repr=False, compare=False)
    probe: np.ndarray = field(repr=False, compare=False)  # arange(width)
    # one bit per fine bucket (8 per key, the key's next top bits): whether any key lives there. It
    # fits in a core's cache where the directory and the keys do not, so a query that misses (most
    # of the neighbour-pair tier's k lookups per request) is answered without two random reads of
    # main memory; about one miss in nine still reaches the directory
    occupied: np.ndarray = field(repr=False, compare=False)
    fine_shift: int = 64

    @classmethod
    def build(cls, sorted_keys: np.ndarray) -> "KeyIndex":
        keys = np.asarray(sorted_keys, dtype=np.uint64)
        bits = max(1, int(np.ceil(np.log2(max(keys.size, 2)))))  # about one key per bucket
        shift = 64 - bits
        buckets = (keys >> np.uint64(shift)).astype(np.int64)
        start = np.searchsorted(buckets, np.arange((1 << bits) + 1), side="left").astype(np.int64)
        width = int(np.diff(start).max(initial=0))
        padded = np.concatenate([keys, np.repeat(keys[-1:], width)]) if keys.size else keys
        fine_shift = shift - 3
        fine = np.zeros(max(1 << (64 - fine_shift), 64), dtype=bool)
        fine[(keys >> np.uint64(fine_shift)).astype(np.int64)] = True
        # bit (b & 63) of word (b >> 6) is fine bucket b
        occupied = np.packbits(fine, bitorder="little").view("<u8")
        return cls(keys, start, shift, width, padded, np.arange(width, dtype=np.int64), occupied, fine_shift)

    def __len__(self) -> int:
        return int(self.keys.size)

    def find(self, query: np.ndarray) -> np.ndarray:
        """Position of each query key, -1 when absent."""
        if not self.keys.size:
            return np.full(query.size, -1, dtype=np.int64)
        if self.width > _MAX_BUCKET_SCAN:  # keys that defeat the mix (not ids): plain binary search
            position = np.minimum(np.searchsorted(self.keys, query), self.keys.size - 1)
            return np.where(self.keys[position] == query, position, -1)
        fine = query >> np.uint64(self.fine_shift)
        word = self.occupied[(fine >> np.uint64(6)).view(np.int64)]
        maybe = np.flatnonzero((word >> (fine & np.uint64(63))) & np.uint64(1))
        candidates = query[maybe]
        first = self.start[candidates >> np.uint64(self.shift)]
        # compare each candidate with the largest bucket's worth of keys from its bucket's start, in
        # one gather (no per-step loop: at 100 pairs a request, each numpy call costs about as much as
        # the random reads it makes, so fewer calls and fewer reads both count). A key
        # read past the bucket's end belongs to a later bucket, whose top bits differ from the
        # query's, so it can never match: no per-query bound is needed.
        match = self.padded[first[:, None] + self.probe] == candidates[:, None]
        position = np.full(query.size, -1, dtype=np.int64)
        position[maybe] = np.where(match.any(axis=1), first + match.argmax(axis=1), -1)
        return position


# ids up to this many times the number of rows (plus a floor) get a direct directory
_DENSE_SLACK, _DENSE_FLOOR = 4, 1 << 16


@dataclass(frozen=True)
class IdRows:
    """One lookup for every table keyed by the same id: for each id, its row in each table (-1 where
    absent). Built once per snapshot, it turns one lookup per tier into one per request side (the
    user tiers 3, 4 and the neighbour graph; the item tiers 5 and 6): at 100 pairs per request, the
    cost is numpy's per-call overhead and the random memory reads in about equal parts, and one
    directory saves both.

    Ids are usually dictionary-encoded (small non-negative integers), so when the largest id is at
    most a few times the number of ids the directory is a plain array indexed by id - one gather per
    lookup; other ids (hashes, 60-bit keys) go through the radix :class:`KeyIndex`."""

    rows: np.ndarray  # int64 [n, m]: dense -> indexed by id, last row all -1; else in index order
    index: KeyIndex | None  # None = dense directory

    @classmethod
    def build(cls, ids: np.ndarray, rows: np.ndarray) -> "IdRows":
        """From each distinct id and its ``rows`` [n, m]."""
        ids = np.asarray(ids, dtype=np.int64)
        rows = np.asarray(rows, dtype=np.int64)
        if ids.size == 0 or (ids.min() >= 0 and ids.max() < _DENSE_SLACK * ids.size + _DENSE_FLOOR):
            size = int(ids.max()) + 1 if ids.size else 0
            dense = np.full((size + 1, rows.shape[1]), -1, dtype=np.int64)
            dense[ids] = rows
            return cls(dense, None)
        keys = _user_key(ids)
        order = np.argsort(keys, kind="stable")
        return cls(rows[order], KeyIndex.build(keys[order]))

    def find(self, ids: np.ndarray) -> np.ndarray:
        """[n, m] rows of each id, -1 where absent."""
        if self.index is None:
            # a negative id seen as uint64 is huge, so one minimum sends it, like any id past the
            # largest, to the last row (all -1)
            return self.rows[np.minimum(_ids(ids), np.uint64(self.rows.shape[0] - 1))]
        position = self.index.find(_user_key(ids))  # the key is a bijection of the id: no re-check
        return np.where((position >= 0)[:, None], self.rows[np.maximum(position, 0)], -1)


@dataclass(frozen=True)
class Tier:
    """One tier's rows, sorted by a uint64 key and found through a radix directory (pairs keep both ids to
    confirm a hit, so a hash collision can only cost a miss, never a wrong value). A tier keyed by
    one id holds it in ``users`` whether that id is a user (tiers 3, 4) or an item (tier 5)."""

    index: KeyIndex  # the rows' keys, sorted
    users: np.ndarray  # int64, in key order (the item id for the item tier)
    items: np.ndarray | None  # int64 in key order (pair tier) or None
    embeddings: np.ndarray  # float32 [n, D], in key order
    computed_at: np.ndarray  # epoch seconds
    expires_at: np.ndarray  # epoch seconds
    exact: bool = True  # keys identify rows (single ids; pairs with 32-bit ids): hits need no id re-check

    @classmethod
    def build(
        cls, keys: list[np.ndarray], embeddings: ArrayLike, computed_at: datetime | ArrayLike,
        expires_at: datetime | ArrayLike,
    ) -> "Tier":
        users = np.asarray(keys[0], dtype=np.int64)
        items = np.asarray(keys[1], dtype=np.int64) if len(keys) == 2 else None
        exact = items is None or bool(_fits_32_bits(users, items).all())
        lookup = _user_key(users) if items is None else _pair_key(users, items, exact)
        order = np.argsort(lookup, kind="stable")
        lookup = lookup[order]
        if lookup.size and (lookup[1:] == lookup[:-1]).any():
            raise ValueError("tier keys must be unique (latest row per key)")
        return cls(KeyIndex.build(lookup), users[order], None if items is None else items[order],
                   np.asarray(embeddings, dtype=np.float32)[order], _seconds(computed_at)[order],
                   _seconds(expires_at)[order], exact)

    @classmethod
    def empty(cls, dim: int, keyed_by_pair: bool) -> "Tier":
        keys = [np.empty(0, np.int64)] * (2 if keyed_by_pair else 1)
        return cls.build(keys, np.zeros((0, dim), np.float32), np.empty(0), np.empty(0))

    def __len__(self) -> int:
        return len(self.index)

    def find(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Row of each query in this tier, -1 when absent (without exact keys, ids re-checked: a key
        collision costs a miss, never a wrong value)."""
        if not len(self.index):
            return np.full(users.size, -1, dtype=np.int64)
        if self.items is None:
            return self.index.find(_user_key(users))
        if self.exact:
            return np.where(_fits_32_bits(users, items), self.index.find(_pair_key(users, items, True)), -1)
        position = self.index.find(_pair_key(users, items, False))
        safe = np.maximum(position, 0)
        found = (position >= 0) & (self.users[safe] == users) & (self.items[safe] == items)
        return np.where(found, position, -1)


@dataclass(frozen=True)
class Neighbors:
    """Each user's KNN neighbours (``user_neighbors`` at a pinned version), for the neighbour-pair tier.

    ``neighbor_ids`` is padded with -1 to ``k`` columns; a neighbour counts only if its similarity
    is at least ``min_similarity``, and a pair is imputed only from at least ``min_neighbors`` of them.
    """

    user_ids: np.ndarray  # int64 [n], in index order
    index: KeyIndex  # the users' keys
    neighbor_ids: np.ndarray  # int64 [n, k], -1 = no neighbour
    similarities: np.ndarray  # float32 [n, k]
    min_neighbors: int = 1
    min_similarity: float = 0.0

    @classmethod
    def build(cls, user_ids: ArrayLike, offsets: ArrayLike, flat_neighbor_ids: ArrayLike,
              flat_similarities: ArrayLike, *, min_neighbors: int = 1, min_similarity: float = 0.0) -> "Neighbors":
        """From list columns in Arrow's layout: user ``r``'s neighbours are ``flat[offsets[r]:offsets[r + 1]]``."""
        users = np.asarray(user_ids, dtype=np.int64)
        starts = np.asarray(offsets, dtype=np.int64)
        lengths = np.diff(starts)
        if lengths.size != users.size:
            raise ValueError("offsets must have one entry more than user_ids")
        k = int(lengths.max(initial=0))
        rows = np.repeat(np.arange(users.size), lengths)
        columns = np.arange(int(lengths.sum())) - np.repeat(starts[:-1] - starts[0], lengths)
        flat = slice(int(starts[0]) if starts.size else 0, int(starts[-1]) if starts.size else 0)
        ids = np.full((users.size, k), -1, dtype=np.int64)
        sims = np.full((users.size, k), -np.inf, dtype=np.float32)
        ids[rows, columns] = np.asarray(flat_neighbor_ids, dtype=np.int64)[flat]
        sims[rows, columns] = np.asarray(flat_similarities, dtype=np.float32)[flat]
        keys = _user_key(users)
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        if keys.size and (keys[1:] == keys[:-1]).any():
            raise ValueError("one neighbour row per user")
        return cls(users[order], KeyIndex.build(keys), ids[order], sims[order], min_neighbors, min_similarity)

    def find(self, users: np.ndarray) -> np.ndarray:
        """Row of each user, -1 when the user has no neighbour row."""
        if not len(self.index):
            return np.full(users.size, -1, dtype=np.int64)
        return self.index.find(_user_key(users))  # the key is a bijection of the id: no re-check


def _rows_by_id(tables: list[Tier | None], graph: Neighbors | None = None, graph_column: bool = False) -> IdRows:
    """The :class:`IdRows` of the id-keyed ``tables`` (and, with ``graph_column``, the neighbour
    graph's row as a last column, -1 everywhere without a graph)."""
    present = [table for table in tables if table is not None]
    graph_users = [graph.user_ids] if graph is not None else []
    ids = np.unique(np.concatenate([*(table.users for table in present), *graph_users, np.empty(0, np.int64)]))
    empty = np.empty(0, np.int64)
    columns = [table.find(ids, empty) if table is not None else np.full(ids.size, -1, np.int64) for table in tables]
    if graph_column:
        columns.append(graph.find(ids) if graph is not None else np.full(ids.size, -1, np.int64))
    return IdRows.build(ids, np.stack(columns, axis=1))


_AGGREGATE_ROW, _IMPUTED_ROW, _GRAPH_ROW = 0, 1, 2  # columns of TierTables.user_rows
_ITEM_ROW, _IMPUTED_ITEM_ROW = 0, 1  # columns of TierTables.item_rows


@dataclass(frozen=True)
class TierTables:
    """An immutable serving snapshot: the tiers of one published manifest (``item_side`` and
    ``imputed_items`` keyed by item; ``neighbors`` turns the pair tier into the neighbour-pair tier)."""

    dim: int
    pairs: Tier
    users: Tier
    imputed: Tier
    snapshot_id: str = ""
    item_side: Tier | None = None
    neighbors: Neighbors | None = None
    imputed_items: Tier | None = None
    user_rows: IdRows = field(init=False, repr=False, compare=False)
    item_rows: IdRows = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        user_rows = _rows_by_id([self.users, self.imputed], self.neighbors, graph_column=True)
        object.__setattr__(self, "user_rows", user_rows)
        object.__setattr__(self, "item_rows", _rows_by_id([self.item_side, self.imputed_items]))

    def _neighbor_pairs(
        self, graph_rows: np.ndarray, items: np.ndarray, now_s: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Tier 2 for requests whose user has graph row ``graph_rows`` (>= 0) -> (found mask,
        embeddings [m, D], age of the newest row used)."""
        n = graph_rows.size
        found = np.zeros(n, dtype=bool)
        out = np.zeros((n, self.dim), dtype=np.float32)
        age = np.full(n, np.nan)
        graph = self.neighbors
        if graph is None or not n or len(self.pairs) == 0 or graph.neighbor_ids.shape[1] == 0:
            return found, out, age
        neighbours = graph.neighbor_ids[graph_rows]  # [m, k]
        weights = graph.similarities[graph_rows]
        k = neighbours.shape[1]
        position = self.pairs.find(neighbours.ravel(), np.repeat(items, k)).reshape(-1, k)
        safe = np.maximum(position, 0)
        usable = ((position >= 0) & (neighbours >= 0) & (weights >= graph.min_similarity) & (weights > 0)
                  & servable_mask(now_s[:, None], self.pairs.computed_at[safe], self.pairs.expires_at[safe]))
        usable_count = usable.sum(axis=1)
        enough = usable_count >= graph.min_neighbors
        if not enough.any():
            return found, out, age
        # gather only the usable neighbours' rows (usually one or two of k): the embeddings are the
        # one large random read of a request, so reading k rows per request would cost k times more
        request, column = np.nonzero(usable & enough[:, None])  # row-major: grouped by request
        rows = safe[request, column]
        w = weights[request, column]
        counts = usable_count[enough]
        starts = np.cumsum(counts) - counts
        sums = np.add.reduceat(self.pairs.embeddings[rows] * w[:, None], starts, axis=0)
        mean = sums / np.add.reduceat(w, starts)[:, None]
        newest = np.maximum.reduceat(self.pairs.computed_at[rows], starts)
        found[enough] = True
        out[enough] = mean
        age[enough] = now_s[enough] - newest
        return found, out, age

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
        when = _seconds(now)
        now_s = np.full(n, when, dtype=np.float64) if when.ndim == 0 else np.broadcast_to(when, (n,)).astype(np.float64)
        out = np.zeros((n, self.dim), dtype=np.float32)
        tier = np.zeros(n, dtype=np.int8)
        age = np.full(n, np.nan, dtype=np.float64)
        user_rows = self.user_rows.find(users)
        item_rows: np.ndarray | None = None  # looked up at the first item tier, for the requests still open
        open_ = np.arange(n)  # requests not served yet, shrinking tier by tier
        for code in SERVING_ORDER:
            if not open_.size:
                break
            if code == TIER_NEIGHBOR_PAIR:
                graph_rows = user_rows[open_, _GRAPH_ROW]
                asked = open_[graph_rows >= 0]
                found, vectors, ages = self._neighbor_pairs(graph_rows[graph_rows >= 0], items[asked], now_s[asked])
                target = asked[found]
                out[target], tier[target], age[target] = vectors[found], code, ages[found]
                open_ = open_[tier[open_] == TIER_NONE]
                continue
            table = {TIER_PAIR: self.pairs, TIER_USER: self.users, TIER_IMPUTED: self.imputed,
                     TIER_ITEM: self.item_side, TIER_IMPUTED_ITEM: self.imputed_items}[code]
            if table is None or len(table) == 0:
                continue
            if code == TIER_USER or code == TIER_IMPUTED:
                position = user_rows[open_, _AGGREGATE_ROW if code == TIER_USER else _IMPUTED_ROW]
            elif code == TIER_ITEM or code == TIER_IMPUTED_ITEM:
                if item_rows is None:  # one lookup serves both item tiers
                    item_rows = np.full((n, 2), -1, dtype=np.int64)
                    item_rows[open_] = self.item_rows.find(items[open_])
                position = item_rows[open_, _ITEM_ROW if code == TIER_ITEM else _IMPUTED_ITEM_ROW]
            else:
                position = table.find(users[open_], items[open_])
            safe = np.maximum(position, 0)
            # only values servable at the request (computed at or before it, not yet expired)
            serve = (position >= 0) & servable_mask(now_s[open_], table.computed_at[safe], table.expires_at[safe])
            target, rows = open_[serve], position[serve]
            out[target] = table.embeddings[rows]
            tier[target] = code
            age[target] = now_s[target] - table.computed_at[rows]
            open_ = open_[~serve]
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
    from solaris.storage.embedding_codec import decode

    columns = [*keys, "embedding", "computed_at", "expires_at"]
    table = _pinned_rows(path, version, columns)
    return Tier.build(
        [table[key].to_numpy() for key in keys],
        decode(table["embedding"], dim),
        table["computed_at"].to_numpy(),
        table["expires_at"].to_numpy(),
    )


def _pinned_rows(path: str, version: int | None, columns: list[str]) -> Any:
    """``columns`` of the table at ``path`` at exactly ``version``, on the driver (no Spark here)."""
    rows = Table.at(path).rows(columns, version=version)
    if rows is None:
        raise ValueError(f"{path}: deltalake could not read version {version}")
    return rows


def load_snapshot(manifest_path: str | os.PathLike[str]) -> TierTables:
    """TierTables of a publish manifest: every tier read at the exact Delta version it pins."""
    from solaris.serving.snapshots import read_manifest

    manifest = read_manifest(Path(manifest_path))
    dim = manifest.embedding_dim
    tiers = {}
    for name, keys in TIER_TABLE_KEYS.items():
        spec = manifest.tables.get(name)
        tiers[name] = load_tier(spec.path, spec.version, dim, keys) if spec else Tier.empty(dim, len(keys) == 2)
    graph = manifest.tables.get("user_neighbors")
    neighbors = None
    if graph is not None and manifest.neighbor_pairs is not None:
        neighbors = load_neighbors(graph.path, graph.version, manifest.neighbor_pairs.min_neighbors,
                                   manifest.neighbor_pairs.min_similarity)
    return TierTables(
        dim, tiers["pair_embeddings"], tiers["user_embeddings"], tiers["imputed_embeddings"], manifest.snapshot_id,
        tiers["item_embeddings"], neighbors, tiers["imputed_item_embeddings"],
    )


def load_neighbors(path: str, version: int | None, min_neighbors: int, min_similarity: float) -> Neighbors:
    """``user_neighbors`` at a pinned version (deltalake, no Spark) as a :class:`Neighbors` lookup."""
    table = _pinned_rows(path, version, ["user_id", "neighbor_ids", "similarities"])
    ids = table["neighbor_ids"].combine_chunks()
    sims = table["similarities"].combine_chunks()
    if not (ids.offsets.to_numpy() == sims.offsets.to_numpy()).all():
        raise ValueError(f"{path}: neighbor_ids and similarities differ in length for some user")
    return Neighbors.build(table["user_id"].to_numpy(), ids.offsets.to_numpy(), ids.values.to_numpy(),
                           sims.values.to_numpy(), min_neighbors=min_neighbors, min_similarity=min_similarity)


# Tier table -> the columns that key it (a snapshot without a tier's table serves that tier empty).
TIER_TABLE_KEYS: dict[str, list[str]] = {
    "pair_embeddings": ["user_id", "item_id"],
    "user_embeddings": ["user_id"],
    "imputed_embeddings": ["user_id"],
    "item_embeddings": ["item_id"],
    "imputed_item_embeddings": ["item_id"],
}
