"""A tiny FM spec and a random training batch for it, shared by the model and checkpoint unit tests.

A helper module: test modules import from here, never from one another.
"""

from __future__ import annotations

import numpy as np

from solaris.models.features import training_features
from solaris.models.fm import FMSpec

SMALL_FM = FMSpec(embedding_dim=16, history_length=6, id_buckets=512, d_model=16, heads=2, tower=(32,), dropout=0.0)


def small_features(n=64, seed=0):
    """Features and labels of ``n`` random events (20 users, 30 items) for ``SMALL_FM``."""
    rng = np.random.default_rng(seed)
    users, items = rng.integers(1, 20, n), rng.integers(1, 30, n)
    ts = np.sort(rng.integers(0, 5000, n))
    labels = rng.integers(0, 2, n).astype(np.float32)
    return training_features(users, items, ts, labels, history_length=SMALL_FM.history_length), labels
