"""run_cycle's seconds: each stage's own, the block's rest as `runs_audit`, a caller's observer apart.

A fake clock and fake stages (no Spark): the stages and the observer advance the clock by known
amounts, so the accounting is checked exactly, not timed.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from solaris import pipeline
from solaris.config import load_config


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(pipeline, "time", SimpleNamespace(perf_counter=fake))  # this module's clock only

    @contextmanager
    def open_tick(*args, **kwargs):
        yield None
        fake.now += 0.25  # the tick's one `runs` commit, at the block's end

    monkeypatch.setattr(pipeline, "open_tick", open_tick)

    def fake_run(name):
        def run(*args, **kwargs):
            fake.now += 2.0
            return SimpleNamespace(stage=name)
        return run

    monkeypatch.setattr(pipeline, "CYCLE", tuple(replace(stage, run=fake_run(stage.name)) for stage in pipeline.CYCLE))
    return fake


def test_observer_time_is_reported_apart_and_not_in_the_tick(clock, tmp_path):
    config = load_config(overrides=[f"warehouse={tmp_path}"])
    as_of = datetime(2000, 12, 1, 1, tzinfo=timezone.utc)
    entered = []

    @contextmanager
    def observe(name):
        entered.append(name)
        clock.now += 0.5  # a benchmark's counters before the stage
        yield
        clock.now += 0.75  # and after it

    plain = pipeline.run_cycle(None, config, as_of, stages=["candidates", "score"])
    observed = pipeline.run_cycle(None, config, as_of, stages=["candidates", "score"], observe=observe)

    assert entered == ["candidates", "score"]
    for cycle in (plain, observed):
        assert cycle.seconds == {"candidates": 2.0, "score": 2.0, "runs_audit": 0.25}
        assert cycle.total_seconds == 4.25
    assert plain.observer_seconds == 0.0
    assert observed.observer_seconds == 2 * (0.5 + 0.75)
