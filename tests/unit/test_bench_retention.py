"""bench/retention.py's footprint: live rows and bytes of the latest version, bytes on disk beside them."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.unit.bench_scripts import bench_script


@pytest.fixture(scope="module")
def retention():
    with bench_script("retention") as module:
        yield module


def test_footprint_counts_live_rows_and_keeps_removed_files_on_disk(retention, tmp_path):
    from deltalake import DeltaTable, write_deltalake

    folder = tmp_path / "t"
    assert retention.footprint(folder) == retention.Footprint(0, 0, 0)
    write_deltalake(str(folder), pa.table({"x": list(range(10))}))
    write_deltalake(str(folder), pa.table({"x": list(range(5))}), mode="append")
    both = retention.footprint(folder)
    assert both.rows == 15 and 0 < both.live_bytes < both.disk_bytes
    DeltaTable(str(folder)).delete("x < 5")  # rewrites the files: the old ones stay on disk until VACUUM
    after = retention.footprint(folder)
    assert after.rows == 5 and after.live_bytes < both.live_bytes and after.disk_bytes > both.disk_bytes
