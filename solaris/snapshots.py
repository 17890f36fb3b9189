"""Serving snapshot manifests (docs/architecture.md §7): pure file logic, no Spark.

A manifest is JSON naming the Delta table paths *and versions* the serving layer must read, the
FM version, the embedding dimension and coverage figures. It is written under a temporary name
and renamed (atomic on POSIX), then ``LATEST`` is replaced the same way, so a reader sees either
the old snapshot or the new one, never half of one. Only the last N manifests are kept.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from solaris.errors import RefusedError

LATEST = "LATEST"
SNAPSHOTS_DIR = "snapshots"


class QualityGateError(RefusedError):
    """The snapshot failed a check; nothing was published."""


def quality_gate(row_counts: dict[str, int], bad_rows: dict[str, int], coverage: float,
                 previous_coverage: float | None, tolerance: float) -> list[str]:
    """Reasons to refuse a snapshot (empty list = publish)."""
    reasons = []
    if sum(row_counts.values()) == 0:
        reasons.append("no servable embeddings in any tier")
    elif row_counts.get("pair_embeddings", 0) == 0:
        reasons.append("pair_embeddings has no servable rows (tier 1 empty)")
    for table, count in sorted(bad_rows.items()):
        if count:
            reasons.append(f"{table}: {count} rows with non-finite values or the wrong dimension")
    if previous_coverage is not None and coverage < previous_coverage * (1.0 - tolerance):
        reasons.append(f"coverage collapsed: {coverage:.3f} vs {previous_coverage:.3f} in the previous snapshot "
                       f"(tolerance {tolerance:.0%})")
    return reasons


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_manifest(directory: Path, manifest: dict[str, Any], keep: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{manifest['snapshot_id']}.json"
    _atomic_write(path, json.dumps(manifest, indent=2, sort_keys=True, default=str))
    _atomic_write(directory / LATEST, path.name + "\n")
    manifests = sorted(p for p in directory.glob("*.json"))
    for old in manifests[:-keep] if len(manifests) > keep else []:
        if old != path:
            old.unlink(missing_ok=True)
    return path


def latest_manifest_path(directory: Path) -> Path | None:
    pointer = directory / LATEST
    if not pointer.is_file():
        return None
    return directory / pointer.read_text().strip()


def read_manifest(path: Path) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"cannot read snapshot manifest {path}: {error}") from None


def list_manifests(directory: Path) -> list[Path]:
    """Published manifests, oldest first (ids embed the as-of, so name order is time order)."""
    return sorted(Path(directory).glob("snapshot-*.json"))


def find_manifest(directory: Path, snapshot_id: str) -> Path:
    """The kept manifest named ``snapshot_id`` (``.json`` optional); only kept manifests can be
    named, so no path trick like ``../`` reaches a file outside the snapshots folder."""
    kept = {p.stem: p for p in list_manifests(directory)}
    path = kept.get(snapshot_id.removesuffix(".json"))
    if path is None:
        raise RefusedError(f"no manifest {snapshot_id!r} in {directory} (kept: {', '.join(kept) or 'none'})")
    return path


def point_latest(directory: Path, snapshot_id: str) -> Path:
    """Make ``LATEST`` name an existing manifest (rollback / roll forward); atomic like publish."""
    directory = Path(directory)
    path = find_manifest(directory, snapshot_id)
    read_manifest(path)  # refuse a manifest that does not parse
    _atomic_write(directory / LATEST, path.name + "\n")
    return path
