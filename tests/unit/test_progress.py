"""solaris.progress: the line, the time-left estimate, the throttle, and silence at WARNING (fake clock)."""

from __future__ import annotations

import logging

import pytest

from solaris.progress import Position, due, format_duration, progress, progress_line, seconds_left


class FakeClock:
    """A clock the test moves by hand: no real time in these tests."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def logger() -> logging.Logger:
    return logging.getLogger("solaris.test_progress")


def _lines(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "solaris.test_progress" and r.levelno == level]


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (44.6, "45s"), (62, "1m02s"), (3599, "59m59s"),
                                           (7500, "2h05m"), (-3, "0s")])
def test_durations_read_at_a_glance(seconds, text):
    assert format_duration(seconds) == text


def test_time_left_is_the_pace_so_far_applied_to_the_rest():
    assert seconds_left(60, 0.25) == pytest.approx(180)
    assert seconds_left(60, 0) is None  # nothing done yet: no estimate
    assert seconds_left(60, 1) == 0


def test_throttle_logs_after_the_interval_and_always_the_last_step():
    assert not due(now=10, last_logged=0, interval=30, last_step=False)
    assert due(now=30, last_logged=0, interval=30, last_step=False)
    assert due(now=1, last_logged=0, interval=30, last_step=True)


def test_line_has_step_percent_metric_elapsed_and_time_left():
    line = progress_line("training FM", "epoch", Position(3, 20), elapsed=62, metric="valid NE 0.8120")
    assert line == "training FM: epoch 3/20 (15 %), valid NE 0.8120, elapsed 1m02s, ~5m51s left"
    inside = progress_line("training FM", "epoch", Position(1, 2, 50, 100, "batch"), elapsed=90)
    assert inside == "training FM: epoch 2/2, batch 50/100 (75 %), elapsed 1m30s, ~30s left"
    done = progress_line("replay", "tick", Position(4, 4), elapsed=10)
    assert done == "replay: tick 4/4 (100 %), elapsed 10s"


def test_many_fast_steps_log_at_most_once_per_interval_and_the_last(caplog, logger):
    clock = FakeClock()
    caplog.set_level(logging.INFO, logger=logger.name)
    with progress("fine-tunes", total=10, unit="variant", log=logger, interval=30, clock=clock, bar=False) as p:
        for _ in range(10):
            clock.now += 7  # 7 s a step: a line at the first step 30 s after the previous one
            p.advance()
    assert _lines(caplog) == [
        "fine-tunes: variant 5/10 (50 %), elapsed 35s, ~35s left",
        "fine-tunes: variant 10/10 (100 %), elapsed 1m10s",
    ]


def test_throttled_steps_go_to_debug(caplog, logger):
    clock = FakeClock()
    caplog.set_level(logging.DEBUG, logger=logger.name)
    with progress("x", total=3, log=logger, interval=30, clock=clock, bar=False) as p:
        for _ in range(3):
            clock.now += 1
            p.advance()
    assert len(_lines(caplog, logging.DEBUG)) == 2 and _lines(caplog) == ["x: step 3/3 (100 %), elapsed 3s"]


def test_a_loop_that_stops_early_still_logs_where_it_stopped(caplog, logger):
    clock = FakeClock()
    caplog.set_level(logging.INFO, logger=logger.name)
    with progress("training VM", total=8, unit="epoch", log=logger, interval=30, clock=clock, bar=False) as p:
        for epoch in range(3):  # early stop after epoch 3 of 8
            clock.now += 2
            p.advance(metric=f"valid NE 0.{epoch}")
    assert _lines(caplog) == ["training VM: epoch 3/8 (38 %), valid NE 0.2, elapsed 6s, ~10s left"]


def test_progress_inside_a_long_step_is_throttled_and_never_forced(caplog, logger):
    clock = FakeClock()
    caplog.set_level(logging.INFO, logger=logger.name)
    with progress("training FM", total=2, unit="epoch", log=logger, interval=30, clock=clock, bar=False) as p:
        for batch in range(1, 11):
            clock.now += 10
            p.within(batch, 10, "batch")
        p.advance(metric="valid NE 0.8")
    assert _lines(caplog) == [
        "training FM: epoch 1/2, batch 3/10 (15 %), elapsed 30s, ~2m50s left",
        "training FM: epoch 1/2, batch 6/10 (30 %), elapsed 1m00s, ~2m20s left",
        "training FM: epoch 1/2, batch 9/10 (45 %), elapsed 1m30s, ~1m50s left",
        # 10 s after the previous line: throttled, then logged on close (the loop stopped before its total)
        "training FM: epoch 1/2 (50 %), valid NE 0.8, elapsed 1m40s, ~1m40s left",
    ]


def test_nothing_at_warning_no_line_no_bar_no_clock(caplog, logger):
    def clock() -> float:
        raise AssertionError("an inert progress reads no clock")

    caplog.set_level(logging.WARNING, logger=logger.name)
    with progress("training FM", total=2, unit="epoch", log=logger, clock=clock, bar=True) as p:
        p.within(1, 2, "batch")
        p.advance(metric="valid NE 0.8")
        p.advance()
    assert not [r for r in caplog.records if r.name == logger.name]
    assert p._bar is None


def test_an_error_inside_ends_the_log_with_the_error_not_a_progress_line(caplog, logger):
    clock = FakeClock()
    caplog.set_level(logging.INFO, logger=logger.name)
    with pytest.raises(RuntimeError):
        with progress("replay", total=4, unit="tick", log=logger, clock=clock, bar=False) as p:
            p.advance()
            raise RuntimeError("tick failed")
    assert _lines(caplog) == []


def test_a_bar_opens_and_closes_with_its_progress(logger, caplog):
    """The terminal path (forced): rich's display starts with the first bar and stops with the last."""
    from solaris.progress import _Bars

    caplog.set_level(logging.INFO, logger=logger.name)
    clock = FakeClock()
    with progress("outer", total=2, log=logger, clock=clock, bar=True) as outer:
        with progress("inner", total=3, log=logger, clock=clock, bar=True) as inner:
            inner.within(1, 2, "batch")
            assert _Bars.open_tasks == 2
            inner.advance(3)  # its last step: its bar goes, the outer one stays
            assert _Bars.open_tasks == 1 and _Bars.display is not None
        outer.advance(1)
    assert _Bars.display is None and _Bars.open_tasks == 0  # closed by the with, short of its total


def test_a_throttled_step_stays_owed_while_the_next_one_is_under_way(caplog, logger):
    """An epoch whose line was throttled away, then batches of the next, then an early stop: the log
    still ends where the loop stopped."""
    clock = FakeClock()
    caplog.set_level(logging.INFO, logger=logger.name)
    with progress("training FM", total=3, unit="epoch", log=logger, interval=30, clock=clock, bar=False) as p:
        clock.now += 5
        p.advance(metric="valid NE 0.9")
        clock.now += 5
        p.within(1, 4, "batch")
    assert _lines(caplog) == ["training FM: epoch 2/3, batch 1/4 (42 %), valid NE 0.9, elapsed 10s, ~14s left"]
