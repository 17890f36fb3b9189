"""bench/stream.py's pure parts: the replay's commits and pace, offsets, covering batches, delays, percentiles."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.unit.bench_scripts import bench_script


@pytest.fixture(scope="module")
def stream():
    with bench_script("stream") as module:
        yield module


def test_one_commit_per_step_of_event_time_due_when_its_last_second_has_passed(stream):
    ts = [1001, 1059, 1060, 1061, 1200, 1300]  # sorted; start 1000, spans of 60 s
    commits = stream.commit_schedule(ts, start=1000, seconds=300, step=60, speedup=10.0)
    # spans (1000, 1060], (1060, 1120], (1120, 1180] (empty: no commit), (1180, 1240], (1240, 1300]
    assert [(c.since, c.until) for c in commits] == [(1000, 1060), (1060, 1120), (1180, 1240), (1240, 1300)]
    assert [ts[c.rows] for c in commits] == [[1001, 1059, 1060], [1061], [1200], [1300]]
    assert [c.due for c in commits] == pytest.approx([6.0, 12.0, 24.0, 30.0])
    assert [c.index for c in commits] == [0, 1, 2, 3]


def test_the_schedule_covers_every_event_of_the_window_once_and_nothing_outside(stream):
    rng = np.random.default_rng(0)
    ts = sorted(rng.integers(900, 2000, 500).tolist())
    commits = stream.commit_schedule(ts, start=1000, seconds=610, step=45, speedup=3.0)
    held = [t for c in commits for t in ts[c.rows]]
    assert held == [t for t in ts if 1000 < t <= 1610]
    assert commits[-1].until == 1610 and commits[-1].due == pytest.approx(610 / 3.0)
    assert all(c.since < t <= c.until for c in commits for t in ts[c.rows])


def test_the_schedule_refuses_unsorted_times_and_bad_settings(stream):
    with pytest.raises(ValueError, match="sorted"):
        stream.commit_schedule([5, 3], start=0, seconds=10, step=1, speedup=1.0)
    with pytest.raises(ValueError):
        stream.commit_schedule([1], start=0, seconds=10, step=0, speedup=1.0)
    with pytest.raises(ValueError):
        stream.commit_schedule([1], start=0, seconds=10, step=1, speedup=0.0)


def test_an_offset_file_gives_the_delta_source_version_and_index(stream):
    text = "v1\n" + json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1}) + "\n" + json.dumps(
        {"sourceVersion": 1, "reservoirId": "x", "reservoirVersion": 7, "index": -1, "isStartingVersion": False})
    assert stream.parse_offset(text) == (7, -1)


def test_a_commit_is_covered_by_the_first_batch_whose_offset_reaches_its_end(stream):
    # batch 0 ended inside version 5 (index 1 of 0..3), batch 1 at the start of version 7 (= through 6),
    # batch 2 at the end marker of version 8
    offsets = {0: (5, 1), 1: (7, -1), 2: (8, stream.END_INDEX)}
    assert stream.covering_batch(offsets, 4, last_index=2) == 0
    assert stream.covering_batch(offsets, 5, last_index=3) == 1  # split: served by the batch that finished it
    assert stream.covering_batch(offsets, 5, last_index=1) == 0
    assert stream.covering_batch(offsets, 6, last_index=3) == 1
    assert stream.covering_batch(offsets, 7, last_index=3) == 2
    assert stream.covering_batch(offsets, 8, last_index=3) == 2
    assert stream.covering_batch(offsets, 9, last_index=3) is None


def test_values_are_servable_at_the_first_publish_of_their_batch_or_a_later_one(stream):
    published = {0: 100.0, 2: 125.0, 3: 130.0}  # batch 1's publish was refused: batch 2's pins its pairs
    assert stream.first_servable(published, 0) == 100.0
    assert stream.first_servable(published, 1) == 125.0
    assert stream.first_servable(published, 4) is None
    assert stream.first_servable(published, None) is None


def test_event_delays_join_arrival_batch_and_publish(stream):
    arrivals = {5: 10.0, 6: 16.0, 7: 22.0}
    last_index = {5: 2, 6: 2, 7: 2}
    offsets = {0: (6, -1), 1: (8, -1)}
    published = {0: 40.0, 1: 95.0}
    rows = stream.event_delays([(5, 1), (6, 2), (6, 1), (7, 3)], arrivals, last_index, offsets, published)
    assert [(r.batch, r.delay) for r in rows] == [(0, 30.0), (1, 79.0), (1, 79.0), (1, 73.0)]
    unpublished = stream.event_delays([(7, 3)], arrivals, last_index, offsets, {0: 40.0})
    assert unpublished[0].batch == 1 and unpublished[0].delay is None
    uncovered = stream.event_delays([(7, 3)], arrivals, last_index, {0: (6, -1)}, published)
    assert uncovered[0].batch is None and uncovered[0].servable is None


def test_percentiles_interpolate_between_ranks_as_numpy_does(stream):
    values = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    for q in (0, 25, 50, 90, 99, 100):
        assert stream.percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert stream.percentile([], 50) is None
    assert stream.percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        stream.percentile([1.0], 101)


def test_the_batch_of_a_stream_manifest_and_none_for_an_hourly_one(stream):
    assert stream.batch_of_manifest("snapshot-20001208T180512Z-stream-b12.json") == 12
    assert stream.batch_of_manifest("snapshot-20001208T180000Z.json") is None
