"""Coverage by tier of a replayed window, with 95 % intervals by bootstrap over users.

Reads a warehouse after ``solaris replay`` (no Spark: ``deltalake`` + the resolver): for every
published snapshot whose ``as_of`` lies in ``[--start, --end)``, the requests of
``(as_of, as_of + 1 h]`` (the events of that hour) are resolved through that snapshot at their own
timestamps - what the replay's ``coverage`` measurement does, here with the requesting users kept.
Prints the share of requests per tier, cumulative coverage in serving order, each with a 95 %
interval from resampling *users* (a user's burst of requests is one unit: resampling requests
would make the interval far too narrow), and the per-tick range.

    .venv/bin/python bench/coverage.py --warehouse /tmp/wh --start 2000-11-19T18:00:00Z --end 2000-11-20T06:00:00Z
"""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np


def _utc(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def user_bootstrap(users: np.ndarray, covered: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """95 % percentile interval of the share of covered requests, users drawn with replacement."""
    _, user_index = np.unique(users, return_inverse=True)
    per_user_requests = np.bincount(user_index)
    per_user_covered = np.bincount(user_index, weights=covered.astype(np.float64))
    rng = np.random.default_rng(seed)
    n_users = per_user_requests.size
    draws = rng.multinomial(n_users, np.full(n_users, 1.0 / n_users), size=resamples)  # times each user is drawn
    shares = (draws @ per_user_covered) / np.maximum(draws @ per_user_requests, 1)
    low, high = np.percentile(shares, [2.5, 97.5])
    return float(low), float(high)


def main() -> None:
    from solaris.serving.resolver import load_snapshot
    from solaris.serving.snapshots import list_manifests, read_manifest
    from solaris.storage.table import Table
    from solaris.tiers import SERVING_ORDER, TIER_NAMES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--start", required=True, type=_utc, help="first tick (UTC)")
    parser.add_argument("--end", required=True, type=_utc, help="end of the ticks (exclusive)")
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    events = Table.at(f"{args.warehouse}/events").rows(["user_id", "item_id", "ts"]).to_pandas()
    events["ts_s"] = events["ts"].astype("datetime64[us, UTC]").astype("int64") / 1e6
    users, tiers, ticks = [], [], []
    manifests = {}
    for path in list_manifests(Path(args.warehouse) / "snapshots"):
        as_of = _utc(read_manifest(path).as_of)
        if args.start <= as_of < args.end:
            manifests[as_of] = path  # one snapshot per tick (a rerun's later manifest replaces it)
    if not manifests:
        raise SystemExit(f"no published snapshot with as_of in [{args.start}, {args.end}) under {args.warehouse}")
    for as_of in sorted(manifests):
        start_s, end_s = as_of.timestamp(), (as_of + timedelta(hours=1)).timestamp()
        hour = events[(events.ts_s > start_s) & (events.ts_s <= end_s)]
        _, tier, _ = load_snapshot(manifests[as_of]).resolve(hour.user_id.to_numpy(), hour.item_id.to_numpy(),
                                                             hour.ts_s.to_numpy())
        users.append(hour.user_id.to_numpy())
        tiers.append(tier)
        served = np.isin(tier, SERVING_ORDER).mean() if tier.size else float("nan")
        ticks.append((as_of, tier.size, np.unique(hour.user_id).size, served))
    all_users, all_tiers = np.concatenate(users), np.concatenate(tiers)
    print(f"{len(ticks)} ticks {ticks[0][0]:%Y-%m-%d %H:%M} -> {ticks[-1][0]:%Y-%m-%d %H:%M} UTC: "
          f"{all_tiers.size:,} requests from {np.unique(all_users).size:,} distinct users")
    for as_of, requests, distinct, served in ticks:
        print(f"  {as_of:%Y-%m-%d %H:%M}Z  {requests:>6,} requests, {distinct:>4} users, all tiers {100 * served:.1f}%")
    print(f"{'tier':<26}{'share':>8}   {'cumulative (95% CI, users resampled)':<40}")
    for position, code in enumerate(SERVING_ORDER):
        share = float((all_tiers == code).mean())
        covered = np.isin(all_tiers, SERVING_ORDER[: position + 1])
        low, high = user_bootstrap(all_users, covered, args.resamples, args.seed)
        print(f"{code} {TIER_NAMES[code]:<24}{100 * share:>7.1f}%   "
              f"<= {code}: {100 * covered.mean():.1f}% [{100 * low:.1f}, {100 * high:.1f}]")
    print(f"none{'':<22}{100 * float((all_tiers == 0).mean()):>7.1f}%")
    per_tick = [served for *_, served in ticks]
    print(f"all tiers per tick: min {100 * min(per_tick):.1f}%, median {100 * float(np.median(per_tick)):.1f}%, "
          f"max {100 * max(per_tick):.1f}%")


if __name__ == "__main__":
    main()
