"""Next-hour item prediction without the pipeline: how much of the next hour can any model's top B hit?

Issue #16 asks the written set to hit >= 25 % of the next hour's requests of users with >= 1 prior
event at 50 pairs per user. ``bench/speculation.py`` measures the pipeline's sources and blend, which
stay near 12-13 % at 50 on ML-1M. Before building a new source into the Spark job, this benchmark
asks whether a better *predictor* exists at all, on exactly the same ticks and the same definition
of a hit, with plain numpy / torch on the driver (ML-1M fits in memory; no Spark, no FM):

* ``popular``      items engaged by the most distinct users in the last 90 days;
* ``item_knn``     cosine item-item similarity over the whole history, summed over the user's last 20
                   items weighted 1 / (1 + rank) (a classic item-based CF);
* ``transitions``  what followed each of the user's last 20 items within the next 20 events of the
                   same user, over the whole history (session continuation without a window cap);
* ``sequence``     a GRU over the user's last ``--seq-len`` items trained for the question asked: its
                   output at every position is scored against the *next* ``--targets`` items of the
                   sequence (a multi-target softmax over all items), trained once on the events
                   ``<= the first tick`` (so every later tick is point-in-time; the model is up to
                   nine days stale at the last of the default ticks, where a daily retrain would be a day).

Every predictor skips the items the user already engaged (ML-1M has no repeats) and is scored on
events ``<= t`` only; events in ``(t, t + 1h]`` are the labels. Hit rate at B = share of requests whose
item is among the user's first B. For comparison with published next-item results, the bench also
gives the share of requester-ticks whose *first* request after ``t`` is in the user's top 10.
Intervals (95 %) come from resampling users (``solaris.evaluation.bootstrap.cluster_intervals``),
the unit whose requests are correlated.

    .venv/bin/python bench/next_items.py --warehouse /tmp/spec-wh
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np
import pandas as pd
import scipy.sparse as sp

BUDGETS = (10, 20, 50, 100, 200)
PREDICTORS = ("popular", "item_knn", "transitions", "sequence")
NEXT_ITEM_K = 10
STRATA = ("1-20", ">20")  # requesters with >= 1 prior event; those with none cannot be hit by a per-user list


@dataclass(frozen=True)
class Events:
    """The event log as dense codes, sorted by (user, ts, item): the order a user's sequence is read in."""

    user: np.ndarray  # int64 codes 0..n_users-1
    item: np.ndarray  # int64 codes 0..n_items-1
    ts: np.ndarray  # int64 epoch seconds
    n_users: int
    n_items: int

    @staticmethod
    def from_frame(frame: pd.DataFrame) -> Events:
        """``frame``: user_id, item_id, ts (epoch seconds)."""
        frame = frame.sort_values(["user_id", "ts", "item_id"], kind="stable")
        users, user = np.unique(frame["user_id"].to_numpy(), return_inverse=True)
        items, item = np.unique(frame["item_id"].to_numpy(), return_inverse=True)
        return Events(user.astype(np.int64), item.astype(np.int64), frame["ts"].to_numpy().astype(np.int64),
                      len(users), len(items))

    def until(self, t: int) -> Events:
        """The events visible at ``t`` (``ts <= t``): the only input of any prediction at ``t``."""
        keep = self.ts <= t
        return Events(self.user[keep], self.item[keep], self.ts[keep], self.n_users, self.n_items)

    def between(self, start: int, end: int) -> Events:
        keep = (self.ts > start) & (self.ts <= end)
        return Events(self.user[keep], self.item[keep], self.ts[keep], self.n_users, self.n_items)

    def matrix(self) -> sp.csr_matrix:
        """users x items, 1 where engaged."""
        ones = np.ones(len(self.user), dtype=np.float32)
        matrix = sp.csr_matrix((ones, (self.user, self.item)), shape=(self.n_users, self.n_items))
        matrix.data[:] = 1.0
        return matrix


def hourly_requesters(events: Events, start: int, end: int) -> dict[datetime, int]:
    """Distinct users with an event in ``(t, t + 1h]`` for each hourly ``t`` in ``[start, end)``: the
    counts ``busiest_ticks`` chooses from (as ``solaris.stages.train_speculator.requesters_per_hour``)."""
    window = events.between(start, end + 3600)
    tick = (window.ts - 1) // 3600 * 3600
    keep = tick < end
    frame = pd.DataFrame({"tick": tick[keep], "user": window.user[keep]})
    counts = frame.groupby("tick")["user"].nunique()
    return {datetime.fromtimestamp(int(t), timezone.utc): int(n) for t, n in counts.items()}


def last_items(past: Events, users: np.ndarray, n: int) -> sp.csr_matrix:
    """users (rows, in the given order) x items: the user's last ``n`` items, weighted 1 / (1 + rank)."""
    rows, cols, weights = [], [], []
    ends = np.searchsorted(past.user, users, side="right")
    starts = np.searchsorted(past.user, users, side="left")
    for row, (lo, hi) in enumerate(zip(starts, ends, strict=True)):
        recent = past.item[max(lo, hi - n):hi][::-1]
        rows.extend([row] * len(recent))
        cols.extend(recent.tolist())
        weights.extend((1.0 / (1.0 + np.arange(len(recent)))).tolist())
    return sp.csr_matrix((np.asarray(weights, dtype=np.float32), (rows, cols)), shape=(len(users), past.n_items))


def popular_scores(past: Events, t: int, days: int = 90) -> np.ndarray:
    recent = past.between(t - days * 86400, t)
    pairs = np.unique(recent.user * past.n_items + recent.item)
    return np.bincount(pairs % past.n_items, minlength=past.n_items).astype(np.float32)


def item_cosine(matrix: sp.csr_matrix) -> np.ndarray:
    """items x items cosine similarity of the engagement columns (``Events.matrix``), diagonal 0."""
    norms = np.sqrt(np.asarray(matrix.sum(axis=0)).ravel()) + 1e-9
    similarity = (matrix.T @ matrix).toarray().astype(np.float32) / norms[:, None] / norms[None, :]
    np.fill_diagonal(similarity, 0.0)
    return similarity


def transition_counts(past: Events, window: int) -> sp.csr_matrix:
    """items x items: how often b came within ``window`` events after a in the same user's sequence."""
    rows, cols = [], []
    for step in range(1, window + 1):
        same = past.user[:-step] == past.user[step:]
        rows.append(past.item[:-step][same])
        cols.append(past.item[step:][same])
    r, c = np.concatenate(rows), np.concatenate(cols)
    keep = r != c
    return sp.csr_matrix((np.ones(keep.sum(), np.float32), (r[keep], c[keep])), shape=(past.n_items, past.n_items))


def sequences(past: Events, users: np.ndarray, length: int, pad: int) -> np.ndarray:
    """users x length: each user's last ``length`` items, left-padded with ``pad``."""
    out = np.full((len(users), length), pad, dtype=np.int64)
    ends = np.searchsorted(past.user, users, side="right")
    starts = np.searchsorted(past.user, users, side="left")
    for row, (lo, hi) in enumerate(zip(starts, ends, strict=True)):
        items = past.item[max(lo, hi - length):hi]
        out[row, length - len(items):] = items
    return out


def training_windows(past: Events, length: int, targets: int, pad: int) -> np.ndarray:
    """Windows of ``length + targets`` items of each user's sequence, padded with ``pad`` on both sides:
    the inputs are the first ``length``, the targets of input position p are positions p+1..p+targets.
    Windows step back by ``length`` from the sequence's end, so every event is an input exactly once
    (its targets padded when the sequence ends) and a target up to ``targets`` times."""
    width = length + targets
    windows = []
    bounds = np.flatnonzero(np.diff(past.user)) + 1
    for items in np.split(past.item, bounds):
        if len(items) < 2:
            continue
        padded = np.concatenate([np.full(length, pad, dtype=np.int64), items, np.full(targets, pad, dtype=np.int64)])
        for end in range(len(padded), width, -length):  # while the inputs hold at least one event
            windows.append(padded[end - width:end])
    return np.stack(windows) if windows else np.empty((0, width), dtype=np.int64)


def train_sequence_model(past: Events, length: int, targets: int, epochs: int, dim: int = 64, seed: int = 0,
                         log=print):
    """A GRU next-items model (see the module docstring), trained on ``past`` only; returns it in eval mode."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    pad = past.n_items
    windows = torch.tensor(training_windows(past, length, targets, pad))

    class NextItems(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embedding = nn.Embedding(past.n_items + 1, dim, padding_idx=pad)
            self.gru = nn.GRU(dim, 2 * dim, batch_first=True)
            self.out = nn.Linear(2 * dim, past.n_items)

        def forward(self, items):
            hidden, _ = self.gru(self.embedding(items))
            return self.out(hidden)

    model = NextItems()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(seed)
    for epoch in range(epochs):
        started, total, batches = time.perf_counter(), 0.0, 0
        model.train()
        for batch in torch.randperm(len(windows), generator=generator).split(128):
            chunk = windows[batch]
            inputs = chunk[:, :length]
            log_probs = torch.log_softmax(model(inputs), dim=-1)
            loss, count = torch.zeros(()), torch.zeros(())
            for k in range(1, targets + 1):
                target = chunk[:, k:length + k]
                valid = (target != pad) & (inputs != pad)
                picked = log_probs.gather(-1, target.clamp(max=pad - 1).unsqueeze(-1)).squeeze(-1)
                loss = loss - (picked * valid).sum()
                count = count + valid.sum()
            loss = loss / count.clamp(min=1)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, batches = total + loss.item(), batches + 1
        log(f"  sequence model epoch {epoch + 1}/{epochs}: loss {total / max(batches, 1):.3f} "
            f"({time.perf_counter() - started:.0f} s, {len(windows):,} windows)")
    return model.eval()


def ranking(scores: np.ndarray, engaged: np.ndarray, depth: int) -> np.ndarray:
    """users x depth: each user's first ``depth`` items by score, engaged items skipped, ties by item."""
    masked = np.where(engaged, -np.inf, scores)
    return np.argsort(-masked, axis=1, kind="stable")[:, :depth]


def hits_per_user(scores: np.ndarray, engaged: np.ndarray, truth: np.ndarray,
                  budgets: tuple[int, ...] = BUDGETS) -> np.ndarray:
    """users x budgets: requests hit by each user's first B items (engaged items skipped, ties by item)."""
    return hits_within(ranking(scores, engaged, max(budgets)), truth, budgets)


def hits_within(order: np.ndarray, truth: np.ndarray, budgets: tuple[int, ...] = BUDGETS) -> np.ndarray:
    hit = np.take_along_axis(truth, order, axis=1).cumsum(axis=1)
    return np.stack([hit[:, b - 1] for b in budgets], axis=1)


def next_item_hits(order: np.ndarray, first_items: np.ndarray, k: int = NEXT_ITEM_K) -> np.ndarray:
    """Per user: is the first item requested after ``t`` among the first ``k``? (the published
    next-item protocol's HR@k, measured at the tick instead of right before that item)."""
    return (order[:, :k] == first_items[:, None]).any(axis=1)


def tick_scores(past: Events, matrix: sp.csr_matrix, users: np.ndarray, t: int, model,
                length: int) -> dict[str, np.ndarray]:
    """users x items scores of every predictor at ``t`` from ``past`` (events <= t, ``matrix`` its
    ``Events.matrix()``, built once per tick by the caller, which also needs it) only."""
    seeds = last_items(past, users, 20)
    scores = {
        "popular": np.tile(popular_scores(past, t), (len(users), 1)),
        "item_knn": np.asarray(seeds @ item_cosine(matrix)),
        "transitions": np.asarray((seeds @ transition_counts(past, 20)).todense()),
    }
    if model is not None:
        import torch

        with torch.no_grad():
            logits = model(torch.tensor(sequences(past, users, length, past.n_items)))[:, -1]
        scores["sequence"] = logits.numpy()
    return scores


def report(hits: dict[str, np.ndarray], strata: np.ndarray, requests: np.ndarray, user: np.ndarray,
           names: tuple[str, ...]) -> dict[str, object]:
    """Hit rates per predictor, budget and stratum (rows: requester-ticks; ``hits`` has one column per
    budget, then the next-item hit), and the @50 rates and next-item HR@10 with intervals from
    resampling users (rows summed per user first). Returns the intervals."""
    from solaris.evaluation.bootstrap import cluster_intervals

    print(f"{'predictor':<12} {'stratum':<6}" + "".join(f"{'@' + str(b):>8}" for b in BUDGETS))
    for name in names:
        for stratum in (*STRATA, ">=1"):
            rows = np.ones(len(strata), bool) if stratum == ">=1" else strata == stratum
            rates = hits[name][rows, :len(BUDGETS)].sum(axis=0) / max(requests[rows].sum(), 1)
            print(f"{name:<12} {stratum:<6}" + "".join(f"{100 * r:7.1f}%" for r in rates))
    at50, n = BUDGETS.index(50), len(names)
    codes = np.unique(user, return_inverse=True)[1]
    # per user: requests, hits @50 per predictor, requester-ticks, next-item hits per predictor
    table = np.zeros((codes.max() + 1, 2 * n + 2))
    np.add.at(table, codes, np.column_stack([requests] + [hits[name][:, at50] for name in names]
                                            + [np.ones(len(user))] + [hits[name][:, -1] for name in names]))
    stats = {name: (lambda s, j=j: s[..., j + 1] / s[..., 0]) for j, name in enumerate(names)}
    base = names.index("popular")
    stats.update({f"{name} / popular": (lambda s, j=j: s[..., j + 1] / s[..., base + 1])
                  for j, name in enumerate(names) if j != base})
    stats.update({f"{name} next item HR@{NEXT_ITEM_K}": (lambda s, j=j: s[..., n + 2 + j] / s[..., n + 1])
                  for j, name in enumerate(names)})
    intervals = cluster_intervals(table, stats)
    print("@50, requests of users with >= 1 prior event; 95 % intervals from resampling users (paired); then the "
          f"share of requester-ticks whose first request is in the top {NEXT_ITEM_K}:")
    for name, iv in intervals.items():
        scale, unit = (1, "x") if "/" in name else (100, " %")
        low = "-" if iv.low is None else f"{scale * iv.low:.2f}"
        high = "-" if iv.high is None else f"{scale * iv.high:.2f}"
        print(f"  {name:<32} {scale * (iv.estimate or 0):6.2f}{unit} [{low}, {high}]")
    return intervals


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warehouse", required=True, help="a warehouse with an ingested `events` table")
    parser.add_argument("--start", default="2000-11-02T00:00:00Z", help="ticks are chosen in [start, end)")
    parser.add_argument("--end", default="2000-12-01T00:00:00Z")
    parser.add_argument("--days", type=int, default=6, help="busiest days to take ticks from")
    parser.add_argument("--per-day", type=int, default=8, help="busiest hours per day")
    parser.add_argument("--seq-len", type=int, default=30, help="items the sequence model reads")
    parser.add_argument("--targets", type=int, default=5, help="next items each position is trained on")
    parser.add_argument("--epochs", type=int, default=12, help="sequence model epochs (0: no sequence model)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch

    from solaris.precompute.speculation import busiest_ticks
    from solaris.storage.table import Table
    from solaris.timeutil import parse_utc

    torch.set_num_threads(2)
    started = time.perf_counter()
    table = Table.at(f"{args.warehouse}/events").rows(["user_id", "item_id", "ts"])
    frame = table.to_pandas()
    frame["ts"] = (pd.to_datetime(frame["ts"], utc=True) - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(seconds=1)
    events = Events.from_frame(frame)
    start, end = int(parse_utc(args.start).timestamp()), int(parse_utc(args.end).timestamp())
    ticks = busiest_ticks(hourly_requesters(events, start, end), args.days * args.per_day, args.days, args.per_day)
    print(f"{len(events.user):,} events, {events.n_users:,} users, {events.n_items:,} items; {len(ticks)} ticks "
          f"over {len({t.date() for t in ticks})} days ({ticks[0]:%Y-%m-%d %H}h .. {ticks[-1]:%Y-%m-%d %H}h)")
    first = int(ticks[0].timestamp())
    model = None
    if args.epochs > 0:
        print(f"training the sequence model on the {int((events.ts <= first).sum()):,} events "
              f"<= {ticks[0]:%Y-%m-%d %H}h")
        model = train_sequence_model(events.until(first), args.seq_len, args.targets, args.epochs)
    names = PREDICTORS if model is not None else PREDICTORS[:-1]
    # one row per requester-tick (its stratum is its history at that tick); intervals sum rows per user
    row_user, row_history, row_requests = [], [], []
    row_hits: dict[str, list[np.ndarray]] = {name: [] for name in names}
    requests_without_history = 0
    for number, tick in enumerate(ticks, start=1):
        t = int(tick.timestamp())
        past, future = events.until(t), events.between(t, t + 3600)
        prior = np.bincount(past.user, minlength=events.n_users)
        keep = prior[future.user] > 0
        requests_without_history += int((~keep).sum())
        users = np.unique(future.user[keep])
        if not len(users):
            continue
        truth = np.zeros((len(users), events.n_items), bool)
        truth[np.searchsorted(users, future.user[keep]), future.item[keep]] = True
        matrix = past.matrix()
        engaged = matrix[users].toarray() > 0
        # the first request of each user (the future is ordered by user, then time, then item)
        first_items = future.item[keep][np.unique(future.user[keep], return_index=True)[1]]
        for name, scores in tick_scores(past, matrix, users, t, model, args.seq_len).items():
            order = ranking(scores, engaged, max(BUDGETS))
            row_hits[name].append(np.column_stack([hits_within(order, truth), next_item_hits(order, first_items)]))
        row_user.append(users)
        row_history.append(prior[users])
        row_requests.append(truth.sum(axis=1))
        print(f"tick {number}/{len(ticks)} {tick:%Y-%m-%d %H}h: {int(truth.sum())} requests of {len(users)} users "
              f"with history ({time.perf_counter() - started:.0f} s so far)", flush=True)
    user, requests = np.concatenate(row_user), np.concatenate(row_requests)
    strata = np.where(np.concatenate(row_history) > 20, ">20", "1-20")
    print(f"\n{int(requests.sum()):,} requests of users with >= 1 prior event ({len(user):,} requester-ticks, "
          f"{len(np.unique(user))} users); {requests_without_history:,} of users with none (no per-user list "
          "can hit them; not counted)")
    report({name: np.concatenate(hits) for name, hits in row_hits.items()}, strata, requests, user, names)
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
