"""Progress of long work: step k of n, its metric, elapsed and time left, as log lines and a terminal bar.

Why: an evaluation trains the FM, the teachers and dozens of VMs and replays dozens of ticks; without
progress, minutes of silence cannot be told from a hang. One small API so every long loop reports
the same way::

    with progress("training FM", total=n_epochs, unit="epoch", log=log) as p:
        for epoch in ...:
            for batch in ...:
                p.within(k, n_batches, "batch")   # inside a long step: throttled lines too
            p.advance(metric="valid NE 0.8120")

* INFO lines ("training FM: epoch 3/20 (15 %), valid NE 0.8120, elapsed 1m02s, ~5m50s left"),
  throttled: at most one every ``interval`` seconds, and always the last step (a step whose line is
  throttled away goes to DEBUG), so a loop of many fast steps does not flood the log.
* On a terminal (stderr a TTY), besides the lines, a ``rich`` bar per open progress; log lines are
  printed above the bars. Airflow task logs and CI get lines only.
* Nothing at all (no bar, no line) when ``log`` is not enabled for INFO (``--log-level WARNING``).

The pure parts (:func:`format_duration`, :func:`seconds_left`, :func:`due`, :func:`progress_line`)
take times as arguments; :class:`Progress` takes its clock as a parameter, so tests need no real time.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # pragma: no cover
    from rich.progress import Progress as RichProgress
    from rich.progress import TaskID

Clock = Callable[[], float]

# Seconds between two progress lines of one loop. Why 30: the slowest loops (an FM epoch on a large
# dataset, a replay tick) then still report at least once a minute, and a loop of fast steps stays quiet.
INTERVAL_SECONDS = 30.0


def format_duration(seconds: float) -> str:
    """``45s``, ``1m02s``, ``2h05m``: short enough for a log line, exact enough for a wait."""
    whole = max(0, int(round(seconds)))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def seconds_left(elapsed: float, fraction: float) -> float | None:
    """Time left if the rest goes at the pace so far (None before any progress, 0 when done)."""
    if fraction <= 0:
        return None
    if fraction >= 1:
        return 0.0
    return elapsed * (1 - fraction) / fraction


def due(now: float, last_logged: float, interval: float, last_step: bool) -> bool:
    """Whether a step's line is logged at INFO: the last step always, others ``interval`` s after the
    previous line (or the start)."""
    return last_step or now - last_logged >= interval


@dataclass(frozen=True)
class Position:
    """Where a loop is: ``done`` of ``total`` steps, and inside the next step ``part`` of ``parts``."""

    done: int
    total: int
    part: int = 0
    parts: int = 0
    part_unit: str = ""

    @property
    def fraction(self) -> float:
        if self.total <= 0:
            return 1.0
        inside = self.part / self.parts if self.parts > 0 else 0.0
        return min(1.0, (self.done + inside) / self.total)


def progress_line(name: str, unit: str, at: Position, elapsed: float, metric: str | None = None) -> str:
    """``"training FM: epoch 3/20 (15 %), valid NE 0.812, elapsed 1m02s, ~5m50s left"``.

    Inside a step (``at.parts``): ``"training FM: epoch 4/20, batch 120/350 (16 %), ..."``; the
    step counted is then the one under way.
    """
    percent = f"({100 * at.fraction:.0f} %)"
    if at.parts:
        where = f"{unit} {min(at.done + 1, at.total)}/{at.total}, {at.part_unit} {at.part}/{at.parts} {percent}"
    else:
        where = f"{unit} {at.done}/{at.total} {percent}"
    parts = [where] + ([metric] if metric else []) + [f"elapsed {format_duration(elapsed)}"]
    left = seconds_left(elapsed, at.fraction)
    if left is not None and at.fraction < 1:
        parts.append(f"~{format_duration(left)} left")
    return f"{name}: " + ", ".join(parts)


def on_terminal() -> bool:
    """Whether stderr (where the log goes) is an interactive terminal: the only place a bar is drawn."""
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


class Progress:
    """One loop's progress: :meth:`advance` after each step, :meth:`within` inside a long one.

    ``bar``: None draws a bar when stderr is a terminal; the clock is ``time.monotonic`` unless given.
    Inert (no clock read, no output) when ``log`` is not enabled for INFO.
    """

    def __init__(self, name: str, total: int, *, unit: str = "step", log: logging.Logger,
                 interval: float = INTERVAL_SECONDS, clock: Clock = time.monotonic, bar: bool | None = None):
        self.name, self.unit, self.log, self.interval, self.clock = name, unit, log, interval, clock
        self.position = Position(0, max(0, int(total)))
        self.enabled = log.isEnabledFor(logging.INFO)
        self.metric: str | None = None
        self.started = self.last_logged = clock() if self.enabled else 0.0
        self.pending = False  # a step whose line was throttled away: logged on close
        self._bar: _BarTask | None = None
        if self.enabled and (on_terminal() if bar is None else bar):
            self._bar = _BarTask(name, self.position.total)

    def advance(self, steps: int = 1, metric: str | None = None) -> None:
        """``steps`` more steps done; ``metric`` (e.g. ``"valid NE 0.8120"``) goes on the line."""
        if not self.enabled:
            return
        self.position = Position(self.position.done + steps, self.position.total)
        self.metric = metric
        last = self.position.done >= self.position.total
        self._report(last=last)
        if last:
            self.close()  # the bar goes with the last step, even without a ``with``

    def within(self, part: int, parts: int, unit: str) -> None:
        """Inside the step under way: ``part`` of ``parts`` ``unit`` done (lines throttled, none forced)."""
        if not self.enabled:
            return
        at = self.position
        self.position = Position(at.done, at.total, part, parts, unit)
        self._report(last=False, quiet_when_throttled=True)

    def close(self) -> None:
        """Log the last step if its line was throttled away (a loop that stops early), remove the bar."""
        if self.enabled and self.pending:
            self._emit(logging.INFO, self.clock())
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if kind is not None:
            self.pending = False  # the error is what the log should end with
        self.close()

    def _report(self, last: bool, quiet_when_throttled: bool = False) -> None:
        now = self.clock()
        if self._bar is not None:
            self._bar.update(self.position, self.metric)
        if due(now, self.last_logged, self.interval, last):
            self._emit(logging.INFO, now)
        elif not quiet_when_throttled:
            self.pending = True
            if self.log.isEnabledFor(logging.DEBUG):
                self.log.debug("%s", self.line(now))

    def _emit(self, level: int, now: float) -> None:
        self.log.log(level, "%s", self.line(now))
        self.last_logged, self.pending = now, False

    def line(self, now: float) -> str:
        return progress_line(self.name, self.unit, self.position, now - self.started, self.metric)


def progress(name: str, total: int, *, unit: str = "step", log: logging.Logger,
             interval: float = INTERVAL_SECONDS, clock: Clock = time.monotonic, bar: bool | None = None) -> Progress:
    """A :class:`Progress`, best used as a context manager: closing it logs a throttled last step of a
    loop that stopped early and removes its bar (a loop that reaches ``total`` closes it itself)."""
    return Progress(name, total, unit=unit, log=log, interval=interval, clock=clock, bar=bar)


# --- the terminal bars: one rich display shared by every open progress (nested loops stack) --------


class _Bars:
    """The live ``rich`` display while at least one bar is open.

    Why shared: rich draws one live display per terminal, and progress nests (the FM's epochs inside
    an evaluation's seed). Why the handler swap: log lines written straight to the terminal would
    tear the bars; while the display is live, handlers writing to stderr write through rich's proxy,
    which prints them above the bars.
    """

    display: RichProgress | None = None
    open_tasks = 0
    swapped: list[tuple[logging.StreamHandler, Any]] = []

    @classmethod
    def add(cls, name: str, total: int) -> TaskID:
        if cls.display is None:
            cls._start()
        assert cls.display is not None
        cls.open_tasks += 1
        return cls.display.add_task(name, total=max(total, 1), note="")

    @classmethod
    def remove(cls, task: TaskID) -> None:
        if cls.display is None:
            return
        cls.display.remove_task(task)
        cls.open_tasks -= 1
        if cls.open_tasks <= 0:
            cls._stop()

    @classmethod
    def _start(cls) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        original = sys.stderr
        cls.display = RichProgress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[note]}"),
            TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True), transient=True,
            redirect_stdout=False, redirect_stderr=True,
        )
        cls.display.start()
        if sys.stderr is not original:  # rich's proxy: route the log's stderr handlers through it
            for handler in logging.getLogger().handlers:
                if isinstance(handler, logging.StreamHandler) and handler.stream is original:
                    cls.swapped.append((handler, handler.setStream(sys.stderr)))

    @classmethod
    def _stop(cls) -> None:
        for handler, stream in cls.swapped:
            handler.setStream(stream)
        cls.swapped = []
        if cls.display is not None:
            cls.display.stop()
        cls.display, cls.open_tasks = None, 0


class _BarTask:
    """One progress's bar in the shared display: whole steps, plus the part of the step under way."""

    def __init__(self, name: str, total: int):
        self.task = _Bars.add(name, total)

    def update(self, at: Position, metric: str | None) -> None:
        if _Bars.display is None:
            return
        inside = f"{at.part_unit} {at.part}/{at.parts}" if at.parts else ""
        note = ", ".join(text for text in (inside, metric or "") if text)
        _Bars.display.update(self.task, completed=at.done + (at.part / at.parts if at.parts else 0), note=note)

    def close(self) -> None:
        _Bars.remove(self.task)
