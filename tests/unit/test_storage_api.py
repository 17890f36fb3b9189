"""Only the storage API opens Delta tables, and one function decides the engine of an access.

Why: every read and write of a table follows its write rule and the engine rule of
``solaris.storage`` (docs/architecture.md §6, "Storage API"); a module that opened a table itself
would bypass both - a write without its idempotency rule, a read without the bound that keeps the
driver from holding too much. The check reads source text (and, for the engine rule, the syntax
tree), so it needs no JVM.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STORAGE = ROOT / "solaris" / "storage"
FOLDERS = ("solaris", "jobs", "udfs", "dags", "bench")

# What opening a Delta table looks like in Spark (delta-spark) and in deltalake (delta-rs).
OPENS = re.compile(
    r"""\.format\(\s*["']delta["']\s*\)"""  # spark.read.format("delta"), frame.write.format("delta")
    r"""|\bDeltaTable\s*\("""  # deltalake.DeltaTable(path)
    r"""|\bDeltaTable\s*\.\s*for(?:Path|Name)\b"""  # delta.tables.DeltaTable.forPath / forName
    r"""|\bwrite_deltalake\s*\("""  # deltalake.write_deltalake(path, rows)
)


def delta_opens(path: Path) -> list[str]:
    """``file:line: text`` of every line of ``path`` that opens a Delta table itself."""
    found = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if OPENS.search(line):
            found.append(f"{path}:{number}: {line.strip()}")
    return found


def _sources() -> list[Path]:
    return sorted(path for folder in FOLDERS for path in (ROOT / folder).rglob("*.py")
                  if "__pycache__" not in path.parts and STORAGE not in path.parents)


def test_nothing_outside_the_storage_api_opens_a_delta_table() -> None:
    offending = [hit for path in _sources() for hit in delta_opens(path)]
    assert not offending, "open Delta tables through solaris.storage (Table, Events, RunsLog):\n" + "\n".join(
        offending)


def test_the_check_catches_each_way_of_opening_a_table(tmp_path: Path) -> None:
    """Guard against a check that cannot fail: a file opening tables every way is refused, line by line."""
    bad = tmp_path / "stage.py"
    bad.write_text("\n".join([
        "frame = spark.read.format('delta').load(path)",
        'frame.write.format( "delta" ).save(path)',
        "from deltalake import DeltaTable",  # an import alone opens nothing
        "rows = DeltaTable(path).to_pyarrow_table()",
        "DeltaTable.forPath(spark, path).vacuum()",
        "DeltaTable.forName(spark, 'events').delete('true')",
        "write_deltalake(path, rows, mode='append')",
        "spark.read.parquet(path)",
    ]))
    hits = delta_opens(bad)
    assert [hit.split(":")[1] for hit in hits] == ["1", "2", "4", "5", "6", "7"]
    assert all(hit.startswith(f"{bad}:") for hit in hits)


def _functions(tree: ast.AST) -> list[ast.FunctionDef]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)]


def _reads_the_bound(node: ast.AST) -> bool:
    return any(isinstance(child, ast.Attribute) and child.attr == "driver_max_rows" for child in ast.walk(node))


def _returns_an_engine(function: ast.FunctionDef) -> bool:
    return any(isinstance(node, ast.Return) and isinstance(node.value, ast.Attribute)
               and isinstance(node.value.value, ast.Name) and node.value.value.id == "Engine"
               for node in ast.walk(function))


def test_one_function_decides_the_engine_and_only_it_reads_the_bound() -> None:
    """``storage.driver_max_rows`` is read in ``choose_engine`` alone (its definition aside), and no
    other function names an engine as its answer: every former decision site asks it."""
    readers, deciders = [], []
    for path in [*_sources(), *sorted(STORAGE.rglob("*.py"))]:
        tree = ast.parse(path.read_text())
        for function in _functions(tree):
            name = f"{path.relative_to(ROOT)}::{function.name}"
            if _reads_the_bound(function):
                readers.append(name)
            if _returns_an_engine(function):
                deciders.append(name)
        if path.name != "config.py":
            outside = [node for node in tree.body if not isinstance(node, (ast.FunctionDef, ast.ClassDef))]
            assert not any(_reads_the_bound(node) for node in outside), path
    assert readers == ["solaris/storage/engine.py::choose_engine"]
    assert deciders == ["solaris/storage/engine.py::choose_engine"]
