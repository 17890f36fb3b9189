"""Every exact comparison in the suite says why it may be exact.

Why: a float32 result is bit-for-bit the same only where the code promises it (integer ids, tiers and
masks; codec round trips; vectors copied without arithmetic; one computation repeated on the same
shapes in one process). Elsewhere - a row's position in a batch, another batch shape, another CPU's
kernels - the last bits move, and a ``torch.equal`` on model outputs fails on one machine and not on
another (issue #72). So each ``torch.equal`` / ``array_equal`` / ``assert_equal`` call carries
``# bit-exact: <why>`` on its line or on the comment line right above it; a float comparison the
code does not promise exactly uses :mod:`tests.tolerance` instead. The rule is textual on purpose:
whether an array holds floats is not known before the test runs, and a reader needs the reason anyway.
A bare ``==`` on floats is not scanned (by text it looks like any integer comparison): it follows the
same rule, by review.
"""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
EXACT_CALL = re.compile(r"\.equal\(|array_equal\(|assert_equal\(")
MARKER = "# bit-exact:"


def unmarked_exact_comparisons(source: str) -> list[tuple[int, str]]:
    """``(line number, line)`` of every exact comparison without the marker on it or on the comment above."""
    lines = source.splitlines()
    found = []
    for number, line in enumerate(lines, start=1):
        if not EXACT_CALL.search(line.split("#", 1)[0]):  # a call in code, not in a comment
            continue
        above = lines[number - 2].strip() if number > 1 else ""
        if MARKER not in line and not (above.startswith("#") and MARKER in above):
            found.append((number, line.strip()))
    return found


def test_every_exact_comparison_in_the_suite_says_why_it_is_exact() -> None:
    offenders = [f"{path.relative_to(TESTS.parent)}:{number}: {line}"
                 for path in sorted(TESTS.rglob("*.py")) if path != Path(__file__).resolve()
                 for number, line in unmarked_exact_comparisons(path.read_text())]
    assert not offenders, (f"exact comparisons without '{MARKER} <why>' (or use tests.tolerance.assert_close):\n"
                           + "\n".join(offenders))


def test_the_check_catches_an_unmarked_comparison_and_accepts_a_marked_one(tmp_path: Path) -> None:
    module = tmp_path / "test_example.py"
    module.write_text(
        "assert torch.equal(model(batch), loaded(batch))\n"  # 1: unmarked, on model outputs
        "np.testing.assert_array_equal(ids, expected)  # bit-exact: integer ids\n"  # 2: marked on the line
        "# bit-exact: a codec round trip\n"
        "np.testing.assert_array_equal(decode(encode(v)), v)\n"  # 4: marked on the comment above
        "x = 1  # bit-exact: a marker above code does not count\n"
        "assert np.array_equal(a, b)\n"  # 6: the line above is code, not a comment
        "assert_close(a, b)  # not torch.equal(a, b): a call named in a comment only\n"
    )
    found = unmarked_exact_comparisons(module.read_text())
    assert [number for number, _ in found] == [1, 6]
