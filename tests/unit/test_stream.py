"""The stream's pure rules: who a micro-batch touches, its as-of and run id, the events it reads,
where the query starts, its trigger (no Spark)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from solaris.config import CandidateConfig, load_config
from solaris.pipeline import run_ids
from solaris.precompute import fast_lane
from solaris.precompute.stream import (
    UserEvents,
    events_since,
    events_window_hours,
    has_new_events,
    plan_batch,
    run_id,
    snapshot_id,
    start_plan,
    trigger_options,
)
from solaris.serving.snapshots import list_manifests

T = datetime(2000, 11, 19, 18, 7, 42, tzinfo=timezone.utc)
SECOND = timedelta(seconds=1)


def test_a_batch_touches_its_users_at_its_newest_event():
    plan = plan_batch(3, [UserEvents(20, 2, T - 5 * SECOND), UserEvents(7, 1, T), UserEvents(11, 4, T - SECOND)])
    assert plan.users == [7, 11, 20] and plan.events == 7
    assert plan.as_of == T and plan.run_id == "stream-20001119T180742Z-b3"


def test_a_batch_of_late_events_runs_at_the_stream_s_last_as_of():
    """The as-of never goes back: late events (older than the last batch's as-of) are computed at that
    as-of, so their users see every stored event; a batch newer than the floor keeps its own time;
    a redo (which may see its own as-of as the floor) gets the same as-of and run id."""
    activity = [UserEvents(4, 1, T - 600 * SECOND), UserEvents(9, 2, T - 300 * SECOND)]
    late = plan_batch(5, activity, floor=T)
    assert late.as_of == T and late.run_id == run_id(T, 5) and late.users == [4, 9]
    assert plan_batch(5, activity, floor=late.as_of) == late
    assert plan_batch(5, activity, floor=T - 3600 * SECOND).as_of == T - 300 * SECOND
    assert plan_batch(5, activity).as_of == T - 300 * SECOND
    assert plan_batch(5, [], floor=T).as_of is None


def test_an_empty_batch_does_nothing():
    for activity in ([], [UserEvents(1, 0, T)]):
        plan = plan_batch(0, activity)
        assert plan.users == [] and plan.as_of is None and plan.run_id is None


def test_a_user_appears_once_per_batch():
    with pytest.raises(ValueError, match="one UserEvents per user"):
        plan_batch(0, [UserEvents(1, 1, T), UserEvents(1, 2, T)])


def test_run_ids_are_the_batch_s_own():
    """A redo of a batch (same id, same events) gets the same run id; two batches whose newest event
    has the same time get different ones; never an hourly or fast-lane id, even on the hour."""
    on_the_hour = T.replace(minute=0, second=0)
    assert run_id(T, 4) == run_id(T, 4) != run_id(T, 5)
    for moment in (T, on_the_hour):
        stream_id = run_id(moment, 0)
        assert stream_id not in {*run_ids(moment).values(), fast_lane.run_id(moment)}
        assert stream_id.startswith("stream-")
    with pytest.raises(ValueError):
        run_id(T, -1)


def test_snapshot_ids_never_replace_the_hourly_manifest_and_sort_by_time(tmp_path):
    on_the_hour = T.replace(minute=0, second=0)
    assert snapshot_id(on_the_hour, 2) != f"snapshot-{on_the_hour:%Y%m%dT%H%M%SZ}"
    names = [f"snapshot-{on_the_hour:%Y%m%dT%H%M%SZ}", snapshot_id(T, 9), snapshot_id(T + SECOND, 10),
             f"snapshot-{T.replace(hour=19, minute=0, second=0):%Y%m%dT%H%M%SZ}"]
    for name in names:
        (tmp_path / f"{name}.json").write_text("{}")
    assert [path.stem for path in list_manifests(tmp_path)] == names


def test_the_events_window_covers_every_enabled_source():
    rules = CandidateConfig()  # defaults: cooc, trending, recent, next, popular
    assert events_window_hours(rules) == max(rules.lookback_hours, rules.trending_hours, 24 * rules.popular_days,
                                             24 * rules.cooc_days + rules.item_stats_hours)
    # the item-item statistics' window starts cooc_days before their as-of, up to item_stats_hours before the run's
    only_cooc = CandidateConfig(sources=("cooc",), cooc_days=2, item_stats_hours=24, lookback_hours=1)
    assert events_window_hours(only_cooc) == 72
    assert events_window_hours(CandidateConfig(sources=("recent",), lookback_hours=5)) == 5
    assert events_window_hours(CandidateConfig(sources=("retrieval",), retrieval_days=3, lookback_hours=1)) == 72
    assert events_since(T, only_cooc) == T - timedelta(hours=72)


def test_the_first_run_records_the_next_version_and_waits_for_it():
    """The query starts after the table's history (the hourly cycle's), and never skips what arrives
    between a first run that found nothing and the next run."""
    assert start_plan(None, 41).record == 42 and start_plan(None, 41).start is None
    assert start_plan(None, None).record == 0  # no events table yet: every event is new
    assert start_plan(42, 41).start is None and start_plan(42, 41).record is None
    assert start_plan(42, 42).start == 42 and start_plan(42, 50).start == 42
    assert start_plan(42, None).start is None


def test_triggers():
    assert trigger_options("available-now", 60) == {"availableNow": True}
    assert trigger_options("processing-time", 30) == {"processingTime": "30 seconds"}
    with pytest.raises(ValueError):
        trigger_options("continuous", 60)  # type: ignore[arg-type]


def test_stream_settings_are_in_the_typed_config():
    config = load_config(overrides=["stream.interval_seconds=15", "stream.max_files_per_trigger=3"])
    assert config.stream.interval_seconds == 15 and config.stream.max_files_per_trigger == 3
    assert config.resolve_under_warehouse(config.stream.checkpoint_dir).is_relative_to(config.warehouse.resolve())


def test_a_run_has_work_when_the_table_passed_the_checkpoint_or_a_batch_is_pending():
    # the checkpoint's last committed offset names the version read next
    assert not has_new_events(7, recorded_start=3, next_version=8, pending=False)
    assert has_new_events(8, recorded_start=3, next_version=8, pending=False)
    assert has_new_events(7, recorded_start=3, next_version=8, pending=True)  # a killed batch: redo it
    assert not has_new_events(None, recorded_start=3, next_version=8, pending=False)
    # no offset yet: the recorded start (a first run, nothing recorded, always runs: it records)
    assert not has_new_events(2, recorded_start=3, next_version=None, pending=False)
    assert has_new_events(3, recorded_start=3, next_version=None, pending=False)
    assert has_new_events(None, recorded_start=None, next_version=None, pending=False)


def _offset(directory, batch: int, version: int, index: int = -1, committed: bool = True) -> None:
    source = {"sourceVersion": 1, "reservoirId": "x", "reservoirVersion": version, "index": index,
              "isStartingVersion": False}
    (directory / "offsets").mkdir(parents=True, exist_ok=True)
    (directory / "commits").mkdir(parents=True, exist_ok=True)
    (directory / "offsets" / str(batch)).write_text('v1\n{"batchWatermarkMs":0}\n' + json.dumps(source) + "\n")
    if committed:
        (directory / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')
        (directory / "commits" / f".{batch}.crc").write_text("")


def test_the_checkpoint_files_give_the_version_read_next_and_a_pending_batch(tmp_path):
    """The files Spark writes (format measured on delta-spark: a batch through version v logs v + 1, index -1)."""
    from solaris.drivers.stream import batch_in_flight, checkpoint_progress

    assert checkpoint_progress(tmp_path / "query") == (None, False) and not batch_in_flight(tmp_path / "query")
    _offset(tmp_path, 0, 5)
    _offset(tmp_path, 1, 9)
    assert checkpoint_progress(tmp_path) == (9, False) and not batch_in_flight(tmp_path)
    _offset(tmp_path, 2, 12, committed=False)
    assert checkpoint_progress(tmp_path) == (None, True) and batch_in_flight(tmp_path)
    (tmp_path / "commits" / "2").write_text("v1\n")
    (tmp_path / "offsets" / "2").write_text("v1\nnot json\n")
    assert checkpoint_progress(tmp_path) == (None, True)  # not understood: the query decides
    assert not batch_in_flight(tmp_path)  # but committed: a stop does not wait for it


def test_the_stream_dag_check_reads_the_events_log_and_the_checkpoint(tmp_path, monkeypatch):
    """On a real Delta table written with deltalake (no JVM), in the warehouse the config points at."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from solaris.drivers.stream import QUERY_DIR, START_FILE, checkpoint_root
    from solaris.orchestration import stream_events_arrived

    monkeypatch.setenv("SOLARIS_WAREHOUSE", str(tmp_path))
    root = checkpoint_root(load_config())
    assert stream_events_arrived()  # nothing recorded: the first run records where it starts
    root.mkdir(parents=True)
    (root / START_FILE).write_text(json.dumps({"starting_version": 1}))
    assert not stream_events_arrived()  # no table
    for _ in range(2):  # versions 0 and 1
        write_deltalake(str(tmp_path / "events"), pa.table({"user_id": [1]}), mode="append")
    assert stream_events_arrived()  # the recorded start is there
    _offset(root / QUERY_DIR, 0, 2)  # the query read through version 1
    assert not stream_events_arrived()
    write_deltalake(str(tmp_path / "events"), pa.table({"user_id": [2]}), mode="append")
    assert stream_events_arrived()


def test_a_stop_signal_is_recorded_not_raised_and_the_handlers_come_back():
    """SIGINT / SIGTERM during a processing-time run set ``requested`` (the driver then stops the
    query and returns) instead of a KeyboardInterrupt wherever the driver is; disabled (available-now),
    the handlers are not touched; on exit the previous ones are back."""
    import signal

    from solaris.drivers.stream import StopSignals

    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    with StopSignals(enabled=True) as stop:
        signal.raise_signal(signal.SIGTERM)
        assert stop.requested == "SIGTERM"
        signal.raise_signal(signal.SIGINT)
        assert stop.requested == "SIGINT"
    assert {signum: signal.getsignal(signum) for signum in before} == before
    with StopSignals(enabled=False) as ignored:
        assert {signum: signal.getsignal(signum) for signum in before} == before and ignored.requested is None
