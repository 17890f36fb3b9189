"""Is the FM worth transferring? FM vs VM baseline per dense window, with user-bootstrap intervals.

SOLARIS can only carry into the VM what the FM knows beyond it, so before any transfer is measured
the FM must beat the VM on the requests the evaluation scores. Per window (the evaluation's own
choice: the densest non-overlapping windows by distinct users, or ``--as-of``), the FM variants and
the VM baseline train on events up to the FM cutoff ``T0 - evaluation.tail_hours`` and score the
requests of ``(T0, T0 + evaluation.eval_hours]`` with point-in-time features (history strictly
before each request). Prints NE per model and the gap ``NE_VM - NE_FM`` with its 95 % interval from
resampling users (paired: one draw for every model), per window and pooled over windows. With
``--tail-finetune`` every model is also fine-tuned on the tail ``(T0 - tail, T0]`` as the evaluation
fine-tunes its VMs (``NAME+tail``), and the gap is taken against the fine-tuned VM, as the evaluation's.

    .venv/bin/python bench/fm_gap.py --warehouse warehouse
    .venv/bin/python bench/fm_gap.py --warehouse warehouse --variant current=model.fm.self_attention=true \\
        --variant default= --json /tmp/fm_gap.json

A variant is ``NAME=`` followed by ``;``-separated config overrides of the FM (empty: the config as
loaded). The VM is the config's baseline VM, single-threaded (bit-reproducible).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import dataclass

import numpy as np
import torch

from solaris.config import SolarisConfig, load_config
from solaris.drivers.evaluate import finetune_training
from solaris.evaluation import bootstrap
from solaris.evaluation.protocol import densest_windows
from solaris.models import metrics
from solaris.models.training import EventArrays, fit, predict, train_fm, train_vm
from solaris.runtime import as_of_arg, setup_logging

log = logging.getLogger("bench.fm_gap")


@dataclass(frozen=True)
class WindowScores:
    """One window's scored requests and every model's probabilities on them."""

    t0: str
    users: np.ndarray
    labels: np.ndarray
    predictions: dict[str, np.ndarray]
    train_seconds: dict[str, float]


def _variants(specs: list[str]) -> dict[str, list[str]]:
    variants = {}
    for spec in specs or ["default="]:
        name, _, overrides = spec.partition("=")
        variants[name] = [item for item in overrides.split(";") if item]
    return variants


def score_window(events: EventArrays, config: SolarisConfig, t0_seconds: int, variants: dict[str, list[str]],
                 base_overrides: list[str], seed: int, tail_finetune: bool = False) -> WindowScores:
    settings = config.evaluation
    cutoff = t0_seconds - int(settings.tail_hours * 3600)
    end = t0_seconds + int(settings.eval_hours * 3600)
    train = events.select(np.flatnonzero(events.ts <= cutoff))
    rows = np.flatnonzero((events.ts > t0_seconds) & (events.ts <= end))
    visible = events.select(np.flatnonzero(events.ts <= end))
    predictions, seconds = {}, {}
    configs = {name: load_config(overrides=[*base_overrides, *extra]) for name, extra in variants.items()}
    vm_config = load_config(overrides=[*base_overrides, "model.training.threads=1"])
    lengths = {c.model.history_length for c in configs.values()} | {vm_config.model.history_length}
    features = {h: train.features(h) for h in lengths}
    index = visible.index()
    scored = {h: index.query(events.user_id[rows], events.item_id[rows], events.ts[rows], h) for h in lengths}
    tail = events.select(np.flatnonzero((events.ts > cutoff) & (events.ts <= t0_seconds)))
    # each tail event's features at its own time (history strictly before it), as the training features
    tail_features = {h: index.query(tail.user_id, tail.item_id, tail.ts, h) for h in lengths} if tail_finetune else {}

    def refreshed(name: str, model: torch.nn.Module, recipe: SolarisConfig, threads: int) -> None:
        started = time.monotonic()
        h = recipe.model.history_length
        result = fit(model, tail_features[h], tail.label, tail.ts, finetune_training(recipe, threads), seed=seed,
                     name=f"{name}+tail", keep_initial=True)
        seconds[f"{name}+tail"] = time.monotonic() - started
        predictions[f"{name}+tail"] = predict(result.model, scored[h])
        log.info("%s+tail: best epoch %d, %.0f s", name, result.best_epoch, seconds[f"{name}+tail"])

    started = time.monotonic()
    vm = train_vm(train, vm_config, seed, "baseline", features=features[vm_config.model.history_length])
    seconds["vm_baseline"] = time.monotonic() - started
    predictions["vm_baseline"] = predict(vm.model, scored[vm_config.model.history_length])
    if tail_finetune:
        refreshed("vm_baseline", vm.model, vm_config, 1)
    for name, fm_config in configs.items():
        started = time.monotonic()
        fm = train_fm(train, fm_config, seed, features=features[fm_config.model.history_length])
        seconds[name] = time.monotonic() - started
        predictions[name] = predict(fm.model, scored[fm_config.model.history_length])
        log.info("%s: best epoch %d, %.0f s", name, fm.best_epoch, seconds[name])
        if tail_finetune:
            refreshed(name, fm.model, fm_config, fm_config.model.training.threads)
    return WindowScores(str(np.datetime64(t0_seconds, "s")), events.user_id[rows], events.label[rows], predictions,
                        seconds)


def gaps(windows: list[WindowScores], resamples: int, confidence: float,
         reference: str = "vm_baseline") -> dict[str, dict[str, object]]:
    """Per model: NE and the gap NE_VM - NE_model with its user-bootstrap interval (users of every window;
    NE_VM: the ``reference`` VM); every FM variant after the first also gets ``vs_first``: NE_first -
    NE_variant, paired the same way (positive: the variant is better than the first one named)."""
    users = np.concatenate([np.char.add(f"{i}:", w.users.astype(str)) for i, w in enumerate(windows)])
    labels = np.concatenate([w.labels for w in windows])
    codes, n_users = bootstrap.user_codes(users)
    counts = bootstrap.resample_counts(n_users, resamples, np.random.default_rng(0))
    stacked = {name: np.concatenate([w.predictions[name] for w in windows]) for name in windows[0].predictions}
    vm = stacked[reference]
    vm_ne, vm_replicates = metrics.normalized_entropy(labels, vm), bootstrap.weighted_ne(labels, vm, codes, counts)
    out: dict[str, dict[str, object]] = {}
    first: tuple[float, np.ndarray] | None = None
    for name, p in stacked.items():
        ne, replicates = metrics.normalized_entropy(labels, p), bootstrap.weighted_ne(labels, p, codes, counts)
        interval = bootstrap.percentile_interval(vm_ne - ne, vm_replicates - replicates, confidence)
        out[name] = {"ne": ne, "auc": metrics.summary(labels, p)["auc"], "gap": interval.to_dict()}
        if name.startswith("vm_baseline"):
            continue
        if first is None:
            first = (ne, replicates)
        else:
            out[name]["vs_first"] = bootstrap.percentile_interval(first[0] - ne, first[1] - replicates,
                                                                  confidence).to_dict()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--as-of", type=as_of_arg, nargs="*", help="window T0s (default: the densest windows)")
    parser.add_argument("--windows", type=int, help="how many densest windows (default: evaluation.windows)")
    parser.add_argument("--variant", action="append", default=[], help="NAME=override;override (repeatable)")
    parser.add_argument("--seed", type=int, help="default: the config seed")
    parser.add_argument("--tail-finetune", action="store_true",
                        help="also fine-tune the VM and every FM on the tail (the evaluation's fine-tune recipe, "
                             "warm start kept when no epoch beats it) and score them as NAME+tail")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--predictions", help="write every window's users, labels and predictions here (.npz)")
    args = parser.parse_args()
    setup_logging()
    base = [f"warehouse={args.warehouse}", *args.overrides]
    config = load_config(overrides=base)
    seed = config.seed if args.seed is None else args.seed

    from solaris.storage.table import Table

    frame = Table.of(None, config, "events").rows(["user_id", "item_id", "ts", "label", "rating"]).to_pandas()
    events = EventArrays.from_frame(frame)
    settings = config.evaluation
    if args.as_of:
        t0s = [int(t.timestamp()) for t in args.as_of]
    else:
        picked = densest_windows(events.ts, events.user_id, tail_hours=settings.tail_hours,
                                 eval_hours=settings.eval_hours, step_hours=settings.step_hours,
                                 count=args.windows or settings.windows, min_requests=settings.min_requests,
                                 min_users=settings.min_users, min_training_events=settings.min_training_events)
        t0s = [int(w.t0.timestamp()) for w in picked]
    variants = _variants(args.variant)
    reference = "vm_baseline+tail" if args.tail_finetune else "vm_baseline"
    windows, reports = [], []
    for t0 in t0s:
        window = score_window(events, config, t0, variants, base, seed, args.tail_finetune)
        windows.append(window)
        reports.append(gaps([window], settings.bootstrap_resamples, settings.confidence, reference))
        _print(window.t0, window, reports[-1])
    pooled = gaps(windows, settings.bootstrap_resamples, settings.confidence, reference)
    if len(windows) > 1:
        _print("pooled", None, pooled)
    if args.predictions:
        np.savez_compressed(args.predictions, **{f"{i}:{key}": value for i, w in enumerate(windows)
                                                 for key, value in [("users", w.users), ("labels", w.labels),
                                                                    *w.predictions.items()]})
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"seed": seed, "variants": variants, "pooled": pooled,
                       "windows": [{"t0": w.t0, "requests": int(w.labels.size),
                                    "users": int(np.unique(w.users).size), "train_seconds": w.train_seconds,
                                    **report}
                                   for w, report in zip(windows, reports, strict=True)]}, handle, indent=2,
                      default=str)


def _print(title: str, window: WindowScores | None, report: dict[str, dict[str, object]]) -> None:
    if window is not None:
        title += f": {window.labels.size:,} requests from {np.unique(window.users).size} users"
    print(f"\n{title}\n{'model':<16}{'NE':>8}{'AUC':>8}   gap NE_VM - NE_model [95 % users resampled]")
    for name, row in report.items():
        gap = row["gap"]
        assert isinstance(gap, dict)
        bounds = f"[{gap['low']:+.4f}, {gap['high']:+.4f}]" if gap["low"] is not None else "[unbounded]"
        seconds = f"  trained in {window.train_seconds[name]:.0f} s" if window is not None else ""
        print(f"{name:<16}{row['ne']:>8.4f}{row['auc']:>8.4f}   {gap['estimate']:+.4f} {bounds}{seconds}")
        versus = row.get("vs_first")
        if isinstance(versus, dict) and versus["low"] is not None:
            print(f"{'':<16}vs the first FM variant: {versus['estimate']:+.4f} "
                  f"[{versus['low']:+.4f}, {versus['high']:+.4f}] (positive: this one is better)")


if __name__ == "__main__":
    main()
