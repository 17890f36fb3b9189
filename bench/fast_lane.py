"""What the fast lane adds and costs on real data: tier-1 coverage of new sessions, seconds, FM pairs.

Copies the events, id map and FM/verifier (and speculator) checkpoints of an ingested + trained warehouse into a
fresh work folder (the source is never written), then for ``--ticks`` hourly ticks from
``--start`` runs the hourly cycle (:func:`solaris.pipeline.run_cycle`, as ``solaris replay``) and
the fast lane at every ``fast_lane.interval_minutes`` past the hour (:15/:30/:45), in one Spark
session.

Measured, for the requests (events) of each fast-lane run's users after its as-of and up to the
next hourly tick (the "following minutes": after it both lanes serve the next hourly snapshot):

* **without** the fast lane: every request resolved through the hourly snapshot of its hour. Exact,
  not a model of it: a manifest pins Delta versions, and the hourly snapshot is published before
  any fast-lane write of that hour; the users a fast lane picks are new since that hourly run, so
  no earlier fast-lane pair of theirs is in it (the absence rule picks a session once);
* **with**: each request resolved through the newest snapshot published at or before it (hourly or
  fast lane), assuming a snapshot is live at its as-of; ``with, lag`` also counts the fast lane's
  measured wall seconds on this machine as the delay before its snapshot is live.

Tier-1 share of those requests with / without, and for every request of the hours; then per
fast-lane run: users (new / returning), candidate pairs, FM pairs scored, pairs written, wall
seconds. Wall seconds move with the machine's load; the coverage figures do not.

    .venv/bin/python bench/fast_lane.py --warehouse /tmp/fast-wh --start 2000-11-19T18:00:00Z --ticks 6
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import timedelta
from pathlib import Path


def _share(tiers, code: int) -> float:
    return float((tiers == code).mean()) if len(tiers) else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warehouse", required=True, help="ingested warehouse with models/fm and models/vm_baseline")
    parser.add_argument("--start", required=True, help="first hourly tick (UTC)")
    parser.add_argument("--ticks", type=int, default=6, help="hourly ticks")
    parser.add_argument("--threads", type=int, default=2, help="Spark local[N]")
    parser.add_argument("--work-dir", default="/tmp/solaris-bench-fast-lane")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()

    import numpy as np
    from cycle import prepare  # bench/cycle.py (this script's folder is on sys.path): the same work-warehouse copy

    from solaris.config import load_config
    from solaris.pipeline import PUBLISH, SCORE, run_cycle, run_fast_lane, tick_schedule
    from solaris.precompute.fast_lane import run_id
    from solaris.runtime import setup_logging
    from solaris.serving.resolver import load_snapshot
    from solaris.spark import get_spark
    from solaris.storage.events import Events
    from solaris.tiers import TIER_PAIR
    from solaris.timeutil import parse_utc

    setup_logging("WARNING")
    work = Path(args.work_dir) / "warehouse"
    prepare(Path(args.warehouse).resolve(), work)
    # every snapshot stays on disk: the measurement resolves through each of them afterwards
    config = load_config(overrides=[f"warehouse={work}", f"spark.master=local[{args.threads}]",
                                    "enrichment.snapshots_kept=10000", *args.overrides])
    spark = get_spark(config, "bench-fast-lane")
    start = parse_utc(args.start)
    interval = timedelta(minutes=config.fast_lane.interval_minutes)

    # (as_of, manifest, kind, wall seconds, users, result)
    published: list[tuple] = []
    runs: list[dict] = []
    for tick in tick_schedule(start, start + timedelta(hours=args.ticks)):
        started = time.perf_counter()
        cycle = run_cycle(spark, config, tick)
        hourly_seconds = time.perf_counter() - started
        published.append((tick, cycle.require(PUBLISH).manifest, "hourly", hourly_seconds, []))
        print(f"{tick:%Y-%m-%dT%H:%MZ} hourly: {hourly_seconds:.1f}s, {cycle.require(SCORE).scored} "
              f"FM pairs", flush=True)
        as_of = tick + interval
        while as_of < tick + timedelta(hours=1):
            started = time.perf_counter()
            result = run_fast_lane(spark, config, as_of, run_id(as_of))
            seconds = time.perf_counter() - started
            row = {"as_of": as_of.isoformat(), "users": len(result.users), "new": result.new,
                   "returning": result.returning, "dropped": result.dropped,
                   "candidates": result.candidates.pairs if result.candidates else 0,
                   "fm_pairs": result.score.scored if result.score else 0,
                   "written": result.score.written if result.score else 0, "seconds": seconds,
                   "skipped": result.skipped}
            runs.append(row)
            if result.publish is not None:
                published.append((as_of, result.publish.manifest, "fast", seconds, result.users))
            print(f"{as_of:%Y-%m-%dT%H:%MZ} fast lane: {row['users']} users, {row['fm_pairs']} FM pairs, "
                  f"{seconds:.1f}s", flush=True)
            as_of += interval

    end = start + timedelta(hours=args.ticks)
    requests = Events.of(spark, config).pandas(end, since=start)
    users_at = requests["user_id"].to_numpy()
    items_at = requests["item_id"].to_numpy()
    ts = requests["ts"].to_numpy().astype("float64")
    live = np.array([moment.timestamp() for moment, *_ in published])
    lagged = np.array([moment.timestamp() + (seconds if kind == "fast" else 0.0)
                       for moment, _, kind, seconds, _ in published])
    hourly_index = np.array([index for index, (_, _, kind, _, _) in enumerate(published) if kind == "hourly"])
    hourly_live = live[hourly_index]
    # a request at ts is served by the newest snapshot live strictly before ts: a snapshot at as-of t read
    # the events <= t, so a request at t itself is not served by it (as the replay's coverage counts)
    without = hourly_index[np.searchsorted(hourly_live, ts, side="left") - 1]
    with_lane = np.searchsorted(live, ts, side="left") - 1
    lagged[:-1] = np.minimum(lagged[:-1], live[1:])  # a run slower than the interval is superseded, not reordered
    with_lag = np.searchsorted(lagged, ts, side="left") - 1

    # requests of each fast-lane run's users, after its as-of and up to the next hourly tick
    lane_mask = np.zeros(len(ts), dtype=bool)
    for moment, _, kind, _, picked in published:
        if kind != "fast" or not picked:
            continue
        hour_end = moment.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        lane_mask |= np.isin(users_at, picked) & (ts > moment.timestamp()) & (ts <= hour_end.timestamp())

    # each snapshot loaded once (pinned Delta versions), resolving every request any of the three choices sends it
    choices = {"without": without, "with": with_lane, "with, lag": with_lag}
    tiers = {name: np.zeros(len(ts), dtype=np.int8) for name in choices}
    for index, (_, manifest, _, _, _) in enumerate(published):
        masks = {name: choice == index for name, choice in choices.items()}
        if not any(mask.any() for mask in masks.values()):
            continue
        snapshot = load_snapshot(manifest)
        for name, mask in masks.items():
            if mask.any():
                _, tiers[name][mask], _ = snapshot.resolve(users_at[mask], items_at[mask], ts[mask])
        del snapshot
    print()
    print(f"requests {start:%Y-%m-%dT%H:%MZ} -> {end:%Y-%m-%dT%H:%MZ}: {len(ts):,}; of fast-lane users after their "
          f"run, until the next hourly tick: {int(lane_mask.sum()):,} "
          f"({len(np.unique(users_at[lane_mask]))} users)")
    print(f"{'tier-1 coverage':<20}{'fast-lane users':>18}{'all requests':>16}")
    for name, values in tiers.items():
        lane_share, all_share = _share(values[lane_mask], TIER_PAIR), _share(values, TIER_PAIR)
        print(f"{name:<20}{100 * lane_share:>17.1f}%{100 * all_share:>15.1f}%")
    served_lane = {name: {int(code): int((values[lane_mask] == code).sum()) for code in np.unique(values[lane_mask])}
                   for name, values in tiers.items()}
    print("fast-lane users' requests by tier (tier: requests):",
          "; ".join(f"{name} {counts}" for name, counts in served_lane.items()))
    print()
    print(f"{'fast-lane run':<20}{'users':>7}{'new':>6}{'ret.':>6}{'cands':>8}{'FM pairs':>10}{'written':>9}"
          f"{'seconds':>9}")
    for row in runs:
        print(f"{row['as_of'][:16] + 'Z':<20}{row['users']:>7}{row['new']:>6}{row['returning']:>6}"
              f"{row['candidates']:>8}{row['fm_pairs']:>10}{row['written']:>9}{row['seconds']:>9.1f}")
    busy = [row for row in runs if not row["skipped"]]
    if busy:
        print(f"median over {len(busy)} runs with users: {statistics.median(r['seconds'] for r in busy):.1f}s, "
              f"{statistics.median(r['fm_pairs'] for r in busy):.0f} FM pairs, "
              f"{statistics.median(r['users'] for r in busy):.0f} users; total FM pairs "
              f"{sum(r['fm_pairs'] for r in runs)} over {len(runs)} runs")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "requests": len(ts), "lane_requests": int(lane_mask.sum()),
            "tier1": {name: {"lane": _share(values[lane_mask], TIER_PAIR), "all": _share(values, TIER_PAIR)}
                      for name, values in tiers.items()},
            "runs": runs}, indent=2))
    spark.stop()


if __name__ == "__main__":
    main()
