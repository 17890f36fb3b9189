import json
import pickle

import pytest
import torch

from solaris.models.checkpoint import CheckpointError, load_checkpoint, resolve_checkpoint, save_checkpoint
from solaris.models.common import to_tensors
from solaris.models.fm import FoundationModel
from solaris.models.vm import VerticalModel, VMSpec
from tests.tolerance import assert_close
from tests.unit.small_models import SMALL_FM, small_features


def _rehash(folder):
    """Record the current content hash, as an attacker or a buggy writer could."""
    import hashlib

    config_text = (folder / "config.json").read_text()
    meta = json.loads((folder / "metadata.json").read_text())
    meta["version"] = hashlib.sha256((folder / "weights.pt").read_bytes() + config_text.encode()).hexdigest()[:16]
    (folder / "metadata.json").write_text(json.dumps(meta))


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    model = FoundationModel(SMALL_FM).eval()
    folder = save_checkpoint(model, tmp_path / "fm", {"as_of": "2026-01-01T00:00:00+00:00"})
    return model, folder


def test_round_trip_gives_same_outputs_and_version(saved, tmp_path):
    model, folder = saved
    loaded, metadata = load_checkpoint(tmp_path / "fm", expected_arch="fm", expected_embedding_dim=16)
    assert resolve_checkpoint(tmp_path / "fm") == folder
    assert metadata["version"] == folder.name and metadata["as_of"].startswith("2026")
    weights = loaded.state_dict()
    for name, value in model.state_dict().items():
        assert torch.equal(weights[name], value), name  # bit-exact: torch.save / load copies the bytes
    batch = to_tensors(small_features()[0])
    with torch.inference_mode():  # what the round trip promises is the weights; outputs within the tolerance
        assert_close(model(batch)[0], loaded(batch)[0])
    again = save_checkpoint(loaded, tmp_path / "fm", {"as_of": "2026-01-01T00:00:00+00:00"})
    assert again.name == folder.name  # same content -> same version


def test_missing_file_is_named(saved):
    _, folder = saved
    (folder / "weights.pt").unlink()
    with pytest.raises(CheckpointError, match="weights.pt"):
        load_checkpoint(folder)


def test_truncated_weights_are_refused(saved):
    _, folder = saved
    data = (folder / "weights.pt").read_bytes()
    (folder / "weights.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="weights.pt"):
        load_checkpoint(folder)


class _Boom:
    def __reduce__(self):
        return (exec, ("import pathlib; pathlib.Path('PWNED').write_text('x')",))


def test_non_weights_pickle_is_never_executed(saved, tmp_path, monkeypatch):
    _, folder = saved
    monkeypatch.chdir(tmp_path)
    (folder / "weights.pt").write_bytes(pickle.dumps({"x": _Boom()}))
    _rehash(folder)  # even with a matching recorded version, weights_only must refuse the object
    with pytest.raises(CheckpointError, match="tensors only"):
        load_checkpoint(folder)
    assert not (tmp_path / "PWNED").exists()


def test_mismatched_dim_and_arch_are_refused(saved):
    _, folder = saved
    with pytest.raises(CheckpointError, match="embedding dim 16"):
        load_checkpoint(folder, expected_embedding_dim=64)
    with pytest.raises(CheckpointError, match="expected a 'vm'"):
        load_checkpoint(folder, expected_arch="vm")


def test_edited_config_is_refused(saved):
    _, folder = saved
    config = json.loads((folder / "config.json").read_text())
    config["d_model"] = 32
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="does not match its recorded version"):
        load_checkpoint(folder)


def test_foreign_state_dict_does_not_fit(tmp_path):
    vm = VerticalModel(VMSpec(id_buckets=64, id_dim=4, hidden=(8,)))
    folder = save_checkpoint(vm, tmp_path / "vm", {})
    # weights of a different architecture under a valid vm config
    other = VerticalModel(VMSpec(id_buckets=32, id_dim=4, hidden=(8,)))
    torch.save(other.state_dict(), folder / "weights.pt")
    _rehash(folder)
    with pytest.raises(CheckpointError, match="does not fit"):
        load_checkpoint(folder)


def test_unknown_arch_and_missing_folder_are_refused(saved):
    _, folder = saved
    config = json.loads((folder / "config.json").read_text())
    config["arch"] = "gpt"
    (folder / "config.json").write_text(json.dumps(config))
    _rehash(folder)
    with pytest.raises(CheckpointError, match="unknown arch 'gpt'"):
        load_checkpoint(folder)
    with pytest.raises(CheckpointError, match="missing"):
        load_checkpoint(folder.parent / "nope")
