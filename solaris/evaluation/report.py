"""The evaluation's outputs: ``metrics.json``, a Markdown report and PNG plots (matplotlib, Agg).

Pure presentation of the summary ``jobs/evaluate`` builds (no Spark, no torch): everything a
reader needs is in the report and the plots' titles and axes, the JSON is for machines.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from solaris.evaluation.protocol import TRANSFER_VARIANTS, VARIANTS

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

LABELS = {
    "fm": "FM (upper bound)", "vm_baseline": "VM baseline", "vm_distilled": "VM distilled",
    "solaris_tier1": "VM+SOLARIS tier 1", "solaris_tiers12": "VM+SOLARIS tiers 1-2",
    "solaris_tiers123": "VM+SOLARIS tiers 1-3", "solaris_distilled": "VM+SOLARIS+distilled (1-3)",
}
COVERAGE_OF = {"solaris_tier1": "tiers1", "solaris_tiers12": "tiers1-2", "solaris_tiers123": "tiers1-3"}


def _pm(cell: dict, digits: int = 4, percent: bool = False) -> str:
    if cell is None or cell.get("mean") is None:
        return "n/a"
    scale = 100.0 if percent else 1.0
    unit = "%" if percent else ""
    return f"{scale * cell['mean']:.{digits}f}{unit} ± {scale * cell['std']:.{digits}f}{unit}"


def render_markdown(summary: dict, plots: list[str]) -> str:
    settings = summary["settings"]
    seeds = summary["seeds"]
    first = summary["per_seed"][0]
    lines = [
        "# SOLARIS knowledge-transfer evaluation",
        "",
        f"- Split T0 = {summary['t0']}; serving FM and verifier trained on events up to {summary['fm_cutoff']}; "
        f"replay every {settings['step_hours']:g} h from there to {summary['end']} "
        f"(tail {settings['tail_hours']:g} h used to fine-tune the VM variants, "
        f"then {settings['eval_hours']:g} h scored).",
        f"- Seeds: {', '.join(map(str, seeds))} (mean ± std over seeds; every seed retrains every model and replays).",
        f"- Scored requests per seed: {first['requests']['scored']} (base rate {first['requests']['base_rate']:.3f}); "
        f"tail requests: {first['requests']['tail']}.",
        "- Every feature is point-in-time: histories strictly before the request; FM embeddings from the snapshot "
        "published at the last tick before it (older than the request, TTL enforced by the resolver).",
        "",
        "## Quality per variant",
        "",
        "| variant | NE | log-loss | AUC | calibration | transfer ratio (pooled) | transfer ratio per seed |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in VARIANTS:
        row = summary["variants"][name]
        pooled, ratio = "-", "-"
        if name in TRANSFER_VARIANTS:
            pooled = "n/a" if row.get("transfer_ratio_pooled") is None else f"{row['transfer_ratio_pooled']:.3f}"
            ratio = _pm(row["transfer_ratio"], 3)
            if row["transfer_ratio"]["n"] < len(seeds):
                ratio += f" ({row['transfer_ratio']['n']} of {len(seeds)} seeds)"
        lines.append(
            f"| {LABELS[name]} | {_pm(row['ne'])} | {_pm(row['log_loss'])} | {_pm(row['auc'])} | "
            f"{_pm(row['calibration'], 3)} | {pooled} | {ratio} |"
        )
    lines += [
        "",
        "transfer ratio = (NE_VM − NE_variant) / (NE_VM − NE_FM): the share of the FM's NE gain the variant recovers "
        "(published SOLARIS: 42–44 %; distillation 20–25 %). *Pooled* uses the NEs averaged over seeds; *per seed* "
        "is mean ± std of each seed's ratio, over the seeds whose FM beat their VM baseline (otherwise there is no "
        "gain to transfer and the ratio is undefined).",
        "",
        "## Coverage of the scored requests",
        "",
        "| served by | share |",
        "|---|---|",
    ]
    for key, label in (
        ("tier1", "tier 1 (pair)"),
        ("tier2", "tier 2 (user aggregate)"),
        ("tier3", "tier 3 (KNN-imputed)"),
        ("none", "nothing"),
        ("tiers1", "cumulative: tier 1"),
        ("tiers1-2", "cumulative: tiers 1-2"),
        ("tiers1-3", "cumulative: tiers 1-3"),
    ):
        lines.append(f"| {label} | {_pm(summary['coverage'][key], 1, percent=True)} |")
    cost = summary["cost"]
    lines += [
        "",
        "(published: ~40–50 % from direct precompute, ~90–100 % with the hierarchy)",
        "",
        "## Cost",
        "",
        f"- FM forward passes spent per scored request (pairs precomputed + users represented for KNN, in the scored "
        f"window): {_pm(cost['fm_passes_per_request'], 2)} — versus 1.0 for running the FM on every request "
        "on the serving path, which the latency budget does not allow.",
        f"- Wall time per seed: {_pm(cost['seed_wall_s'], 0)} s (replay {_pm(cost['replay_s'], 0)} s, FM + verifier "
        f"{_pm(cost['train_fm_and_verifier_s'], 0)} s, "
        f"distilled incl. cross-fitted teacher {_pm(cost['train_distilled_s'], 0)} s).",
        "",
        "## Plots",
        "",
    ]
    lines += [f"![{Path(p).stem}]({Path(p).name})" for p in plots]
    return "\n".join(lines) + "\n"


def _mean_series(summary: dict, key: str) -> tuple[list[str], np.ndarray]:
    ticks = [row["tick"] for row in summary["per_seed"][0]["per_tick"]]
    values = []
    for result in summary["per_seed"]:
        # an hour without requests has no coverage or hit rate (not 0 %): leave a gap in the line
        series = {row["tick"]: row.get(key) if row.get("requests") else None for row in result["per_tick"]}
        values.append([np.nan if (value := series.get(t)) is None else float(value) for t in ticks])
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


def _time_series(ax: Axes, summary: dict, series: tuple[tuple[str, str], ...]) -> None:
    """Percent lines over replay ticks (mean over seeds), ~12 tick labels on the x axis."""
    ticks: list[str] = []
    for key, label in series:
        ticks, values = _mean_series(summary, key)
        ax.plot(range(len(ticks)), 100 * values, marker=".", label=label)
    every = max(1, len(ticks) // 12)
    ax.set_xticks(range(len(ticks))[::every], [t[5:16] for t in ticks][::every], rotation=30, ha="right", fontsize=8)


def write_plots(out_dir: Path, summary: dict) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    n_seeds = len(summary["seeds"])

    fig, ax = plt.subplots(figsize=(8, 4.5))
    names = list(TRANSFER_VARIANTS)
    means = [summary["variants"][n].get("transfer_ratio_pooled") for n in names]
    stds = [summary["variants"][n]["transfer_ratio"]["std"] for n in names]
    ax.bar(
        range(len(names)),
        [0 if m is None else 100 * m for m in means],
        yerr=[0 if s is None else 100 * s for s in stds],
        capsize=4,
        color="#4c72b0",
    )
    ax.axhspan(42, 44, color="#55a868", alpha=0.3, label="published SOLARIS (42-44%)")
    ax.axhspan(20, 25, color="#c44e52", alpha=0.2, label="published distillation (20-25%)")
    ax.set_xticks(range(len(names)), [LABELS[n] for n in names], rotation=20, ha="right", fontsize=8)
    ax.axhline(0, color="black", linewidth=0.8)
    paths.append(
        _finish(
            fig,
            ax,
            out_dir / "transfer_ratio.png",
            f"Knowledge transfer per variant (pooled over {n_seeds} seeds; bars: std of per-seed ratios)",
            "transfer ratio (% of FM's NE gain)",
        )
    )

    fig, ax = plt.subplots(figsize=(9, 4.5))
    _time_series(ax, summary, (("tiers1", "tier 1"), ("tiers1-2", "tiers 1-2"), ("tiers1-3", "tiers 1-3")))
    t0_index = next((i for i, row in enumerate(summary["per_seed"][0]["per_tick"]) if row["scored_window"]), None)
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
    _time_series(ax, summary, (("candidates_hit_rate", "candidates"), ("verified_hit_rate", "verified (written)")))
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
    xs = [0.0] + [100 * summary["coverage"][COVERAGE_OF[v]]["mean"] for v in COVERAGE_OF]
    ys = [summary["variants"]["vm_baseline"]["ne"]["mean"]] + [
        summary["variants"][v]["ne"]["mean"] for v in COVERAGE_OF
    ]
    errs = [summary["variants"]["vm_baseline"]["ne"]["std"]] + [
        summary["variants"][v]["ne"]["std"] for v in COVERAGE_OF
    ]
    ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=4, label="VM baseline -> VM+SOLARIS tier 1, 1-2, 1-3")
    for name, style in (("fm", "--"), ("vm_distilled", ":")):
        ax.axhline(
            summary["variants"][name]["ne"]["mean"],
            linestyle=style,
            color="grey" if name == "fm" else "#c44e52",
            label=LABELS[name],
        )
    ax.set_xlabel("coverage of scored requests (%)")
    paths.append(_finish(fig, ax, out_dir / "ne_vs_coverage.png", "NE vs coverage", "NE (lower is better)"))
    return paths


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


def write_report(out_dir: Path, summary: dict) -> list[Path]:
    """``metrics.json``, ``report.md`` and the plots; each file replaced atomically."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = write_plots(out_dir, summary)
    written = []
    for name, text in (
        ("metrics.json", json.dumps(_clean(summary), indent=2, default=str, allow_nan=False)),
        ("report.md", render_markdown(summary, [p.name for p in plots])),
    ):
        tmp = out_dir / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out_dir / name)
        written.append(out_dir / name)
    return written + plots
