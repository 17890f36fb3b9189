"""Model checkpoints: a folder with weights, config, metadata and a content hash.

Layout of a checkpoint directory::

    weights.pt      state_dict only, read back with torch.load(weights_only=True)
    config.json     {"arch": "fm"|"vm", ...spec fields}  -> rebuilds the network
    metadata.json   as-of, data range, metrics, seed, and "version"

``version`` (= ``fm_version`` / ``verifier_version`` in the tables) is a hash of the weights file
and config, so two identical models share a version and any change gets a new one. Loading
recomputes it: a truncated or edited file is refused with a message naming the file. Nothing is
ever unpickled beyond tensors.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from solaris.errors import RefusedError
from solaris.models.fm import FMSpec, FoundationModel
from solaris.models.vm import VerticalModel, VMSpec

WEIGHTS = "weights.pt"
CONFIG = "config.json"
METADATA = "metadata.json"
LATEST = "LATEST"


class CheckpointError(RefusedError):
    """A checkpoint that is missing, corrupt, foreign or does not fit the expected model."""


def _content_hash(weights: Path, config_text: str) -> str:
    digest = hashlib.sha256()
    with open(weights, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    digest.update(config_text.encode("utf-8"))
    return digest.hexdigest()[:16]


def _spec_dict(model: nn.Module) -> dict[str, Any]:
    spec = cast("FMSpec | VMSpec", model.spec).to_dict()
    return {key: list(value) if isinstance(value, tuple) else value for key, value in spec.items()}


def save_checkpoint(model: nn.Module, root: str | os.PathLike, metadata: dict[str, Any]) -> Path:
    """Write ``model`` under ``root/<version>/`` atomically and point ``root/LATEST`` at it."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
    try:
        state = {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}
        torch.save(state, staging / WEIGHTS)
        config_text = json.dumps(_spec_dict(model), sort_keys=True)
        (staging / CONFIG).write_text(config_text)
        version = _content_hash(staging / WEIGHTS, config_text)
        (staging / METADATA).write_text(
            json.dumps({**metadata, "version": version}, sort_keys=True, indent=2, default=str)
        )
        final = root / version
        if final.exists():
            shutil.rmtree(staging)  # identical content already saved
        else:
            os.replace(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    pointer = root / f".{LATEST}.tmp"
    pointer.write_text(version + "\n")
    os.replace(pointer, root / LATEST)
    return final


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """A checkpoint folder, or a model root whose ``LATEST`` names one."""
    path = Path(path)
    if (path / LATEST).is_file():
        version = (path / LATEST).read_text().strip()
        return path / version
    return path


def load_checkpoint(
    path: str | os.PathLike,
    expected_arch: str | None = None,
    expected_embedding_dim: int | None = None,
    device: str | torch.device = "cpu",
) -> tuple[nn.Module, dict[str, Any]]:
    """Rebuild and load a model; refuse anything that is not exactly what was saved."""
    folder = resolve_checkpoint(path)
    weights, config_file, metadata_file = folder / WEIGHTS, folder / CONFIG, folder / METADATA
    for required in (weights, config_file, metadata_file):
        if not required.is_file():
            raise CheckpointError(f"checkpoint file missing: {required}")
    try:
        config_text = config_file.read_text()
        config = json.loads(config_text)
        metadata = json.loads(metadata_file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"checkpoint config/metadata unreadable in {folder}: {error}") from None
    version = metadata.get("version")
    actual = _content_hash(weights, config_text)
    if version != actual:
        raise CheckpointError(
            f"checkpoint {weights} does not match its recorded version {version!r} (content hash {actual}): "
            "truncated or modified"
        )
    arch = config.get("arch")
    if expected_arch and arch != expected_arch:
        raise CheckpointError(f"{config_file}: expected a {expected_arch!r} checkpoint, found {arch!r}")
    spec_fields: dict[str, Any] = {
        key: tuple(value) if isinstance(value, list) else value for key, value in config.items() if key != "arch"
    }
    try:
        if arch == "fm":
            fm_spec = FMSpec(**spec_fields)
            model: nn.Module = FoundationModel(fm_spec)
            dim = fm_spec.embedding_dim
        elif arch == "vm":
            vm_spec = VMSpec(**spec_fields)
            model = VerticalModel(vm_spec)
            dim = vm_spec.fm_embedding_dim
        else:
            raise CheckpointError(f"{config_file}: unknown arch {arch!r}")
    except TypeError as error:
        raise CheckpointError(f"{config_file}: config does not describe a known model: {error}") from None
    if expected_embedding_dim is not None and dim != expected_embedding_dim:
        raise CheckpointError(
            f"{config_file}: embedding dim {dim} does not match the configured model.embedding_dim "
            f"{expected_embedding_dim}"
        )
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - UnpicklingError, RuntimeError on truncated zip, ...
        raise CheckpointError(
            f"cannot load weights {weights} as tensors only: {type(error).__name__}: {error}"
        ) from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{weights} does not hold a state_dict")
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as error:
        raise CheckpointError(f"{weights} does not fit the {arch} architecture in {config_file}: {error}") from None
    model.to(device)
    model.eval()
    return model, metadata
