"""Load a script of ``bench/`` (not a package) as a module, for the unit tests of its pure parts."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


@contextmanager
def bench_script(name: str) -> Iterator[ModuleType]:
    """``bench/<name>.py`` as module ``bench_<name>``, registered in ``sys.modules`` while in use
    (dataclasses look their module up there) and removed afterwards."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]
