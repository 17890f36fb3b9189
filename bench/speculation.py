"""Speculation benchmark: which share of the next hour's requests each source, the blend and the written set hit.

On an ingested warehouse with an FM and a verifier trained as of <= the first tick, over many hourly
ticks chosen by the data (the ``--per-day`` hours with the most distinct requesters on each of the
``--days`` busiest days of ``[--start, --end)``), in one Spark session:

1. ``solaris.stages.train_speculator.fit`` learns the blend and the request verifier at the first
   tick (from ticks before it only) unless ``--no-train``; the checkpoint goes to the warehouse.
2. At each tick ``t`` the views of ``sql/candidates.sql`` are built from events ``<= t``; ranked pair
   sets are read from them: every source alone (its own per-user ranking), the blend, today's rules
   (cooc + trending + recent with the hand weights: the baseline), the new written set (the request
   verifier on the candidates stage's output - each user's best ``candidates.per_user`` pairs by the
   blend, within the global budget - before the FM, as the pipeline does: threshold + top-k per user
   + budget per active user; again at each ``--sweep`` entry) and
   today's written set (the baseline's top 50 candidates per user scored by the FM + relevance
   verifier UDF, threshold 0.5 + top 20).
3. Requests are the events in ``(t, t + horizon]``, stratified by the requester's event count at
   ``t`` (none / 1-20 / > 20). Hit rate at budget B = share of requests whose pair is within the
   user's first B pairs of a set. Precision = share of written pairs requested in ``(t, t + ttl]``.
   FM passes per tier-1-covered request = pairs scored by the FM / requests hit by the written set.
   A ceiling row gives the most any B pairs per user could hit (min(requests, B) per requester).
4. The acceptance figures of issue #16 (written hit rate among requesters with >= 1 prior event, its
   ratio to today's, FM passes per covered request against today's) get 95 % intervals from
   resampling users, the unit whose requests are correlated.
Reads only events <= t for every decision; events after t only as labels of the measurement.

    .venv/bin/python bench/speculation.py --warehouse /tmp/spec-wh
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

BUDGETS = (10, 20, 50, 100, 200)
# The speculation under test: the config's defaults since this benchmark measured them, pinned here so
# a deployment's YAML does not change what "new" means. "Today's" rules are issue #16's baseline (the
# defaults before the speculator: three rule sources, hand weights, relevance verifier), measured in
# the same run. --set overrides these. The retrieval source is left out: it is the costliest per tick
# (an FM pass over every user) and its measured hit rate is in BENCHMARKS.md; add it with
# --set precompute.candidates.sources=[..., retrieval].
NEW_SPECULATION = (
    "precompute.candidates.sources=[cooc, trending, recent, next, popular]",
    "precompute.candidates.blend=learned",
    "precompute.verifier.rule=request",
    "precompute.candidates.per_user=200",
    "precompute.candidates.item_stats_hours=24",
    "precompute.verifier.request_threshold=0.001",
    "precompute.verifier.request_budget_per_active_user=20",
    "precompute.verifier.request_top_k_per_user=200",
    "precompute.verifier.request_min_per_user=1",
)
# Today's written set takes the baseline's top 50 candidates per user into the FM (the candidates stage's
# per-user cap when the 48-tick runs of BENCHMARKS.md measured it); pinned, so that a --set of
# precompute.candidates.per_user for the new speculation does not move the baseline.
TODAY_CANDIDATES_PER_USER = 50
STRATA = ("none", "1-20", ">20")
NEW, TODAY = "written (new)", "written (today)"


class SweepEntry(NamedTuple):
    """One more written set of the request verifier: its threshold (None: the configured one), top-k
    per user (None: the configured one) and budget per active user (None: none)."""

    threshold: float | None = None
    top_k: int | None = None
    per_active_user: float | None = None

    def name(self) -> str:
        if self.per_active_user is not None:
            return f"written b{self.per_active_user:g}"
        return f"written p>={self.threshold:g}" + ("" if self.top_k is None else f" k{self.top_k}")

    def update(self) -> dict:
        """The verifier settings this entry changes (a threshold entry has no budget per user)."""
        if self.per_active_user is not None:
            return {"rule": "request", "request_budget_per_active_user": self.per_active_user}
        update = {"rule": "request", "request_threshold": self.threshold, "request_budget_per_active_user": None}
        return update if self.top_k is None else {**update, "request_top_k_per_user": self.top_k}


def parse_sweep(text: str) -> tuple[SweepEntry, ...]:
    """``--sweep``: comma-separated ``p`` (threshold p, the configured top-k per user, no budget per
    user), ``p:k`` (and top-k k) or ``bN`` (the configured threshold, budget N per active user)."""
    entries = []
    for part in (p.strip() for p in text.split(",")):
        if part.startswith("b"):
            entries.append(SweepEntry(per_active_user=float(part[1:])))
        elif part:
            threshold, _, top_k = part.partition(":")
            entries.append(SweepEntry(float(threshold), int(top_k) if top_k else None))
    return tuple(entries)


def written_sets(sweep: tuple[SweepEntry, ...]) -> tuple[str, ...]:
    return (NEW, *(entry.name() for entry in sweep), TODAY)


def per_user_columns(written: tuple[str, ...]) -> tuple[str, ...]:
    """Per-user totals the acceptance intervals resample: requests of users with >= 1 prior event,
    then every written set's hits among them, then its FM passes."""
    return ("requests", *(f"hits {name}" for name in written), *(f"passes {name}" for name in written))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warehouse", required=True, help="ingested warehouse with models/fm and models/vm_baseline")
    parser.add_argument("--start", default="2000-11-02T00:00:00Z")
    parser.add_argument("--end", default="2000-12-01T00:00:00Z")
    parser.add_argument("--days", type=int, default=6, help="busiest days to take ticks from")
    parser.add_argument("--per-day", type=int, default=8, help="busiest hours per day")
    parser.add_argument("--no-train", action="store_true", help="use the warehouse's speculator checkpoint as is")
    parser.add_argument("--set", action="append", default=[], help="config override key=value")
    parser.add_argument("--sweep", default="b10,b50,0.02,0.005",
                        help="more written sets of the request verifier, comma-separated ('' for none): p "
                             "(threshold p, no budget per user), p:k (and top-k k per user) or bN (budget N per "
                             "active user): the trade of FM passes against hits")
    return parser.parse_args(argv)


def ranked_sets(spark, config, tick, final, baseline_weights, phases, sweep=(), context=None):
    """(set, user_id, item_id, rank) of every pair set measured at ``tick`` (views already built),
    the FM passes of each written set per user (user_id, passes, set), and the frames to drop at the
    tick's end.

    Every frame read more than once is computed once, eagerly (``source_parts``, the candidate
    pairs, the FM scores, the union of sets): without that the measurement's joins re-ran the
    candidate views and the FM, and planning the nested plans dominated; a tick cost 5-8 minutes.
    ``phases`` receives the seconds of each step.
    """
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from solaris.config import VerifierConfig
    from solaris.models.checkpoint import resolve_checkpoint
    from solaris.precompute.spark_features import candidate_features
    from solaris.stages.score import _verify
    from solaris.udfs.fm_scoring import OUTPUT_SCHEMA, ScoringSpec, make_scorer

    pre = config.precompute
    held = []

    def eager(frame, phase, cache=False):
        """Compute ``frame`` once. Checkpointed (lineage cut) unless ``cache``: the sets' plans nest the
        candidate views many times over, and AQE re-planned that tree after every stage (minutes a
        tick). ``cache`` keeps the plan so that views defined over it (candidate_pairs over
        source_parts) read the cache."""
        started = time.perf_counter()
        if cache:
            frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
            frame.count()
            held.append(frame)
        else:
            frame = frame.localCheckpoint(eager=True)
        phases[phase] += time.perf_counter() - started
        return frame

    def ranked(frame, name, score):
        window = Window.partitionBy("user_id").orderBy(F.col(score).desc(), F.col("item_id"))
        return frame.select("user_id", "item_id", F.row_number().over(window).alias("rank"), F.lit(name).alias("set"))

    # the view the candidate pairs are built from: cached first, so candidate_pairs reads the cache
    source_parts = eager(spark.table("source_parts"), "sources", cache=True)
    pairs = eager(spark.table("candidate_pairs"), "blend")
    parts = source_parts.select("user_id", "item_id", F.col("source_rank").alias("rank"), F.col("source").alias("set"))
    hand = sum(F.col(f"score_{s}") * w for s, w in baseline_weights.items())
    baseline_pool = pairs.where(sum(F.col(f"score_{s}") for s in baseline_weights) > 0).withColumn("hand", hand)
    baseline = ranked(baseline_pool, "today's rules", "hand")
    blend = ranked(pairs, "blend", "spec_score")
    # what the candidates stage hands the verifier: sql/candidates.sql's final statement (each user's
    # best per_user pairs by the blend, within the global budget); computed once, every written set
    # below verifies it
    requestable = eager(spark.sql(final).where(F.col("request_score").isNotNull()).drop("user_rank"), "verify (new)")
    started = time.perf_counter()
    verification = _verify(requestable, "request_score", pre.verifier)
    held.append(verification.ranked)  # persisted by the rule; released with the tick's other caches
    new_written = verification.kept
    phases["verify (new)"] += time.perf_counter() - started
    new_written = eager(new_written, "verify (new)")
    written_new = ranked(new_written, NEW, "request_score")
    passes = new_written.groupBy("user_id").agg(F.count("*").alias("passes")).withColumn("set", F.lit(NEW))
    for entry in sweep:
        rule = pre.verifier.model_copy(update=entry.update())
        verification = _verify(requestable, "request_score", rule)
        held.append(verification.ranked)
        kept = eager(verification.kept, "verify (new)")
        written_new = written_new.unionByName(ranked(kept, entry.name(), "request_score"))
        passes = passes.unionByName(kept.groupBy("user_id").agg(F.count("*").alias("passes"))
                                    .withColumn("set", F.lit(entry.name())))

    # today's written set: top per_user baseline candidates -> FM + relevance verifier -> threshold, top-k
    today_candidates = baseline.where(F.col("rank") <= TODAY_CANDIDATES_PER_USER).select("user_id", "item_id")
    spec = ScoringSpec(
        fm_checkpoint=str(resolve_checkpoint(config.resolve_under_warehouse(pre.fm_checkpoint))),
        verifier_checkpoint=str(resolve_checkpoint(config.resolve_under_warehouse(pre.verifier_checkpoint))),
        embedding_dim=config.model.embedding_dim, history_length=config.model.history_length,
        request_ts=int(tick.timestamp()), model_batch_size=pre.model_batch_size, torch_threads=pre.torch_threads)
    features = candidate_features(spark, config, today_candidates, tick, context)
    scored = eager(features.mapInArrow(make_scorer(spec), OUTPUT_SCHEMA).select("user_id", "item_id", "verifier_score"),
                   "FM (today)")
    relevance = VerifierConfig(rule="relevance", threshold=0.5, top_k_per_user=20)
    started = time.perf_counter()
    verification = _verify(scored, "verifier_score", relevance)
    held.append(verification.ranked)
    today_written = verification.kept
    phases["verify (today)"] += time.perf_counter() - started
    written_today = ranked(today_written, TODAY, "verifier_score")
    sets = eager(parts.unionByName(baseline).unionByName(blend).unionByName(written_new).unionByName(written_today),
                 "rank sets")
    # FM passes per user: the new set scores only what it writes; today's scores its whole input
    passes = passes.unionByName(scored.groupBy("user_id").agg(F.count("*").alias("passes"))
                                .withColumn("set", F.lit(TODAY)))
    return sets, passes, held


def measure_tick(spark, config, tick, sets, passes, written_names, context=None):
    """Hits per (set, stratum, budget), requests per stratum, written pairs and their TTL hits, and
    per user (the bootstrap's unit): requests from users with >= 1 prior event, the written sets'
    hits among them and FM passes."""
    from pyspark.sql import functions as F

    from solaris.precompute.spark_features import visible_events
    from solaris.storage.events import Events

    pre = config.precompute
    history = visible_events(spark, config, tick, context).groupBy("user_id").agg(F.count("*").alias("n"))
    stratum = (F.when(F.col("n").isNull(), "none").when(F.col("n") <= 20, "1-20").otherwise(">20"))
    horizon_end = tick + timedelta(hours=pre.horizon_hours)
    horizon = Events.of(spark, config).window(since=tick, until=horizon_end)
    requests = horizon.select("user_id", "item_id").join(history, "user_id", "left").withColumn("stratum", stratum)
    per_stratum = {r["stratum"]: (int(r["requests"]), int(r["users"])) for r in requests.groupBy("stratum").agg(
        F.count("*").alias("requests"), F.countDistinct("user_id").alias("users")).collect()}
    hits = requests.join(sets, ["user_id", "item_id"]).groupBy("set", "stratum").agg(
        *(F.count_if(F.col("rank") <= b).alias(f"b{b}") for b in BUDGETS)).collect()
    ttl = Events.of(spark, config).window(since=tick, until=tick + timedelta(hours=pre.ttl_hours))
    asked = ttl.select("user_id", "item_id").distinct().withColumn("asked", F.lit(True))
    written = sets.where(F.col("set").startswith("written")).join(asked, ["user_id", "item_id"], "left")
    sizes = written.groupBy("set").agg(F.count("*").alias("pairs"), F.count_if(F.col("asked")).alias("asked"),
                                       F.countDistinct("user_id").alias("users")).collect()
    prior = requests.where(F.col("stratum") != "none").select("user_id", "item_id", F.lit(1).alias("requests"))
    hit = prior.join(sets.where(F.col("set").startswith("written")), ["user_id", "item_id"])
    # Spark columns c0.. in per_user_columns order (the set names hold dots and spaces)
    n = len(written_names)
    zeros = [F.lit(0)] * (1 + 2 * n)

    def row(values):
        return [value.alias(f"c{j}") for j, value in enumerate(values)]
    hit_values = [F.when(F.col("set") == name, 1).otherwise(0) for name in written_names]
    pass_values = [F.when(F.col("set") == name, F.col("passes")).otherwise(0) for name in written_names]
    rows = (prior.select("user_id", *row([F.col("requests"), *zeros[1:]]))
            .unionByName(hit.select("user_id", *row([F.lit(0), *hit_values, *zeros[: n]])))
            .unionByName(passes.select("user_id", *row([F.lit(0), *zeros[: n], *pass_values])))
            .groupBy("user_id").agg(*(F.sum(f"c{j}").alias(f"c{j}") for j in range(1 + 2 * n))).collect())
    per_user = {r["user_id"]: [int(r[f"c{j}"]) for j in range(1 + 2 * n)] for r in rows}
    return per_stratum, hits, sizes, per_user


def acceptance_intervals(per_user: dict[int, list[int]], written: tuple[str, ...] = (NEW, TODAY),
                         seed: int = 0) -> dict[str, object]:
    """The acceptance figures of every written set against today's, with 95 % intervals from
    resampling users (their requests are bursts: correlated within and across hours). Columns as
    in :func:`per_user_columns` of ``written`` (today's set last)."""
    import numpy as np

    from solaris.evaluation.bootstrap import cluster_intervals

    columns = per_user_columns(written)
    totals = np.array(sorted(per_user.values()), dtype=np.float64).reshape(-1, len(columns))
    req = 0
    hits = {name: columns.index(f"hits {name}") for name in written}
    passes = {name: columns.index(f"passes {name}") for name in written}
    today_hit, today_pass = hits[TODAY], passes[TODAY]
    statistics = {}
    for name in written:
        hit, cost = hits[name], passes[name]
        statistics[f"{name} hit rate"] = lambda s, h=hit: s[..., h] / s[..., req]
        if name == TODAY:
            continue
        statistics[f"{name} hit rate / today's"] = lambda s, h=hit: s[..., h] / s[..., today_hit]
        statistics[f"{name} FM passes per covered request / today's"] = (
            lambda s, h=hit, c=cost: (s[..., c] / s[..., h]) / (s[..., today_pass] / s[..., today_hit]))
    return cluster_intervals(totals, statistics, seed=seed)


def reachable(requests_per_user: list[int], budgets: tuple[int, ...] = BUDGETS) -> dict[int, int]:
    """Requests that any set of B pairs per user could hit at best, per budget B: a user who asks for
    n items in the hour is covered for at most min(n, B) of them. Summed over requester-ticks, over
    the requests, this is the ceiling of every hit rate at budget B."""
    return {b: sum(min(n, b) for n in requests_per_user) for b in budgets}


def report(n_ticks, requests, requesters, hits, written, per_user, ceiling=None, written_names=(NEW, TODAY)) -> None:
    """Print the tables over the ticks measured so far (called after every tick: a run stopped early
    still leaves its figures in the log)."""
    prior = ("1-20", ">20")
    n_prior = sum(requests[s] for s in prior)
    print(f"\nrequests in (t, t+1h] over {n_ticks} ticks: " + ", ".join(
        f"{s}: {requests[s]} ({requesters[s]} requester-ticks)" for s in STRATA))
    names = sorted({key[0] for key in hits}, key=lambda n: (n.startswith("written"), n != "today's rules", n))
    header = f"{'set':<21} {'stratum':<8} " + " ".join(f"{'@' + str(b):>7}" for b in BUDGETS)
    print("\nhit rate (share of requests whose pair is among the user's first B pairs of the set)")
    print(header)
    if ceiling and n_prior:
        print(f"{'(any set)':<21} {'>=1':<8} " + " ".join(f"{100 * ceiling[b] / n_prior:6.1f}%"
                                                       for b in BUDGETS) + "  <- the most B pairs per user can hit")
    for name in names:
        for stratum in (*STRATA, ">=1"):
            members = prior if stratum == ">=1" else (stratum,)
            denominator = sum(requests[s] for s in members)
            if not denominator:
                continue
            cells = [sum(hits[(name, s, b)] for s in members) / denominator for b in BUDGETS]
            print(f"{name:<21} {stratum:<8} " + " ".join(f"{100 * c:6.1f}%" for c in cells))
    print("\nwritten sets (new: request verifier at the configured threshold, top-k and budget per active user; "
          "p>=x [kK]: the same at threshold x [and top-k K] without a budget; bN: budget N per active user; "
          "today: relevance >= 0.5, top 20)")
    print(f"{'set':<21} {'pairs':>8} {'per user':>9} {'hit >=1':>8} {'precision':>10} {'FM passes':>10} "
          f"{'passes/hit':>11}")
    summary = {}
    columns = per_user_columns(written_names)
    passes = {name: sum(totals[columns.index(f"passes {name}")] for totals in per_user.values())
              for name in written_names}
    for name in written_names:
        pairs, asked, users = written[name]
        hit = sum(hits[(name, s, BUDGETS[-1])] for s in prior)
        per_hit = passes[name] / hit if hit else float("inf")
        summary[name] = (hit / n_prior if n_prior else 0.0, per_hit)
        print(f"{name:<21} {pairs:>8} {pairs / max(users, 1):>9.1f} {100 * hit / max(n_prior, 1):>7.1f}% "
              f"{100 * asked / max(pairs, 1):>9.1f}% {passes[name]:>10} {per_hit:>11.1f}")
    (new_hit, new_cost), (old_hit, old_cost) = summary[NEW], summary[TODAY]
    print(f"\nacceptance: written hit rate (>=1 prior event) {100 * new_hit:.1f}% (target >= 25%), "
          f"{new_hit / old_hit if old_hit else float('inf'):.2f}x today's {100 * old_hit:.1f}% (target >= 2.5x); "
          f"FM passes per covered request {new_cost:.1f} vs {old_cost:.1f} = "
          f"{new_cost / old_cost if old_cost else float('nan'):.2f} (target <= 0.25)")
    users = sum(1 for totals in per_user.values() if totals[0])
    print(f"95 % intervals, resampling the {users} users with >= 1 prior event who requested "
          f"(and {len(per_user) - users} users with written pairs only):")
    for name, interval in acceptance_intervals(per_user, written_names).items():
        percent = "rate" in name and "/" not in name
        low, estimate, high = (_figure(v, percent) for v in (interval.low, interval.estimate, interval.high))
        print(f"  {name:<60} {estimate:>8}  [{low}, {high}]")


def _figure(value: float | None, percent: bool) -> str:
    if value is None:
        return "unbounded"
    return f"{100 * value:.1f}%" if percent else f"{value:.2f}"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from solaris.config import load_config
    from solaris.pipeline import open_tick
    from solaris.precompute.speculation import busiest_ticks
    from solaris.precompute.speculator_store import load_speculator, save_speculator
    from solaris.spark import get_spark
    from solaris.stages.candidates import prepare_views
    from solaris.stages.train_speculator import fit, requesters_per_hour
    from solaris.timeutil import parse_utc

    config = load_config(overrides=[f"warehouse={args.warehouse}", *NEW_SPECULATION, *args.set])
    spark = get_spark(config, "bench-speculation")
    bench_started = time.perf_counter()
    start, end = parse_utc(args.start), parse_utc(args.end)
    counts = requesters_per_hour(spark, config, start, end)
    ticks = busiest_ticks(counts, args.days * args.per_day, args.days, args.per_day)
    print(f"{len(ticks)} ticks over {len({t.date() for t in ticks})} days "
          f"({ticks[0]:%Y-%m-%d %H}h .. {ticks[-1]:%Y-%m-%d %H}h); distinct requesters per tick: "
          f"min {min(counts[t] for t in ticks)}, median {sorted(counts[t] for t in ticks)[len(ticks) // 2]}, "
          f"total {sum(counts[t] for t in ticks)}")
    if not args.no_train:
        save_speculator(config, fit(spark, config, ticks[0]))
    speculator = load_speculator(config, ticks[0])
    assert speculator is not None, "no speculator trained at or before the first tick"
    print(f"speculator {speculator.version} as of {speculator.as_of} from {len(speculator.ticks)} ticks; "
          f"blend weights {({k: round(v, 3) for k, v in speculator.blend.weights.items()})}")
    rules = config.precompute.candidates
    baseline_weights = {"cooc": rules.weight_cooc, "trending": rules.weight_trending, "recent": rules.weight_recent}

    requests: dict[str, int] = defaultdict(int)
    requesters: dict[str, int] = defaultdict(int)
    hits: dict[tuple[str, str, int], int] = defaultdict(int)
    written: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    sweep = parse_sweep(args.sweep)
    names = written_sets(sweep)
    per_user: dict[int, list[int]] = defaultdict(lambda: [0] * len(per_user_columns(names)))
    phases: dict[str, float] = defaultdict(float)
    seconds: list[float] = []
    ceiling: dict[int, int] = defaultdict(int)
    for number, tick in enumerate(ticks):
        tick_started = time.perf_counter()
        with open_tick(spark, config, tick, batch_audit=False) as context:
            prepared = prepare_views(spark, config, tick, speculator=speculator, tick=context)
            phases["views"] += time.perf_counter() - tick_started
            sets, fm_passes, cached = ranked_sets(spark, config, tick, prepared.final, baseline_weights, phases, sweep,
                                                 context)
            started = time.perf_counter()
            per_stratum, tick_hits, sizes, tick_users = measure_tick(spark, config, tick, sets, fm_passes, names,
                                                                     context)
            phases["measure"] += time.perf_counter() - started
            for frame in cached:
                frame.unpersist()
            prepared.release()
        for name, (n, users) in per_stratum.items():
            requests[name] += n
            requesters[name] += users
        for row in tick_hits:
            for b in BUDGETS:
                hits[(row["set"], row["stratum"], b)] += int(row[f"b{b}"])
        for row in sizes:
            total = written[row["set"]]
            total[0], total[1], total[2] = total[0] + row["pairs"], total[1] + row["asked"], total[2] + row["users"]
        for user, totals in tick_users.items():
            per_user[user] = [a + b for a, b in zip(per_user[user], totals, strict=True)]
        for budget, n in reachable([totals[0] for totals in tick_users.values()]).items():
            ceiling[budget] += n
        seconds.append(time.perf_counter() - tick_started)
        print(f"tick {number + 1}/{len(ticks)} {tick:%Y-%m-%d %H}h: {sum(n for n, _ in per_stratum.values())} requests "
              f"({time.perf_counter() - tick_started:.0f} s; so far " +
              ", ".join(f"{name} {spent:.0f} s" for name, spent in phases.items()) + ")", flush=True)
        if number + 1 < len(ticks):
            print(f"--- after {number + 1} of {len(ticks)} ticks ---")
            report(number + 1, requests, requesters, hits, written, per_user, ceiling, names)
            print("---", flush=True)

    report(len(ticks), requests, requesters, hits, written, per_user, ceiling, names)
    print(f"seconds per tick: median {sorted(seconds)[len(seconds) // 2]:.0f}, min {min(seconds):.0f}, "
          f"max {max(seconds):.0f}")
    wall = time.perf_counter() - bench_started
    print(f"bench wall time {wall:.0f} s at {datetime.now(timezone.utc):%Y-%m-%d %H:%M}Z")


if __name__ == "__main__":
    main()
