"""The documents a user reads: sizes, references into the tree, and the committed evaluation reports.

Why: README, docs/ and BENCHMARKS.md are what a user who clones the project has; a reference to a
file or function that moved, or a committed report missing what the evaluation promises (the
placebo, the ceiling, every seed), misleads them silently. These checks read the files only.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]
TREE_ROOTS = ("solaris/", "jobs/", "udfs/", "sql/", "tests/", "dags/", "bench/", "docs/", "scripts/", "conf/", ".ci/")
REPORTS = sorted(path for path in (ROOT / "docs").glob("evaluation-*") if path.is_dir())


def tree_references(text: str) -> list[str]:
    """Paths into the tree a document names in code spans or links (``solaris/x.py``, ``solaris/x.fn``)."""
    spans = re.findall(r"`([^`\s]+)`", text) + re.findall(r"\]\(([^)\s#]+)", text)
    found = []
    for span in spans:
        reference = span.split("::")[0].rstrip(":,.")
        if reference.startswith(TREE_ROOTS) and not any(mark in reference for mark in "<*{"):
            found.append(reference)
    return found


def resolves(reference: str) -> bool:
    """A file or folder of the tree, or ``module.symbol`` with the symbol defined in ``module.py``.

    A path with neither an extension nor a symbol (``solaris/precompute/speculation``) names a
    module loosely; it resolves when that module or folder exists.
    """
    path = ROOT / reference
    if path.exists() or (not path.suffix and path.with_suffix(".py").exists()):
        return True
    module, _, symbol = reference.rpartition(".")
    source = ROOT / f"{module}.py"
    if not module or not source.exists():
        return False
    definition = rf"^\s*(def|class)\s+{re.escape(symbol)}\b|^{re.escape(symbol)}\b"
    return re.search(definition, source.read_text(), re.M) is not None


def test_the_reference_check_tells_present_from_missing() -> None:
    assert resolves("solaris/tiers.py")
    assert resolves("solaris/timeutil.parse_utc")
    assert not resolves("solaris/timeutil.no_such_function")
    assert not resolves("solaris/no_such_module.py")
    assert tree_references("see `solaris/tiers.py` and [x](docs/models.md), not `<wh>/x` or `replay.json`") == [
        "solaris/tiers.py", "docs/models.md"]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_every_reference_into_the_tree_exists(document: Path) -> None:
    missing = [ref for ref in tree_references(document.read_text()) if not resolves(ref)]
    assert not missing, f"{document.name} names what is not in the tree: {missing}"


def test_readme_and_benchmarks_stay_short() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150
    assert len((ROOT / "BENCHMARKS.md").read_text().splitlines()) <= 250


def test_there_are_committed_reports() -> None:
    assert {path.name for path in REPORTS} >= {"evaluation-ml1m", "evaluation-ml100k"}


@pytest.mark.parametrize("report", REPORTS, ids=lambda path: path.name)
def test_a_committed_report_holds_every_seed_the_placebo_and_the_ceiling(report: Path) -> None:
    metrics = json.loads((report / "metrics.json").read_text())
    assert (report / "report.md").read_text().strip()
    variants = set(metrics["variants"])
    assert any("placebo" in name for name in variants) and any("oracle" in name for name in variants)
    comparisons = metrics["intervals"]["pooled"]["comparisons"]
    assert comparisons
    for comparison in comparisons.values():
        assert {comparison["variant"], comparison["reference"]} <= variants
        difference = comparison["ne_difference"]
        assert difference["low"] <= difference["estimate"] <= difference["high"]
    expected = {(window["t0"], seed) for window in metrics["windows"] for seed in metrics["seeds"]}
    assert len(metrics["windows"]) >= 2
    assert {(result["t0"], result["seed"]) for result in metrics["per_seed"]} == expected
    assert len(metrics["per_seed"]) == len(expected)
    for result in metrics["per_seed"]:
        assert set(result["variants"]) == variants
