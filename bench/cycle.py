"""Cost of consecutive hourly ticks on real data: per-stage seconds, the FM's own share, medians.

Copies the events table and the FM/verifier (and speculator) checkpoints of an ingested + trained warehouse into a
fresh work folder (so the source warehouse is never written), then runs
:func:`solaris.pipeline.run_cycle` with the replay measurements (hit rate, coverage) at ``--ticks``
consecutive ticks from ``--start`` in one Spark session, exactly as ``solaris replay`` does.

Printed: one row per tick (seconds per stage, tick total, candidate pairs), then the median of
each stage over the ticks, the median tick, and the FM's own share: the seconds the FM and the
verifier need for the median tick's candidate pairs in plain torch (same checkpoints, same
point-in-time features, 2 threads, measured here on the last tick's real candidates: the hourly
``expire`` keeps only ``retention.candidates_hours`` of them) divided by
the median tick. The first tick also pays Spark's warm-up (first jobs, Python workers, model
loads): it is printed but the medians are taken over all ticks, as a scheduler would see them.

Then what the tick *does*, which a shared machine cannot blur: per stage, the median number of
Spark jobs, Spark stages and tasks it ran (each stage runs under its own job group, read back
from ``statusTracker``), of generated-code classes it had Janino compile (Spark's
``CodegenMetrics``; classes found in Spark's codegen cache are not compiled again) and of Delta
commits it made (new files in every table's ``_delta_log``); ``other`` is what the tick did
outside the stages (the batched ``runs`` MERGE, caching the tick's events).

And where the driver JVM's CPU went in each stage (Linux: the per-thread CPU counters under
``/proc/<pid>/task``, read around each stage): the JIT compiler threads, the driver threads that run
Python's calls (planning, Janino, Delta's log work), Spark's task threads (the data work), the
garbage collector, the rest. Threads that end inside a stage lose their share (pooled threads do not
end); on a machine without ``/proc`` the split is left out.

With ``--event-log DIR`` Spark also writes its event log there, and the bench splits each stage's
median wall seconds into *Spark-busy* seconds (at least one Spark job running: the union of the
stage's job intervals) and *driver* seconds (no job running: Python, planning, Delta's log work on
the driver), and names the job kinds that took the most time (Delta's own job descriptions, else
the SQL execution's or the first Spark stage's name) - where a tick's seconds go, before deciding
what to cut.

    .venv/bin/python bench/cycle.py --warehouse warehouse --start 2000-12-01T00:00:00Z --ticks 6
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Iterable, Iterator

from solaris.spark import codegen_compilations

# Thread kinds of a HotSpot + Spark driver JVM, by thread-name prefix (the first that matches).
THREAD_KINDS = (
    ("jit", ("C1 CompilerThre", "C2 CompilerThre", "Sweeper thread")),
    ("gc", ("GC Thread", "VM Thread", "G1 ", "ParGC")),
    ("tasks", ("Executor task",)),  # "Executor task launch worker", cut to 15 characters
    ("driver", ("Thread-",)),  # py4j's threads, one per Python call into the JVM
)
CPU_KINDS = ("jit", "driver", "tasks", "gc", "other")


def thread_kind(name: str) -> str:
    """The kind of a JVM thread by its (kernel, 15-character) name: jit, gc, tasks, driver or other."""
    for kind, prefixes in THREAD_KINDS:
        if name.startswith(prefixes):
            return kind
    return "other"


def thread_cpu(stat: str, ticks_per_second: float) -> tuple[str, float]:
    """(name, user + system CPU seconds) of one ``/proc/<pid>/task/<tid>/stat`` line.

    The name sits in parentheses and may itself hold spaces or parentheses, so the fields are
    counted from the last ``)``: utime and stime are the 12th and 13th after it.
    """
    name = stat[stat.index("(") + 1:stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2:].split()
    return name, (int(fields[11]) + int(fields[12])) / ticks_per_second


def jvm_cpu_by_kind(pid: int | None) -> dict[str, float]:
    """CPU seconds the JVM's live threads have used so far, summed per :func:`thread_kind`
    (empty without ``/proc``)."""
    if pid is None or not (tasks := Path(f"/proc/{pid}/task")).is_dir():
        return {}
    ticks = float(os.sysconf("SC_CLK_TCK"))
    totals = {kind: 0.0 for kind in CPU_KINDS}
    for thread in tasks.iterdir():
        try:
            name, seconds = thread_cpu((thread / "stat").read_text(), ticks)
        except (OSError, ValueError, IndexError):
            continue  # the thread ended while we read
        totals[thread_kind(name)] += seconds
    return totals


class CycleCounter:
    """Counts the Spark jobs / stages / tasks and the Delta commits of each stage of a tick.

    Why counts: wall seconds on a shared 2-core machine move with the neighbours' load; the number
    of Spark actions and Delta commits a stage makes is what it costs on any machine, and is what
    a change to the stage removes.
    """

    _serial = 0  # across ticks, so every stage of every tick has its own job group

    def __init__(self, spark, warehouse: Path) -> None:
        self.spark, self.warehouse = spark, warehouse
        self.pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())  # noqa: SLF001
        self.counts: dict[str, dict[str, float]] = {}  # stage -> jobs, commits, compilations, cpu:<kind> seconds
        self.groups: dict[str, str] = {}  # job group -> stage name

    def commits(self) -> dict[str, int]:
        """Commit files per Delta table under the warehouse (``_delta_log/<version>.json``)."""
        return {log.parent.name: sum(1 for _ in log.glob("*.json")) for log in self.warehouse.glob("*/_delta_log")}

    def jobs(self, group: str | None) -> tuple[int, int, int]:
        tracker = self.spark.sparkContext.statusTracker()
        jobs = tracker.getJobIdsForGroup(group)
        stages = [stage for job in jobs if (info := tracker.getJobInfo(job)) is not None for stage in info.stageIds]
        tasks = sum(info.numTasks for stage in stages if (info := tracker.getStageInfo(stage)) is not None)
        return len(jobs), len(stages), tasks

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        CycleCounter._serial += 1
        group = f"bench-cycle-{CycleCounter._serial}-{name}"
        self.groups[group] = name
        context = self.spark.sparkContext
        before = self.commits()
        compiled_before = codegen_compilations(self.spark)
        cpu_before = jvm_cpu_by_kind(self.pid)
        outer = context.getLocalProperty("spark.jobGroup.id")  # the tick's group around a stage's
        context.setJobGroup(group, name)
        try:
            yield
        finally:
            context.setLocalProperty("spark.jobGroup.id", outer)
            after = self.commits()
            jobs, stages, tasks = self.jobs(group)
            per_table = {table: after[table] - before.get(table, 0) for table in after
                         if after[table] != before.get(table, 0)}
            self.counts[name] = {"jobs": jobs, "spark_stages": stages, "tasks": tasks,
                                 "commits": sum(per_table.values()),
                                 "compilations": codegen_compilations(self.spark) - compiled_before,
                                 **{f"cpu:{kind}": seconds - cpu_before.get(kind, 0.0)
                                    for kind, seconds in jvm_cpu_by_kind(self.pid).items()},
                                 **{f"commits:{table}": n for table, n in per_table.items()}}


@dataclass
class GroupTime:
    """The Spark jobs of one job group in an event log: how many, the seconds at least one of them
    ran (overlapping jobs - AQE runs query stages side by side - count once) and seconds per kind."""

    jobs: int = 0
    busy_seconds: float = 0.0
    seconds_by_kind: dict[str, float] = field(default_factory=dict)


def job_time_by_group(lines: Iterable[str]) -> dict[str, GroupTime]:
    """Per job group, the jobs of a Spark event log (JSON lines): count, busy seconds, kinds."""
    sql_description: dict[int, str] = {}
    started: dict[int, tuple[str, float, str]] = {}
    intervals: dict[str, list[tuple[float, float]]] = {}
    groups: dict[str, GroupTime] = {}
    for line in lines:
        event = json.loads(line)
        kind = event.get("Event", "")
        if kind.endswith("SQLExecutionStart"):
            sql_description[int(event["executionId"])] = event.get("description", "")
        elif kind == "SparkListenerJobStart":
            properties = event.get("Properties") or {}
            group = properties.get("spark.jobGroup.id")
            if group is None:
                continue
            execution = properties.get("spark.sql.execution.id")
            stages = event.get("Stage Infos") or [{}]
            # Delta names its jobs ("Delta: <stage>: Filtering files for query"); the others carry the
            # bench's stage name as description (and so as SQL description), so their Spark stage's
            # call site says more ("collect at solaris/stages/score.py:227"; AQE's query stages run from a future)
            description = properties.get("spark.job.description") or ""
            site = stages[-1].get("Stage Name", "?")
            if execution is not None and sql_description.get(int(execution), description) != description:
                site = sql_description[int(execution)]
            label = description if ":" in description or " - " in description else (
                "AQE query stage" if "withThreadLocalCaptured" in site else site)
            started[event["Job ID"]] = (group, event["Submission Time"] / 1000, " ".join(label.split())[:60])
        elif kind == "SparkListenerJobEnd" and event["Job ID"] in started:
            group, start, label = started.pop(event["Job ID"])
            end = event["Completion Time"] / 1000
            times = groups.setdefault(group, GroupTime())
            times.jobs += 1
            times.seconds_by_kind[label] = times.seconds_by_kind.get(label, 0.0) + end - start
            intervals.setdefault(group, []).append((start, end))
    for group, spans in intervals.items():
        busy, current = 0.0, None
        for start, end in sorted(spans):
            if current is None or start > current[1]:
                busy += 0.0 if current is None else current[1] - current[0]
                current = [start, end]
            else:
                current[1] = max(current[1], end)
        groups[group].busy_seconds = busy + (current[1] - current[0] if current is not None else 0.0)
    return groups


def print_event_log_split(directory: Path, rows: list[dict], names: list[str]) -> None:
    """Median wall / Spark-busy / driver seconds per stage and its costliest job kinds (event log)."""
    files = sorted(path for path in directory.rglob("*") if path.is_file() and not path.name.startswith("."))
    lines = [line for path in files if "events" in path.name or path.name.startswith("local-")
             for line in path.read_text().splitlines() if line.strip()]
    times = job_time_by_group(lines)
    print("\nper stage, median over the ticks (Spark event log):  wall  spark-busy  driver  | costliest job kinds (s)")
    for name in names:
        walls, busy, kinds = [], [], {}
        for row in rows:
            group = next((g for g, stage in row["groups"].items() if stage == name), None)
            if group is None:
                continue
            spent = times.get(group, GroupTime())
            walls.append(row["seconds"].get(name, 0.0))
            busy.append(spent.busy_seconds)
            for kind, seconds in spent.seconds_by_kind.items():
                kinds[kind] = kinds.get(kind, 0.0) + seconds / len(rows)
        if not walls:
            continue
        wall, spark_busy = statistics.median(walls), statistics.median(busy)
        top = "; ".join(f"{kind} {seconds:.1f}" for kind, seconds in sorted(kinds.items(), key=lambda kv: -kv[1])[:3])
        print(f"{name:<20} {wall:>6.1f} {spark_busy:>11.1f} {max(wall - spark_busy, 0.0):>7.1f}  | {top}")


def prepare(source: Path, work: Path) -> None:
    """Fresh work warehouse: the source's events, id map and current model checkpoints (the
    speculator too when the source has one; without it the stages use the hand blend and the
    relevance rule, as the schedule would)."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for name in ("events", "id_map"):
        if (source / name).exists():
            shutil.copytree(source / name, work / name)
    for role in ("fm", "vm_baseline"):
        shutil.copytree(source / "models" / role, work / "models" / role)
    if (source / "models" / "speculator").exists():
        shutil.copytree(source / "models" / "speculator", work / "models" / "speculator")


def fm_seconds_per_pair(spark, config, as_of, threads: int) -> tuple[float, int]:
    """Plain-torch seconds per candidate pair (FM + verifier) on this tick's real candidates."""
    import numpy as np
    import torch

    from solaris.models.checkpoint import load_checkpoint, resolve_checkpoint
    from solaris.models.common import to_tensors
    from solaris.models.training import EventArrays
    from solaris.pipeline import run_ids
    from solaris.storage.events import Events
    from solaris.storage.table import Table

    torch.set_num_threads(threads)
    events = Events.of(spark, config).pandas(as_of)
    pairs = (Table.of(spark, config, "candidates").scan()
             .where(f"run_id = '{run_ids(as_of)['precompute']}'").select("user_id", "item_id").toPandas())
    index = EventArrays.from_frame(events).index()
    features = index.query(pairs.user_id.to_numpy(), pairs.item_id.to_numpy(),
                           np.full(len(pairs), int(as_of.timestamp()) + 1), config.model.history_length)
    fm, _ = load_checkpoint(resolve_checkpoint(config.resolve_under_warehouse(config.precompute.fm_checkpoint)), "fm",
                            config.model.embedding_dim)
    vm, _ = load_checkpoint(resolve_checkpoint(config.resolve_under_warehouse(config.precompute.verifier_checkpoint)),
                            "vm")
    batch = config.precompute.model_batch_size
    started = time.perf_counter()
    with torch.inference_mode():
        for start in range(0, len(pairs), batch):
            rows = slice(start, min(start + batch, len(pairs)))
            tensors = to_tensors(features, "cpu", rows)
            fm(tensors)
            vm(tensors)
    seconds = time.perf_counter() - started
    return seconds / max(len(pairs), 1), len(pairs)


def print_counts(rows: list[dict], names: list[str]) -> None:
    """Median Spark jobs / stages / tasks and Delta commits per stage over the ticks, commits by table."""
    print("\nper stage, median over the ticks:  jobs  spark-stages  tasks  codegen-compiles  commits"
          "  (commits by table)")
    for name in names:
        seen = [row["counts"].get(name, {}) for row in rows]
        keys = sorted({key for counts in seen for key in counts})
        median = {key: statistics.median(counts.get(key, 0) for counts in seen) for key in keys}
        tables = ", ".join(f"{key.split(':', 1)[1]} {value:g}" for key, value in median.items()
                           if key.startswith("commits:") and value)
        print(f"{name:<34} {median.get('jobs', 0):>5g} {median.get('spark_stages', 0):>13g} "
              f"{median.get('tasks', 0):>6g} {median.get('compilations', 0):>17g} "
              f"{median.get('commits', 0):>8g}  {tables}")


def print_cpu(rows: list[dict], names: list[str]) -> None:
    """Median driver-JVM CPU seconds per stage by thread kind (nothing when /proc was not there)."""
    if not any(key.startswith("cpu:") for row in rows for counts in row["counts"].values() for key in counts):
        return
    print("\nper stage, median driver-JVM CPU seconds by thread kind:  " + " ".join(f"{k:>7}" for k in CPU_KINDS)
          + "    total")
    for name in names:
        seen = [row["counts"].get(name, {}) for row in rows]
        median = {kind: statistics.median(counts.get(f"cpu:{kind}", 0.0) for counts in seen) for kind in CPU_KINDS}
        total = statistics.median(sum(counts.get(f"cpu:{kind}", 0.0) for kind in CPU_KINDS) for counts in seen)
        print(f"{name:<57} " + " ".join(f"{median[kind]:>7.1f}" for kind in CPU_KINDS) + f" {total:>8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warehouse", required=True, help="ingested warehouse with models/fm and models/vm_baseline")
    parser.add_argument("--start", required=True, help="first tick (UTC)")
    parser.add_argument("--ticks", type=int, default=6)
    parser.add_argument("--step-hours", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=2, help="Spark local[N] and torch threads")
    parser.add_argument("--work-dir", default="/tmp/solaris-bench-cycle")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--event-log", help="write Spark's event log to this (emptied) folder and split each "
                                            "stage's seconds into Spark-busy and driver time")
    args = parser.parse_args()
    if args.event_log:  # read when the JVM starts, i.e. by get_spark below
        log_dir = Path(args.event_log).resolve()
        shutil.rmtree(log_dir, ignore_errors=True)
        log_dir.mkdir(parents=True)
        os.environ["PYSPARK_SUBMIT_ARGS"] = (
            f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir=file://{log_dir} "
            "--conf spark.eventLog.compress=false --conf spark.eventLog.rolling.enabled=false pyspark-shell")

    from solaris.config import load_config
    from solaris.pipeline import (
        CANDIDATES,
        COVERAGE,
        HIT_RATE,
        IMPUTE,
        KNN,
        SCORE,
        STAGE_NAMES,
        USER_AGGREGATES,
        run_cycle,
        tick_schedule,
    )
    from solaris.runtime import setup_logging
    from solaris.spark import get_spark
    from solaris.timeutil import parse_utc

    setup_logging("WARNING")
    work = Path(args.work_dir) / "warehouse"
    prepare(Path(args.warehouse).resolve(), work)
    config = load_config(overrides=[f"warehouse={work}", f"spark.master=local[{args.threads}]", *args.overrides])
    spark = get_spark(config, "bench-cycle")
    start = parse_utc(args.start)
    schedule = tick_schedule(start, start + timedelta(hours=args.step_hours * args.ticks), args.step_hours)
    columns = [*STAGE_NAMES[:2], HIT_RATE.name, *STAGE_NAMES[2:], COVERAGE.name, "runs_audit"]
    print("tick                  " + " ".join(f"{name[:10]:>10}" for name in columns) + "      total   pairs")
    rows = []
    for tick in schedule:
        counter = CycleCounter(spark, work)
        with counter("tick"):
            cycle = run_cycle(spark, config, tick, measure=True, observe=counter)
        # the tick's own job group holds only the jobs run outside every stage; its commit count
        # (files in the logs) includes the stages' commits, and its compilations and CPU seconds
        # (JVM-wide counters) the stages' ones: subtracted, so `other` is what ran outside the stages
        other = counter.counts.pop("tick")
        stages = list(counter.counts.values())
        counted = {key for counts in [other, *stages] for key in counts
                   if key.startswith(("commits", "cpu:")) or key == "compilations"}
        for key in counted:
            other[key] = other.get(key, 0) - sum(counts.get(key, 0) for counts in stages)
        counter.counts["other"] = other
        counter.counts["tick"] = {key: other.get(key, 0) + sum(counts.get(key, 0) for counts in stages)
                                  for key in {key for counts in [other, *stages] for key in counts}}
        rows.append({"counts": counter.counts, "as_of": tick.isoformat(), "seconds": cycle.seconds,
                     "total": cycle.total_seconds, "observer_seconds": cycle.observer_seconds,
                     "pairs": cycle.require(CANDIDATES).pairs, "written": cycle.require(SCORE).written,
                     "fm_scored": cycle.require(SCORE).scored,
                     "coverage_tiers1_3": cycle.require(COVERAGE).cumulative(3),
                     "requests": cycle.require(COVERAGE).requests, "knn_recall": cycle.require(KNN).recall,
                     "aggregated_users": cycle.require(USER_AGGREGATES).users,
                     "imputed": cycle.require(IMPUTE).imputed,
                     "verified_hit_rate": cycle.require(HIT_RATE).verified.hit_rate,
                     "groups": counter.groups})
        print(f"{tick:%Y-%m-%d %H:%M}Z     " + " ".join(f"{cycle.seconds.get(name, 0.0):>10.1f}" for name in columns)
              + f" {cycle.total_seconds:>10.1f} {cycle.require(CANDIDATES).pairs:>7,}", flush=True)
    medians = {name: statistics.median(row["seconds"].get(name, 0.0) for row in rows) for name in columns}
    median_tick = statistics.median(row["total"] for row in rows)
    median_pairs = statistics.median(row["pairs"] for row in rows)
    # the pairs the FM scored: every candidate under the relevance rule, the kept ones under request
    median_scored = statistics.median(row["fm_scored"] for row in rows)
    per_pair, measured_on = fm_seconds_per_pair(spark, config, schedule[-1], args.threads)
    fm_seconds = per_pair * median_scored
    print("median                " + " ".join(f"{medians[name]:>10.1f}" for name in columns)
          + f" {median_tick:>10.1f} {median_pairs:>7,.0f}")
    print(f"FM + verifier in plain torch ({args.threads} threads): {1 / per_pair:,.0f} pairs/s "
          f"(measured on {measured_on:,} pairs) -> {fm_seconds:.1f}s for the median tick's {median_scored:,.0f} "
          "FM-scored pairs")
    print(f"median tick: {median_tick:.1f}s over {len(rows)} ticks; FM share {100 * fm_seconds / median_tick:.0f}%")
    print(f"not in the tick: this benchmark's counters around each stage, median "
          f"{statistics.median(row['observer_seconds'] for row in rows):.2f}s a tick")
    counted_rows = [*columns[:-1], "other", "tick"]
    print_counts(rows, counted_rows)
    print_cpu(rows, counted_rows)
    print("\nquality per tick: written pairs, verified hit rate, user aggregates, imputed, knn recall@k, coverage <=3")
    for row in rows:
        print(f"{row['as_of']}  {row['written']:>7,} {row['verified_hit_rate'] or 0:>7.4f} "
              f"{row['aggregated_users']:>6,} {row['imputed']:>6,} {row['knn_recall']:>7.4f} "
              f"{row['coverage_tiers1_3']:>7.4f}")
    if args.event_log:
        spark.stop()  # flushes the event log
        print_event_log_split(Path(args.event_log), rows, [*columns[:2], *columns[3:-1]])
    if args.json:
        Path(args.json).write_text(json.dumps({"ticks": rows, "median_stage_seconds": medians,
                                               "median_tick_seconds": median_tick,
                                               "fm_seconds_median_tick": fm_seconds}, indent=2))


if __name__ == "__main__":
    main()
