"""The package's layout follows the data flow, and no module reaches back up it.

Layers, upstream first: the frame every stage shares (config, errors, time, Spark session, job
entry, storage), then the stages in data-flow order (ingest -> models -> precompute -> enrichment
-> serving -> evaluation), then the executors (``udfs``, ``stages``), the cycle that chains them
(``pipeline``), what drives it (``drivers``: replay and evaluate; ``orchestration``, ``cli``) and, on
top, the command-line entry points ``jobs/<name>.py``. A
module may import its own layer or any layer before it; importing a later layer would make an
upstream stage depend on a downstream one, which is what this test refuses. The check reads
imports with :mod:`ast`, so it needs neither Spark nor torch.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LAYERS: tuple[tuple[str, ...], ...] = (
    ("solaris", "solaris.errors", "solaris.timeutil", "solaris.config", "solaris.tiers", "solaris.provenance"),
    ("solaris.spark", "solaris.runtime", "solaris.storage", "solaris.class_archive", "solaris.tick"),
    # Progress of long loops (log lines, terminal bars): the models, the replay and the evaluation report with it.
    ("solaris.progress",),
    ("solaris.ingest",),
    ("solaris.models",),
    ("solaris.precompute",),
    ("solaris.enrichment",),
    ("solaris.serving",),
    ("solaris.evaluation",),
    ("solaris.udfs",),
    ("solaris.stages",),
    ("solaris.pipeline",),
    # The drivers that run the whole cycle, and what launches jobs.
    ("solaris.drivers", "solaris.orchestration", "solaris.cli"),
    # The command-line entry points (jobs/<name>.py): each parses its arguments and calls one stage or driver.
    ("solaris.jobs",),
)


def _module_name(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    parts = list(relative.parts)
    if parts[0] in {"jobs", "udfs"}:
        parts = ["solaris", *parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _layer(module: str) -> int:
    best, depth = -1, -1
    for index, names in enumerate(LAYERS):
        for name in names:
            matches = module == name or module.startswith(name + ".")
            if matches and name.count(".") > depth and not (name == "solaris" and module != "solaris"):
                best, depth = index, name.count(".")
    if best < 0:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS in {Path(__file__).name}")
    return best


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("solaris"):
            found.add(node.module)
            if node.module in {"solaris", "solaris.jobs", "solaris.udfs"} or node.module.count(".") == 1:
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("solaris"))
    return found


SOURCES = sorted(
    p for folder in ("solaris", "jobs", "udfs") for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts
)


def test_every_module_has_a_layer() -> None:
    for path in SOURCES:
        _layer(_module_name(path))


def _back_references(module: str, path: Path) -> list[str]:
    own = _layer(module)
    return sorted(name for name in _imports(path) if _is_module(name) and _layer(name) > own)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_imports_a_later_stage(path: Path) -> None:
    module = _module_name(path)
    assert not _back_references(module, path), f"{module} imports a downstream stage"


def _is_module(name: str) -> bool:
    """``from solaris.x import y`` lists ``solaris.x.y``, which is a module only if it exists."""
    parts = name.split(".")
    base = {"jobs": ROOT / "jobs", "udfs": ROOT / "udfs"}.get(parts[1] if len(parts) > 1 else "", None)
    folder = base if base is not None else ROOT / "solaris"
    rest = parts[2:] if base is not None else parts[1:]
    target = folder.joinpath(*rest) if rest else folder
    return target.with_suffix(".py").exists() or (target / "__init__.py").exists()


ENTRY_POINTS = sorted((ROOT / "jobs").glob("*.py"))
# What an entry point may define: its parser, its main, and the line it prints when the run is done.
ENTRY_DEFINITIONS = {"build_parser", "main", "_report"}


@pytest.mark.parametrize("path", ENTRY_POINTS, ids=lambda p: p.name)
def test_entry_points_only_parse_arguments_and_call_their_stage(path: Path) -> None:
    """``jobs/<name>.py`` is thin: no other job imported, nothing defined beyond the entry's functions, so
    every stage's code lives in the package where the pipeline, the tests and the benchmarks import it."""
    tree = ast.parse(path.read_text())
    other_jobs = sorted(name for name in _imports(path) if name.startswith("solaris.jobs") and _is_module(name))
    assert not other_jobs, f"{path.name} imports {other_jobs}"
    defined = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    assigned = [node for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))]
    assert defined <= ENTRY_DEFINITIONS and not assigned, f"{path.name} defines {sorted(defined)} {len(assigned)}"


def test_the_check_catches_a_back_reference(tmp_path: Path) -> None:
    """Guard against a check that cannot fail: an ingest module importing the resolver is refused."""
    fake = tmp_path / "rules.py"
    fake.write_text("from solaris.serving.resolver import Resolver\nfrom solaris.config import SolarisConfig\n")
    assert _back_references("solaris.ingest.rules", fake) == ["solaris.serving.resolver"]


# Module-level containers a module may change, each with the bound that keeps it from growing or
# carrying one tick's data into another (stated where it is defined).
BOUNDED_MODULE_STATE = {
    # item-item statistics of one period shared by the runs of that period in one session; the
    # entries of any other period are dropped before a run adds its own
    ("solaris.stages.candidates", "_ITEM_STATS"),
    # the Python worker's loaded models, least recently used out first beyond MODEL_CACHE_SIZE
    ("solaris.udfs.fm_scoring", "_MODEL_CACHE"),
}
_MUTATORS = {"append", "extend", "insert", "pop", "popitem", "clear", "update", "setdefault", "add", "discard",
             "remove"}
_CONTAINERS = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)
_CONTAINER_CALLS = {"dict", "list", "set", "defaultdict", "OrderedDict", "deque", "Counter"}


def _module_state(path: Path) -> set[str]:
    """Module-level containers that the module changes anywhere (state kept between calls)."""
    tree = ast.parse(path.read_text())
    containers = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) and node.value is not None else []
        value = getattr(node, "value", None)
        called = getattr(value.func, "id", getattr(value.func, "attr", "")) if isinstance(value, ast.Call) else ""
        mutable = isinstance(value, _CONTAINERS) or called in _CONTAINER_CALLS
        if mutable:
            containers.update(t.id for t in targets if isinstance(t, ast.Name))
    changed, declared_global = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            declared_global.update(node.names)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS:
            if isinstance(node.func.value, ast.Name):
                changed.add(node.func.value.id)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            changed.update(t.value.id for t in targets
                           if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name))
    return (containers & changed) | declared_global


def test_no_module_keeps_state_between_ticks() -> None:
    """What the stages of a tick share is handed to them (``solaris.tick.Tick``), not kept in module
    variables that would outlive the tick; the only module state left has a stated bound."""
    found = {(_module_name(path), name) for path in SOURCES for name in _module_state(path)}
    assert found == BOUNDED_MODULE_STATE


def test_the_state_check_catches_a_module_cache(tmp_path: Path) -> None:
    """Guard against a check that cannot fail: a dict filled by a function, a buffer swapped by
    ``global``, a list appended to; a constant mapping that is only read is not state."""
    fake = tmp_path / "stage.py"
    fake.write_text("CACHE: dict = {}\nBUFFER = None\nPARTS = []\nNAMES = {'a': 1}\n"
                    "def run(key):\n    CACHE[key] = 1\n    PARTS.append(key)\n    return NAMES[key]\n"
                    "def block():\n    global BUFFER\n    BUFFER = []\n")
    assert _module_state(fake) == {"CACHE", "BUFFER", "PARTS"}


def test_the_command_list_keeps_every_name_apart_from_its_summary():
    from solaris.cli import COMMANDS, _usage

    lines = {line.split()[0]: line for line in _usage().splitlines() if line.startswith("  ")}
    assert set(lines) == set(COMMANDS)  # a name glued to its summary would not be found here
    for name, (_, summary) in COMMANDS.items():
        assert lines[name].split(None, 1) == [name, summary]
