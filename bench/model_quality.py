"""FM vs VM baseline vs distilled VM on a time split, over several seeds (issue: models).

Trains on events with ``ts <= --as-of`` (T0) and evaluates on the events in
``(T0, T0 + --eval-days]`` with point-in-time features (each request sees only events strictly
before it). Prints NE / AUC / calibration per model as mean ± std over seeds, and the distillation
transfer ratio. Reads the ``events`` Delta table without Spark (deltalake).

    .venv/bin/python bench/model_quality.py --warehouse warehouse --as-of 2000-12-01T00:00:00Z --seeds 3
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from datetime import timedelta

import numpy as np

from solaris.config import load_config
from solaris.models import metrics
from solaris.models.training import EventArrays, distillation_teacher_logits, predict, train_fm, train_vm
from solaris.runtime import as_of_arg, setup_logging

log = logging.getLogger("bench.model_quality")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--as-of", type=as_of_arg, required=True, help="T0: end of the training window")
    parser.add_argument("--eval-days", type=float, default=14.0)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--first-seed", type=int, help="first seed (default: config seed); to add seeds to earlier runs"
    )
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--json", help="write the per-seed results here")
    parser.add_argument(
        "--teacher",
        choices=["cross-fit", "in-sample"],
        help="soft labels from FMs that did not train on the example, or the FM's own "
        "(default: model.distillation.teacher)",
    )
    parser.add_argument(
        "--folds", type=int, help="time folds for cross-fit (default: model.distillation.teacher_folds)"
    )
    parser.add_argument(
        "--fm-epochs",
        type=int,
        help="max epochs of the FM and the cross-fitted teachers only (default: model.training.max_epochs)",
    )
    parser.add_argument(
        "--vm-threads",
        type=int,
        default=1,
        help="torch threads for the VMs (default 1: bit-reproducible, so baseline and distilled "
        "differ only by their loss; the VMs train in seconds anyway)",
    )
    args = parser.parse_args()
    setup_logging()
    overrides = [f"warehouse={args.warehouse}", *args.overrides]
    if args.teacher:
        overrides.append(f"model.distillation.teacher={args.teacher}")
    if args.folds:
        overrides.append(f"model.distillation.teacher_folds={args.folds}")
    config = load_config(overrides=overrides)
    fm_config = (
        load_config(overrides=[*overrides, f"model.training.max_epochs={args.fm_epochs}"]) if args.fm_epochs else config
    )
    vm_config = load_config(overrides=[*overrides, f"model.training.threads={args.vm_threads}"])

    from solaris.storage.table import Table

    frame = Table.of(None, config, "events").rows(["user_id", "item_id", "ts", "label", "rating"]).to_pandas()
    events = EventArrays.from_frame(frame)
    t0 = int(args.as_of.timestamp())
    t1 = int((args.as_of + timedelta(days=args.eval_days)).timestamp())
    train = events.select(events.ts <= t0)
    test_rows = np.flatnonzero((events.ts > t0) & (events.ts <= t1))
    visible = events.select(events.ts <= t1)  # point-in-time index; queries are strict (< ts)
    test_features = visible.index().query(
        events.user_id[test_rows], events.item_id[test_rows], events.ts[test_rows], config.model.history_length
    )
    test_labels = events.label[test_rows]
    log.info(
        "train %d events <= T0, evaluate %d events in (T0, T0+%.0fd], base rate %.3f",
        len(train),
        test_rows.size,
        args.eval_days,
        test_labels.mean(),
    )

    runs = []
    first = config.seed if args.first_seed is None else args.first_seed
    train_features = train.features(config.model.history_length)
    for seed in range(first, first + args.seeds):
        started = time.monotonic()
        fm = train_fm(train, fm_config, seed, features=train_features)
        fm_seconds = time.monotonic() - started
        teacher_logits, _ = distillation_teacher_logits(train, fm_config, seed, features=train_features,
                                                        served_fm=fm.model)
        baseline = train_vm(train, vm_config, seed, "baseline", features=train_features)
        distilled = train_vm(
            train, vm_config, seed, "distilled", teacher_logits=teacher_logits, features=train_features
        )
        result = {
            "seed": seed,
            "fm_train_seconds": fm_seconds,
            "fm_epochs": fm.best_epoch,
            "vm_epochs": {"baseline": baseline.best_epoch, "distilled": distilled.best_epoch},
        }
        for name, model in (("fm", fm.model), ("vm_baseline", baseline.model), ("vm_distilled", distilled.model)):
            result[name] = metrics.summary(test_labels, predict(model, test_features))
        result["distillation_transfer_ratio"] = metrics.transfer_ratio(
            result["vm_baseline"]["ne"], result["vm_distilled"]["ne"], result["fm"]["ne"]
        )
        runs.append(result)
        log.info(
            "seed %d: %s",
            seed,
            json.dumps({k: v.get("ne", v) if isinstance(v, dict) else v for k, v in result.items()}),
        )

    kd = config.model.distillation
    print(
        f"\nteacher soft labels: {kd.teacher}"
        + (f" ({kd.teacher_folds} time folds)" if kd.teacher == "cross-fit" else "")
    )
    print(
        f"MovieLens time split: train ts <= {args.as_of:%Y-%m-%d %H:%M}Z ({len(train)} events), "
        f"test {test_rows.size} events in the next {args.eval_days:g} days, {args.seeds} seeds"
    )
    print(f"{'model':<14}{'NE':>18}{'AUC':>18}{'calibration':>18}")
    for name in ("fm", "vm_baseline", "vm_distilled"):
        cells = []
        for key in ("ne", "auc", "calibration"):
            values = np.array([run[name][key] for run in runs])
            cells.append(f"{values.mean():.4f} ± {values.std():.4f}")
        print(f"{name:<14}" + "".join(f"{cell:>18}" for cell in cells))
    ratios = np.array([run["distillation_transfer_ratio"] for run in runs])
    seconds = np.array([run["fm_train_seconds"] for run in runs])
    print(f"distillation transfer ratio: {ratios.mean():.3f} ± {ratios.std():.3f}")
    between = sum(run["fm"]["ne"] < run["vm_distilled"]["ne"] < run["vm_baseline"]["ne"] for run in runs)
    print(
        f"FM < distilled < baseline (NE) in {between} of {len(runs)} seeds; "
        f"FM < baseline in {sum(run['fm']['ne'] < run['vm_baseline']['ne'] for run in runs)} of {len(runs)}"
    )
    print(f"FM training time: {seconds.mean():.0f} s ± {seconds.std():.0f} s per seed (2 threads)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(runs, handle, indent=2)


if __name__ == "__main__":
    main()
