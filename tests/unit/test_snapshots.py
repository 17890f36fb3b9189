import json

import pytest

from solaris.serving.snapshots import (
    Manifest,
    ManifestCoverage,
    PinnedTable,
    latest_manifest_path,
    manifests_to_prune,
    quality_gate,
    read_manifest,
    write_manifest,
)

COUNTS = {"pair_embeddings": 10, "user_embeddings": 5, "imputed_embeddings": 3}


def test_gate_passes_a_healthy_snapshot():
    assert quality_gate(COUNTS, {"pair_embeddings": 0}, 0.8, 0.85, 0.5) == []


def test_gate_refuses_empty_poisoned_or_collapsed():
    assert quality_gate(dict.fromkeys(COUNTS, 0), {}, 0.0, None, 0.5) == ["no servable embeddings in any tier"]
    assert "tier 1 empty" in quality_gate({**COUNTS, "pair_embeddings": 0}, {}, 0.5, None, 0.5)[0]
    assert "non-finite" in quality_gate(COUNTS, {"user_embeddings": 2}, 0.8, None, 0.5)[0]
    assert "collapsed" in quality_gate(COUNTS, {}, 0.3, 0.8, 0.5)[0]
    assert quality_gate(COUNTS, {}, 0.41, 0.8, 0.5) == []  # within tolerance


def _manifest(snapshot_id: str) -> Manifest:
    return Manifest(snapshot_id=snapshot_id, as_of="2026-01-01T00:00:00+00:00", run_id="r", embedding_dim=4)


def test_manifest_round_trips_and_names_a_missing_field(tmp_path):
    manifest = Manifest(
        snapshot_id="snapshot-20260101T000000Z", as_of="2026-01-01T00:00:00+00:00", run_id="publish-1",
        embedding_dim=64, fm_versions=["fm-1"], tables={"pair_embeddings": PinnedTable("/wh/pair_embeddings", 7)},
        row_counts={"pair_embeddings": 10}, coverage=ManifestCoverage(0.5, 10, 5),
    )
    path = write_manifest(tmp_path, manifest, keep=2)
    assert read_manifest(path) == manifest
    assert json.loads(path.read_text())["tables"]["pair_embeddings"] == {"path": "/wh/pair_embeddings", "version": 7}
    raw = json.loads(path.read_text())
    del raw["embedding_dim"]
    path.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="'embedding_dim' is missing"):
        read_manifest(path)
    raw["embedding_dim"] = "sixty-four"
    path.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="wrong type"):
        read_manifest(path)


def test_manifest_write_is_atomic_and_keeps_the_last_n(tmp_path):
    for hour in range(5):
        write_manifest(tmp_path, _manifest(f"snapshot-2026010{hour}"), keep=3)
    assert sorted(p.name for p in tmp_path.glob("*.json")) == [f"snapshot-2026010{h}.json" for h in (2, 3, 4)]
    assert latest_manifest_path(tmp_path).name == "snapshot-20260104.json"
    assert read_manifest(latest_manifest_path(tmp_path)).snapshot_id == "snapshot-20260104"
    assert not list(tmp_path.glob(".*tmp*"))  # no temporary files left behind
    assert json.loads((tmp_path / "snapshot-20260104.json").read_text())["tables"] == {}


def _hourly(hour: int) -> str:
    return f"snapshot-20260101T{hour:02d}0000Z"


def _stream(hour: int, minute: int, batch: int) -> str:
    from datetime import datetime, timezone

    from solaris.precompute.stream import snapshot_id

    return snapshot_id(datetime(2026, 1, 1, hour, minute, tzinfo=timezone.utc), batch)


def test_pruning_keeps_the_last_hourly_manifests_and_the_stream_s_since_the_oldest_of_them():
    """A stream manifest every 5 minutes does not push the hourly ones out of the rollback window."""
    hourly = [_hourly(hour) for hour in range(6)]
    stream = [_stream(hour, minute, 12 * hour + minute // 5) for hour in range(6) for minute in range(0, 60, 5)]
    pruned = manifests_to_prune([*stream, *hourly], keep=3)
    kept = {*stream, *hourly} - set(pruned)
    assert {name for name in kept if "stream" not in name} == {_hourly(3), _hourly(4), _hourly(5)}
    # the stream's manifests from the oldest kept hour on (one at 03:00 sharp included), none before
    assert {name for name in kept if "stream" in name} == {_stream(h, m, 12 * h + m // 5) for h in (3, 4, 5)
                                                            for m in range(0, 60, 5)}
    assert set(pruned) == {*hourly[:3], *stream[:36]}
    # a stream alone (no hourly manifest yet): the newest `keep` of its manifests
    assert manifests_to_prune(stream[:5], keep=3) == stream[:2]
    assert manifests_to_prune(hourly[:2], keep=3) == [] and manifests_to_prune([], keep=1) == []
    with pytest.raises(ValueError, match="keep"):
        manifests_to_prune(hourly, keep=0)


def test_a_publish_prunes_by_that_rule_and_never_the_manifest_it_wrote(tmp_path):
    for name in (_hourly(0), _stream(0, 30, 0), _hourly(1), _stream(1, 5, 1)):
        write_manifest(tmp_path, _manifest(name), keep=1)
    assert sorted(p.stem for p in tmp_path.glob("*.json")) == sorted([_hourly(1), _stream(1, 5, 1)])
    late = _stream(0, 50, 2)  # a batch of late events: older than the kept hour, still served until the next
    write_manifest(tmp_path, _manifest(late), keep=1)
    assert latest_manifest_path(tmp_path).stem == late and (tmp_path / f"{late}.json").is_file()


def test_rollback_repoints_latest_only_to_a_readable_manifest(tmp_path):
    from solaris.errors import RefusedError
    from solaris.serving.snapshots import list_manifests, point_latest

    for hour in range(3):
        write_manifest(tmp_path, _manifest(f"snapshot-2026010{hour}"), keep=5)
    assert [p.stem for p in list_manifests(tmp_path)] == ["snapshot-20260100", "snapshot-20260101", "snapshot-20260102"]
    assert point_latest(tmp_path, "snapshot-20260101").name == "snapshot-20260101.json"
    assert latest_manifest_path(tmp_path).name == "snapshot-20260101.json"
    with pytest.raises(RefusedError, match="no manifest .snapshot-1999. .*kept: snapshot-20260100"):
        point_latest(tmp_path, "snapshot-1999")
    (tmp_path / "snapshot-20260100.json").write_text("{not json")
    with pytest.raises(ValueError, match="cannot read snapshot manifest"):
        point_latest(tmp_path, "snapshot-20260100")
    assert latest_manifest_path(tmp_path).name == "snapshot-20260101.json"  # unchanged by the refusals


def test_servable_stats_count_bad_rows_covered_users_and_pair_fm_versions():
    import numpy as np
    import pyarrow as pa

    from solaris.serving.snapshots import servable_stats

    dim = 2

    def packed(*vectors):
        return [None if v is None else np.asarray(v, "<f4").tobytes() for v in vectors]

    pairs = pa.table({"embedding": pa.array(packed([1, 2], [np.nan, 0], [3, 4]), pa.binary()),
                      "user_id": pa.array([1, 1, 2], pa.int64()), "fm_version": ["v2", None, "v1"]})
    users = pa.table({"embedding": pa.array(packed([1, 2]) + [b"\x00" * 12] + packed(None), pa.binary()),
                      "user_id": pa.array([3, 4, None], pa.int64())})
    items = pa.table({"embedding": pa.array(packed([np.inf, 1], [0, 0]), pa.binary())})  # no user: covers none
    known = pa.array([1, 2, 3, 5, 5, None], pa.int64())  # every row counts as known, as in Spark's join
    stats = servable_stats({"pair_embeddings": pairs, "user_embeddings": users, "item_embeddings": items},
                           known, dim, ("pair_embeddings", "user_embeddings"))
    assert stats.rows == {"pair_embeddings": 3, "user_embeddings": 3, "item_embeddings": 2}
    # non-finite, wrong size (12 bytes for 2 floats) and missing embeddings are bad
    assert stats.bad == {"pair_embeddings": 1, "user_embeddings": 2, "item_embeddings": 1}
    assert (stats.users_known, stats.users_covered) == (6, 3)  # users 1, 2, 3; not 5 twice nor the null
    assert stats.fm_versions == ["v1", "v2"]
    empty = servable_stats({}, pa.array([7], pa.int64()), dim, ())
    assert (empty.rows, empty.users_known, empty.users_covered, empty.fm_versions) == ({}, 1, 0, [])


def test_publish_s_spark_bad_row_flag_is_the_driver_rule():
    """Publish's mapInPandas flag (the Spark path) and servable_stats (the driver path) agree row by row."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    from solaris.serving.snapshots import servable_stats
    from solaris.stages.publish import _flag_bad_rows

    dim = 2
    values = [np.asarray([1, 2], "<f4").tobytes(), np.asarray([np.nan, 0], "<f4").tobytes(), b"\x00" * 4, None,
              np.asarray([0, -np.inf], "<f4").tobytes()]
    frame = pd.DataFrame({"tier_table": 0, "user_id": np.arange(5), "fm_version": "v", "embedding": values})
    flagged = next(_flag_bad_rows(dim)(iter([frame])))
    assert flagged["bad"].tolist() == [False, True, True, True, True]
    stats = servable_stats({"t": pa.table({"embedding": pa.array(values, pa.binary())})}, pa.array([], pa.int64()),
                           dim, ())
    assert stats.bad == {"t": int(flagged["bad"].sum())}
