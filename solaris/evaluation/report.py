"""The evaluation's outputs: ``metrics.json``, a Markdown report and PNG plots (matplotlib, Agg).

Pure presentation of the :class:`EvaluationSummary` ``solaris.drivers.evaluate`` builds (no Spark, no torch):
everything a reader needs is in the report and the plots' titles and axes, the JSON is for machines.
The summary is typed (frozen dataclasses of :mod:`solaris.evaluation.protocol` and
:mod:`solaris.evaluation.bootstrap`); ``metrics.json`` is its ``to_dict``.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np

from solaris.evaluation.bootstrap import TIER_COMPARISONS, BootstrapIntervals, Comparison, Interval
from solaris.evaluation.freshness import CurvePoint, FreshnessCurve, FreshnessReport, Series
from solaris.evaluation.protocol import (
    ABLATION,
    FM_AT_TICK,
    PRETRAINED,
    SOLARIS_ALL,
    SOLARIS_MAX_TIER,
    SOLARIS_NONE,
    SOLARIS_ORACLE,
    SOLARIS_PLACEBO,
    TRANSFER_VARIANTS,
    VARIANTS,
    Cost,
    MeanStd,
    SeedAggregate,
    SeedResult,
    TickRow,
    VariantSummary,
    cumulative_key,
)
from solaris.provenance import Provenance
from solaris.tiers import SERVING_ORDER, TIER_NAMES

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from solaris.config import AdapterConfig, EvaluationConfig


def tiers_label(max_tier: int) -> str:
    """"tier 1" or "tiers 1-k": how the report names the tiers up to ``max_tier``."""
    return "tier 1" if max_tier == 1 else f"tiers 1-{max_tier}"


LABELS = {
    "fm": "FM (upper bound)",
    FM_AT_TICK: "FM at the serving tick (history up to the last tick)",
    PRETRAINED["vm_baseline"]: "VM baseline, not fine-tuned", "vm_baseline": "VM baseline",
    PRETRAINED["vm_distilled"]: "VM distilled, not fine-tuned", "vm_distilled": "VM distilled",
    SOLARIS_NONE: "VM+SOLARIS control (nothing served)",
    SOLARIS_PLACEBO: "VM+SOLARIS placebo (served values permuted within tier)",
    **{name: f"VM+SOLARIS {tiers_label(SOLARIS_MAX_TIER[name])}" for name in ABLATION},
    "solaris_distilled": f"VM+SOLARIS+distilled (1-{SOLARIS_MAX_TIER['solaris_distilled']})",
    SOLARIS_ORACLE: "VM+SOLARIS oracle (exact pair for every request)",
}
COVERAGE_OF = {name: cumulative_key(SOLARIS_MAX_TIER[name]) for name in ABLATION}
ALL_LABEL = f"SOLARIS 1-{SERVING_ORDER[-1]}"


@dataclass(frozen=True)
class WindowSummary:
    """One window of the evaluation: its split and what its scored part holds."""

    t0: str
    fm_cutoff: str
    end: str
    requests: int
    users: int

    def to_dict(self) -> dict[str, Any]:
        return {"t0": self.t0, "fm_cutoff": self.fm_cutoff, "end": self.end, "requests": self.requests,
                "users": self.users}


@dataclass(frozen=True)
class EvaluationSummary:
    """Everything an evaluation found (``metrics.json`` is :meth:`to_dict`, same keys as before).

    ``variants`` / ``coverage`` / ``cost``: mean ± std over every seed of every window
    (:func:`solaris.evaluation.protocol.aggregate_seeds`); ``intervals``: the user bootstrap;
    ``per_seed``: each seed's result, windows one after the other.
    """

    output: str
    t0: tuple[str, ...]
    windows: tuple[WindowSummary, ...]
    scored_requests: int
    scored_users: int
    settings: EvaluationConfig
    warehouse: str
    seeds: tuple[int, ...]
    variants: Mapping[str, VariantSummary]
    coverage: Mapping[str, MeanStd]
    cost: Cost[MeanStd]
    intervals: BootstrapIntervals
    per_seed: tuple[SeedResult, ...]
    wall_s: float
    adapter: AdapterConfig | None = None  # how the VM+SOLARIS variants read the served values
    provenance: Provenance | None = None  # the code, config, events and models behind these figures
    freshness: FreshnessReport | None = None  # the freshness curve, pooled and per window

    @classmethod
    def of(cls, aggregate: SeedAggregate, **parts: Any) -> EvaluationSummary:
        return cls(variants=aggregate.variants, coverage=aggregate.coverage, cost=aggregate.cost, **parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "output": self.output, "t0": list(self.t0), "windows": [w.to_dict() for w in self.windows],
            "requests": {"scored": self.scored_requests, "users": self.scored_users},
            "settings": self.settings.model_dump(mode="json"), "warehouse": self.warehouse, "seeds": list(self.seeds),
            "variants": {name: row.to_dict() for name, row in self.variants.items()},
            "coverage": {key: cell.to_dict() for key, cell in self.coverage.items()},
            "cost": self.cost.to_dict(), "intervals": self.intervals.to_dict(),
            **({"freshness": self.freshness.to_dict()} if self.freshness is not None else {}),
            "per_seed": [result.to_dict() for result in self.per_seed], "wall_s": self.wall_s,
            **({"adapter": self.adapter.model_dump(mode="json")} if self.adapter is not None else {}),
            **({"provenance": self.provenance.to_dict()} if self.provenance is not None else {}),
        }


def _pm(cell: MeanStd | None, digits: int = 4, percent: bool = False) -> str:
    if cell is None or cell.mean is None or cell.std is None:
        return "n/a"
    scale = 100.0 if percent else 1.0
    unit = "%" if percent else ""
    return f"{scale * cell.mean:.{digits}f}{unit} ± {scale * cell.std:.{digits}f}{unit}"


def _signed(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:+.{digits}f}".replace("-", "\u2212")


def interval_text(cell: Interval | None, digits: int = 3, signed: bool = True) -> str:
    """``estimate [low, high]`` of an interval; unbounded intervals are said to be."""
    if cell is None or cell.estimate is None:
        return "n/a"
    show = (lambda v: _signed(v, digits)) if signed else (lambda v: "n/a" if v is None else f"{v:.{digits}f}")
    if cell.low is None or cell.high is None:
        return f"{show(cell.estimate)} [unbounded: undefined in {100 * cell.undefined_share:.0f} % of resamples]"
    return f"{show(cell.estimate)} [{show(cell.low)}, {show(cell.high)}]"


def _verdict(cell: Interval | None, above: str, below: str, *, digits: int) -> str:
    """What an interval of a difference says: ``above`` when it lies above 0, ``below`` under it.

    ``digits``: the decimals the line prints the interval with (:func:`interval_text`). An interval
    that excludes 0 but prints as zero at both ends (e.g. ``-0.0000 [-0.0000, -0.0000]``) is said to
    be below that precision rather than called better or worse, which a reader could not check
    against the printed figures.
    """
    if cell is None or cell.estimate is None:
        return "undefined on these data."
    if cell.low is None or cell.high is None:
        return "the interval is unbounded: no conclusion."
    if cell.low <= 0 <= cell.high:
        return "the interval includes 0: no difference shown."
    half_unit = 0.5 * 10.0 ** -digits  # the largest magnitude that still prints as zero
    if max(abs(cell.low), abs(cell.high)) < half_unit:
        return f"the interval excludes 0 but lies within ±{half_unit:g}: below the precision shown."
    return (above if cell.low > 0 else below) + "."


def comparison_line(comparison: Comparison, level: str) -> str:
    """ΔNE (decides: lower NE is better) and ΔTR of a paired comparison, with their intervals."""
    a, b = LABELS[comparison.variant], LABELS[comparison.reference]
    return (f"- {a} vs {b}: \u0394NE = {interval_text(comparison.ne_difference, 4)}, "
            f"\u0394TR = {interval_text(comparison.transfer_ratio_difference)} {level} \u2014 "
            + _verdict(comparison.ne_difference, f"{a} is worse (higher NE)", f"{a} is better (lower NE)", digits=4))


def verdict_lines(intervals: BootstrapIntervals) -> list[str]:
    """One line per comparison, generated from the pooled user-bootstrap intervals."""
    pooled = intervals.pooled
    level = f"({100 * intervals.confidence:g} %, users resampled)"
    lines = [
        f"- FM vs VM baseline: \u0394NE = NE_VM \u2212 NE_FM = {interval_text(pooled.fm_vm_gap, 4)} {level} \u2014 "
        + _verdict(pooled.fm_vm_gap, "the FM is better, so there is a gain to transfer",
                   "the VM is better: no gain to transfer, transfer ratios are meaningless", digits=4)
    ]
    for name in TRANSFER_VARIANTS:
        if name in pooled.transfer_ratio:
            cell = pooled.transfer_ratio[name]
            lines.append(f"- {LABELS[name]} vs VM baseline: TR = {interval_text(cell)} {level} \u2014 "
                         + _verdict(cell, "it transfers part of the FM's gain", "it is worse than the VM baseline",
                                    digits=3))
    lines += [comparison_line(comparison, level) for comparison in pooled.comparisons.values()]
    return lines


def _ceiling_conclusion(oracle_vs_distilled: Interval | None) -> str:
    """What the oracle-vs-distillation interval says SOLARIS can reach on these data."""
    if oracle_vs_distilled is None or not oracle_vs_distilled.bounded:
        return "the ceiling could not be compared with distillation on these data."
    assert oracle_vs_distilled.low is not None and oracle_vs_distilled.high is not None
    if oracle_vs_distilled.low > 0:
        return ("even the exact pair for every request predicts worse than distillation: **SOLARIS cannot beat "
                "distillation on these data**, whatever its coverage; what it adds is measured on top of "
                "distillation (VM+SOLARIS+distilled).")
    if oracle_vs_distilled.high < 0:
        return ("the exact pair for every request predicts better than distillation: SOLARIS could beat "
                "distillation on these data; the gap between the served values and the ceiling is what "
                "speculation and the tiers leave on the table.")
    return "the ceiling and distillation do not differ on these data (the interval includes 0)."


def ceiling_lines(intervals: BootstrapIntervals) -> list[str]:
    """The ceiling section: what any precomputed value could transfer here, against distillation.

    Why a section of its own: a transfer ratio below the published one means little until the
    reader knows whether the data allow more. The oracle (the exact pair at the serving tick for
    every request, through the same VM) bounds what SOLARIS can carry; the FM limited to the
    tick's history bounds what the oracle's vector can know. Generated from the intervals, so the
    conclusion follows the numbers of each run.
    """
    pooled = intervals.pooled
    level = f"({100 * intervals.confidence:g} %, users resampled)"
    at_tick = pooled.comparisons.get(f"{FM_AT_TICK}-vs-vm_baseline")
    oracle = _difference(pooled.comparisons, SOLARIS_ORACLE, "vm_distilled")
    lines = ["## The ceiling: what a precomputed value can transfer here", ""]
    if at_tick is not None:
        lines.append(
            f"- The FM limited to the history as of the serving tick vs the VM baseline: \u0394NE = "
            f"{interval_text(at_tick.ne_difference, 4)} {level} \u2014 "
            + _verdict(at_tick.ne_difference, "a value computed at the tick knows less than the VM's real-time inputs",
                       "a value computed at the tick still beats the VM", digits=4)
        )
    transfer = pooled.transfer_ratio
    lines += [
        f"- Transfer ratio of the ceiling (VM+SOLARIS oracle): {interval_text(transfer.get(SOLARIS_ORACLE))}; of "
        f"the served values (VM+SOLARIS {tiers_label(SOLARIS_MAX_TIER[SOLARIS_ALL])}): "
        f"{interval_text(transfer.get(SOLARIS_ALL))}; of distillation: {interval_text(transfer.get('vm_distilled'))}; "
        f"of both together (VM+SOLARIS+distilled): {interval_text(transfer.get('solaris_distilled'))}.",
        f"- Ceiling vs distillation: \u0394NE = {interval_text(oracle, 4)} {level}"
        + "".join(f"; window {t0}: {interval_text(_difference(cell.comparisons, SOLARIS_ORACLE, 'vm_distilled'), 4)}"
                  for t0, cell in intervals.per_window.items())
        + " \u2014 " + _ceiling_conclusion(oracle),
    ]
    return lines


def _curve_table(curve: FreshnessCurve) -> list[str]:
    """One row per age (the tick last): the FM's and the oracle's NE and TR with their intervals."""
    by_age: dict[tuple[bool, float], dict[str, CurvePoint]] = {}
    for point in curve.points:
        by_age.setdefault((point.at_tick, point.age_minutes), {})[point.series] = point
    lines = ["| value computed at | FM: NE [95 %] | FM: TR [95 %] | oracle: NE [95 %] | oracle: TR [95 %] |",
             "|---|---|---|---|---|"]
    for (at_tick, age), cells in sorted(by_age.items()):
        when = f"the serving tick (median {age:.0f} min)" if at_tick else (
            "the request" if age == 0 else f"request \u2212 {age:g} min")
        row = [when]
        for series in ("fm", "oracle"):
            cell = cells.get(series)
            if cell is None:
                row += ["-", "-"]
                continue
            ratio = "1 (the reference)" if cell.variant == "fm" else interval_text(cell.transfer_ratio)
            row += [interval_text(cell.ne, 4, signed=False), ratio]
        lines.append("| " + " | ".join(row) + " |")
    return [*lines, "", f"VM baseline NE {interval_text(curve.vm_baseline, 4, signed=False)}, VM distilled NE "
            f"{interval_text(curve.vm_distilled, 4, signed=False)}.", ""]


def freshness_lines(report: FreshnessReport, windows: tuple[WindowSummary, ...], confidence: float) -> list[str]:
    """The freshness curve section: pooled, then each window when there are several.

    Why in every report: a precomputed value can only carry what the FM knew when it was computed;
    the curve says which ages still beat the VM, so the served values' transfer can be read against
    what their age allows.
    """
    lines = [
        "## The freshness curve: an FM value by its age",
        "",
        "The FM fed the history up to request \u2212 age (its head on the pair vector it computed then), and "
        "the VM+SOLARIS oracle model (fine-tuned on the exact pair at the serving tick) fed the exact pair computed "
        "at request \u2212 age, tier 1 on every request. Age 0 is the FM at the request (the upper bound); the "
        "serving tick is what the hourly pipeline computes, placed at the median age of its values. TR = share of "
        f"the FM's edge over the VM baseline kept; {100 * confidence:g} % intervals, users resampled, paired with "
        "every other variant. A point whose NE is above the VM baseline's is worth less than the VM's own "
        "real-time inputs. Pooled over windows and seeds ([freshness.png](freshness.png)):",
        "",
        *_curve_table(report.pooled),
    ]
    for window in windows:
        curve = report.per_window.get(window.t0)
        if curve is not None:
            lines += [f"Window T0 = {window.t0} (pooled over seeds):", "", *_curve_table(curve)]
    return lines


def _seeding(settings: EvaluationConfig, seeds: tuple[int, ...]) -> str:
    """What a seed varies: with a shared replay only the VMs, otherwise every model and the replay."""
    if settings.share_replay:
        return (f"one serving FM, verifier, teacher and replay per window (seed {seeds[0]}); every seed trains and "
                "fine-tunes its own VMs on the same served tail")
    return "every seed retrains every model and replays"


def _setup_lines(summary: EvaluationSummary) -> list[str]:
    settings, seeds = summary.settings, summary.seeds
    lines = [
        f"- Window T0 = {w.t0}: serving FM and verifier trained on events up to {w.fm_cutoff}; "
        f"{w.requests:,} scored requests from {w.users:,} users in (T0, {w.end}]."
        for w in summary.windows
    ]
    return [
        *lines,
        f"- Replay every {settings.step_hours:g} h from the cutoff to the window's end (tail "
        f"{settings.tail_hours:g} h fine-tunes the VM variants, then {settings.eval_hours:g} h scored).",
        f"- Seeds: {', '.join(map(str, seeds))} ({_seeding(settings, seeds)}).",
        f"- Fine-tune: every VM variant on the same tail requests, batch {settings.finetune_batch_size}, learning "
        f"rate {settings.finetune_learning_rate:g}, one thread; the warm start is kept when no epoch beats it on "
        "validation NE. Only the input differs between the VM+SOLARIS variants: what serving returned, nothing "
        "(control), the served values permuted within each tier (placebo), the exact pair for every request "
        "(oracle); each is trained on the input it is scored with.",
        _adapter_line(summary.adapter),
        "- Every feature is point-in-time: histories strictly before the request; FM embeddings from the snapshot "
        "published at the last tick before it (older than the request, TTL enforced by the resolver); the "
        "oracle's from the history strictly before that tick.",
        *([] if summary.provenance is None else [f"- Provenance: {summary.provenance.describe()} (metrics.json)."]),
    ]


def _adapter_line(adapter: AdapterConfig | None) -> str:
    if adapter is not None and adapter.design == "channel":
        own = adapter.channel_learning_rate
        rate = "the pre-training rate" if own is None else f"{own:g}"
        return ("- VM+SOLARIS input (`model.adapter.design: channel`): the served vector, its FM score (the FM's head "
                "on it), its age and a one-hot of its tier through input weights of their own into the VM's first "
                "layer, plus a per-tier linear path from the FM score (its gain sloped in the age) to the logit; "
                "every new weight starting at zero (the warm start is the VM); the score path and the score, age "
                f"and tier weights learning at {rate}, the VM and the vector's weights at the fine-tune's rate.")
    if adapter is None or adapter.design == "concat":
        return ("- VM+SOLARIS input (`model.adapter.design: concat`): the served vector and a one-hot of its tier in "
                "the VM's first layer (the new weights starting at zero, so the warm start is the VM), fine-tuned "
                "with the VM.")
    return ("- VM+SOLARIS input (`model.adapter.design: adapter`): the fine-tuned VM (baseline; distilled for "
            "VM+SOLARIS+distilled), frozen, plus a per-tier residual on its logit from the FM score of the served "
            f"vector{' and a projection of the vector' if adapter.vector else ''}, a ridge logistic regression "
            f"(l2 {adapter.l2:g}) fit on the tail's served values on top of the VM before its fine-tune (out of "
            "sample); a tier is switched off when it does not lower its own tail-validation rows' log loss. The "
            "control is then the fine-tuned VM itself (nothing served adds nothing).")


def _tier_rows(summary: EvaluationSummary) -> list[str]:
    """Per serving tier: its scored requests and what its values do to them (pooled over seeds)."""
    strata = summary.intervals.per_tier
    if not strata:
        return []
    heads = [f"{LABELS[a]} − {LABELS[b]}" for a, b in TIER_COMPARISONS]
    lines = [
        "## Per serving tier (the scored requests each tier answered, ΔNE pooled over seeds [95 %])",
        "",
        "| tier | requests (share) | users | " + " | ".join(heads) + " |",
        "|---|---|---|" + "---|" * len(heads),
    ]
    for key, cell in strata.items():
        differences = [cell.ne_difference.get(f"{a}-vs-{b}") for a, b in TIER_COMPARISONS]
        if not cell.bootstrapped:  # too few users: bootstrap.tier_strata gave estimates only
            cells = ["n/a" if d is None or d.estimate is None else
                     f"{_signed(d.estimate, 4)} (no interval: {cell.users} users)" for d in differences]
        else:
            cells = [interval_text(d, 4) for d in differences]
        lines.append(f"| {key} ({TIER_NAMES[cell.tier]}) | {cell.requests:,} ({100 * cell.share:.1f} %) | "
                     f"{cell.users:,} | " + " | ".join(cells) + " |")
    return [*lines, "", f"{LABELS[SOLARIS_ALL]} − {LABELS[SOLARIS_ORACLE]} is the distance from the ceiling on "
            "the tier's requests (> 0: the exact pair would do better).", ""]


def _variant_rows(summary: EvaluationSummary) -> list[str]:
    pooled = summary.intervals.pooled
    n_results = len(summary.per_seed)
    lines = [
        "| variant | NE [95 %] | AUC [95 %] | calibration | transfer ratio [95 %] | TR per seed (mean \u00b1 std) |",
        "|---|---|---|---|---|---|",
    ]
    for name in VARIANTS:
        row = summary.variants[name]
        ratio, per_seed = "-", "-"
        if name in TRANSFER_VARIANTS:
            ratio = interval_text(pooled.transfer_ratio.get(name))
            per_seed = _pm(row.transfer_ratio, 3)
            if row.transfer_ratio.n < n_results:
                per_seed += f" ({row.transfer_ratio.n} of {n_results})"
        lines.append(
            f"| {LABELS[name]} | {interval_text(pooled.ne.get(name), 4, signed=False)} | "
            f"{interval_text(pooled.auc.get(name), 4, signed=False)} | {_pm(row.calibration, 3)} | {ratio} | "
            f"{per_seed} |"
        )
    return lines


def _comparison_rows(summary: EvaluationSummary) -> list[str]:
    pooled = summary.intervals.pooled
    lines = [
        "| comparison | \u0394NE (variant \u2212 reference) [95 %] | \u0394TR [95 %] |",
        "|---|---|---|",
        *(f"| {LABELS[name]} vs VM baseline | {interval_text(cell, 4)} | - |"
          for name, cell in pooled.ne_vs_baseline.items() if name in LABELS),  # the curve's: their own section
        *(f"| {LABELS[c.variant]} vs {LABELS[c.reference]} | {interval_text(c.ne_difference, 4)} | "
          f"{interval_text(c.transfer_ratio_difference)} |" for c in pooled.comparisons.values()),
    ]
    return lines


def _split_lines(summary: EvaluationSummary) -> list[str]:
    """Per seed and per window: the FM-VM gap and the all-tiers transfer ratio."""
    intervals = summary.intervals
    per_result = "; ".join(
        f"seed {seed}: \u0394NE FM\u2013VM {interval_text(cell.fm_vm_gap, 4)}, TR {ALL_LABEL} "
        f"{interval_text(cell.transfer_ratio.get(SOLARIS_ALL))}"
        for seed, cell in zip(summary.seeds, intervals.per_seed, strict=True)
    )
    lines = ["Per seed (same resamples, one seed at a time, every window): " + per_result + ".", ""]
    if intervals.per_window:
        per_window = "; ".join(
            f"T0 {t0}: \u0394NE FM\u2013VM {interval_text(cell.fm_vm_gap, 4)}, TR {ALL_LABEL} "
            f"{interval_text(cell.transfer_ratio.get(SOLARIS_ALL))}, \u0394NE {ALL_LABEL} \u2212 VM distilled "
            f"{interval_text(_difference(cell.comparisons, SOLARIS_ALL, 'vm_distilled'), 4)}"
            for t0, cell in intervals.per_window.items()
        )
        lines += ["Per window (pooled over seeds): " + per_window + ".", ""]
    return lines


def _difference(comparisons: Mapping[str, Comparison], variant: str, reference: str) -> Interval | None:
    comparison = comparisons.get(f"{variant}-vs-{reference}")
    return None if comparison is None else comparison.ne_difference


def _coverage_and_cost_lines(summary: EvaluationSummary) -> list[str]:
    rows = [(f"tier{tier}", f"tier {tier} ({TIER_NAMES[tier]})") for tier in SERVING_ORDER]
    rows.append(("none", "nothing"))
    rows += [(cumulative_key(tier), f"cumulative: {tiers_label(tier)}") for tier in SERVING_ORDER]
    cost = summary.cost
    return [
        "## Coverage of the scored requests",
        "",
        "| served by | share |",
        "|---|---|",
        *(f"| {label} | {_pm(summary.coverage.get(key), 1, percent=True)} |" for key, label in rows),
        "",
        "(published: ~40\u201350 % from direct precompute, ~90\u2013100 % with the hierarchy)",
        "",
        "## Cost",
        "",
        f"- FM forward passes spent per scored request (pairs precomputed + users represented for KNN, in the scored "
        f"window): {_pm(cost.fm_passes_per_request, 2)} \u2014 versus 1.0 for running the FM on every "
        "request on the serving path, which the latency budget does not allow.",
        f"- Wall time of the whole evaluation: {summary.wall_s:.0f} s. Per seed and window: "
        f"{_pm(cost.seed_wall_s, 0)} s (models {_pm(cost.train_models_s, 0)} s, replay "
        f"{_pm(cost.replay_s, 0)} s, fine-tuning {_pm(cost.finetune_vms_s, 0)} s)"
        + ("; with a shared replay the first seed of a window pays its FM, teacher and replay, the others only "
           "their VMs." if summary.settings.share_replay else "."),
    ]


def render_markdown(summary: EvaluationSummary, plots: list[str]) -> str:
    intervals = summary.intervals
    lines = [
        "# SOLARIS knowledge-transfer evaluation",
        "",
        f"## Verdict ({intervals.n_requests:,} scored requests from {intervals.n_users:,} distinct users, "
        f"{len(summary.windows)} window(s), {len(summary.seeds)} seed(s); {intervals.resamples} user resamples)",
        "",
        *verdict_lines(intervals),
        "",
        "Intervals: percentile bootstrap over users (all of a drawn user's requests kept; one draw applied to "
        "every variant and seed, so differences are paired); statistics are averaged over seeds, on the "
        "requests of every window together. TR = (NE_VM \u2212 NE_variant) / (NE_VM \u2212 NE_FM); "
        "\u0394NE < 0: the variant is better.",
        "",
        *ceiling_lines(intervals),
        "",
        *([] if summary.freshness is None else freshness_lines(summary.freshness, summary.windows,
                                                               intervals.confidence)),
        "## Set-up",
        "",
        *_setup_lines(summary),
        "",
        "## Quality per variant",
        "",
        *_variant_rows(summary),
        "",
        *_comparison_rows(summary),
        "",
        *_split_lines(summary),
        "Published: SOLARIS 42\u201344 %, distillation 20\u201325 % transfer.",
        "",
        *_tier_rows(summary),
        *_coverage_and_cost_lines(summary),
        "",
        "## Plots",
        "",
        *(f"![{Path(p).stem}]({Path(p).name})" for p in plots),
    ]
    return "\n".join(lines) + "\n"


TickValue = Callable[[TickRow], "float | None"]  # one figure of a tick (a coverage share, a hit rate), None: absent


def _share(key: str) -> TickValue:
    """The share of tiers ``key`` served at a tick (a plotted line)."""
    return lambda row: row.coverage.get(key)


def _candidates_hit_rate(row: TickRow) -> float | None:
    """A tick's candidates hit rate, None where the replay measured none (a gap, not 0 %)."""
    return None if row.hit_rates is None else row.hit_rates.candidates


def _verified_hit_rate(row: TickRow) -> float | None:
    """A tick's verified hit rate, None where the replay measured none."""
    return None if row.hit_rates is None else row.hit_rates.verified


def _mean_series(summary: EvaluationSummary, value: TickValue) -> tuple[list[str], np.ndarray]:
    """``value`` of every replay tick of the first window, mean over its seeds (other windows' ticks differ)."""
    ticks = [row.tick for row in summary.per_seed[0].per_tick]
    values = []
    for result in summary.per_seed:
        # an hour without requests has no coverage or hit rate (not 0 %): leave a gap in the line
        series = {row.tick: value(row) if row.requests else None for row in result.per_tick}
        values.append([np.nan if (figure := series.get(t)) is None else float(figure) for t in ticks])
    with warnings.catch_warnings():  # a tick with no value in any seed stays NaN (a gap), no warning
        warnings.simplefilter("ignore", RuntimeWarning)
        return ticks, np.nanmean(np.asarray(values, dtype=np.float64), axis=0) if values else np.array([])


def _finish(fig: Figure, ax: Axes, path: Path, title: str, ylabel: str) -> Path:
    import matplotlib.pyplot as plt

    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _time_series(ax: Axes, summary: EvaluationSummary, series: tuple[tuple[TickValue, str], ...]) -> None:
    """Percent lines over replay ticks (mean over seeds), ~12 tick labels on the x axis."""
    ticks: list[str] = []
    for value, label in series:
        ticks, values = _mean_series(summary, value)
        ax.plot(range(len(ticks)), 100 * values, marker=".", label=label)
    every = max(1, len(ticks) // 12)
    ax.set_xticks(range(len(ticks))[::every], [t[5:16] for t in ticks][::every], rotation=30, ha="right", fontsize=8)


def _bars(cells: list[Interval | None], scale: float) -> tuple[list[float], list[float], list[float]]:
    """Estimates and asymmetric error lengths of intervals (0 where undefined or unbounded)."""
    estimates, low_err, high_err = [], [], []
    for cell in cells:
        estimate = None if cell is None else cell.estimate
        estimates.append(0.0 if estimate is None else scale * estimate)
        if cell is not None and estimate is not None and cell.low is not None and cell.high is not None:
            low_err.append(scale * (estimate - cell.low))
            high_err.append(scale * (cell.high - estimate))
        else:
            low_err.append(0.0)
            high_err.append(0.0)
    return estimates, low_err, high_err


def write_plots(out_dir: Path, summary: EvaluationSummary) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    n_seeds = len(summary.seeds)

    pooled = summary.intervals.pooled
    fig, ax = plt.subplots(figsize=(8, 4.5))
    names = list(TRANSFER_VARIANTS)
    estimates, low_err, high_err = _bars([pooled.transfer_ratio.get(n) for n in names], 100.0)
    ax.bar(range(len(names)), estimates, yerr=[low_err, high_err], capsize=4, color="#4c72b0")
    ax.axhspan(42, 44, color="#55a868", alpha=0.3, label="published SOLARIS (42-44%)")
    ax.axhspan(20, 25, color="#c44e52", alpha=0.2, label="published distillation (20-25%)")
    ax.set_xticks(range(len(names)), [LABELS[n] for n in names], rotation=20, ha="right", fontsize=8)
    ax.axhline(0, color="black", linewidth=0.8)
    paths.append(
        _finish(
            fig,
            ax,
            out_dir / "transfer_ratio.png",
            f"Transfer per variant ({n_seeds} seeds; 95 % user-bootstrap intervals)",
            "transfer ratio (% of FM's NE gain)",
        )
    )

    fig, ax = plt.subplots(figsize=(9, 4.5))
    _time_series(ax, summary, tuple((_share(cumulative_key(tier)), tiers_label(tier))
                                    for tier in SERVING_ORDER))
    t0_index = next((i for i, row in enumerate(summary.per_seed[0].per_tick) if row.scored_window), None)
    if t0_index is not None:
        ax.axvline(t0_index - 0.5, color="grey", linestyle="--", label="T0 (scored window starts)")
    ax.set_ylim(0, 100)
    paths.append(
        _finish(
            fig,
            ax,
            out_dir / "coverage_over_time.png",
            "Coverage by tier over replay time (requests of the hour after each tick)",
            "requests served (%)",
        )
    )

    fig, ax = plt.subplots(figsize=(9, 4.5))
    _time_series(ax, summary, ((_candidates_hit_rate, "candidates"), (_verified_hit_rate, "verified (written)")))
    paths.append(
        _finish(
            fig,
            ax,
            out_dir / "hit_rate.png",
            "Speculation hit rate over replay time",
            "requests of the next hour precomputed (%)",
        )
    )

    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [0.0] + [100 * (summary.coverage[COVERAGE_OF[v]].mean or 0.0) for v in COVERAGE_OF]
    ys, low_err, high_err = _bars([pooled.ne.get(v) for v in ("vm_baseline", *COVERAGE_OF)], 1.0)
    errs = [low_err, high_err]
    ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=4, label="VM baseline -> VM+SOLARIS tier 1, 1-2, 1-3")
    for name, style, color in (("fm", "--", "grey"), ("vm_distilled", ":", "#c44e52"),
                               (SOLARIS_ORACLE, "-.", "#55a868"), (SOLARIS_PLACEBO, ":", "#8172b2")):
        estimate = pooled.ne[name].estimate if name in pooled.ne else None
        if estimate is not None:
            ax.axhline(estimate, linestyle=style, color=color, label=LABELS[name])
    ax.set_xlabel("coverage of scored requests (%)")
    paths.append(_finish(fig, ax, out_dir / "ne_vs_coverage.png", "NE vs coverage (95 % user-bootstrap intervals)",
                         "NE (lower is better)"))
    if summary.freshness is not None:
        paths.append(freshness_plot(out_dir / "freshness.png", summary.freshness,
                                    f"NE by the FM value's age ({n_seeds} seeds; 95 % user-bootstrap intervals)"))
    return paths


def freshness_plot(path: Path, report: FreshnessReport, title: str) -> Path:
    """NE against the value's age, pooled: the FM and the oracle by age (the tick at its median age, its own
    marker), the VM baseline and distillation as horizontal lines; bars: the paired user intervals."""
    import matplotlib.pyplot as plt

    curve = report.pooled
    fig, ax = plt.subplots(figsize=(8, 4.5))
    drawn: tuple[tuple[Series, bool, str, str], ...] = (
        ("fm", False, "#4c72b0", "FM fed the history up to request \u2212 age"),
        ("fm", True, "#4c72b0", "FM at the serving tick (median age)"),
        ("oracle", False, "#55a868", "VM+SOLARIS oracle fed the FM's pair of that age"),
        ("oracle", True, "#55a868", "VM+SOLARIS oracle at the serving tick (median age)"),
    )
    for series, at_tick, color, label in drawn:
        chosen = [p for p in curve.series(series) if p.at_tick == at_tick]
        if chosen:
            ys, low_err, high_err = _bars([p.ne for p in chosen], 1.0)
            ax.errorbar([p.age_minutes for p in chosen], ys, yerr=[low_err, high_err], color=color, capsize=3,
                        marker="s" if at_tick else "o", linestyle="none" if at_tick else "-", label=label)
    for cell, style, color, label in ((curve.vm_baseline, "--", "#dd8452", "VM baseline"),
                                      (curve.vm_distilled, ":", "#c44e52", "VM distilled")):
        if cell.estimate is not None:
            ax.axhline(cell.estimate, linestyle=style, color=color, label=label)
    ax.set_xscale("symlog", linthresh=1.0)
    ages = sorted({point.age_minutes for point in curve.points})
    ax.set_xticks(ages, [f"{age:.0f}" for age in ages], fontsize=8)
    ax.set_xlim(left=-0.25, right=1.3 * max(ages + [1.0]))  # room for the points at age 0
    ax.set_xlabel("age of the FM value (minutes before the request; symlog scale)")
    return _finish(fig, ax, path, title, "NE (lower is better)")


def metrics_json(summary: EvaluationSummary) -> str:
    """``metrics.json``: the summary as strict JSON (NaN written as null)."""
    return json.dumps(_clean(summary.to_dict()), indent=2, default=str, allow_nan=False)


def _clean(value: Any) -> Any:
    """JSON without NaN (not valid JSON): NaN and infinities become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, np.generic):
        return _clean(value.item())
    return value


def write_report(out_dir: Path, summary: EvaluationSummary) -> list[Path]:
    """``metrics.json``, ``report.md`` and the plots; each file replaced atomically."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = write_plots(out_dir, summary)
    written = []
    for name, text in (
        ("metrics.json", metrics_json(summary)),
        ("report.md", render_markdown(summary, [p.name for p in plots])),
    ):
        tmp = out_dir / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out_dir / name)
        written.append(out_dir / name)
    return written + plots
