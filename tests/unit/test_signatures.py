"""Functions name what they are given: past five parameters, the rest are keyword-only.

Why: a call that passes six arrays or options by position (``impute_items(a, b, c, d, e, 5)``)
reads the same when two of them are swapped, and nothing catches it (same shapes, same dtypes).
Five covers the context most functions take first (a Spark session, the config, the as-of, a run
id) plus the one thing they work on; everything after it is named at the call. Read with
:mod:`ast`: no Spark, no torch.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("solaris", "jobs", "udfs")
MAX_POSITIONAL = 5


def too_many_positional(root: Path, folders: tuple[str, ...] = FOLDERS) -> list[str]:
    """``file:line name`` of every function with more than MAX_POSITIONAL positional parameters."""
    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    arguments = node.args.posonlyargs + node.args.args
                    names = [arg.arg for arg in arguments if arg.arg not in ("self", "cls")]
                    if len(names) > MAX_POSITIONAL:
                        found.append(f"{path.relative_to(root)}:{node.lineno} {node.name}")
    return found


def test_no_function_takes_more_than_five_positional_parameters():
    assert too_many_positional(ROOT) == []


def test_the_check_finds_a_sixth_positional_parameter(tmp_path):
    (tmp_path / "solaris").mkdir()
    (tmp_path / "solaris" / "m.py").write_text(
        "def named(a, b, c, d, e, *, f): pass\n\n"
        "def positional(a, b, c, d, e, f): pass\n\n"
        "class C:\n    def method(self, a, b, c, d, e): pass\n")
    assert too_many_positional(tmp_path, ("solaris",)) == ["solaris/m.py:3 positional"]
