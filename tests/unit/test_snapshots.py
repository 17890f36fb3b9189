import json

from solaris.snapshots import latest_manifest_path, quality_gate, read_manifest, write_manifest

COUNTS = {"pair_embeddings": 10, "user_embeddings": 5, "imputed_embeddings": 3}


def test_gate_passes_a_healthy_snapshot():
    assert quality_gate(COUNTS, {"pair_embeddings": 0}, 0.8, 0.85, 0.5) == []


def test_gate_refuses_empty_poisoned_or_collapsed():
    assert quality_gate(dict.fromkeys(COUNTS, 0), {}, 0.0, None, 0.5) == ["no servable embeddings in any tier"]
    assert "tier 1 empty" in quality_gate({**COUNTS, "pair_embeddings": 0}, {}, 0.5, None, 0.5)[0]
    assert "non-finite" in quality_gate(COUNTS, {"user_embeddings": 2}, 0.8, None, 0.5)[0]
    assert "collapsed" in quality_gate(COUNTS, {}, 0.3, 0.8, 0.5)[0]
    assert quality_gate(COUNTS, {}, 0.41, 0.8, 0.5) == []  # within tolerance


def test_manifest_write_is_atomic_and_keeps_the_last_n(tmp_path):
    for hour in range(5):
        write_manifest(tmp_path, {"snapshot_id": f"snapshot-2026010{hour}", "tables": {}}, keep=3)
    assert sorted(p.name for p in tmp_path.glob("*.json")) == [f"snapshot-2026010{h}.json" for h in (2, 3, 4)]
    assert latest_manifest_path(tmp_path).name == "snapshot-20260104.json"
    assert read_manifest(latest_manifest_path(tmp_path))["snapshot_id"] == "snapshot-20260104"
    assert not list(tmp_path.glob(".*tmp*"))  # no temporary files left behind
    assert json.loads((tmp_path / "snapshot-20260104.json").read_text())["tables"] == {}


def test_rollback_repoints_latest_only_to_a_readable_manifest(tmp_path):
    import pytest

    from solaris.errors import RefusedError
    from solaris.snapshots import list_manifests, point_latest

    for hour in range(3):
        write_manifest(tmp_path, {"snapshot_id": f"snapshot-2026010{hour}", "tables": {}}, keep=5)
    assert [p.stem for p in list_manifests(tmp_path)] == ["snapshot-20260100", "snapshot-20260101", "snapshot-20260102"]
    assert point_latest(tmp_path, "snapshot-20260101").name == "snapshot-20260101.json"
    assert latest_manifest_path(tmp_path).name == "snapshot-20260101.json"
    with pytest.raises(RefusedError, match="no manifest .snapshot-1999. .*kept: snapshot-20260100"):
        point_latest(tmp_path, "snapshot-1999")
    (tmp_path / "snapshot-20260100.json").write_text("{not json")
    with pytest.raises(ValueError, match="cannot read snapshot manifest"):
        point_latest(tmp_path, "snapshot-20260100")
    assert latest_manifest_path(tmp_path).name == "snapshot-20260101.json"  # unchanged by the refusals
