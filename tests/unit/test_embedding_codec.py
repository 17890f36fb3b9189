import numpy as np
import pyarrow as pa
import pytest

from solaris.storage.embedding_codec import decode, encode_arrow


def test_round_trip_bit_exact_including_extremes():
    rng = np.random.default_rng(0)
    values = rng.standard_normal((50, 64)).astype(np.float32)
    values[0, :4] = [0.0, -0.0, np.finfo(np.float32).tiny, np.finfo(np.float32).max]
    encoded = encode_arrow(values)
    assert encoded.type == pa.binary() and len(encoded) == 50
    assert all(len(v.as_py()) == 256 for v in encoded)
    for held in (encoded, [v.as_py() for v in encoded], pa.chunked_array([encoded.slice(0, 20), encoded.slice(20)])):
        # bit-exact: a codec round trip copies the bytes, whatever holds them
        np.testing.assert_array_equal(decode(held, 64), values)


def test_layout_is_little_endian_float32():
    encoded = encode_arrow(np.array([[1.0, -2.5]], dtype=np.float32))
    assert encoded[0].as_py() == np.array([1.0, -2.5], dtype="<f4").tobytes()


def test_wrong_dimension_and_nulls_are_refused():
    encoded = encode_arrow(np.zeros((3, 8), dtype=np.float32))
    with pytest.raises(ValueError, match="dim"):
        decode(encoded, 16)
    with pytest.raises(ValueError, match="null"):
        decode(pa.array([b"\x00" * 4, None], pa.binary()), 1)
    with pytest.raises(ValueError):
        encode_arrow(np.zeros(5, dtype=np.float32))


def test_empty():
    assert decode(encode_arrow(np.zeros((0, 4), dtype=np.float32)), 4).shape == (0, 4)
