import numpy as np
import pandas as pd

from solaris.config import SyntheticConfig
from solaris.ingest.synthetic import chunk_user_range, generate_chunk

CONFIG = SyntheticConfig(n_events=20_000, n_users=400, n_items=300, chunks=4, days=30)


def _all(seed: int) -> pd.DataFrame:
    return pd.concat([generate_chunk(CONFIG, seed, c) for c in range(CONFIG.chunks)], ignore_index=True)


def test_same_seed_same_events_other_seed_differs():
    a, b, c = _all(7), _all(7), _all(8)
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(c)


def test_size_ids_and_time_span():
    frame = _all(1)
    assert 0.9 * CONFIG.n_events <= len(frame) <= 1.2 * CONFIG.n_events
    assert frame.user_id.between(1, CONFIG.n_users).all() and frame.item_id.between(1, CONFIG.n_items).all()
    start = int(CONFIG.start.timestamp())
    assert frame.timestamp.between(start, start + 30 * 86400).all()
    assert set(frame.rating.unique()) <= {1.0, 2.0, 3.0, 4.0, 5.0}


def test_popularity_and_activity_are_heavy_tailed():
    frame = _all(2)
    item_counts = frame.item_id.value_counts().to_numpy()
    top_share = item_counts[: len(item_counts) // 10].sum() / item_counts.sum()
    assert top_share > 0.35  # top 10% of items take far more than 10% of events
    user_counts = frame.user_id.value_counts().to_numpy()
    assert user_counts.max() > 5 * np.median(user_counts)


def test_chunks_partition_users():
    ranges = [chunk_user_range(CONFIG, c) for c in range(CONFIG.chunks)]
    assert ranges[0][0] == 1 and ranges[-1][1] == CONFIG.n_users + 1
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


def test_rating_distribution_is_plausible():
    # Ratings come from taste affinity plus noise: centred above the middle, with real spread.
    frame = _all(3)
    assert 2.8 < frame.rating.mean() < 4.2 and frame.rating.std() > 0.5


def test_no_duplicate_events():
    frame = _all(4)
    assert not frame.duplicated(["user_id", "item_id", "timestamp"]).any()
