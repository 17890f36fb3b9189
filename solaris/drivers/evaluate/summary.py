"""Every window and seed of one evaluation, pooled: intervals, the summary, the report.

Why a module of its own: this is the driver's entry (:func:`run`): it chooses the windows, runs
each seed (:mod:`.seed`), pools their scored requests into paired user-bootstrap intervals and
writes ``metrics.json``, ``report.md`` and the plots.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from solaris import provenance
from solaris.drivers.evaluate.results import COVERAGE_KEYS, SERVED_TIER, coverage_text
from solaris.drivers.evaluate.seed import seed_result
from solaris.drivers.evaluate.serving import oracle_ages
from solaris.drivers.evaluate.windows import END_OF_TIME, EvaluationData, WindowRows, choose_windows, read_events
from solaris.evaluation import freshness
from solaris.evaluation import protocol as evaluation
from solaris.evaluation.bootstrap import BootstrapIntervals, ScoredRequests, bootstrap_intervals
from solaris.evaluation.protocol import EvaluationWindow, SeedResult
from solaris.evaluation.report import EvaluationSummary, WindowSummary, interval_text, verdict_lines, write_report
from solaris.progress import Progress, progress
from solaris.timeutil import utc_stamp

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

    from solaris.config import SolarisConfig

log = logging.getLogger("solaris.evaluate")

# CI-sized evaluation: one window, few ticks, one epoch, two seeds (so mean ± std still means something).
QUICK_OVERRIDES = [
    "evaluation.seeds=2", "evaluation.windows=1", "evaluation.tail_hours=3", "evaluation.eval_hours=2",
    "model.training.max_epochs=1", "enrichment.knn_recall_sample=50", "evaluation.bootstrap_resamples=200",
    "evaluation.min_requests=100", "evaluation.min_users=20", "evaluation.min_training_events=1000",
]


def summary_lines(summary: EvaluationSummary) -> list[str]:
    """What ``solaris evaluate`` prints when it is done: pooled NE and AUC per variant, the coverage,
    the verdicts, and where the report is."""
    pooled = summary.intervals.pooled
    lines = [f"{name:<24} NE {interval_text(cell, 4, signed=False)}"
             + (f"  AUC {interval_text(pooled.auc[name], 4, signed=False)}" if name in pooled.auc else "")
             for name, cell in pooled.ne.items()]  # the freshness curve's variants: NE (and TR in the report)
    lines.append("coverage " + coverage_text({key: summary.coverage[key].mean or 0.0 for key in COVERAGE_KEYS}))
    lines += verdict_lines(summary.intervals)
    lines.append(f"report: {summary.output}/report.md (metrics.json, *.png)")
    return lines


def _started_once(spark: SparkSession | Callable[[], SparkSession]) -> Callable[[], SparkSession]:
    """The session, or a factory of it called at most once: the first step that needs Spark starts it."""
    if not callable(spark):
        return lambda: spark
    started: list[SparkSession] = []

    def session() -> SparkSession:
        if not started:
            started.append(spark())
        return started[0]

    return session


@dataclass(frozen=True)
class WindowOutcome:
    """Every seed of one window: their results and the scored requests' predictions (for the bootstrap)."""

    window: EvaluationWindow
    results: tuple[SeedResult, ...]
    scored: ScoredRequests
    tick_ages: np.ndarray  # seconds from the serving tick to each scored request: where the tick sits on the curve


def _evaluate_window(
    session: Callable[[], SparkSession], config: SolarisConfig, data: EvaluationData, window: EvaluationWindow, *,
    seeds: list[int], out_dir: Path, force: bool, force_cleared: set[Path], report: Progress,
) -> WindowOutcome:
    """Every seed of one window, then its scored requests with each seed's predictions side by side."""
    rows = WindowRows.of(data.events, window)
    log.info("window T0 %s: FM trained up to %s, replay %d ticks to %s, %d seeds",
             window.t0, window.fm_cutoff, len(window.ticks()), window.end, len(seeds))
    results, per_seed_predictions = [], []
    for seed in seeds:
        result, predictions = seed_result(
            session, config, rows, data, seed=seed, seed_dir=out_dir / utc_stamp(window.t0) / f"seed-{seed}",
            force_cleared=force_cleared, force=force,
        )
        results.append(result)
        per_seed_predictions.append(predictions)
        report.advance(metric=f"T0 {window.t0:%Y-%m-%d %H:%M}Z seed {seed} done")
    events = data.events
    # one replay serves every seed of the window (share_replay): the first seed's tiers are the window's;
    # without it each seed has its own, and the per-tier strata are left out
    tiers = [predictions.pop(SERVED_TIER, None) for predictions in per_seed_predictions]
    first = tiers[0]
    same_tiers = first is not None and all(t is not None and np.array_equal(t, first) for t in tiers)
    scored = ScoredRequests(events.user_id[rows.scored], events.label[rows.scored], tuple(per_seed_predictions),
                            first if same_tiers else None)
    return WindowOutcome(window, tuple(results), scored, oracle_ages(rows, events)[rows.tail.size:])


def _intervals(config: SolarisConfig, outcomes: list[WindowOutcome]) -> BootstrapIntervals:
    """User-bootstrap intervals pooled over every window, and per window when there are several."""
    settings = config.evaluation
    started = time.monotonic()
    intervals = bootstrap_intervals(ScoredRequests.concatenate([o.scored for o in outcomes]),
                                    settings.bootstrap_resamples, config.seed, settings.confidence)
    if len(outcomes) > 1:
        intervals = replace(intervals, per_window={
            o.window.t0.isoformat(): bootstrap_intervals(o.scored, settings.bootstrap_resamples, config.seed,
                                                         settings.confidence).pooled
            for o in outcomes
        })
    log.info("user-bootstrap intervals (%d resamples) in %.0fs", settings.bootstrap_resamples,
             time.monotonic() - started)
    return intervals


def _summary(config: SolarisConfig, data: EvaluationData, outcomes: list[WindowOutcome], *, out_dir: Path,
             seeds: list[int], wall: float) -> EvaluationSummary:
    """The figures of every window and seed, pooled: what metrics.json and report.md show."""
    settings = config.evaluation
    intervals = _intervals(config, outcomes)
    per_seed = tuple(result for o in outcomes for result in o.results)
    curve = settings.freshness
    freshness_report = freshness.FreshnessReport.of(
        curve.fm_ages_minutes, curve.oracle_ages_minutes, intervals,
        {o.window.t0.isoformat(): o.tick_ages for o in outcomes})
    return EvaluationSummary.of(
        evaluation.aggregate_seeds(list(per_seed)),
        output=str(out_dir),
        t0=tuple(o.window.t0.isoformat() for o in outcomes),
        windows=tuple(
            WindowSummary(o.window.t0.isoformat(), o.window.fm_cutoff.isoformat(), o.window.end.isoformat(),
                          int(o.scored.labels.size), int(np.unique(o.scored.users).size))
            for o in outcomes
        ),
        scored_requests=intervals.n_requests,
        scored_users=intervals.n_users,
        settings=settings,
        warehouse=str(config.warehouse),
        seeds=tuple(seeds),
        intervals=intervals,
        per_seed=per_seed,
        wall_s=time.monotonic() - wall,
        adapter=config.model.adapter,
        freshness=freshness_report,
        provenance=provenance.collect(config, data.events.digest(), {
            f"{result.t0} seed {result.seed} {role}": str(version)
            for result in per_seed for role, version in dict(result.models.get("versions", {})).items()
        }),
    )


def run(
    spark: SparkSession | Callable[[], SparkSession], config: SolarisConfig,
    t0s: list[datetime] | datetime | None = None, name: str | None = None, force: bool = False,
) -> EvaluationSummary:
    """Evaluate every window and seed (reusing what was computed with the same fingerprint), then report.

    ``spark``: a session, or a function that starts one. The events are read without Spark, so given a
    function, a rerun whose seeds all have results (the report regenerated, another seed count) never
    starts a JVM; the first seed that has to be computed starts it.
    """
    settings = config.evaluation
    session = _started_once(spark)
    events = read_events(session, config, END_OF_TIME)
    chosen = choose_windows(config, events, [t0s] if isinstance(t0s, datetime) else t0s)
    windows = [EvaluationWindow(t, settings.tail_hours, settings.eval_hours, settings.step_hours) for t in chosen]
    out_dir = config.resolve_under_warehouse(Path(settings.output) / (name or evaluation.default_name(chosen)))
    out_dir.mkdir(parents=True, exist_ok=True)
    data = EvaluationData.of(events.select(np.flatnonzero(events.ts <= max(w.end for w in windows).timestamp())),
                             config.model.history_length)
    seeds = list(range(config.seed, config.seed + settings.seeds))
    wall, cleared = time.monotonic(), set[Path]()
    with progress("evaluation", total=len(windows) * len(seeds), unit="seed", log=log, interval=0) as report:
        outcomes = [_evaluate_window(session, config, data, window, seeds=seeds, out_dir=out_dir, force=force,
                                     force_cleared=cleared, report=report) for window in windows]
    summary = _summary(config, data, outcomes, out_dir=out_dir, seeds=seeds, wall=wall)
    log.info("provenance: %s", summary.provenance.describe() if summary.provenance else "n/a")
    paths = write_report(out_dir, summary)
    log.info("evaluation written: %s", ", ".join(str(p) for p in paths))
    return summary
