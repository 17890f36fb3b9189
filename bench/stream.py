"""The stream's freshness: dense ML-1M events replayed into ``events`` with ``solaris stream`` running.

On a copy of a demo warehouse (never the source), ``events`` is replaced by a fresh table holding
the events up to ``--start`` (written by the table's own rule, the insert-only MERGE ingest uses), one
hourly cycle runs at ``--start`` (snapshot, tiers and KNN of that hour, as the hourly chain would
have left them), and then:

1. ``solaris stream --trigger processing-time`` starts as a child process: the deployed entry
   point in its own driver JVM, beside this process, which plays ingest (as in production, where
   ingest and the stream are separate jobs: the replay's MERGEs never queue in the stream's Spark
   scheduler, they only share the machine's cores);
2. the events of ``(start, start + warm-up]`` are committed to ``events`` at their original pace
   sped up ``--speedup`` times, one commit per ``--step-seconds`` of event time (a commit is due
   when the last second of its span has passed in sped-up time; empty spans make no commit), each
   by ``Table.write``: the insert-only MERGE of ingest; once a batch has processed them, the measured
   ``--minutes`` after them are committed the same way;
3. once the query has processed the last commit, the child is stopped between two batches
   (SIGINT: every batch Spark logged is committed, the checkpoint is complete).

Then, from what the run left on disk (same clock for every time):

* per micro-batch (the query's checkpoint: ``offsets/<b>`` is written when a batch is planned,
  ``commits/<b>`` when it is done; the ``runs`` rows of its run id): events, users, candidates,
  FM passes, duration (offsets -> commit) and its stages' seconds;
* per event: **arrival** = the moment its commit became visible (the mtime of
  ``_delta_log/<version>.json``); the batch that **covered** it = the first whose end offset in the
  checkpoint lies at or past the end of that version; **servable** = the moment the first publish
  of that batch or a later one wrote its manifest ``snapshots/snapshot-<as-of>-stream-b<b>.json``
  (:func:`solaris.serving.snapshots.write_manifest` writes the manifest, then ``LATEST``, each by
  an atomic rename; from then ``Resolver.reload_if_newer`` loads the pinned ``pair_embeddings``
  and ``user_embeddings`` versions that hold the user's refreshed rows). A watcher thread records
  each manifest's mtime as it appears (publish keeps only the last ``snapshots_kept``).
  The delay is servable - arrival; an event no publish followed is "never served".

The warm-up's events are left out of the figures (printed on their own): the query's first
batch waits for the first commit (the first run polls every ``stream.interval_seconds``), starts
its Python workers, loads the models and compiles its plans; a deployed stream runs for days.

    .venv/bin/python bench/stream.py --warehouse warehouse --json /tmp/stream.json
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterable, Sequence

log = logging.getLogger("bench.stream")

REPO = Path(__file__).resolve().parents[1]
# The densest hour of ML-1M after the demo warehouse's models (as of 2000-12-01T00:00Z) by distinct
# users, among the hours of 2000-12-01 05:00 .. 2000-12-15: 1,082 events from 31 users in (18:00, 19:00].
DEFAULT_START = "2000-12-08T18:00:00Z"
END_INDEX = 2**62  # an offset index at or past this means "the whole version" (Delta's end marker)


# --- pure parts (tests/unit/test_bench_stream.py) ------------------------------------------------------


@dataclass(frozen=True)
class Commit:
    """One commit of the replay: events with ``since < ts <= until`` (epoch s), due ``due`` seconds
    after the replay starts; ``rows`` is the slice of the (ts-sorted) replayed events it holds."""

    index: int
    since: int
    until: int
    due: float
    rows: slice


def commit_schedule(ts: Sequence[int], start: int, seconds: int, step: int, speedup: float) -> list[Commit]:
    """The commits replaying the sorted event times ``ts`` of ``(start, start + seconds]``.

    One commit per ``step`` seconds of event time, due when its last second has passed at
    ``speedup`` times the original pace: span ``k`` = ``(start + k*step, start + (k+1)*step]`` is due
    ``(k+1)*step / speedup`` seconds after the replay starts. Spans without events make no commit.
    """
    if step < 1 or seconds < 1 or speedup <= 0:
        raise ValueError("step and seconds must be >= 1 and speedup > 0")
    if any(later < earlier for earlier, later in zip(ts, ts[1:], strict=False)):
        raise ValueError("event times must be sorted")
    import bisect

    commits = []
    for k in range(math.ceil(seconds / step)):
        since, until = start + k * step, min(start + (k + 1) * step, start + seconds)
        low, high = bisect.bisect_right(ts, since), bisect.bisect_right(ts, until)
        if high > low:
            commits.append(Commit(len(commits), since, until, (until - start) / speedup, slice(low, high)))
    return commits


def parse_offset(text: str) -> tuple[int, int]:
    """(reservoirVersion, index) of a Delta source offset file of a query's checkpoint
    (``offsets/<batch>``: a version line, the batch metadata, then one JSON line per source)."""
    lines = [line for line in text.splitlines() if line.strip()]
    source = json.loads(lines[-1])
    return int(source["reservoirVersion"]), int(source["index"])


def covers(offset: tuple[int, int], version: int, last_index: int) -> bool:
    """Whether a batch whose end offset is ``offset`` has processed the whole commit ``version``,
    whose files have indexes up to ``last_index``: a later version, or this one at or past its end."""
    end_version, end_index = offset
    return end_version > version or (end_version == version and end_index >= last_index)


def covering_batch(offsets: dict[int, tuple[int, int]], version: int, last_index: int) -> int | None:
    """The first batch (by id) whose end offset covers commit ``version`` (None: no batch did)."""
    for batch in sorted(offsets):
        if covers(offsets[batch], version, last_index):
            return batch
    return None


def first_servable(published: dict[int, float], batch: int | None) -> float | None:
    """When the values of batch ``batch`` became servable: the earliest manifest time of this batch or
    a later one (a later publish pins every version written before it); None if none published."""
    if batch is None:
        return None
    times = [moment for other, moment in published.items() if other >= batch]
    return min(times) if times else None


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100), linear between the closest ranks (numpy's default); None if empty."""
    ordered = sorted(values)
    if not ordered:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"q must lie in [0, 100], got {q}")
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class EventDelay:
    """One replayed event: its commit's version and arrival, the batch that covered it, its delay."""

    version: int
    user_id: int
    arrival: float
    batch: int | None
    servable: float | None

    @property
    def delay(self) -> float | None:
        return None if self.servable is None else self.servable - self.arrival


def event_delays(events: Sequence[tuple[int, int]], arrivals: dict[int, float], last_index: dict[int, int],
                 offsets: dict[int, tuple[int, int]], published: dict[int, float]) -> list[EventDelay]:
    """Each replayed ``(version, user_id)``: arrival of its commit, covering batch, servable moment."""
    rows = []
    for version, user in events:
        batch = covering_batch(offsets, version, last_index[version])
        rows.append(EventDelay(version, user, arrivals[version], batch, first_servable(published, batch)))
    return rows


def fmt_seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


# --- the run ---------------------------------------------------------------------------------------------


def prepare(source: Path, work: Path) -> None:
    """The source warehouse copied to ``work`` without ``events`` and without a stream checkpoint."""
    if work.resolve() == source.resolve():
        raise SystemExit("the work warehouse must not be the source")
    shutil.rmtree(work, ignore_errors=True)
    work.parent.mkdir(parents=True, exist_ok=True)

    def skipped(folder: str, names: list[str]) -> list[str]:
        return [name for name in names if Path(folder) == source and name in ("events", "streams")]

    shutil.copytree(source, work, ignore=skipped)


class ManifestWatcher(threading.Thread):
    """Records the mtime of every manifest that appears in the snapshots folder (polling), and the
    machine's 1-minute load average every ``load_every`` seconds (who else was running)."""

    def __init__(self, folder: Path, every: float = 0.25, load_every: float = 10.0) -> None:
        super().__init__(daemon=True)
        self.folder, self.every, self.load_every = folder, every, load_every
        self.seen: dict[str, float] = {}
        self.loads: list[float] = []
        self.done = threading.Event()

    def poll(self) -> None:
        for path in self.folder.glob("snapshot-*.json"):
            if path.name not in self.seen:
                try:
                    self.seen[path.name] = path.stat().st_mtime
                except FileNotFoundError:  # trimmed while we looked
                    continue

    def run(self) -> None:
        sampled = 0.0
        while not self.done.is_set():
            self.poll()
            if time.monotonic() - sampled >= self.load_every:
                sampled = time.monotonic()
                self.loads.append(os.getloadavg()[0])
            self.done.wait(self.every)
        self.poll()


def batch_of_manifest(name: str) -> int | None:
    """The batch id of a stream manifest ``snapshot-<stamp>-stream-b<batch>.json`` (None: an hourly one)."""
    stem = name.removesuffix(".json")
    marker = "-stream-b"
    return int(stem.rsplit(marker, 1)[1]) if marker in stem else None


def read_checkpoint(query: Path) -> tuple[dict[int, tuple[int, int]], dict[int, float], dict[int, float]]:
    """End offsets, planned times (offsets file mtime) and done times (commits file mtime) per batch."""
    offsets, planned, done = {}, {}, {}
    for path in (query / "offsets").glob("[0-9]*"):
        batch = int(path.name)
        offsets[batch], planned[batch] = parse_offset(path.read_text()), path.stat().st_mtime
    for path in (query / "commits").glob("[0-9]*"):
        done[int(path.name)] = path.stat().st_mtime
    return offsets, planned, done


def commit_actions(table: Path, version: int) -> tuple[int, int]:
    """Actions (JSON lines) of one Delta commit (its files' indexes lie below this) and the rows its
    MERGE updated (the stream skips a commit that rewrote stored rows: there must be none)."""
    lines = [line for line in (table / "_delta_log" / f"{version:020d}.json").read_text().splitlines() if line.strip()]
    info = next((json.loads(line)["commitInfo"] for line in lines if line.startswith('{"commitInfo"')), {})
    return len(lines), int(info.get("operationMetrics", {}).get("numTargetRowsUpdated", 0))


def _driver_read(table: Path, columns: Sequence[str] | None = None, where: object = None):
    """A Delta table's rows as a pyarrow table, read on the driver by the storage API's engine."""
    from solaris.storage.driver_engine import DriverEngine

    rows = DriverEngine.read(str(table), columns, where)
    if rows is None:
        raise SystemExit(f"cannot read the Delta table {table} on the driver")
    return rows


def stream_runs(warehouse: Path) -> dict[int, dict]:
    """Per batch id, the stream's ``runs`` row (events, details) and its stages' seconds."""
    frame = _driver_read(warehouse / "runs").to_pandas()
    frame = frame[frame.run_id.str.startswith("stream-")]
    batches: dict[int, dict] = {}
    for run_id, rows in frame.groupby("run_id"):
        own = rows[rows.job == "stream"]
        if own.empty:
            continue
        details = json.loads(own.details.iloc[0])
        stages = {row.job: (row.finished_at - row.started_at).total_seconds() for row in rows.itertuples()
                  if row.job != "stream"}
        batches[int(details["batch_id"])] = {"run_id": run_id, "events": int(own.rows_in.iloc[0]), **details,
                                             "stages": stages}
    return batches


def stop_child(child: subprocess.Popen, grace: float = 60.0) -> int:
    child.send_signal(signal.SIGINT)
    try:
        return child.wait(grace)
    except subprocess.TimeoutExpired:
        log.warning("the stream did not stop within %.0fs of SIGINT; SIGTERM", grace)
        child.terminate()
        return child.wait(grace)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warehouse", default="warehouse",
                        help="source: a demo warehouse, models trained as of 2000-12-01 (copied, never written)")
    parser.add_argument("--work-dir", default="/tmp/solaris-bench-stream", help="emptied; gets warehouse/ and logs")
    parser.add_argument("--start", default=DEFAULT_START, help="events up to here are the table; hourly cycle here")
    parser.add_argument("--warmup-minutes", type=float, default=5.0, help="event time replayed first, not measured")
    parser.add_argument("--minutes", type=float, default=60.0, help="event time replayed and measured")
    parser.add_argument("--speedup", type=float, default=10.0, help="replay pace: event time / wall time")
    parser.add_argument("--step-seconds", type=int, default=60, help="event time per commit")
    parser.add_argument("--interval", type=int, help="stream.interval_seconds (default: the config's)")
    parser.add_argument("--threads", type=int, default=2, help="local[N] of both Spark drivers")
    parser.add_argument("--no-hourly", action="store_true", help="skip the hourly cycle at --start")
    parser.add_argument("--drain-seconds", type=float, default=900, help="wait at most this for the last batch")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()

    from solaris.config import load_config
    from solaris.runtime import setup_logging
    from solaris.timeutil import parse_utc

    setup_logging("INFO")
    logging.getLogger("solaris").setLevel(logging.WARNING)
    source = Path(args.warehouse).resolve()
    work_dir = Path(args.work_dir).resolve()
    work = work_dir / "warehouse"
    start = parse_utc(args.start)
    first = int(start.timestamp())
    warm, measured = int(args.warmup_minutes * 60), int(args.minutes * 60)
    overrides = [f"warehouse={work}", f"spark.master=local[{args.threads}]", *args.overrides]
    if args.interval:
        overrides.append(f"stream.interval_seconds={args.interval}")
    config = load_config(overrides=overrides)
    log.info("copying %s to %s (without events)", source, work)
    prepare(source, work)

    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from solaris.spark import get_spark
    from solaris.storage.driver_engine import DriverEngine
    from solaris.storage.table import Table

    replay = _driver_read(source / "events", where=(ds.field("ts") > start)
                          & (ds.field("ts") <= start + timedelta(seconds=warm + measured))).sort_by("ts")
    epoch = pc.divide(replay.column("ts").cast("int64"), 1_000_000).to_pylist()  # ts is timestamp[us]
    warm_commits = commit_schedule(epoch, first, warm, args.step_seconds, args.speedup) if warm else []
    measured_commits = commit_schedule(epoch, first + warm, measured, args.step_seconds, args.speedup)
    schedule = [*warm_commits, *measured_commits]
    users = replay.column("user_id").to_pylist()
    in_window = [i for i, t in enumerate(epoch) if t > first + warm]
    log.info("replay: %d events (%d measured, from %d users, in (%s, %s]) in %d commits, one per %d s of event "
             "time, %.0fx: %.0f s of wall time", replay.num_rows, len(in_window),
             len({users[i] for i in in_window}), datetime.fromtimestamp(first + warm, timezone.utc).isoformat(),
             datetime.fromtimestamp(first + warm + measured, timezone.utc).isoformat(), len(schedule),
             args.step_seconds, args.speedup, (warm + measured) / args.speedup)

    spark = get_spark(config, "bench-stream")
    events_table = Table.of(spark, config, "events")
    started = time.monotonic()
    source_events = Table.of(spark, load_config(overrides=[f"warehouse={source}"]), "events")
    base = source_events.scan().where(f"ts <= timestamp'{start:%Y-%m-%d %H:%M:%S}'")
    events_table.write(base, "bench-stream-base")
    stored = _driver_read(work / "events", ["event_id"]).num_rows
    log.info("fresh events table: %d events up to %s, version %s (%.0f s)", stored, start.isoformat(),
             events_table.version(), time.monotonic() - started)
    if not args.no_hourly:
        from solaris.pipeline import run_cycle

        started = time.monotonic()
        cycle = run_cycle(spark, config, start)
        log.info("hourly cycle at %s: %.0f s", start.isoformat(), time.monotonic() - started)
        del cycle

    checkpoint = config.resolve_under_warehouse(config.stream.checkpoint_dir)
    stream_log = work_dir / "stream.log"
    command = [sys.executable, str(REPO / "jobs" / "stream.py"), "--trigger", "processing-time",
               "--warehouse", str(work), "--master", f"local[{args.threads}]",
               *[item for override in args.overrides for item in ("--set", override)],
               *(["--set", f"stream.interval_seconds={args.interval}"] if args.interval else [])]
    log.info("starting the stream (log: %s): %s", stream_log, " ".join(command))
    with open(stream_log, "w") as output:
        child = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=os.environ.copy())
    watcher = ManifestWatcher(work / "snapshots")
    watcher.start()
    try:
        while not (checkpoint / "start_version.json").is_file():  # the query's first run records its start
            if child.poll() is not None:
                raise SystemExit(f"the stream exited ({child.returncode}); see {stream_log}")
            time.sleep(0.5)
        log.info("the stream recorded its start version: %s", (checkpoint / "start_version.json").read_text().strip())

        arrivals: dict[int, float] = {}
        last_index: dict[int, int] = {}
        replayed: list[tuple[int, int, bool]] = []  # (version, user, measured)
        lags: list[float] = []  # measured commits: seconds behind their due time
        writes: list[float] = []  # measured commits: seconds of the MERGE

        def play(commits: list[Commit], measured_phase: bool) -> None:
            """Commit ``commits`` at their pace (due times from now)."""
            origin = time.monotonic()
            for commit in commits:
                wait = origin + commit.due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if measured_phase:
                    lags.append(max(-wait, 0.0))
                rows = replay.slice(commit.rows.start, commit.rows.stop - commit.rows.start)
                writing = time.monotonic()
                events_table.write(DriverEngine.to_spark(spark, rows), f"bench-stream-{commit.since}")
                if measured_phase:
                    writes.append(time.monotonic() - writing)
                version = events_table.version()
                assert version is not None
                arrivals[version] = (work / "events" / "_delta_log" / f"{version:020d}.json").stat().st_mtime
                actions, updated = commit_actions(work / "events", version)
                last_index[version] = actions - 1
                if updated:
                    log.warning("commit %d updated %d stored events: the stream skips it", version, updated)
                replayed.extend((version, users[i], measured_phase) for i in range(commit.rows.start, commit.rows.stop))
                if commit.index % 10 == 0 or commit.index == len(commits) - 1:
                    done = read_checkpoint(checkpoint / "query")[2] if (checkpoint / "query").is_dir() else {}
                    log.info("%s commit %d/%d: version %d, %d events (%s], %.1f s behind schedule; stream: %d "
                             "batches done", "measured" if measured_phase else "warm-up", commit.index + 1,
                             len(commits), version, rows.num_rows,
                             datetime.fromtimestamp(commit.until, timezone.utc).strftime("%H:%M:%S"),
                             max(-wait, 0.0), len(done))
                if child.poll() is not None:
                    raise SystemExit(f"the stream exited ({child.returncode}); see {stream_log}")

        def drain() -> None:
            """Wait until a committed batch covers the last commit and no batch is running."""
            final = max(arrivals)
            log.info("waiting for the query to process version %d", final)
            deadline = time.monotonic() + args.drain_seconds
            while True:
                offsets, _, done = read_checkpoint(checkpoint / "query") if (checkpoint / "query").is_dir() else (
                    {}, {}, {})
                if covering_batch(offsets, final, last_index[final]) is not None and set(offsets) <= set(done):
                    return
                if time.monotonic() > deadline or child.poll() is not None:
                    log.warning("the query did not process version %d in time (or exited)", final)
                    return
                time.sleep(0.5)

        if warm_commits:
            play(warm_commits, measured_phase=False)
            drain()  # the first batch (Python workers, models, JIT) done: the measured replay starts now
        play(measured_commits, measured_phase=True)
        drain()
        time.sleep(1.0)  # the manifest watcher's last poll
    finally:
        code = stop_child(child) if child.poll() is None else child.returncode
        watcher.done.set()
        watcher.join()
    offsets, planned, done = read_checkpoint(checkpoint / "query")
    clean = sorted(offsets) == sorted(done)
    log.info("stream stopped (exit %s); every logged batch committed: %s", code, clean)

    published = {batch: moment for name, moment in watcher.seen.items()
                 if (batch := batch_of_manifest(name)) is not None}
    runs = stream_runs(work)
    delays = event_delays([(version, user) for version, user, _ in replayed], arrivals, last_index, offsets, published)
    measured_flags = [flag for _, _, flag in replayed]
    kept = [row for row, flag in zip(delays, measured_flags, strict=True) if flag]
    warm_rows = [row for row, flag in zip(delays, measured_flags, strict=True) if not flag]
    measured_batches = sorted({row.batch for row in kept if row.batch is not None})
    warm_batches = sorted({row.batch for row in warm_rows if row.batch is not None} - set(measured_batches))

    print(f"\nwindow ({datetime.fromtimestamp(first + warm, timezone.utc):%Y-%m-%d %H:%M}, "
          f"{datetime.fromtimestamp(first + warm + measured, timezone.utc):%H:%M}] UTC after a "
          f"{args.warmup_minutes:g} min warm-up from {start:%H:%M}; {args.speedup:g}x "
          f"({(warm + measured) / args.speedup:.0f} s of wall time), "
          f"a commit per {args.step_seconds} s of event time ({len(schedule)} commits, median lag behind schedule "
          f"{percentile(lags, 50) or 0:.1f} s, max {max(lags, default=0):.1f} s; a commit's MERGE took "
          f"{percentile(writes, 50) or 0:.1f} s on median); trigger processing-time "
          f"{config.stream.interval_seconds} s; local[{args.threads}]")
    print(f"{'batch':>5} {'events':>7} {'users':>6} {'cands':>7} {'FM':>6} {'u-agg':>6} {'dur s':>6} "
          f"{'cand':>5} {'score':>5} {'aggr':>5} {'publ':>5} {'other':>5}  manifest   (covers: warm/measured)")
    durations = []
    for batch in sorted(offsets):
        run = runs.get(batch, {})
        duration = done[batch] - planned[batch] if batch in done else None
        stages = run.get("stages", {})
        other = None if duration is None else duration - sum(stages.values())
        if batch in measured_batches and duration is not None:
            durations.append(duration)
        role = "measured" if batch in measured_batches else ("warm-up" if batch in warm_batches else "-")
        print(f"{batch:>5} {run.get('events', 0):>7} {run.get('users', 0):>6} {run.get('candidates', 0):>7} "
              f"{run.get('scored', 0):>6} {run.get('aggregated', 0):>6} {fmt_seconds(duration):>6} "
              f"{fmt_seconds(stages.get('candidates')):>5} {fmt_seconds(stages.get('score')):>5} "
              f"{fmt_seconds(stages.get('user_aggregates')):>5} {fmt_seconds(stages.get('publish')):>5} "
              f"{fmt_seconds(other):>5}  {'yes' if batch in published else 'NO':<9}  {role}")
    values = [row.delay for row in kept if row.delay is not None]
    queued = [planned[row.batch] - row.arrival for row in kept if row.batch in planned]
    never = [row for row in kept if row.delay is None]
    warm_values = [row.delay for row in warm_rows if row.delay is not None]
    figures = {
        "window_start": datetime.fromtimestamp(first + warm, timezone.utc).isoformat(), "minutes": args.minutes,
        "warmup_minutes": args.warmup_minutes, "speedup": args.speedup, "step_seconds": args.step_seconds,
        "commit_seconds_p50": percentile(writes, 50), "lag_seconds_max": max(lags, default=None),
        "interval_seconds": config.stream.interval_seconds, "threads": args.threads, "commits": len(schedule),
        "events": len(kept), "users": len({row.user_id for row in kept}), "batches": len(measured_batches),
        "batch_seconds_p50": percentile(durations, 50), "batch_seconds_p99": percentile(durations, 99),
        "batch_seconds_max": max(durations, default=None),
        "delay_seconds_p50": percentile(values, 50), "delay_seconds_p99": percentile(values, 99),
        "delay_seconds_max": max(values, default=None), "never_served": len(never),
        "wait_for_batch_seconds_p50": percentile(queued, 50), "wait_for_batch_seconds_p99": percentile(queued, 99),
        "warmup_events": len(warm_rows), "warmup_delay_seconds_max": max(warm_values, default=None),
        "stopped_cleanly": clean, "stream_exit": code, "load_average_1min": watcher.loads,
    }
    print(f"\nmeasured: {figures['events']} events from {figures['users']} users in {figures['batches']} batches "
          f"(the batches covering them; the warm-up's {len(warm_rows)} events in batches {warm_batches or '-'}, "
          f"delay max {fmt_seconds(figures['warmup_delay_seconds_max'])} s)")
    print(f"batch duration (offsets logged -> batch committed): p50 {fmt_seconds(figures['batch_seconds_p50'])} s, "
          f"p99 {fmt_seconds(figures['batch_seconds_p99'])} s, max {fmt_seconds(figures['batch_seconds_max'])} s")
    print(f"event -> servable (commit visible -> manifest of the batch covering it written): "
          f"p50 {fmt_seconds(figures['delay_seconds_p50'])} s, p99 {fmt_seconds(figures['delay_seconds_p99'])} s, "
          f"max {fmt_seconds(figures['delay_seconds_max'])} s; never served: {len(never)}")
    print(f"  of which waiting for the batch (commit visible -> the batch's offsets logged): "
          f"p50 {fmt_seconds(percentile(queued, 50))} s, p99 {fmt_seconds(percentile(queued, 99))} s")
    print(f"stream stopped between batches: {clean} (exit code {code}); 1-min load average while it ran: "
          f"min {min(watcher.loads, default=0):.1f}, median {percentile(watcher.loads, 50) or 0:.1f}, "
          f"max {max(watcher.loads, default=0):.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({**figures, "batches_detail": {str(b): {
            "events": runs.get(b, {}).get("events"), "users": runs.get(b, {}).get("users"),
            "candidates": runs.get(b, {}).get("candidates"), "scored": runs.get(b, {}).get("scored"),
            "seconds": done[b] - planned[b] if b in done else None, "stages": runs.get(b, {}).get("stages"),
            "published": b in published} for b in sorted(offsets)}}, indent=2, default=str))


if __name__ == "__main__":
    main()
