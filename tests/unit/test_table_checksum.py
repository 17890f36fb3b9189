"""The tests' table comparison (``tests.conftest.table_checksum``) tells tables apart by content only.

The reliability tests decide "unchanged" and "same as the uninterrupted run" with it, so it must
change with any value (one float bit, one byte of an embedding, a duplicated row) and must not
change with row order or how the rows were split into files and commits.
"""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pyarrow as pa
from deltalake import write_deltalake

from tests.conftest import table_checksum


def _rows(order: list[int], score_of_last: float = 0.25, embedding_of_first: bytes = b"\x00\x01") -> pa.Table:
    users = [1, 2, 3]
    scores = [0.5, 0.125, score_of_last]
    embeddings = [embedding_of_first, b"\x02\x03", b"\x04\x05"]
    stamps = [datetime(2026, 1, 8, hour, tzinfo=timezone.utc) for hour in (0, 1, 2)]
    neighbours = [[2, 3], [1], []]
    return pa.table({
        "user_id": pa.array([users[i] for i in order], pa.int64()),
        "score": pa.array([scores[i] for i in order], pa.float64()),
        "embedding": pa.array([embeddings[i] for i in order], pa.binary()),
        "ts": pa.array([stamps[i] for i in order], pa.timestamp("us", tz="UTC")),
        "neighbors": pa.array([neighbours[i] for i in order], pa.list_(pa.int64())),
    })


def _table(folder, *parts: pa.Table) -> str:
    path = str(folder)
    for part in parts:
        write_deltalake(path, part, mode="append")
    return path


def test_same_rows_in_any_order_or_commits_are_equal_and_any_changed_value_is_not(tmp_path):
    reference = table_checksum(_table(tmp_path / "a", _rows([0, 1, 2])))
    assert reference[0] == 3
    # the same rows, another order, written in two commits
    assert table_checksum(_table(tmp_path / "b", _rows([2, 0]), _rows([1]))) == reference
    # one float one ulp away, one byte of a binary value, a duplicated row: each is another table
    nudged = float(np.nextafter(0.25, 1.0))
    assert table_checksum(_table(tmp_path / "c", _rows([0, 1, 2], score_of_last=nudged))) != reference
    assert table_checksum(_table(tmp_path / "d", _rows([0, 1, 2], embedding_of_first=b"\x00\x02"))) != reference
    assert table_checksum(_table(tmp_path / "e", _rows([0, 1, 2]), _rows([1]))) != reference
