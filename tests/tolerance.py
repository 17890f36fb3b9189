"""The one tolerance of the suite's float comparisons, for results the code does not promise bit-for-bit.

Why a tolerance at all: a float32 model output is a sum of products, and the order of that sum is
the kernel's choice: SIMD width and tail handling (the CPU, or ``ATEN_CPU_CAPABILITY``), row blocking
(a row's position in the batch, the batch's shape), the thread count. Two orders of the same sum
differ in the last bits: relative differences of a few 1e-7 (float32's epsilon is 1.2e-7), up to
~1e-6 after a few layers. Seen on an AMD EPYC: two identical rows of one batch scored -0.16816831
and -0.16816829 (relative 1e-7), which ``torch.equal`` calls different.

Why these values: :data:`RTOL` = 1e-5 leaves 10x headroom over those ~1e-6 relative differences;
:data:`ATOL` = 1e-6 covers values near zero, where a relative bound means nothing (a sum that cancels
to ~0 keeps an absolute error of a few float32 ulps of its terms, which are of order 1 here). A
broken rule moves a logit or a vector by far more (a wrong input vector: ~1e-2), which
:func:`assert_far_apart` requires of the negative checks, so a test still fails when its rule breaks.

Where the code does promise bit-for-bit equality (integer ids, tiers and masks, codec round trips,
vectors copied without arithmetic, one computation repeated on the same shapes in one process), the
test compares exactly and says why on the line, ``# bit-exact: <why>``
(``tests/unit/test_portable_comparisons.py`` checks every exact comparison carries it).
"""

from __future__ import annotations

import numpy as np

RTOL = 1e-5
ATOL = 1e-6
# how many tolerances apart two results must be for :func:`assert_far_apart`
FAR = 100.0


def _numpy(value) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor, without importing torch here
        value = value.detach().cpu().numpy()
    return np.asarray(value, dtype=np.float64)


def assert_close(actual, expected, err_msg: str = "") -> None:
    """``actual`` equals ``expected`` within :data:`RTOL` / :data:`ATOL` (numpy arrays or torch tensors)."""
    np.testing.assert_allclose(_numpy(actual), _numpy(expected), rtol=RTOL, atol=ATOL, err_msg=err_msg)


def assert_far_apart(first, second, err_msg: str = "") -> None:
    """``first`` and ``second`` differ somewhere by more than :data:`FAR` times the tolerance.

    Why not ``not torch.equal``: a last-bit difference from another kernel would satisfy it, so a
    negative check on it could never fail; the difference of a broken rule is orders of magnitude larger.
    """
    a, b = _numpy(first), _numpy(second)
    margin = FAR * (ATOL + RTOL * np.abs(b))
    prefix = f"{err_msg}: " if err_msg else ""
    assert (np.abs(a - b) > margin).any(), (
        f"{prefix}max difference {np.abs(a - b).max():.3g} is within {FAR:g}x the tolerance")
