"""Serving snapshot manifests (docs/architecture.md §7): pure file logic, no Spark.

A manifest is JSON naming the Delta table paths *and versions* the serving layer must read, the
FM version, the embedding dimension and coverage figures. It is written under a temporary name
and renamed (atomic on POSIX), then ``LATEST`` is replaced the same way, so a reader sees either
the old snapshot or the new one, never half of one. Only the last N hourly manifests are kept,
and the stream's manifests since the oldest of them (:func:`manifests_to_prune`).

:class:`Manifest` is the typed form of that JSON: publish builds one, the resolver and rollback
read one, and a file missing a field or holding one of the wrong type is refused on read with the
field's name, rather than failing later on a string key.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from solaris.errors import RefusedError
from solaris.precompute.stream import SNAPSHOT_TAG
from solaris.provenance import Provenance

LATEST = "LATEST"
SNAPSHOTS_DIR = "snapshots"


@dataclass(frozen=True)
class PinnedTable:
    """A Delta table at the exact version the snapshot serves."""

    path: str
    version: int


@dataclass(frozen=True)
class ManifestCoverage:
    """Users with a servable embedding in any tier, among the users KNN knows at publish time."""

    users_any_tier: float
    users_known: int
    users_covered: int


@dataclass(frozen=True)
class NeighborPairRule:
    """How the resolver imputes a missing pair from the user's neighbours (tier 2), fixed at publish."""

    min_neighbors: int
    min_similarity: float


@dataclass(frozen=True)
class Manifest:
    """One published snapshot: what the serving layer loads, pinned to Delta versions."""

    snapshot_id: str
    as_of: str
    run_id: str
    embedding_dim: int
    fm_versions: list[str] = field(default_factory=list)
    tables: dict[str, PinnedTable] = field(default_factory=dict)
    row_counts: dict[str, int] = field(default_factory=dict)
    coverage: ManifestCoverage | None = None
    neighbor_pairs: NeighborPairRule | None = None  # None: the neighbour-pair tier is off
    provenance: Provenance | None = None  # None in manifests written before it was recorded

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True, default=str)

    @classmethod
    def from_dict(cls, raw: Any) -> Manifest:
        """Validate a parsed manifest; a missing or mistyped field raises ``ValueError`` naming it."""
        if not isinstance(raw, dict):
            raise ValueError("a manifest is a JSON object")
        try:
            tables = {
                str(name): PinnedTable(path=str(spec["path"]), version=int(spec["version"]))
                for name, spec in dict(raw.get("tables", {})).items()
            }
            coverage_raw = raw.get("coverage")
            coverage = None if coverage_raw is None else ManifestCoverage(
                users_any_tier=float(coverage_raw["users_any_tier"]),
                users_known=int(coverage_raw["users_known"]),
                users_covered=int(coverage_raw["users_covered"]),
            )
            return cls(
                snapshot_id=str(raw["snapshot_id"]),
                as_of=str(raw["as_of"]),
                run_id=str(raw["run_id"]),
                embedding_dim=int(raw["embedding_dim"]),
                fm_versions=[str(v) for v in raw.get("fm_versions", [])],
                tables=tables,
                row_counts={str(k): int(v) for k, v in dict(raw.get("row_counts", {})).items()},
                coverage=coverage,
                neighbor_pairs=None if raw.get("neighbor_pairs") is None else NeighborPairRule(
                    min_neighbors=int(raw["neighbor_pairs"]["min_neighbors"]),
                    min_similarity=float(raw["neighbor_pairs"]["min_similarity"]),
                ),
                provenance=None if raw.get("provenance") is None else Provenance.from_dict(raw["provenance"]),
            )
        except KeyError as missing:
            raise ValueError(f"manifest field {missing} is missing") from None
        except (TypeError, ValueError) as error:
            raise ValueError(f"manifest field has the wrong type: {error}") from None


class QualityGateError(RefusedError):
    """The snapshot failed a check; nothing was published."""


@dataclass(frozen=True)
class ServableStats:
    """What publish's gate and manifest need from the pinned tier tables' servable rows."""

    rows: dict[str, int]
    bad: dict[str, int]
    users_known: int
    users_covered: int
    fm_versions: list[str]


def servable_stats(tiers: dict[str, Any], known_user_ids: Any, dim: int, user_keyed: tuple[str, ...]) -> ServableStats:
    """:class:`ServableStats` of tier tables' servable rows already read (pyarrow tables with
    ``embedding``, ``user_id`` for the ``user_keyed`` tiers, ``fm_version`` for ``pair_embeddings``).

    The rule publish's Spark action applies, for tables small enough to read on the driver: a row
    is bad when its embedding is missing, of another size than ``dim`` floats, or not finite; a
    known user (a row of ``known_user_ids``) is covered when any user-keyed tier has a row for it
    (bad or not: the gate refuses those anyway); ``fm_versions`` are the pair rows' distinct versions.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from solaris.storage.embedding_codec import decode

    rows: dict[str, int] = {}
    bad: dict[str, int] = {}
    tier_users: list[Any] = []
    versions: set[str] = set()
    for name, table in tiers.items():
        embeddings = table.column("embedding")
        lengths = pc.binary_length(embeddings).to_numpy(zero_copy_only=False)
        right_size = np.nan_to_num(lengths.astype(np.float64), nan=-1.0) == 4 * dim
        finite = np.zeros(table.num_rows, dtype=bool)
        if right_size.any():
            finite[right_size] = np.isfinite(decode(embeddings.filter(pa.array(right_size)), dim)).all(axis=1)
        rows[name], bad[name] = table.num_rows, int((~finite).sum())
        if name in user_keyed:
            tier_users.append(pc.drop_null(table.column("user_id")).combine_chunks().cast(pa.int64()))
        if name == "pair_embeddings":
            versions |= {str(v) for v in pc.unique(pc.drop_null(table.column("fm_version"))).to_pylist()}
    known = (known_user_ids if isinstance(known_user_ids, pa.ChunkedArray)
             else pa.chunked_array([pa.array(known_user_ids)])).cast(pa.int64())
    value_set = pa.concat_arrays(tier_users) if tier_users else pa.array([], pa.int64())
    covered = pc.sum(pc.is_in(known, value_set=value_set, skip_nulls=True)).as_py() or 0
    return ServableStats(rows=rows, bad=bad, users_known=len(known), users_covered=int(covered),
                         fm_versions=sorted(versions))


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


def _stamp(snapshot_id: str) -> str:
    """The as-of stamp of ``snapshot-<stamp>[-stream-b<batch>]`` (stamps sort in time order)."""
    return snapshot_id.removeprefix("snapshot-").split("-", 1)[0]


def manifests_to_prune(snapshot_ids: Sequence[str], keep: int) -> list[str]:
    """The manifests a publish deletes: all but the newest ``keep`` hourly ones and the stream's
    manifests from the oldest kept hourly one's as-of on (without an hourly manifest: the newest
    ``keep`` of any kind).

    Why: the stream publishes a manifest per micro-batch (every few minutes); counted with the
    hourly ones, ``keep`` of them would push the hourly manifests rollback relies on out within
    hours. This way the rollback window stays ``keep`` hourly snapshots, and every stream snapshot
    inside it stays too.
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    ordered = sorted(snapshot_ids, key=lambda name: (_stamp(name), name))
    hourly = [name for name in ordered if SNAPSHOT_TAG not in name]
    if not hourly:
        return ordered[:-keep]
    kept_hourly = set(hourly[-keep:])
    oldest = _stamp(hourly[-keep:][0])
    return [name for name in ordered
            if name not in kept_hourly and (SNAPSHOT_TAG not in name or _stamp(name) < oldest)]


def write_manifest(directory: Path, manifest: Manifest, keep: int) -> Path:
    """Write ``manifest``, point ``LATEST`` at it, then delete what :func:`manifests_to_prune` names
    (never the manifest just written)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{manifest.snapshot_id}.json"
    _atomic_write(path, manifest.to_json())
    _atomic_write(directory / LATEST, path.name + "\n")
    for stem in manifests_to_prune([p.stem for p in directory.glob("*.json")], keep):
        if stem != path.stem:
            (directory / f"{stem}.json").unlink(missing_ok=True)
    return path


def latest_manifest_path(directory: Path) -> Path | None:
    pointer = directory / LATEST
    if not pointer.is_file():
        return None
    return directory / pointer.read_text().strip()


def read_manifest(path: Path) -> Manifest:
    try:
        return Manifest.from_dict(json.loads(Path(path).read_text()))
    except (OSError, ValueError) as error:  # JSONDecodeError is a ValueError
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
