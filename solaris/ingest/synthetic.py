"""Seeded synthetic interaction generator (pure numpy, no Spark).

Why: scale tests must not depend on the size of the real datasets. The generator mimics what makes
recommendation data hard: latent user/item tastes, a heavy-tailed (Zipf) item popularity, heavy-tailed
user activity, temporal sessions, and taste drift over time.

It is split into independent *chunks* (disjoint user ranges) so Spark can generate 50M events in
parallel; every chunk is a pure function of ``(config, seed, chunk_index)``, hence the same seed gives
the same table whatever the partitioning.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from solaris.config import SyntheticConfig

_CANDIDATES_PER_EVENT = 32
_SUB_BATCH = 100_000
_SESSION_MEAN_SECONDS = 20 * 60
_EVENTS_PER_SESSION = 8


@dataclass(frozen=True)
class ItemWorld:
    """Item side shared by every chunk (regenerated identically from the seed in each)."""

    vectors: np.ndarray  # [n_items, latent_dim] float32
    popularity_cdf: np.ndarray  # [n_items] float64, increasing to 1


def item_world(config: SyntheticConfig, seed: int) -> ItemWorld:
    rng = np.random.default_rng([seed, 1])
    vectors = rng.standard_normal((config.n_items, config.latent_dim)).astype(np.float32)
    vectors /= np.sqrt(config.latent_dim)
    ranks = rng.permutation(config.n_items) + 1  # popularity rank independent of item id
    weights = ranks.astype(np.float64) ** (-config.popularity_exponent)
    cdf = np.cumsum(weights / weights.sum())
    cdf[-1] = 1.0
    return ItemWorld(vectors, cdf)


def chunk_user_range(config: SyntheticConfig, chunk: int) -> tuple[int, int]:
    """Users ``[lo, hi)`` owned by a chunk (ids are 1-based like MovieLens)."""
    if not 0 <= chunk < config.chunks:
        raise ValueError(f"chunk {chunk} outside 0..{config.chunks - 1}")
    lo = config.n_users * chunk // config.chunks
    hi = config.n_users * (chunk + 1) // config.chunks
    return lo + 1, hi + 1


def generate_chunk(config: SyntheticConfig, seed: int, chunk: int, items: ItemWorld | None = None) -> pd.DataFrame:
    """Events of one chunk: columns ``user_id``, ``item_id`` (int64), ``timestamp`` (epoch s), ``rating``."""
    items = items or item_world(config, seed)
    lo, hi = chunk_user_range(config, chunk)
    n_users = hi - lo
    columns = {"user_id": np.int64, "item_id": np.int64, "timestamp": np.int64, "rating": np.float64}
    if n_users == 0:
        return pd.DataFrame({name: np.array([], dtype=kind) for name, kind in columns.items()})
    rng = np.random.default_rng([seed, 2, chunk])

    # Heavy-tailed activity: lognormal weights scaled to this chunk's share of n_events.
    target = config.n_events * n_users / config.n_users
    activity = rng.lognormal(mean=0.0, sigma=1.0, size=n_users)
    counts = np.maximum(1, np.round(activity * target / activity.sum())).astype(np.int64)
    user_of_event = np.repeat(np.arange(n_users), counts)
    n_events = user_of_event.size

    # Tastes and their drift direction.
    taste = rng.standard_normal((n_users, config.latent_dim)).astype(np.float32)
    drift_dir = rng.standard_normal((n_users, config.latent_dim)).astype(np.float32)

    # Sessions: each user has a few session starts; events fall inside one session.
    span = config.days * 86400.0
    sessions = 1 + counts // _EVENTS_PER_SESSION
    session_offset = np.concatenate([[0], np.cumsum(sessions)[:-1]])
    session_start = rng.uniform(0.0, span, size=int(sessions.sum()))
    pick = (rng.random(n_events) * sessions[user_of_event]).astype(np.int64)
    within = rng.exponential(_SESSION_MEAN_SECONDS, size=n_events)
    seconds = np.minimum(session_start[session_offset[user_of_event] + pick] + within, span - 1)
    phase = (seconds / span).astype(np.float32)

    chosen = np.empty(n_events, dtype=np.int64)
    affinity = np.empty(n_events, dtype=np.float32)
    for start in range(0, n_events, _SUB_BATCH):
        stop = min(start + _SUB_BATCH, n_events)
        users = user_of_event[start:stop]
        now_taste = taste[users] + config.drift * phase[start:stop, None] * drift_dir[users]
        candidates = np.searchsorted(items.popularity_cdf, rng.random((stop - start, _CANDIDATES_PER_EVENT)))
        scores = np.einsum("bkd,bd->bk", items.vectors[candidates], now_taste)
        gumbel = -np.log(-np.log(rng.random(scores.shape) + 1e-12) + 1e-12)
        best = np.argmax(scores + gumbel, axis=1)
        chosen[start:stop] = candidates[np.arange(stop - start), best]
        affinity[start:stop] = scores[np.arange(stop - start), best]

    noise = rng.normal(0.0, 0.7, size=n_events)
    rating = np.clip(np.round(3.2 + 1.3 * affinity + noise), 1, 5)
    epoch = int(config.start.timestamp()) + seconds.astype(np.int64)
    frame = pd.DataFrame(
        {
            "user_id": (user_of_event + lo).astype(np.int64),
            "item_id": (chosen + 1).astype(np.int64),
            "timestamp": epoch,
            "rating": rating.astype(np.float64),
        }
    )
    # A user picking the same item twice in the same second is one event, not two.
    frame = frame.drop_duplicates(["user_id", "item_id", "timestamp"])
    return frame.sort_values(["user_id", "timestamp", "item_id"], kind="stable").reset_index(drop=True)
