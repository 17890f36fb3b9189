"""Faults of the stream (the incremental precompute, ``solaris stream``): a query killed mid-batch and
restarted, late events, a new FM version between batches, a long-running query stopped by a signal.

One small world for the module: the served world (hourly cycle at T0), the stream's start recorded,
then two commits of new events, one Delta file each, read one per micro-batch
(``stream.max_files_per_trigger=1``):

* batch 0, commit ``ON_TIME``: users U1 and U2 at T0+15 min and T0+20 min;
* a new FM checkpoint is saved (``LATEST`` moves) once batch 0 is done;
* batch 1, commit ``LATE``: U1 and U3 at T0+5 min, earlier than batch 0's events (late and out of
  order: they arrive after the stream has processed later ones).

Before any query runs (and before the late events), the world is copied. The reference copy runs
the batches without interruption in the tests' own session (the state an interrupted run must
reach): batch 0, then the new FM and the late events, then batch 1; the other copy is left to the
real ``solaris`` processes of the kill test, the FM and the late events arriving while its
long-running query waits after batch 0. Only the
kill and the signal need processes of their own: what the late events and the new FM do is read
from the reference's rows.
"""

from __future__ import annotations

import os
import signal
import subprocess
from datetime import timedelta

import numpy as np
import pyarrow as pa
import pytest

from solaris.drivers.stream import QUERY_DIR, checkpoint_progress, checkpoint_root, events_to_process, run_stream
from solaris.serving.resolver import TIER_PAIR, Resolver
from tests.conftest import table_checksum
from tests.reliability.conftest import T0, solaris_command, subprocess_env, wait_until
from tests.world import copy_world

ON_TIME = (T0 + timedelta(minutes=15), T0 + timedelta(minutes=20))
LATE = T0 + timedelta(minutes=5)
ONE_FILE = "stream.max_files_per_trigger=1"
TABLES = ("candidates", "pair_embeddings", "pair_embeddings_log", "user_embeddings")
# `runs` differs between two runs in its clock columns (started_at, finished_at, details' seconds):
# compared on the columns a run decides
RUNS_COLUMNS = ["run_id", "job", "as_of", "status", "rows_in", "rows_out", "rows_quarantined"]


def _rows(config, name):
    """A table of the small world as pandas, read on the driver (no Spark job)."""
    from deltalake import DeltaTable

    return DeltaTable(config.table_path(name)).to_pandas()


def _runs(config):
    return sorted(map(tuple, _rows(config, "runs")[RUNS_COLUMNS].astype(str).to_numpy().tolist()))


def _state(config) -> dict:
    return {**{name: table_checksum(config.table_path(name)) for name in TABLES}, "runs": _runs(config)}


def _append(config, events: list[tuple[int, object]], first_id: int) -> None:
    """One Delta commit of one file: an event per (user, time), on real items of the world (written
    on the driver with ``deltalake``, an append as ingest's: no Spark job)."""
    from deltalake import DeltaTable, write_deltalake

    path = config.table_path("events")
    stored = DeltaTable(path).to_pyarrow_table()
    items = sorted(set(stored.column("item_id").to_pylist()))[:5]
    template = stored.sort_by("event_id").slice(0, 1).to_pylist()[0]
    rows = [{**template, "event_id": first_id + index, "user_id": user, "item_id": items[index % len(items)],
             "ts": moment, "event_date": moment.date()} for index, (user, moment) in enumerate(events)]
    write_deltalake(path, pa.Table.from_pylist(rows, schema=stored.schema), mode="append")


def _append_late(config, users) -> None:
    _append(config, [(user, LATE) for user in users], 8_200_100)


def _fm_version(config) -> str:
    from solaris.models.checkpoint import load_checkpoint

    return str(load_checkpoint(config.resolve_under_warehouse(config.precompute.fm_checkpoint), "fm")[1]["version"])


def _new_fm(config) -> str:
    """Save a new FM version (the current one, one weight moved: the same bytes for every world) -> its version."""
    import torch

    from solaris.models.checkpoint import load_checkpoint, save_checkpoint

    root = config.resolve_under_warehouse(config.precompute.fm_checkpoint)
    model, meta = load_checkpoint(root, "fm")
    with torch.no_grad():
        next(model.parameters()).add_(0.01)
    save_checkpoint(model, root, {key: value for key, value in meta.items() if key != "version"})
    return _fm_version(config)


@pytest.fixture(scope="module")
def worlds(spark, served_template, tmp_path_factory):
    """The reference config and its batches, the FM versions before and after, the pinned state of
    the reference, the copy left to the processes, and the users."""
    base = tmp_path_factory.mktemp("stream_faults")
    reference = copy_world(served_template, base / "reference", ONE_FILE)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(reference.spark.arrow_max_records_per_batch))
    assert run_stream(spark, reference, trigger="available-now").waiting  # records its start
    u1, u2, u3 = (int(user) for user in sorted(set(_rows(reference, "pair_embeddings").user_id))[:3])
    _append(reference, [(user, moment) for user in (u1, u2) for moment in ON_TIME], 8_200_000)
    # the killed copy receives the new FM and the late events at the same points of its run (a batch
    # reads the events committed when it runs, and its score the FM LATEST names then)
    killed = copy_world(reference.warehouse, base / "killed", ONE_FILE)
    old = _fm_version(reference)
    batches = run_stream(spark, reference, trigger="available-now").batches
    new = _new_fm(reference)
    _append_late(reference, (u1, u3))
    batches += run_stream(spark, reference, trigger="available-now").batches
    return reference, batches, (old, new), _state(reference), killed, (u1, u2, u3)


def _start(config, *args: str) -> subprocess.Popen:
    """A ``solaris stream`` process, its output to a file (a pipe nobody reads while it runs could fill)."""
    log = config.warehouse.parent / f"stream-{len(list(config.warehouse.parent.glob('stream-*.log')))}.log"
    with open(log, "w") as output:
        process = subprocess.Popen(solaris_command(config, "stream", *args, "--set", ONE_FILE), stdout=output,
                                   stderr=subprocess.STDOUT, text=True, env=subprocess_env(), start_new_session=True)
    process.log = log  # type: ignore[attr-defined]
    return process


def _output(process: subprocess.Popen) -> str:
    return process.log.read_text()  # type: ignore[attr-defined]


def _wait(process: subprocess.Popen, ready, what: str) -> None:
    wait_until(process, ready, what, output=lambda: _output(process), timeout=240)


def test_sigkill_mid_batch_then_a_processing_time_restart_stopped_by_sigterm(spark, worlds):
    """An available-now query SIGKILLed in batch 0 (logged by Spark, not committed);
    restarted as a long-running processing-time query, which redoes batch 0; then, while it runs, a
    new FM is saved and the late events are committed: it runs batch 1 with them, and SIGTERM, sent
    as soon as Spark has logged batch 1, stops it once batch 1 is committed (exit code 0, one log
    line, no traceback). Every table then equals the uninterrupted reference's, no
    pair twice, and a third run has nothing to redo. Compared whole (checksums): run ids and
    ``computed_at`` are functions of a batch's id and events, so an interrupted run writes what an
    uninterrupted one does; ``runs`` without its clock columns (start and finish times, seconds)."""
    reference, batches, (_, new), expected, config, (u1, _, u3) = worlds
    query = checkpoint_root(config) / QUERY_DIR

    job = _start(config, "--trigger", "available-now")
    _wait(job, (query / "offsets" / "0").is_file, "batch 0 started")  # Spark logs a batch, then runs it
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(timeout=60)
    assert job.returncode == -signal.SIGKILL
    assert checkpoint_progress(query) == (None, True)  # batch 0 pending
    assert events_to_process(config)

    job = _start(config, "--trigger", "processing-time", "--set", "stream.interval_seconds=1")
    _wait(job, (query / "commits" / "0").is_file, "batch 0 redone and committed")
    assert _new_fm(config) == new  # LATEST moves before the events that batch 1 reads are committed
    _append_late(config, (u1, u3))
    _wait(job, (query / "offsets" / "1").is_file, "batch 1 started")
    os.kill(job.pid, signal.SIGTERM)  # the driver process, as `kill <pid>` or systemd's KillMode=mixed does
    job.wait(timeout=120)
    output = _output(job)
    assert job.returncode == 0, output
    assert "stream: stopped by SIGTERM" in output and "Traceback" not in output, output
    assert (query / "commits" / "1").is_file()  # the batch in flight finished before the stop

    assert _state(config) == expected
    assert not _rows(config, "pair_embeddings").duplicated(["user_id", "item_id"]).any()
    streamed = _rows(config, "runs").query("job == 'stream'")
    assert sorted(streamed.run_id) == sorted(batch.run_id for batch in batches)  # each batch once, none lost
    assert not events_to_process(config)
    assert run_stream(spark, config, trigger="available-now").batches == []  # committed batches are not redone
    assert _state(config) == expected


def test_late_events_refresh_their_users_at_the_stream_s_as_of(worlds):
    """Batch 1 brings events older than batch 0's: it runs at batch 0's as-of (the stream's clock
    never goes back), reading the late events and the later ones already stored, so U1 (refreshed by
    batch 0) gets values that include its late event, replacing batch 0's rows of the same time, and
    U3 is refreshed too. No value is computed before an event it read (``computed_at`` is at or
    after every event of the batch), and none is served to a request at or before its
    ``computed_at`` (``storage/validity.py``): a request between the late event and the as-of is
    served no value of the late batch."""
    reference, batches, _, _, _, (u1, u2, u3) = worlds
    first, late = batches
    assert first.as_of == late.as_of == ON_TIME[-1] and (first.users, late.users) == (2, 2)
    assert late.run_id == "stream-20260108T002000Z-b1" and late.written > 0

    log = _rows(reference, "pair_embeddings_log")
    mine = log[log.run_id == late.run_id]
    assert set(mine.user_id) == {u1, u3} and (mine.computed_at == ON_TIME[-1]).all()
    pairs = _rows(reference, "pair_embeddings").set_index(["user_id", "item_id"])
    for user, item in zip(mine.user_id, mine.item_id):  # the late batch's rows are the stored ones
        assert pairs.loc[(user, item), "run_id"] == late.run_id
    assert set(log[log.run_id == first.run_id].user_id) == {u1, u2}
    aggregates = _rows(reference, "user_embeddings").set_index("user_id")
    assert aggregates.loc[u1, "run_id"] == aggregates.loc[u3, "run_id"] == late.run_id
    assert aggregates.loc[u2, "run_id"] == first.run_id

    resolver = Resolver.from_snapshots(reference.warehouse / "snapshots")
    item = int(mine[mine.user_id == u3].item_id.iloc[0])
    for request, fresh in ((LATE + timedelta(minutes=1), False), (ON_TIME[-1], False),
                           (ON_TIME[-1] + timedelta(minutes=1), True)):
        _, tiers, ages = resolver.resolve(np.array([u3]), np.array([item]), request)
        assert (tiers[0] == TIER_PAIR and ages[0] == 60) == fresh, (request, tiers, ages)


def test_a_new_fm_version_between_batches_scores_the_next_batch(worlds):
    """A new FM checkpoint saved (``LATEST`` moved) between batches 0 and 1 (here between two runs; in
    the kill test, which ends with these same tables, while one long-running query waits): batch 1's
    `score` resolves ``LATEST`` (at every batch, as the hourly score does at every run), so every
    pair it writes carries the new version; rows of batch 0 and of the hourly cycle keep the
    old one until replaced; each run's rows carry one version; and a user's tier-3 aggregate
    averages the pairs of one FM version only, that of its newest pair (embeddings of two FM
    versions lie in different spaces)."""
    reference, batches, (old, new), _, _, (u1, u2, u3) = worlds
    first, late = batches
    assert new != old
    pairs = _rows(reference, "pair_embeddings")
    assert (pairs.groupby("run_id").fm_version.nunique() == 1).all()
    assert set(pairs[pairs.run_id == late.run_id].fm_version) == {new}
    assert set(pairs[pairs.run_id != late.run_id].fm_version) == {old}
    assert (pairs.run_id == first.run_id).any()

    aggregates = _rows(reference, "user_embeddings").set_index("user_id")
    log = _rows(reference, "pair_embeddings_log")
    assert aggregates.loc[u2, "fm_version"] == old
    for user in (u1, u3):  # each with pairs of the old FM in the window too (the hourly cycle's, batch 0's)
        mine = log[log.user_id == user]
        latest = mine.sort_values(["computed_at", "run_id"]).drop_duplicates("item_id", keep="last")
        assert (latest.fm_version == old).any() and aggregates.loc[user, "fm_version"] == new
        assert aggregates.loc[user, "n_pairs"] == (latest.fm_version == new).sum()
