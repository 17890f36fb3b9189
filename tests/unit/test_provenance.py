"""What a result records about where it came from (solaris/provenance.py), without Spark."""

import json
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
from deltalake import write_deltalake

from solaris import provenance
from solaris.config import SolarisConfig, load_config
from solaris.models.training import EventArrays, training_metadata
from solaris.serving.snapshots import Manifest
from solaris.storage.delta_log import DeltaLog

ROOT = Path(__file__).resolve().parents[2]


def test_the_config_digest_follows_the_settings_not_the_warehouse_path(tmp_path: Path) -> None:
    config = load_config(None, [f"warehouse={tmp_path}"])
    digest = provenance.config_digest(config)
    assert digest == provenance.config_digest(load_config(None, [f"warehouse={tmp_path / 'other'}"]))
    assert digest != provenance.config_digest(load_config(None, [f"warehouse={tmp_path}", "seed=7"]))


def test_the_code_version_is_the_commit_of_a_checkout_else_the_installed_package(tmp_path: Path) -> None:
    code = provenance.code_version(ROOT)
    commit = code.removeprefix("git:").removesuffix("+dirty")
    assert code.startswith("git:") and len(commit) == 40 and int(commit, 16) >= 0
    installed = provenance.package_versions(("solaris-pipeline",))["solaris-pipeline"]
    assert provenance.code_version(tmp_path) == f"solaris-pipeline {installed}"


def test_a_provenance_survives_its_json_and_says_itself_in_one_line(tmp_path: Path) -> None:
    recorded = provenance.collect(load_config(None, [f"warehouse={tmp_path}"]), "abc", {"fm": "f1", "verifier": "v2"})
    again = provenance.Provenance.from_dict(json.loads(json.dumps(recorded.to_dict())))
    assert again == recorded and {"torch", "numpy", "pyspark"} <= set(again.packages)
    assert "events abc" in again.describe() and "fm f1, verifier v2" in again.describe()


def test_a_manifest_carries_its_provenance_and_older_manifests_still_load() -> None:
    recorded = provenance.Provenance("git:" + "0" * 40, "c" * 16, "e" * 20, {"fm": "f1"}, {"torch": "2"})
    manifest = Manifest("snapshot-x", "2026-01-01T00:00:00+00:00", "r", 4, provenance=recorded)
    assert Manifest.from_dict(json.loads(manifest.to_json())).provenance == recorded
    older = {key: value for key, value in json.loads(manifest.to_json()).items() if key != "provenance"}
    assert Manifest.from_dict(older).provenance is None


def test_a_table_digest_changes_with_the_tables_content_only(tmp_path: Path) -> None:
    path = str(tmp_path / "events")
    assert DeltaLog(path).digest() is None
    write_deltalake(path, pa.table({"user_id": [1, 2]}))
    first = DeltaLog(path).digest()
    assert first is not None and first == DeltaLog(path).digest()
    write_deltalake(path, pa.table({"user_id": [3]}), mode="append")
    assert DeltaLog(path).digest() != first


def test_a_checkpoint_records_the_digest_of_the_events_it_was_trained_on(tmp_path: Path) -> None:
    config: SolarisConfig = load_config(None, [f"warehouse={tmp_path}"])
    events = EventArrays(np.array([1, 2]), np.array([3, 4]), np.array([10, 20]), np.array([1.0, 0.0], np.float32))
    result = SimpleNamespace(validation={"ne": 0.9}, epochs=1, best_epoch=1, seconds=0.1)
    meta = training_metadata("vm_distilled", datetime(2026, 1, 1, tzinfo=timezone.utc), 1, events, result,  # type: ignore[arg-type]
                             config=config, models={"teacher_fm": "f1"})
    recorded = meta["provenance"]
    assert recorded["events_digest"] == events.digest() != events.select(np.array([0])).digest()
    assert recorded["models"] == {"teacher_fm": "f1"} and recorded["config_digest"] == provenance.config_digest(config)
