"""The incremental precompute: a Spark Structured Streaming query over ``events`` (the executor).

The query reads the events appended to the Delta table (``Events.changes``: Delta's streaming source,
from the version recorded at its first run; ingest only appends, by ``events``' ``insert_new`` rule,
and a commit that rewrites stored events is skipped) and, per
micro-batch (``foreachBatch``), runs the hourly stages for the batch's users only, at the batch's
as-of and under its run id (the rules: :mod:`solaris.precompute.stream`):

1. ``candidates`` restricted to the users with an event in the batch (the fast lane's restriction:
   ``CandidatesOptions(users=...)``, same SQL, sources, blend, caps);
2. ``score``: the verifier rule and the FM UDF on those candidates, the TTL MERGE into
   ``pair_embeddings`` and the run's rows in ``pair_embeddings_log`` (the tables' ``WRITE_RULES``);
3. ``user_aggregates`` for those users (tier 3: their 24 h mean, now including this batch's pairs);
4. ``publish`` of a manifest ``snapshot-<as-of>-stream-b<batch>``, pinning the new versions next to
   the last hourly enrichment's tier tables: serving's ``Resolver.reload_if_newer`` picks it up. A
   refused gate (or no ``user_neighbors`` yet) publishes nothing and does not fail the batch: the
   pairs are written, and the next publish pins them.

**What a micro-batch reads.** The batch's own events (new rows only: Delta's change feed of
appended files), then, through the tick it opens, the events in ``(as_of - window, as_of]``
(:func:`solaris.precompute.stream.events_window_hours`: the longest window an enabled candidate
source reads), cached once for its stages; the Delta scan skips the files whose ``ts`` statistics
lie before the window. Every per-user view of the candidates SQL, the candidates written and scored,
the FM's features and the user aggregates are restricted to the batch's users (a ``lane_users`` /
``user_id`` semi-join); ``score`` reads only the run's candidates (``run_id`` filter). The item-side
views (trending, popular, the item-item statistics when not stored for the period) aggregate that
window whatever the batch's size, as the hourly cycle does.

**Idempotent per batch.** Spark logs a batch's offsets before running it and its commit after, so a
query killed mid-batch redoes the same batch id with the same events at restart. The run id is a
function of both (:func:`solaris.precompute.stream.run_id`), and every write is keyed on it by its
table's rule: ``candidates`` and ``pair_embeddings_log`` replace the run's rows, ``pair_embeddings``
and ``user_embeddings`` MERGE where the same run changes nothing, ``runs`` upserts its keys, and the
manifest is rewritten under the same name. Delta's idempotent-write options (``txnAppId`` /
``txnVersion``) are not used: they cover Spark's DataFrame writer, while these writes are MERGEs
and driver-side ``deltalake`` commits; the run-id rules already make a redo a no-op.

**The stream's clock.** A batch's as-of never goes before the last batch's (the ``stream`` job's
newest ``as_of`` in ``runs``, :func:`solaris.precompute.stream.plan_batch`): late events are
computed at the stream's present, with every event stored up to it.

**Stopping.** A ``processing-time`` query stops on SIGTERM or SIGINT (:class:`StopSignals`): the
driver lets a batch in flight (logged in the checkpoint, not committed) finish and commit, stops the
query, logs one line and returns; the job exits 0. A batch Spark logs in the moment between that
commit and the stop is interrupted uncommitted and redone at the next start.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from solaris.config import SolarisConfig
from solaris.errors import RefusedError
from solaris.pipeline import CANDIDATES, PUBLISH, SCORE, USER_AGGREGATES, open_tick
from solaris.precompute.stream import (
    JOB,
    BatchPlan,
    Trigger,
    UserEvents,
    events_since,
    has_new_events,
    plan_batch,
    snapshot_id,
    start_plan,
    trigger_options,
)
from solaris.stages.candidates import CandidatesOptions
from solaris.stages.publish import PublishOptions
from solaris.stages.score import ScoreOptions
from solaris.stages.user_aggregates import UserAggregatesOptions
from solaris.storage.audit import RunRecord, RunsLog
from solaris.storage.events import Events
from solaris.tick import StepContext
from solaris.timeutil import parse_utc

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("solaris.stream")

START_FILE = "start_version.json"  # beside the query's checkpoint: the events version of its first run
QUERY_DIR = "query"  # Spark's checkpoint (offsets, commits) under stream.checkpoint_dir
QUERY_NAME = "solaris_stream"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # stop a processing-time query cleanly (exit code 0)
STOP_POLL_SECONDS = 1.0  # how often the driver looks for a stop request while the query runs


@dataclass(frozen=True)
class BatchResult:
    """What one micro-batch did (``skipped``: why nothing ran)."""

    batch_id: int
    run_id: str | None
    as_of: datetime | None
    events: int = 0
    users: int = 0
    candidates: int = 0
    scored: int = 0  # FM passes
    written: int = 0  # pair rows the run left in pair_embeddings
    aggregated: int = 0  # users whose tier-3 aggregate the run wrote
    manifest: str | None = None
    refused: str | None = None  # why publish wrote no manifest
    skipped: str | None = None
    seconds: float = 0.0


@dataclass
class StreamResult:
    """What one run of the query did: its micro-batches, or why it did not start (``waiting``)."""

    batches: list[BatchResult] = field(default_factory=list)
    waiting: str | None = None
    stopped: str | None = None  # the signal that stopped a processing-time query


def checkpoint_root(config: SolarisConfig) -> Path:
    """``stream.checkpoint_dir`` under the warehouse: the query's checkpoint and its start version."""
    return config.resolve_under_warehouse(config.stream.checkpoint_dir)


def batch_activity(frame: DataFrame) -> list[UserEvents]:
    """Per user of a micro-batch's events: how many, and the newest event time (one aggregate)."""
    from pyspark.sql import functions as F

    rows = frame.groupBy("user_id").agg(F.count("*").alias("n"), F.max("ts").alias("newest")).collect()
    return [UserEvents(int(row["user_id"]), int(row["n"]), parse_utc(row["newest"])) for row in rows]


def run_batch(spark: SparkSession, config: SolarisConfig, plan: BatchPlan) -> BatchResult:
    """The hourly stages for the users of one micro-batch (the module's docstring: what and why)."""
    if plan.as_of is None or plan.run_id is None:
        return BatchResult(batch_id=plan.batch_id, run_id=None, as_of=None, skipped="no events")
    started = time.perf_counter()
    as_of, run_id = plan.as_of, plan.run_id
    record = RunRecord(run_id=run_id, job=JOB, as_of=as_of, rows_in=plan.events)
    users = spark.createDataFrame([(user,) for user in plan.users], "user_id long")
    scored = written = aggregated = 0
    manifest: str | None = None
    refused: str | None = None
    # the events of the window read once for the stages; their `runs` rows in one commit at the end
    with open_tick(spark, config, as_of, events_since=events_since(as_of, config.precompute.candidates)) as tick:
        step = StepContext(spark, config, as_of, run_id, tick)
        speculated = CANDIDATES.run(step, options=CandidatesOptions(users=users))
        if speculated.pairs:
            score = SCORE.run(step, options=ScoreOptions())
            scored, written = score.scored, score.written
            aggregated = USER_AGGREGATES.run(step, options=UserAggregatesOptions(users=users)).users
            try:
                manifest = PUBLISH.run(step, options=PublishOptions(snapshot_id=snapshot_id(as_of, plan.batch_id))
                                       ).manifest
            except RefusedError as error:  # publish recorded why; serving keeps the snapshot it has
                refused = str(error)
                log.warning("stream %s: nothing published (%s); the next publish pins these pairs", run_id, error)
        seconds = time.perf_counter() - started
        record.rows_out = written
        record.details = {"batch_id": plan.batch_id, "users": len(plan.users), "candidates": speculated.pairs,
                          "scored": scored, "aggregated": aggregated, "manifest": manifest, "refused": refused,
                          "seconds": round(seconds, 2)}
        record.write(spark, config, "success", tick)
    log.info("stream batch %d (%s): %d events, %d users -> %d candidates -> %d FM passes -> %d pairs, %d user "
             "aggregates; %s (%.1fs)", plan.batch_id, run_id, plan.events, len(plan.users), speculated.pairs, scored,
             written, aggregated, manifest or refused or "nothing to publish", seconds)
    return BatchResult(batch_id=plan.batch_id, run_id=run_id, as_of=as_of, events=plan.events, users=len(plan.users),
                       candidates=speculated.pairs, scored=scored, written=written, aggregated=aggregated,
                       manifest=manifest, refused=refused, seconds=seconds)


def _recorded_start(path: Path) -> int | None:
    if not path.is_file():
        return None
    return int(json.loads(path.read_text())["starting_version"])


def _record_start(path: Path, version: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({"starting_version": version}) + "\n")
    temporary.replace(path)


def _numbered(directory: Path) -> list[int]:
    """The batch ids of a checkpoint folder's files (``offsets``, ``commits``), sorted."""
    return sorted(int(entry.name) for entry in directory.iterdir() if entry.name.isdigit()) \
        if directory.is_dir() else []


def batch_in_flight(query_dir: Path) -> bool:
    """Whether the query's checkpoint holds a batch logged (``offsets``) but not committed."""
    offsets, commits = _numbered(query_dir / "offsets"), _numbered(query_dir / "commits")
    return bool(offsets) and (not commits or commits[-1] < offsets[-1])


def checkpoint_progress(query_dir: Path) -> tuple[int | None, bool]:
    """From the query's checkpoint files (no Spark): the events version it reads next, and whether a
    batch is logged but not committed. ``(None, False)``: no offset yet; ``(None, True)``: an offset
    this does not understand (the query decides).

    Spark writes ``offsets/<batch>`` before a batch (its last line: the Delta source's offset) and
    ``commits/<batch>`` after it. The Delta offset of a batch that read through version ``v`` is
    ``{"reservoirVersion": v + 1, "index": -1}`` (measured on delta-spark, a skipped change commit
    included); a larger index means ``v`` was read in part, and it is read next too.
    """
    offsets = _numbered(query_dir / "offsets")
    if not offsets:
        return None, False
    if batch_in_flight(query_dir):
        return None, True
    try:
        offset = json.loads((query_dir / "offsets" / str(offsets[-1])).read_text().splitlines()[-1])
        return int(offset["reservoirVersion"]), False
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None, True


def events_to_process(config: SolarisConfig) -> bool:
    """Whether the stream has new events to process (:func:`solaris.precompute.stream.has_new_events`),
    from the events table's log (``deltalake``) and the query's checkpoint files: no JVM."""
    from solaris.storage.table import Table

    root = checkpoint_root(config)
    latest = Table.at(config.table_path("events")).version()  # None: no table yet
    next_version, pending = checkpoint_progress(root / QUERY_DIR)
    return has_new_events(latest, recorded_start=_recorded_start(root / START_FILE), next_version=next_version,
                          pending=pending)


def run_stream(spark: SparkSession, config: SolarisConfig, *, trigger: Trigger) -> StreamResult:
    """Run the query: ``available-now`` processes every event committed so far (in micro-batches of
    at most ``stream.max_files_per_trigger`` files) and returns; ``processing-time`` runs until the
    process is stopped, a micro-batch at most every ``stream.interval_seconds``.

    The first run records the events version to start from (:func:`solaris.precompute.stream.start_plan`)
    and, under ``available-now``, returns ``waiting`` until the table has a commit after it.
    """
    with StopSignals(enabled=trigger == "processing-time") as stop:
        return _run_query(spark, config, trigger=trigger, stop=stop)


class StopSignals:
    """SIGINT and SIGTERM ask a long-running query to stop (``requested``: the signal's name) instead
    of interrupting the driver wherever it is; the previous handlers are restored on exit. Only in
    the main thread (Python's rule for signal handlers) and only when ``enabled``."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.requested: str | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, _frame: object) -> None:
        self.requested = signal.Signals(signum).name

    def __enter__(self) -> StopSignals:
        if self.enabled:
            self._previous = {signum: signal.signal(signum, self._handle) for signum in STOP_SIGNALS}
        return self

    def __exit__(self, *_exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def _run_query(spark: SparkSession, config: SolarisConfig, *, trigger: Trigger, stop: StopSignals) -> StreamResult:
    settings = config.stream
    root = checkpoint_root(config)
    events = Events.of(spark, config)
    start_file = root / START_FILE
    while True:
        latest = events.table.version() if events.table.exists() else None
        plan = start_plan(_recorded_start(start_file), latest)
        if plan.record is not None:
            _record_start(start_file, plan.record)
            log.info("stream: first run; it processes the events committed from version %d of %s on",
                     plan.record, events.table.path)
        if plan.start is not None:
            break
        waiting = f"no events committed since the stream's start (version {_recorded_start(start_file)})"
        if trigger == "available-now":
            log.info("stream: %s; nothing to do", waiting)
            return StreamResult(waiting=waiting)
        deadline = time.monotonic() + settings.interval_seconds
        while not stop.requested and time.monotonic() < deadline:
            time.sleep(min(STOP_POLL_SECONDS, settings.interval_seconds))
        if stop.requested:
            log.info("stream: stopped by %s before its first batch", stop.requested)
            return StreamResult(waiting=waiting, stopped=stop.requested)

    result = StreamResult()
    runs = RunsLog.of(spark, config)

    def each_batch(frame: DataFrame, batch_id: int) -> None:
        # the stream's clock: a batch of late events runs at the last batch's as-of (plan_batch: why)
        plan = plan_batch(int(batch_id), batch_activity(frame), floor=runs.newest_as_of(JOB))
        done = run_batch(spark, config, plan)
        if trigger == "available-now":  # a long-running query logs its batches and keeps none
            result.batches.append(done)

    writer = (events.changes(starting_version=plan.start, max_files_per_trigger=settings.max_files_per_trigger)
              .select("user_id", "ts")
              .writeStream.queryName(QUERY_NAME)
              .option("checkpointLocation", str(root / QUERY_DIR))
              .foreachBatch(each_batch))
    query = writer.trigger(**trigger_options(trigger, settings.interval_seconds)).start()  # type: ignore[call-overload]
    log.info("stream: query %s started (%s), checkpoint %s", query.id, trigger, root / QUERY_DIR)
    if trigger == "available-now":
        query.awaitTermination()
        return result
    while not stop.requested:
        if query.awaitTermination(STOP_POLL_SECONDS):  # ended by itself (a failure raises here)
            return result
    # a batch Spark has logged runs to its commit first: stopping interrupts the batch's Spark jobs,
    # which would abandon it (redone at restart) with a traceback in the log
    while batch_in_flight(root / QUERY_DIR) and query.isActive:
        time.sleep(STOP_POLL_SECONDS / 10)
    if not query.isActive:
        query.awaitTermination()  # a batch that failed meanwhile fails the run (raises)
    query.stop()
    result.stopped = stop.requested
    log.info("stream: stopped by %s; the next run resumes after the last committed batch", stop.requested)
    return result
