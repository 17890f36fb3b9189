"""The stage contract (docs/architecture.md §5), checked without Spark.

Every stage of the hourly list, and every replay measurement attached to one, is typed data: a
frozen options class, a ``run(step: StepContext, *, options: <its options>) -> <its result>`` and a
result class. ``run_cycle`` calls them all the same way, so a stage added to the list (here: fake
stages handed through ``definition=``) runs with no edit to it.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import get_type_hints

import pytest

from solaris import pipeline
from solaris.config import load_config
from solaris.pipeline import CYCLE, CycleResult, CycleSettings, Measurement, Stage, run_cycle
from solaris.tick import StepContext

ROOT = Path(__file__).resolve().parents[2]
STEPS = [*CYCLE, *(measurement for stage in CYCLE for measurement in stage.measurements)]


@pytest.mark.parametrize("step", STEPS, ids=lambda step: step.name)
def test_every_step_has_typed_options_a_contract_run_and_a_result(step: Stage | Measurement) -> None:
    assert dataclasses.is_dataclass(step.options) and step.options.__dataclass_params__.frozen, step.name
    assert dataclasses.is_dataclass(step.result), step.name
    parameters = list(inspect.signature(step.run).parameters.values())
    assert [(p.name, p.kind) for p in parameters] == [
        ("step", inspect.Parameter.POSITIONAL_OR_KEYWORD), ("options", inspect.Parameter.KEYWORD_ONLY)], step.name
    hints = get_type_hints(step.run)
    assert hints == {"step": StepContext, "options": step.options, "return": step.result}, step.name


@pytest.mark.parametrize("stage", CYCLE, ids=lambda stage: stage.name)
def test_every_stage_makes_its_options_from_the_cycle_settings_and_has_its_job(stage: Stage) -> None:
    for settings in (CycleSettings(), CycleSettings(measure=True, vacuum=True)):
        assert isinstance(stage.options_for(settings), stage.options)
    assert (ROOT / "jobs" / f"{stage.name}.py").is_file()
    earlier = {other.name for other in CYCLE[:CYCLE.index(stage)] if other.half == stage.half}
    assert set(stage.upstream) <= earlier, stage.name


def test_run_cycle_special_cases_no_stage_by_name() -> None:
    source = inspect.getsource(run_cycle)
    names = "|".join(step.name for step in STEPS)
    assert not re.search(rf"""['"]({names})['"]""", source)
    assert ".name ==" not in source and ".name in (" not in source


# --- a stage list with a stage run_cycle has never seen ------------------------------------------------------


@dataclass(frozen=True)
class SpeculateOptions:
    wide: bool = False


@dataclass(frozen=True)
class SpeculateResult:
    run_id: str
    wide: bool


@dataclass(frozen=True)
class AuditOptions:
    seen: str


@dataclass(frozen=True)
class AuditResult:
    text: str


@dataclass(frozen=True)
class SummaryOptions:
    pass


@dataclass(frozen=True)
class SummaryResult:
    tick_as_of: datetime


def speculate(step: StepContext, *, options: SpeculateOptions) -> SpeculateResult:
    return SpeculateResult(run_id=step.run_id, wide=options.wide)


def audit(step: StepContext, *, options: AuditOptions) -> AuditResult:
    return AuditResult(text=f"{options.seen} at {step.as_of:%H}")


def summarise(step: StepContext, *, options: SummaryOptions) -> SummaryResult:
    assert step.tick == "the tick"  # handed the tick run_cycle opened
    return SummaryResult(tick_as_of=step.as_of)


AUDIT: Measurement[SpeculateResult, AuditOptions, AuditResult] = Measurement(
    name="audit", command=None, run=audit, options=AuditOptions, result=AuditResult,
    options_from=lambda speculated: AuditOptions(seen=speculated.run_id))
SPECULATE: Stage[SpeculateOptions, SpeculateResult] = Stage(
    name="speculate", half="precompute", upstream=(), doc="A fake first stage.", command="speculate", run=speculate,
    options=SpeculateOptions, result=SpeculateResult, options_from=lambda cycle: SpeculateOptions(wide=cycle.vacuum),
    measurements=(AUDIT,))
SUMMARY: Stage[SummaryOptions, SummaryResult] = Stage(
    name="summary", half="enrichment", upstream=(), doc="A fake new stage.", command="summarise", run=summarise,
    options=SummaryOptions, result=SummaryResult)


@pytest.fixture
def fake_tick(monkeypatch):
    @contextmanager
    def open_tick(*args, **kwargs):
        yield "the tick"

    monkeypatch.setattr(pipeline, "open_tick", open_tick)


def test_run_cycle_runs_a_stage_list_it_has_never_seen(fake_tick, tmp_path) -> None:
    config = load_config(overrides=[f"warehouse={tmp_path}"])
    as_of = datetime(2000, 12, 1, 3, tzinfo=timezone.utc)
    ids = pipeline.run_ids(as_of)

    measured = run_cycle(None, config, as_of, measure=True, vacuum=True, definition=(SPECULATE, SUMMARY))
    assert measured.result(SPECULATE) == SpeculateResult(run_id=ids["precompute"], wide=True)
    assert measured.result(AUDIT) == AuditResult(text=f"{ids['precompute']} at 03")
    assert measured.require(SUMMARY).tick_as_of == as_of
    assert list(measured.seconds) == ["speculate", "audit", "summary", "runs_audit"]

    plain = run_cycle(None, config, as_of, stages=["summary"], definition=(SPECULATE, SUMMARY))
    assert plain.result(SPECULATE) is None and plain.result(AUDIT) is None
    with pytest.raises(KeyError, match="speculate did not run"):
        plain.require(SPECULATE)
    with pytest.raises(KeyError, match="unknown stages"):
        run_cycle(None, config, as_of, stages=["candidates"], definition=(SPECULATE, SUMMARY))


def test_a_result_of_the_wrong_type_is_refused() -> None:
    cycle = CycleResult(as_of=datetime(2000, 12, 1, tzinfo=timezone.utc), results={"speculate": AuditResult("x")})
    with pytest.raises(TypeError, match="speculate returned a AuditResult, not its SpeculateResult"):
        cycle.result(SPECULATE)
