"""bench/vacuum.py's pure part: medians leave the warm-up VACUUM out."""

from __future__ import annotations

import pytest

from tests.unit.bench_scripts import bench_script


@pytest.fixture(scope="module")
def vacuum():
    with bench_script("vacuum") as module:
        yield module


def test_the_first_vacuum_of_each_setting_is_left_out_of_its_median(vacuum):
    assert vacuum.medians({"a": [100.0, 3.0, 5.0, 4.0], "b": [7.0]}) == {"a": 4.0, "b": 7.0}
