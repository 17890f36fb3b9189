"""Growth benchmark: one hourly precompute + enrichment cycle at several synthetic scales.

For each scale (number of synthetic events; users grow with it at ``--events-per-user``, the time
span and item catalogue stay fixed, so the hourly work - active users, candidate pairs - grows
with the scale) the benchmark:

1. ingests the seeded synthetic events into a fresh warehouse (timed, not part of the cycle);
2. runs the same stages the hourly DAGs run, in one Spark session, at ``as_of`` = the last hour of
   the span: candidates -> score/verify/write -> expire -> user aggregates -> KNN -> impute ->
   publish; prints each stage's wall time and pairs/s;
3. samples the resident memory of the whole process tree (driver JVM + Python workers) every
   0.2 s and prints its peak.

Models: the FM and verifier checkpoints are built once from the seed (untrained: this measures cost,
not quality; the verifier keeps the top ``precompute.verifier.top_k_per_user`` per user so the kept
share does not depend on random weights) and copied into every warehouse.

The last lines are the growth exponent of each stage and ``growth exponent: X.XX`` - the slope of
log(time) against log(candidate pairs), fitted over the scales (1.0 = linear).

    .venv/bin/python bench/pipeline.py --scales 1000000,5000000,20000000
"""

from __future__ import annotations

import argparse
import json
import shutil
import threading
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import psutil


class PeakMemory:
    """Peak RSS (GiB) of this process and all its descendants, sampled on a thread."""

    def __init__(self, interval: float = 0.2):
        self.interval, self.peak, self._stop = interval, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for process in [me, *me.children(recursive=True)]:
                try:
                    total += process.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            self._stop.wait(self.interval)

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def gib(self) -> float:
        return self.peak / 2**30


def growth_exponent(pairs: list[float], seconds: list[float]) -> float:
    """Least-squares slope of log(seconds) on log(pairs)."""
    slope, _ = np.polyfit(np.log(pairs), np.log(seconds), 1)
    return float(slope)


def build_models(root: Path, config) -> tuple[Path, Path]:
    from solaris.models.checkpoint import save_checkpoint
    from solaris.models.common import seed_everything
    from solaris.models.fm import FoundationModel
    from solaris.models.training import fm_spec, vm_spec
    from solaris.models.vm import VerticalModel

    seed_everything(config.seed)
    fm = save_checkpoint(FoundationModel(fm_spec(config)), root / "fm", {"bench": "pipeline, untrained"})
    vm = save_checkpoint(VerticalModel(vm_spec(config)), root / "vm_baseline", {"bench": "pipeline, untrained"})
    return fm.parent, vm.parent


def run_scale(spark_holder: dict, n_events: int, args, model_roots: tuple[Path, Path]) -> dict:
    from solaris.config import load_config
    from solaris.ingest.sources import resolve_source
    from solaris.pipeline import CANDIDATES, KNN, SCORE, run_cycle
    from solaris.spark import get_spark
    from solaris.stages.ingest import ingest

    warehouse = Path(args.work_dir) / f"events-{n_events}"
    shutil.rmtree(warehouse, ignore_errors=True)
    n_users = max(100, n_events // args.events_per_user)
    config = load_config(overrides=[
        f"warehouse={warehouse}", f"spark.master=local[{args.threads}]",
        f"spark.shuffle_partitions={args.threads * 4}", f"spark.driver_memory={args.driver_memory}",
        f"synthetic.n_events={n_events}", f"synthetic.n_users={n_users}", f"synthetic.n_items={args.items}",
        f"synthetic.days={args.days}", f"synthetic.chunks={max(args.threads, n_events // 500_000)}",
        f"precompute.candidates.lookback_hours={args.lookback_hours}",
        f"precompute.candidates.per_user={args.per_user}", "precompute.candidates.budget=1000000000",
        "precompute.verifier.threshold=null",
        # its untrained models have no speculator: the rule sources and the relevance rule, pinned so the
        # figures stay comparable with the earlier runs in BENCHMARKS.md (the default would fall back anyway)
        "precompute.candidates.sources=[cooc, trending, recent]", "precompute.candidates.blend=hand",
        "precompute.verifier.rule=relevance",
        # the distributed KNN search at every scale: the driver's (enrichment.knn_driver_max_users) would
        # serve the smaller scales only, so the growth exponent would compare two different searches
        "enrichment.knn_driver_max_users=0", *args.overrides])
    for source, name in zip(model_roots, ("fm", "vm_baseline"), strict=True):
        shutil.copytree(source, warehouse / "models" / name)
    spark = spark_holder.get("spark") or get_spark(config, "bench-pipeline")
    spark_holder["spark"] = spark

    started = time.perf_counter()
    spec = resolve_source("synthetic")
    result = ingest(spark, config, spec, None, f"ingest-synthetic-{n_events}")
    ingest_seconds = time.perf_counter() - started
    as_of = config.synthetic.start + timedelta(days=config.synthetic.days) - timedelta(hours=1)
    with PeakMemory() as memory:
        cycle = run_cycle(spark, config, as_of)
    return {"events": n_events, "valid_events": result.rows_valid, "users": n_users, "ingest_seconds": ingest_seconds,
            "pairs": cycle.require(CANDIDATES).pairs, "verified": cycle.require(SCORE).verified,
            "stage_seconds": cycle.seconds, "total_seconds": cycle.total_seconds, "peak_rss_gib": memory.gib,
            "knn_users": cycle.require(KNN).users}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", default="1000000,5000000,20000000", help="comma-separated event counts")
    parser.add_argument("--events-per-user", type=int, default=100)
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--days", type=float, default=7)
    parser.add_argument("--lookback-hours", type=float, default=24, help="users active in this window get candidates")
    parser.add_argument("--per-user", type=int, default=50, help="candidate pairs per active user")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument("--work-dir", default="/tmp/solaris-bench-pipeline")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()

    from solaris.config import load_config
    from solaris.pipeline import STAGE_NAMES
    from solaris.runtime import setup_logging

    setup_logging("WARNING")
    scales = [int(s) for s in args.scales.split(",")]
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    model_roots = build_models(work / "models", load_config(overrides=args.overrides))
    holder: dict = {}
    results = []
    for n_events in scales:
        print(f"--- scale {n_events:,} events", flush=True)
        row = run_scale(holder, n_events, args, model_roots)
        results.append(row)
        print(f"ingest {row['valid_events']:,} events ({row['users']:,} users): {row['ingest_seconds']:.1f}s")
        for stage in STAGE_NAMES:
            seconds = row["stage_seconds"][stage]
            print(f"  {stage:<16}{seconds:>8.1f}s  {row['pairs'] / seconds:>10,.0f} pairs/s")
        print(
            f"  {'cycle total':<16}{row['total_seconds']:>8.1f}s  {row['pairs'] / row['total_seconds']:>10,.0f} pairs/s"
            f"  ({row['pairs']:,} candidate pairs, {row['verified']:,} verified;"
            f" peak RSS {row['peak_rss_gib']:.2f} GiB)",
            flush=True,
        )
    print("\nevents       pairs        cycle s   pairs/s   peak GiB")
    for row in results:
        print(
            f"{row['events']:>11,} {row['pairs']:>10,} {row['total_seconds']:>10.1f}"
            f" {row['pairs'] / row['total_seconds']:>9,.0f}"
            f" {row['peak_rss_gib']:>9.2f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    if len(results) >= 2:
        pairs = [r["pairs"] for r in results]
        # per stage too: a cycle that grows linearly overall can hide one stage that does not
        print("growth exponent per stage: " + ", ".join(
            f"{stage} {growth_exponent(pairs, [r['stage_seconds'][stage] for r in results]):.2f}"
            for stage in STAGE_NAMES))
        exponent = growth_exponent(pairs, [r["total_seconds"] for r in results])
        print(f"growth exponent: {exponent:.2f}")


if __name__ == "__main__":
    main()
