"""Where a result came from: the code, the effective config, the models and the events behind it.

Why: a ``metrics.json``, a snapshot manifest or a model checkpoint is read long after it was made,
by someone deciding from it. Without the commit, the settings, the models and the data that
produced it, two reports that disagree cannot be told apart from one bug. Each of them records a
:class:`Provenance`; :func:`collect` builds one from what the caller used.

- ``code``: ``git:<commit>`` (``+dirty`` when tracked files differ from it) for a checkout,
  ``solaris-pipeline <version>`` for an installed package without one;
- ``config_digest``: a hash of the effective config (every section, defaults included; the
  warehouse path left out, so the same settings give the same digest on every machine);
- ``events_digest``: a hash of the events the result was computed from (:func:`events_digest` of the
  arrays, or of a Delta table's live files, see ``solaris.storage.delta_log.DeltaLog.digest``);
- ``models``: role -> checkpoint version (content hash) of every model used;
- ``packages``: the versions of the libraries whose numbers differ between releases.

Pure except for :func:`code_version` (one ``git`` call) and :func:`package_versions` (installed
metadata); nothing here reads a table.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from solaris.config import SolarisConfig

PACKAGES = ("solaris-pipeline", "torch", "numpy", "pandas", "pyarrow", "pyspark", "delta-spark", "deltalake",
            "faiss-cpu")
_CHECKOUT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Provenance:
    """What produced a result (see the module docstring for each field)."""

    code: str
    config_digest: str
    events_digest: str | None
    models: Mapping[str, str] = field(default_factory=dict)
    packages: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "models": dict(self.models), "packages": dict(self.packages)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Provenance:
        """Parse a recorded provenance; a missing field raises ``KeyError`` naming it."""
        events = raw["events_digest"]
        return cls(code=str(raw["code"]), config_digest=str(raw["config_digest"]),
                   events_digest=None if events is None else str(events),
                   models={str(k): str(v) for k, v in dict(raw.get("models", {})).items()},
                   packages={str(k): str(v) for k, v in dict(raw.get("packages", {})).items()})

    def describe(self) -> str:
        """One line for a log: code, config, events, models."""
        models = ", ".join(f"{role} {version}" for role, version in sorted(self.models.items())) or "none"
        return (f"code {self.code}; config {self.config_digest}; events {self.events_digest or 'n/a'}; "
                f"models: {models}")


def code_version(checkout: Path = _CHECKOUT) -> str:
    """``git:<commit>[+dirty]`` when ``checkout`` is the top of a git work tree (an editable install), else the
    installed package's version (a wheel in a venv that happens to sit inside some clone is not that clone)."""
    if not (checkout / ".git").exists():
        return f"solaris-pipeline {_installed('solaris-pipeline') or 'unknown'}"
    try:
        commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"solaris-pipeline {_installed('solaris-pipeline') or 'unknown'}"
    return f"git:{commit}{'+dirty' if changed else ''}"


def config_digest(config: SolarisConfig) -> str:
    """Hash of the effective config without its warehouse path (the same settings, the same digest)."""
    settings = config.model_dump(mode="json", exclude={"warehouse"})
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def events_digest(user_id: np.ndarray, item_id: np.ndarray, ts: np.ndarray, label: np.ndarray,
                  feedback: np.ndarray | None = None) -> str:
    """Content hash of an event window (ids, times, labels, feedback levels when given): a re-ingest
    or an edit changes it."""
    digest = hashlib.sha256()
    arrays = [(user_id, np.int64), (item_id, np.int64), (ts, np.int64), (label, np.float32)]
    if feedback is not None:
        arrays.append((feedback, np.int64))
    for array, dtype in arrays:
        digest.update(np.ascontiguousarray(array, dtype=dtype).tobytes())
    digest.update(str(np.asarray(ts).size).encode())
    return digest.hexdigest()[:20]


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """Installed versions of ``names`` (those not installed left out)."""
    return {name: version for name in names if (version := _installed(name)) is not None}


def collect(config: SolarisConfig, events: str | None, models: Mapping[str, str] | None = None) -> Provenance:
    """The provenance of a result computed now from ``events`` (a digest) with ``models``."""
    return Provenance(code=code_version(), config_digest=config_digest(config), events_digest=events,
                      models=dict(models or {}), packages=package_versions())
