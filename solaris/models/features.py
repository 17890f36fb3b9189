"""Point-in-time features for the FM and VM (pure numpy).

The one rule that matters: a request at time ``t`` only sees events with ``ts < t`` (strictly
before). An event's own item and label, and anything at the same second or later, never reach
its features; that is what makes offline metrics honest (no label leakage).

:class:`HistoryIndex` is built once over past events and answers vectorised queries for any
(user, item, time) triples: training examples (each event queried at its own time), evaluation
requests, or speculative candidates at a run's as-of.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

SECONDS_PER_HOUR = 3600.0
NO_HISTORY_RECENCY = float(np.log1p(24 * 365))  # "a year ago" for users never seen


@dataclass(frozen=True)
class Features:
    """Model inputs for ``n`` requests; history arrays are ``[n, N]``, most recent last."""

    user_id: np.ndarray  # int64
    item_id: np.ndarray  # int64
    hist_items: np.ndarray  # int64, 0 where padded
    hist_labels: np.ndarray  # float32 0/1 (past feedback, known at request time)
    hist_feedback: np.ndarray  # int64 level of that feedback (:func:`feedback_levels`), 0 where padded
    hist_age: np.ndarray  # float32 log1p(hours between history event and request)
    hist_mask: np.ndarray  # bool, True where a real history event sits
    item_pop: np.ndarray  # float32 log1p(# events of the item before the request)
    user_recency: np.ndarray  # float32 log1p(hours since the user's previous event)
    user_has_history: np.ndarray  # float32 0/1
    user_like_rate: np.ndarray  # float32 smoothed share of liked events among the user's last N
    user_log_count: np.ndarray  # float32 log1p(# events of the user before the request)
    item_like_rate: np.ndarray  # float32 smoothed share of liked events of the item before the request

    def __len__(self) -> int:
        return int(self.user_id.size)

    def take(self, index: np.ndarray) -> "Features":
        return Features(**{name: getattr(self, name)[index] for name in self.__dataclass_fields__})


FEEDBACK_LEVELS = 7  # 0 / 1: not liked / liked without a rating; 2..6: a rating of 1..5 stars


def feedback_levels(label: ArrayLike, rating: ArrayLike | None = None) -> np.ndarray:
    """What a history event says about the user's reaction to its item, as a level < FEEDBACK_LEVELS.

    An event with a rating: 1 + the rating rounded half to even and clipped to 1..5 stars (2..6);
    without one (a source with labels only, or a null rating): 1 if liked else 0. Why: the liked bit
    is derived from the rating and drops most of it (a 3 and a 1 are both "not liked", a 4 and a 5
    both "liked"); the FM's history tokens carry the level, the VM's counters keep the liked bit.
    The Spark side computes the same rule (:func:`solaris.precompute.spark_features.feedback_level`).
    """
    liked = (np.asarray(label, dtype=np.float64) > 0.5).astype(np.int64)
    if rating is None:
        return liked
    stars = np.asarray(rating, dtype=np.float64)
    rated = np.isfinite(stars)
    level = np.clip(np.rint(np.where(rated, stars, 1.0)), 1, 5).astype(np.int64) + 1
    return np.where(rated, level, liked)


class HistoryIndex:
    """Sorted past events, queried with composite (entity, time) keys and binary search."""

    def __init__(self, user_id: ArrayLike, item_id: ArrayLike, ts_seconds: ArrayLike, label: ArrayLike,
                 feedback: ArrayLike | None = None) -> None:
        """``feedback``: each event's :func:`feedback_levels` (default: from the label alone)."""
        user_id = np.asarray(user_id, dtype=np.int64)
        item_id = np.asarray(item_id, dtype=np.int64)
        ts = np.asarray(ts_seconds, dtype=np.int64)
        label = np.asarray(label, dtype=np.float32)
        feedback = feedback_levels(label) if feedback is None else np.asarray(feedback, dtype=np.int64)
        if not (user_id.size == item_id.size == ts.size == label.size == feedback.size):
            raise ValueError("user_id, item_id, ts, label and feedback must have the same length")
        self.ts_min = int(ts.min()) if ts.size else 0
        self.ts_span = (int(ts.max()) - self.ts_min + 2) if ts.size else 2
        self.users = np.unique(user_id)
        self.items = np.unique(item_id)
        user_key = self._key(self._dense(self.users, user_id), ts)
        order = np.argsort(user_key, kind="stable")
        self.user_keys = user_key[order]
        self.hist_item = item_id[order]
        self.hist_label = label[order]
        self.hist_feedback = feedback[order]
        self.hist_ts = ts[order]
        item_key = self._key(self._dense(self.items, item_id), ts)
        item_order = np.argsort(item_key, kind="stable")
        self.item_keys = item_key[item_order]
        self.item_likes_cum = np.r_[0.0, np.cumsum(label[item_order], dtype=np.float64)]

    @staticmethod
    def _dense(vocab: np.ndarray, ids: np.ndarray) -> np.ndarray:
        position = np.searchsorted(vocab, ids)
        position = np.clip(position, 0, max(vocab.size - 1, 0))
        known = vocab.size > 0
        found = (vocab[position] == ids) if known else np.zeros(ids.size, dtype=bool)
        return np.where(found, position, -1)

    def _key(self, dense: np.ndarray, ts: np.ndarray) -> np.ndarray:
        offset = np.clip(np.asarray(ts, dtype=np.int64) - self.ts_min, -1, self.ts_span - 1) + 1
        return dense.astype(np.int64) * (self.ts_span + 1) + offset

    def query(self, user_id: ArrayLike, item_id: ArrayLike, ts_seconds: ArrayLike, history_length: int) -> Features:
        """Features of requests ``(user, item)`` made at ``ts`` from events strictly before ``ts``."""
        user_id = np.asarray(user_id, dtype=np.int64)
        item_id = np.asarray(item_id, dtype=np.int64)
        ts = np.asarray(ts_seconds, dtype=np.int64)
        n = user_id.size

        dense_user = self._dense(self.users, user_id)
        known_user = dense_user >= 0
        end = np.searchsorted(self.user_keys, self._key(np.maximum(dense_user, 0), ts), side="left")
        start = np.searchsorted(
            self.user_keys, self._key(np.maximum(dense_user, 0), np.full(n, self.ts_min - 10)), side="left"
        )
        end = np.where(known_user, end, start)
        steps = np.arange(history_length, 0, -1)
        index = end[:, None] - steps[None, :]  # most recent last
        mask = index >= start[:, None]
        safe = np.where(mask, index, 0)
        has_events = self.hist_item.size > 0
        hist_items = np.where(mask, self.hist_item[safe], 0) if has_events else np.zeros((n, history_length), np.int64)
        hist_labels = (
            np.where(mask, self.hist_label[safe], 0.0).astype(np.float32)
            if has_events
            else np.zeros((n, history_length), np.float32)
        )
        hist_feedback = (np.where(mask, self.hist_feedback[safe], 0) if has_events
                         else np.zeros((n, history_length), np.int64))
        hist_ts = self.hist_ts[safe] if has_events else np.zeros((n, history_length), np.int64)
        hours = np.maximum(ts[:, None] - hist_ts, 0) / SECONDS_PER_HOUR
        hist_age = np.where(mask, np.log1p(hours), 0.0).astype(np.float32)

        has_history = end > start
        last = np.where(has_history, end - 1, 0)
        recency_hours = (ts - (self.hist_ts[last] if has_events else ts)) / SECONDS_PER_HOUR
        user_recency = np.where(has_history, np.log1p(np.maximum(recency_hours, 0)), NO_HISTORY_RECENCY)

        dense_item = self._dense(self.items, item_id)
        before = np.searchsorted(self.item_keys, self._key(np.maximum(dense_item, 0), ts), side="left")
        first = np.searchsorted(
            self.item_keys, self._key(np.maximum(dense_item, 0), np.full(n, self.ts_min - 10)), side="left"
        )
        item_count = np.where(dense_item >= 0, before - first, 0)
        item_likes = np.where(dense_item >= 0, self.item_likes_cum[before] - self.item_likes_cum[first], 0.0)

        return Features(
            user_id=user_id,
            item_id=item_id,
            hist_items=hist_items.astype(np.int64),
            hist_labels=hist_labels,
            hist_feedback=hist_feedback.astype(np.int64),
            hist_age=hist_age,
            hist_mask=mask,
            item_pop=np.log1p(item_count).astype(np.float32),
            user_recency=user_recency.astype(np.float32),
            user_has_history=has_history.astype(np.float32),
            **counter_features(hist_labels, mask, end - start, item_likes, item_count),
        )


def _smoothed_rate(likes: ArrayLike, count: ArrayLike) -> np.ndarray:
    """Beta(1, 1)-smoothed like rate: 0.5 with no data, the observed rate with plenty."""
    return ((np.asarray(likes, dtype=np.float64) + 1.0) / (np.asarray(count, dtype=np.float64) + 2.0)).astype(
        np.float32
    )


def counter_features(
    hist_labels: np.ndarray, hist_mask: np.ndarray, user_count: ArrayLike, item_likes: ArrayLike, item_count: ArrayLike
) -> dict[str, np.ndarray]:
    """The VM's cheap real-time counters (what an online feature store keeps per user and item)."""
    return {
        "user_like_rate": _smoothed_rate((hist_labels * hist_mask).sum(axis=1), hist_mask.sum(axis=1)),
        "user_log_count": np.log1p(np.asarray(user_count, dtype=np.float64)).astype(np.float32),
        "item_like_rate": _smoothed_rate(item_likes, item_count),
    }


def training_features(
    user_id: ArrayLike, item_id: ArrayLike, ts_seconds: ArrayLike, label: ArrayLike, *, history_length: int,
    feedback: ArrayLike | None = None,
) -> Features:
    """Each event queried at its own time against all events: history strictly before it."""
    index = HistoryIndex(user_id, item_id, ts_seconds, label, feedback)
    return index.query(user_id, item_id, ts_seconds, history_length)


def time_split(ts_seconds: np.ndarray, validation_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Indices of train / validation examples: validation = the latest share of time, not random rows."""
    ts = np.asarray(ts_seconds)
    cut = np.quantile(ts, 1.0 - validation_fraction)
    train = np.flatnonzero(ts < cut)
    valid = np.flatnonzero(ts >= cut)
    if train.size == 0 or valid.size == 0:
        raise ValueError("time split left an empty train or validation slice; need events spread over time")
    return train, valid


def pad_histories(
    offsets: np.ndarray, values: np.ndarray, history_length: int, fill: float = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Ragged lists (Arrow offsets + flat values, oldest first) -> right-aligned ``[n, N]`` + mask.

    Only the last ``history_length`` values of each list are kept, most recent in the last column,
    matching :meth:`HistoryIndex.query`.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    n = offsets.size - 1
    lengths = np.minimum(np.diff(offsets), history_length)
    steps = np.arange(history_length, 0, -1)
    index = offsets[1:, None] - steps[None, :]
    mask = steps[None, :] <= lengths[:, None]
    out = np.full((n, history_length), fill, dtype=np.asarray(values).dtype if len(values) else np.float64)
    if len(values):
        out[mask] = np.asarray(values)[index[mask]]
    return out, mask


def features_from_histories(
    user_id: np.ndarray,
    item_id: np.ndarray,
    *,
    hist_offsets: np.ndarray,
    hist_items: ArrayLike,
    hist_labels: ArrayLike,
    hist_feedback: ArrayLike,
    hist_ts: ArrayLike,
    item_count: ArrayLike,
    item_likes: ArrayLike,
    user_count: ArrayLike,
    request_ts: int,
    history_length: int,
) -> Features:
    """Features for requests at ``request_ts`` from per-row history lists built in Spark.

    The Spark jobs gather each user's last N events with ``ts <= as_of`` as lists (oldest first)
    and each item's event count; this turns them into the same :class:`Features` the models were
    trained on. Requests are taken to happen at ``request_ts`` (the run's as-of). ``item_likes``
    and ``user_count`` are the item's liked events and the user's events up to then.
    """
    items, mask = pad_histories(hist_offsets, np.asarray(hist_items, dtype=np.int64), history_length)
    labels, _ = pad_histories(hist_offsets, np.asarray(hist_labels, dtype=np.float32), history_length)
    feedback, _ = pad_histories(hist_offsets, np.asarray(hist_feedback, dtype=np.int64), history_length)
    times, _ = pad_histories(hist_offsets, np.asarray(hist_ts, dtype=np.int64), history_length)
    hours = np.maximum(request_ts - times, 0) / SECONDS_PER_HOUR
    has_history = mask[:, -1] if history_length else np.zeros(len(user_id), dtype=bool)
    recency = np.where(
        has_history, np.log1p(np.maximum(request_ts - times[:, -1], 0) / SECONDS_PER_HOUR), NO_HISTORY_RECENCY
    )
    return Features(
        user_id=np.asarray(user_id, dtype=np.int64),
        item_id=np.asarray(item_id, dtype=np.int64),
        hist_items=np.where(mask, items, 0).astype(np.int64),
        hist_labels=np.where(mask, labels, 0).astype(np.float32),
        hist_feedback=np.where(mask, feedback, 0).astype(np.int64),
        hist_age=np.where(mask, np.log1p(hours), 0).astype(np.float32),
        hist_mask=mask,
        item_pop=np.log1p(np.asarray(item_count, dtype=np.float64)).astype(np.float32),
        user_recency=recency.astype(np.float32),
        user_has_history=has_history.astype(np.float32),
        **counter_features(np.where(mask, labels, 0).astype(np.float32), mask, user_count, item_likes, item_count),
    )
