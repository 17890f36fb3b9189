"""What a served tier does to the requests it serves: NE of the SOLARIS VM fed the value vs fed nothing.

The evaluation's ablation (docs/evaluation.md) pools every scored request, so a tier that serves
3 % of them cannot move the pooled NE much whatever it is worth. This reads a finished evaluation
(``solaris evaluate``: ``metrics.json`` and each seed's ``scored.npz``) and the warehouse's events
(``deltalake``, no Spark), and for every tier k compares, **on the requests tier k served**, the
VM+SOLARIS model fed that value (``solaris_tiers1-k``) with ``solaris_none``, the VM baseline and
the FM. ``solaris_none`` is, since the evaluation protocol of issue #47, the control model trained
and scored with nothing served (before it, the same SOLARIS model fed nothing). Which tier served a
request is each seed's ``served_tier`` in ``scored.npz``; evaluations written before it kept none,
and there it is read off the predictions (``solaris_tiers1-k`` and ``solaris_tiers1-(k-1)`` differ
exactly on the requests tier k served). 95 % intervals: users resampled (one draw for every seed and
variant, so differences are paired), the statistic averaged over seeds.

    .venv/bin/python bench/tier_strata.py --warehouse /tmp/wh --name t0-20001120T030000Z
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from pathlib import Path

import numpy as np

from solaris.evaluation.bootstrap import percentile_interval, resample_counts, user_codes, weighted_ne
from solaris.evaluation.protocol import SOLARIS_NONE, ablation_variant
from solaris.jobs.evaluate import SERVED_TIER
from solaris.models.training import EventArrays
from solaris.tiers import SERVING_ORDER, TIER_NAMES
from solaris.timeutil import utc_stamp


def _events(warehouse: Path) -> EventArrays:
    from deltalake import DeltaTable

    return EventArrays.from_frame(
        DeltaTable(str(warehouse / "events")).to_pandas(columns=["user_id", "item_id", "ts", "label"])
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warehouse", type=Path, required=True)
    parser.add_argument("--name", required=True, help="evaluation folder under <warehouse>/evaluation")
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args()
    out = args.warehouse / "evaluation" / args.name
    summary = json.loads((out / "metrics.json").read_text())
    events = _events(args.warehouse)
    labels_all, users_all, served_all, preds_all = [], [], [], []
    for window in summary["windows"]:
        t0, end = (datetime.fromisoformat(window[key]).timestamp() for key in ("t0", "end"))
        scored = np.flatnonzero((events.ts > t0) & (events.ts <= end))
        if scored.size != window["requests"]:
            raise SystemExit(f"{scored.size} events in the scored window, the evaluation scored {window['requests']}")
        seeds = [np.load(out / utc_stamp(datetime.fromisoformat(window["t0"])) / f"seed-{seed}" / "scored.npz")
                 for seed in summary["seeds"]]
        first = seeds[0]
        served = np.zeros(scored.size, dtype=np.int64)  # tier that served each request (0: nothing)
        if SERVED_TIER in first.files:
            served = first[SERVED_TIER].astype(np.int64)
        else:  # written before the served tiers were kept: the same model fed nothing, then tiers 1..k
            previous = first[SOLARIS_NONE]
            for tier in SERVING_ORDER:
                current = first[ablation_variant(tier)]
                served[current != previous] = tier
                previous = current
        labels_all.append(events.label[scored].astype(np.float64))
        users_all.append(events.user_id[scored])
        served_all.append(served)
        preds_all.append([{k: s[k] for k in s.files} for s in seeds])
    labels, users, served = (np.concatenate(x) for x in (labels_all, users_all, served_all))
    n_seeds = len(summary["seeds"])
    preds = [{k: np.concatenate([w[seed][k] for w in preds_all]) for k in preds_all[0][seed]}
             for seed in range(n_seeds)]
    codes, n_users = user_codes(users)
    # row 0: the data as observed (every user once); then the resamples (draw counts per user)
    counts = np.vstack([np.ones((1, n_users)), resample_counts(n_users, args.resamples, np.random.default_rng(0))])
    print(f"{labels.size:,} scored requests from {n_users:,} users, {n_seeds} seeds, "
          f"{args.resamples} user resamples")
    print(f"{'served by':24} {'requests':>9} {'users':>6}  {'NE fm':>6} {'NE vm':>6} {'fed 0':>6} {'fed k':>6}   "
          "fed k - fed nothing [95 %]")
    for tier in SERVING_ORDER:
        mask = served == tier
        if not mask.any():
            print(f"{tier} {TIER_NAMES[tier]:22} {0:>9}")
            continue
        fed = ablation_variant(tier)
        # resamples drawing none of this tier's users give NaN: percentile_interval counts them as undefined
        with np.errstate(invalid="ignore", divide="ignore"):
            ne = {variant: np.mean([weighted_ne(labels[mask], p[variant][mask], codes[mask], counts) for p in preds],
                                   axis=0)
                  for variant in ("fm", "vm_baseline", SOLARIS_NONE, fed)}
        difference = ne[fed] - ne[SOLARIS_NONE]
        interval = percentile_interval(difference[0], difference[1:])
        bounds = (f"[{interval.low:+.4f}, {interval.high:+.4f}]" if interval.bounded else
                  f"[unbounded: undefined in {interval.undefined_share:.0%} of resamples]")
        print(f"{tier} {TIER_NAMES[tier]:22} {int(mask.sum()):>9,} {np.unique(codes[mask]).size:>6}  "
              f"{ne['fm'][0]:.4f} {ne['vm_baseline'][0]:.4f} {ne[SOLARIS_NONE][0]:.4f} {ne[fed][0]:.4f}   "
              f"{difference[0]:+.4f} {bounds}")


if __name__ == "__main__":
    main()
