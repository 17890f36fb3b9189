"""The stored embedding layout: packed little-endian float32 bytes (pure numpy/pyarrow).

Why binary and not ``array<float>``: in an earlier comparison on our machines (no script in this
repository repeats it), Spark's conversion of ``array<float>`` columns was the first bottleneck of
the scoring stage (0.3-0.5 of pure-torch throughput) while a packed binary column reached ~0.75;
with binary, ``bench/scoring.py`` measures the scoring path at 0.96 of plain torch with our FM
(BENCHMARKS.md, "Scoring throughput"). Readers decode with :func:`decode`
(Python/pyarrow/deltalake) or the SQL view in ``sql/pair_embeddings_view.sql`` (Spark SQL).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa

DTYPE = np.dtype("<f4")


def encode_arrow(embeddings: np.ndarray) -> pa.Array:
    """``[n, D]`` float32 -> Arrow ``binary`` array of ``4*D``-byte values, without per-row copies."""
    matrix = np.ascontiguousarray(embeddings, dtype=DTYPE)
    if matrix.ndim != 2:
        raise ValueError(f"embeddings must be 2-D, got shape {matrix.shape}")
    n, dim = matrix.shape
    offsets = np.arange(0, (n + 1) * dim * 4, dim * 4, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(matrix.tobytes())])


def decode(values: pa.Array | pa.ChunkedArray | Iterable[bytes], dim: int) -> np.ndarray:
    """Binary values (Arrow array, list of bytes) -> ``[n, dim]`` float32; wrong lengths raise."""
    if isinstance(values, (pa.ChunkedArray,)):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        if values.null_count:
            raise ValueError("embedding column has nulls")
        if pa.types.is_large_binary(values.type):
            values = values.cast(pa.binary())
        offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[values.offset: values.offset + len(values) + 1]
        lengths = np.diff(offsets)
        data = (
            np.frombuffer(values.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
            if len(values)
            else np.empty(0, np.uint8)
        )
    else:
        values = list(values)
        lengths = np.array([len(v) for v in values], dtype=np.int64)
        data = np.frombuffer(b"".join(values), dtype=np.uint8)
    if lengths.size and not (lengths == dim * 4).all():
        raise ValueError(f"embedding byte lengths {sorted(set(lengths.tolist()))[:5]} do not match dim {dim}")
    return data.view(DTYPE).reshape(-1, dim).astype(np.float32, copy=True)
