"""What an FM value is worth by its age: NE of the FM fed the history up to *request - age*.

SOLARIS serves a value the FM computed before the request; whatever happened between that moment and
the request is out of its reach. This measures how much of the FM's edge over the real-time VM
survives that delay. For every request (event) in ``(as_of, as_of + hours]``, with the warehouse's
checkpoints (the FM and the baseline VM, trained up to ``as_of``):

* ``vm_baseline``: the VM at the request, fed real-time features (history strictly before it);
* ``fm@0``: the FM at the request (the same history): the upper bound;
* ``fm@A``: the FM with features queried at ``request - A`` minutes (history strictly before that
  moment, ages and counts as of it): its head on the pair embedding it computed then;
* ``fm@tick``: the FM at the hourly tick whose snapshot serves the request (``(tick, tick + 1 h]``,
  :meth:`solaris.evaluation.protocol.EvaluationWindow.serving_tick`): what the hourly pipeline serves;
* ``vm_distilled`` when the warehouse has a distilled VM (at the request, like the baseline).

Per variant: NE, ``NE_VM - NE`` and the share of the FM's edge it keeps, ``TR = (NE_VM - NE) /
(NE_VM - NE_fm@0)``, with 95 % intervals from resampling users, paired (one draw of users for every
variant, the ratio recomputed within each draw). Also: requests and users, the share of requests that
follow another event of the same user within 5 minutes, the share from users first seen that UTC day,
and the median age of the tick's value.

    .venv/bin/python bench/freshness.py --warehouse warehouse --json /tmp/freshness.json --plot /tmp/freshness.png

Reads Delta with ``deltalake`` on the driver (no Spark) and predicts with plain torch.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from solaris.evaluation import bootstrap
from solaris.evaluation.bootstrap import Interval
from solaris.evaluation.bootstrap import transfer_ratios as share_kept  # the evaluation's TR rule, per resample
from solaris.evaluation.freshness import features_at_age, fm_pass, query_times

log = logging.getLogger("bench.freshness")

BASELINE, UPPER_BOUND, DISTILLED = "vm_baseline", "fm@0", "vm_distilled"
TICK = "tick"
DEFAULT_AGES = (0, 1, 5, 15, 30, 60)
FOLLOW_SECONDS = 300
DAY_SECONDS = 86400


def parse_ages(text: str) -> tuple[int, ...]:
    """Ages in whole minutes from ``"0,1,5"``, sorted and unique; 0 is always there (TR's reference)."""
    ages = {int(part) for part in text.split(",") if part.strip()}
    if any(age < 0 for age in ages):
        raise ValueError(f"ages must be >= 0 minutes: {text!r}")
    return tuple(sorted(ages | {0}))


def fm_variant(age: int | str) -> str:
    return f"fm@{age}"


def serving_tick_times(ts: np.ndarray, step_seconds: int = 3600) -> np.ndarray:
    """The hourly tick whose snapshot serves each request: the latest tick strictly before it.

    A request in ``(tick, tick + step]`` is served by ``tick``, as in the evaluation's
    :meth:`~solaris.evaluation.protocol.EvaluationWindow.serving_tick`: a request exactly on the hour is
    served by the previous tick, since the snapshot of its own hour cannot hold what happened at it.
    """
    ts = np.asarray(ts, dtype=np.int64)
    return (-(-ts // step_seconds) - 1) * step_seconds


def follows_within(history_users: np.ndarray, history_ts: np.ndarray, users: np.ndarray, ts: np.ndarray,
                   seconds: int = FOLLOW_SECONDS) -> np.ndarray:
    """Whether each request comes at most ``seconds`` after an earlier event (strictly before it) of its user.

    Why strictly before: an event at the same second is not in the request's features either
    (:class:`~solaris.models.features.HistoryIndex`), so it cannot be what a fresh value adds.
    """
    history_ts, ts = np.asarray(history_ts, dtype=np.int64), np.asarray(ts, dtype=np.int64)
    users = np.asarray(users)
    if history_ts.size == 0:
        return np.zeros(users.size, dtype=bool)
    vocab, codes = np.unique(np.asarray(history_users), return_inverse=True)
    position = np.clip(np.searchsorted(vocab, users), 0, vocab.size - 1)
    known = vocab[position] == users
    low = min(int(history_ts.min()), int(ts.min()) if ts.size else 0)
    span = max(int(history_ts.max()), int(ts.max()) if ts.size else 0) - low + 1
    keys = np.sort(codes.astype(np.int64) * span + (history_ts - low))  # by user, then time
    previous = np.searchsorted(keys, position * span + (ts - low), side="left") - 1
    safe = np.maximum(previous, 0)
    same_user = (previous >= 0) & (keys[safe] // span == position)
    return known & same_user & (ts - (keys[safe] % span + low) <= seconds)


def first_seen_that_day(history_users: np.ndarray, history_ts: np.ndarray, users: np.ndarray,
                        ts: np.ndarray) -> np.ndarray:
    """Whether each request's user had its first event (in ``history``) on the request's UTC day."""
    vocab, codes = np.unique(np.asarray(history_users), return_inverse=True)
    first = np.full(vocab.size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, codes, np.asarray(history_ts, dtype=np.int64))
    position = np.clip(np.searchsorted(vocab, users), 0, max(vocab.size - 1, 0))
    known = vocab.size > 0 and vocab[position] == np.asarray(users)
    day = np.asarray(ts, dtype=np.int64) // DAY_SECONDS
    return np.asarray(known & (first[position] // DAY_SECONDS == day), dtype=bool)


@dataclass(frozen=True)
class VariantRow:
    """One variant's figures: NE, ``NE_VM - NE`` and the share of the FM's edge it keeps (TR)."""

    name: str
    age_minutes: float | None  # None: the VMs (no age: real-time features)
    ne: Interval
    gain: Interval
    kept: Interval

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "age_minutes": self.age_minutes, "ne": self.ne.to_dict(),
                "gain": self.gain.to_dict(), "kept": self.kept.to_dict()}


def variant_rows(users: np.ndarray, labels: np.ndarray, predictions: dict[str, np.ndarray],
                 ages: dict[str, float | None], resamples: int, seed: int,
                 confidence: float = 0.95) -> list[VariantRow]:
    """Every variant's :class:`VariantRow`, from one set of user draws (paired intervals).

    Row 0 of the draw counts is the data as observed (every user once), as in
    :func:`solaris.evaluation.bootstrap.bootstrap_intervals`; the others are the resamples.
    """
    if BASELINE not in predictions or UPPER_BOUND not in predictions:
        raise ValueError(f"need the {BASELINE!r} and {UPPER_BOUND!r} predictions")
    codes, n_users = bootstrap.user_codes(users)
    counts = np.vstack([np.ones((1, n_users), dtype=np.int64),
                        bootstrap.resample_counts(n_users, resamples, np.random.default_rng(seed))])
    ne = {name: bootstrap.weighted_ne(labels, p, codes, counts) for name, p in predictions.items()}
    vm, fm = ne[BASELINE], ne[UPPER_BOUND]

    def interval(values: np.ndarray) -> Interval:
        return bootstrap.percentile_interval(float(values[0]), values[1:], confidence)

    return [VariantRow(name, ages.get(name), interval(values), interval(vm - values),
                       interval(share_kept(vm, fm, values)))
            for name, values in ne.items()]


def _cell(interval: Interval, scale: float, digits: int, sign: str = "") -> str:
    if interval.estimate is None:
        return "undefined"
    fmt = f"{{:{sign}.{digits}f}}"
    bounds = ("[" + fmt.format(interval.low * scale) + ", " + fmt.format(interval.high * scale) + "]"
              if interval.low is not None and interval.high is not None else "[unbounded]")
    return f"{fmt.format(interval.estimate * scale)} {bounds}"


def format_table(rows: list[VariantRow], confidence: float = 0.95) -> str:
    """The figures as a fixed-width text table (what the bench prints)."""
    level = f"{100 * confidence:.0f} %"
    lines = [f"{'variant':<14}{'age':>9}  {'NE [' + level + ']':<26}{'NE_VM - NE':<28}share of the FM's edge kept",
             "-" * 104]
    for row in rows:
        age = "real time" if row.age_minutes is None else f"{row.age_minutes:.1f} m"
        lines.append(f"{row.name:<14}{age:>9}  {_cell(row.ne, 1, 4):<26}{_cell(row.gain, 1, 4, '+'):<28}"
                     f"{_cell(row.kept, 100, 0, '+')} %")
    return "\n".join(lines)


def plot(rows: list[VariantRow], path: str, title: str, distilled: bool) -> None:
    """NE against the value's age (the tick at its median age), the VMs and the FM at the request as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_name = {row.name: row for row in rows}
    aged = sorted((row for row in rows if row.age_minutes is not None and row.name != fm_variant(TICK)),
                  key=lambda row: float(row.age_minutes or 0.0))
    figure, axes = plt.subplots(figsize=(7, 4.2))

    def errors(items: list[VariantRow]) -> np.ndarray:
        return np.array([[r.ne.estimate - (r.ne.low if r.ne.low is not None else r.ne.estimate) for r in items],
                         [(r.ne.high if r.ne.high is not None else r.ne.estimate) - r.ne.estimate for r in items]])

    axes.errorbar([r.age_minutes for r in aged], [r.ne.estimate for r in aged], yerr=errors(aged), marker="o",
                  capsize=3, label="FM fed the history up to request − age (bars: 95 %, users resampled)")
    tick = by_name.get(fm_variant(TICK))
    if tick is not None:
        axes.errorbar([tick.age_minutes], [tick.ne.estimate], yerr=errors([tick]), marker="s", color="C3",
                      capsize=3, linestyle="none", label=f"FM at the hourly tick (median age {tick.age_minutes:.0f} m)")
    lines = [(BASELINE, "C1", "VM baseline at the request"), (UPPER_BOUND, "C2", "FM at the request (age 0)")]
    if distilled:
        lines.append((DISTILLED, "C4", "distilled VM at the request"))
    for name, color, label in lines:
        axes.axhline(float(by_name[name].ne.estimate or 0.0), color=color, linestyle="--", label=label)
    if not distilled:
        axes.plot([], [], " ", label="(no distilled VM in this warehouse)")
    axes.set_xlabel("age of the FM value (minutes before the request)")
    axes.set_ylabel("NE (lower is better)")
    axes.set_title(title, fontsize=9)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def _checkpoint(config: Any, relative: str, arch: str) -> tuple[Any, dict[str, Any]] | None:
    """A checkpoint (a root with ``LATEST`` or a version folder) and its metadata; None when there is none."""
    from solaris.models.checkpoint import METADATA, load_checkpoint, resolve_checkpoint

    folder = resolve_checkpoint(config.resolve_under_warehouse(relative))
    if not (Path(folder) / METADATA).is_file():
        return None
    return load_checkpoint(folder, expected_arch=arch)


@dataclass(frozen=True)
class Scored:
    """The requests of the window, every variant's probabilities on them and each variant's age."""

    users: np.ndarray
    labels: np.ndarray
    predictions: dict[str, np.ndarray]
    ages: dict[str, float | None]
    follows: np.ndarray
    new_today: np.ndarray
    tick_minutes: np.ndarray


def score(config: Any, models: dict[str, Any], as_of: datetime, hours: float, ages: tuple[int, ...]) -> Scored:
    """Every variant's predictions on the requests of ``(as_of, as_of + hours]``.

    The FM's probability is the sigmoid of its head on the pair embedding it computes from the
    features, so ``fm@A`` scores what a value computed ``A`` minutes before the request would.
    """
    from solaris.models.training import EventArrays, predict
    from solaris.storage.events import Events

    end = as_of + timedelta(hours=hours)
    events = EventArrays.from_frame(Events.of(None, config).pandas(end))  # on the driver: no Spark here
    rows = np.flatnonzero((events.ts > int(as_of.timestamp())) & (events.ts <= int(end.timestamp())))
    if rows.size == 0:
        raise SystemExit(f"no requests in ({as_of.isoformat()}, {end.isoformat()}]")
    users, items, ts = events.user_id[rows], events.item_id[rows], events.ts[rows]
    index = events.index()
    fm = models["fm"]
    fm_history = fm.spec.history_length
    vm_history = config.model.history_length
    realtime = index.query(users, items, ts, vm_history)
    predictions = {BASELINE: predict(models[BASELINE], realtime)}
    if DISTILLED in models:
        predictions[DISTILLED] = predict(models[DISTILLED], realtime)
    variant_ages: dict[str, float | None] = {BASELINE: None, DISTILLED: None}
    ticks = serving_tick_times(ts)
    for age in (*ages, TICK):  # the features and the FM pass of solaris.evaluation.freshness, as the evaluation's
        started, name = time.monotonic(), fm_variant(age)
        at = ticks if age == TICK else query_times(ts, int(age))
        features = (index.query(users, items, ticks, fm_history) if age == TICK
                    else features_at_age(index, users, items, ts, age_minutes=int(age),
                                          history_length=fm_history))
        predictions[name] = fm_pass(fm, features)[0]
        variant_ages[name] = float(np.median(ts - at) / 60)
        log.info("%s: %d requests scored in %.1f s", name, rows.size, time.monotonic() - started)
    return Scored(users, events.label[rows], predictions, variant_ages,
                  follows_within(events.user_id, events.ts, users, ts),
                  first_seen_that_day(events.user_id, events.ts, users, ts), (ts - ticks) / 60)


def load_models(config: Any) -> tuple[dict[str, Any], dict[str, datetime]]:
    """The FM, the baseline VM and (when there is one) the distilled VM, and each one's training as-of."""
    from solaris.timeutil import parse_utc

    models, as_ofs = {}, {}
    for name, relative, arch in (("fm", config.precompute.fm_checkpoint, "fm"),
                                 (BASELINE, config.precompute.verifier_checkpoint, "vm"),
                                 (DISTILLED, f"models/{DISTILLED}", "vm")):
        loaded = _checkpoint(config, relative, arch)
        if loaded is None:
            if name != DISTILLED:
                raise SystemExit(f"no {name} checkpoint under {config.warehouse}/{relative}")
            continue
        models[name], metadata = loaded
        as_ofs[name] = parse_utc(metadata["as_of"])
    return models, as_ofs


def summary(scored: Scored) -> dict[str, Any]:
    """Counts and shares printed above the table."""
    return {"requests": int(scored.labels.size), "users": int(np.unique(scored.users).size),
            "follow_within_5_min": float(scored.follows.mean()),
            "users_first_seen_that_day": float(scored.new_today.mean()),
            "tick_median_age_minutes": float(np.median(scored.tick_minutes)), "base_rate": float(scored.labels.mean())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--as-of", help="start of the requests (default: the latest as-of of the FM and VM)")
    parser.add_argument("--hours", type=float, default=6.0, help="hours of requests after --as-of")
    parser.add_argument("--ages", default=",".join(map(str, DEFAULT_AGES)), help="minutes, comma-separated")
    parser.add_argument("--resamples", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0, help="seed of the user draws")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="config override")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--plot", help="write NE against age here (.png)")
    args = parser.parse_args()
    from solaris.runtime import as_of_arg, setup_logging

    setup_logging()
    import torch

    from solaris.config import load_config

    torch.set_num_threads(args.threads)
    started = time.monotonic()
    config = load_config(overrides=[f"warehouse={args.warehouse}", *args.overrides])
    models, as_ofs = load_models(config)
    as_of = as_of_arg(args.as_of) if args.as_of else max(as_ofs.values())
    scored = score(config, models, as_of, args.hours, parse_ages(args.ages))
    rows = variant_rows(scored.users, scored.labels, scored.predictions, scored.ages, args.resamples, args.seed)
    facts = summary(scored)
    seconds = time.monotonic() - started
    end = as_of + timedelta(hours=args.hours)
    print(f"\nrequests in ({as_of:%Y-%m-%d %H:%M}, {end:%Y-%m-%d %H:%M}] UTC: {facts['requests']:,} from "
          f"{facts['users']} users (base rate {facts['base_rate']:.3f}); models trained as of "
          + ", ".join(f"{name} {moment:%Y-%m-%d %H:%M}" for name, moment in as_ofs.items()))
    print(f"{100 * facts['follow_within_5_min']:.1f} % follow another event of the same user within 5 min; "
          f"{100 * facts['users_first_seen_that_day']:.1f} % come from users first seen that day; the tick's value "
          f"is {facts['tick_median_age_minutes']:.1f} min old on median")
    print(f"{args.resamples} paired user resamples (seed {args.seed}); {DISTILLED}: "
          + ("in the warehouse" if DISTILLED in models else "none in this warehouse") + "\n")
    print(format_table(rows))
    print(f"\n{seconds:.0f} s")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"as_of": as_of.isoformat(), "hours": args.hours, "resamples": args.resamples, "seed": args.seed,
                       "models_as_of": {k: v.isoformat() for k, v in as_ofs.items()}, **facts, "seconds": seconds,
                       "variants": [row.to_dict() for row in rows]}, handle, indent=2)
    if args.plot:
        plot(rows, args.plot, f"FM vs VM by the FM value's age: {facts['requests']:,} requests, {facts['users']} "
             f"users after {as_of:%Y-%m-%d %H:%M} UTC", DISTILLED in models)


if __name__ == "__main__":
    main()
