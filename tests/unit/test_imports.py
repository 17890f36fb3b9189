"""Imports sit at the top of modules, except the heavy optional dependencies named in one allow list.

Why some imports wait inside functions: a DAG file, ``solaris --help`` and the resolver must not pay
for (or even have) a JVM bridge, torch or FAISS, so the modules they import load those only in the
functions that use them. That is the one reason an import may sit in a function, so the allow list
below names the packages it applies to, and a ``solaris`` module may be imported late only when it
loads one of them when imported (directly, or through the ``solaris`` modules it imports first).
Anything else imported in a function hides a dependency from the reader of the module's top, and
this test refuses it naming file:line. It reads the source with :mod:`ast`: no Spark, no torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("solaris", "jobs", "udfs")

# The heavy optional dependencies: imported where used, so that light callers never load them.
LAZY_IMPORTS = frozenset({
    "pyspark", "delta",  # the JVM bridge and Delta's Spark API: a DAG file or the resolver has no JVM
    "deltalake", "pyarrow", "pandas", "numpy",  # the driver's table engine and its frames
    "torch", "faiss",  # the models and the KNN index
    "matplotlib",  # the report's plots
    "rich",  # the terminal's progress bars, only when a terminal is attached
})


@dataclass(frozen=True)
class LateImport:
    where: str  # file:line
    module: str


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[0] in ("jobs", "udfs"):  # packaged as solaris.jobs / solaris.udfs
        parts = ["solaris", *parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    """Modules an import statement may load: ``from a.b import c`` loads a.b and maybe a.b.c."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level or node.module is None:
        return []
    return [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]


def _top_level_imports(tree: ast.Module) -> list[str]:
    names: list[str] = []
    for statement in tree.body:
        if isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.unparse(statement.test):
            continue  # for the type checker only: never run
        body = statement.body if isinstance(statement, ast.Try) else [statement]
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names += _imported(node)
    return names


def late_imports(root: Path, folders: tuple[str, ...] = FOLDERS) -> list[LateImport]:
    """Imports inside functions that neither name an allow-listed package nor a module loading one."""
    trees = {_module_name(path, root): (path, ast.parse(path.read_text()))
             for folder in folders for path in sorted((root / folder).rglob("*.py"))}
    heavy: dict[str, bool] = {}

    def loads_heavy(module: str, seen: frozenset[str] = frozenset()) -> bool:
        if module not in heavy:
            if module not in trees or module in seen:
                return False
            imports = _top_level_imports(trees[module][1])
            heavy[module] = any(name.split(".")[0] in LAZY_IMPORTS or loads_heavy(name, seen | {module})
                                for name in imports)
        return heavy[module]

    found = []
    for path, tree in trees.values():
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                names = _imported(node)
                if any(name.split(".")[0] in LAZY_IMPORTS or loads_heavy(name) for name in names):
                    continue
                found.append(LateImport(f"{path.relative_to(root)}:{node.lineno}", names[0] if names else "."))
    return sorted(set(found), key=lambda late: late.where)


def test_imports_inside_functions_are_only_the_heavy_optional_ones():
    assert late_imports(ROOT) == []


def test_the_check_refuses_a_light_import_inside_a_function_and_allows_a_heavy_one(tmp_path):
    package = tmp_path / "solaris"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "light.py").write_text("import json\n")
    (package / "heavy.py").write_text("import torch\n")
    (package / "user.py").write_text(
        "def a():\n    import json\n\n"  # stdlib: belongs at the top
        "def b():\n    from solaris import light\n\n"  # a light module: at the top too
        "def c():\n    import pyspark\n    from solaris import heavy\n")  # allowed: heavy, directly or not
    found = late_imports(tmp_path, ("solaris",))
    assert [(late.where, late.module) for late in found] == [("solaris/user.py:2", "json"),
                                                             ("solaris/user.py:5", "solaris")]
