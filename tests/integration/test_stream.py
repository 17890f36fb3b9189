"""The stream on real Spark + Delta: new events of a few users reach tier 1, tier 3 and serving; a
run without new events, and a redo of a batch, change no table.

The shared world after one hourly cycle at T0 (a snapshot is served, `user_neighbors` exists). The
stream's first run records where it starts; then a few events of three of the world's users are
appended to `events`, and an available-now run processes them.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from solaris.drivers.stream import run_batch, run_stream
from solaris.precompute.stream import UserEvents, plan_batch
from solaris.serving.resolver import TIER_PAIR, Resolver
from tests.conftest import table_checksum
from tests.world import T0, copy_world

TABLES = ("candidates", "pair_embeddings", "pair_embeddings_log", "user_embeddings", "runs")
MOMENTS = (T0 + timedelta(minutes=10), T0 + timedelta(minutes=12), T0 + timedelta(minutes=20))


def _table(spark, config, name):
    return spark.read.format("delta").load(config.table_path(name))


def _rows(config, name):
    """A table of the small world as pandas, read on the driver (no Spark job: this file's time budget)."""
    from deltalake import DeltaTable

    return DeltaTable(config.table_path(name)).to_pandas()


def _append_events(spark, config, users):
    """Two events per user at MOMENTS (real items of the world), one Delta commit; -> the events."""
    events = _table(spark, config, "events")
    items = [row.item_id for row in events.select("item_id").distinct().orderBy("item_id").limit(6).collect()]
    template = events.orderBy("event_id").first().asDict()
    rows = [{**template, "event_id": 8_000_000 + index, "user_id": user, "item_id": items[index % len(items)],
             "ts": MOMENTS[index % len(MOMENTS)], "event_date": MOMENTS[index % len(MOMENTS)].date()}
            for index, user in enumerate(user for user in users for _ in range(2))]
    spark.createDataFrame(rows, events.schema).write.format("delta").mode("append").save(config.table_path("events"))
    return rows


@pytest.fixture(scope="module")
def streamed(spark, served_template, tmp_path_factory):
    config = copy_world(served_template, tmp_path_factory.mktemp("stream") / "warehouse")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(config.spark.arrow_max_records_per_batch))
    first = run_stream(spark, config, trigger="available-now")  # records its start: after the world's events
    pairs = _rows(config, "pair_embeddings")
    users = sorted(set(pairs.user_id))[:3]
    before = pairs[~pairs.user_id.isin(users)]
    appended = _append_events(spark, config, users)
    result = run_stream(spark, config, trigger="available-now")
    return config, first, users, before, appended, result


def test_new_events_reach_tier_1_tier_3_and_serving_for_their_users_only(spark, streamed):
    config, first, users, before, appended, result = streamed
    assert first.waiting and not first.batches
    (batch,) = result.batches
    as_of = max(MOMENTS)
    assert batch.as_of == as_of and batch.users == len(users) and batch.events == len(appended)
    assert batch.run_id == "stream-20260108T002000Z-b0" and batch.written > 0 and batch.manifest

    pairs = _rows(config, "pair_embeddings")
    mine = pairs[pairs.run_id == batch.run_id]
    assert len(mine) == batch.written and set(mine.user_id) == set(users)  # each touched user, no other
    # point in time: computed at the batch's newest event, after every event it brought; TTL from there
    assert (mine.computed_at == as_of).all()
    assert all(row["ts"] <= as_of for row in appended)
    assert (mine.expires_at - mine.computed_at == timedelta(hours=config.precompute.ttl_hours)).all()
    log = _rows(config, "pair_embeddings_log").query("run_id == @batch.run_id")
    assert sorted(zip(log.user_id, log.item_id)) == sorted(zip(mine.user_id, mine.item_id))
    # the other users' rows are untouched
    others = pairs[~pairs.user_id.isin(users)]
    key = ["user_id", "item_id"]
    assert others.sort_values(key).reset_index(drop=True)[["user_id", "item_id", "run_id", "computed_at"]].equals(
        before.sort_values(key).reset_index(drop=True)[["user_id", "item_id", "run_id", "computed_at"]])

    aggregates = _rows(config, "user_embeddings").query("run_id == @batch.run_id")
    assert set(aggregates.user_id) == set(mine.user_id) and (aggregates.computed_at == as_of).all()

    # serving: the stream's manifest is LATEST and serves the new pairs as tier 1, no hourly publish needed
    assert (config.warehouse / "snapshots" / "LATEST").read_text().strip() == "snapshot-20260108T002000Z-stream-b0.json"
    resolver = Resolver.from_snapshots(config.warehouse / "snapshots")
    _, tiers, ages = resolver.resolve(mine.user_id.to_numpy(), mine.item_id.to_numpy(), as_of + timedelta(minutes=1))
    assert (tiers == TIER_PAIR).all() and (ages == 60).all()
    runs = _rows(config, "runs").query("run_id == @batch.run_id")
    assert set(runs.job) == {"stream", "candidates", "score", "user_aggregates", "publish"}


def test_no_new_events_and_a_redo_of_a_batch_change_no_table(spark, streamed):
    config, _, users, _, appended, result = streamed
    (batch,) = result.batches
    pinned = {name: table_checksum(config.table_path(name)) for name in TABLES}
    assert run_stream(spark, config, trigger="available-now").batches == []
    assert {name: table_checksum(config.table_path(name)) for name in TABLES} == pinned
    # the same batch redone (a crash before Spark committed it): same run id, its rows replaced by equal ones
    activity = [UserEvents(user, 2, max(row["ts"] for row in appended if row["user_id"] == user)) for user in users]
    redo = run_batch(spark, config, plan_batch(batch.batch_id, activity))
    assert redo.run_id == batch.run_id and redo.written == batch.written
    for name in ("pair_embeddings", "pair_embeddings_log", "user_embeddings"):
        assert table_checksum(config.table_path(name)) == pinned[name], name


def test_a_reingest_overlapping_stored_events_hands_its_new_event_to_the_stream(spark, streamed):
    """`events`' insert_new rule: an ingest-like write of stored events (one "corrected") plus a new
    event of another user is committed as an append, so the stream processes the new event (an
    update MERGE would have rewritten files, a commit the stream's source skips whole)."""
    from solaris.drivers.stream import events_to_process
    from solaris.storage.table import Table

    config, _, users, _, appended, _ = streamed
    assert not events_to_process(config)  # the DAG's check on the real checkpoint: all processed
    pairs = _rows(config, "pair_embeddings")
    newcomer = int(sorted(set(pairs.user_id) - set(users))[0])
    moment = max(MOMENTS) + timedelta(minutes=5)
    corrected = [{**row, "rating": (row["rating"] or 0.0) + 1.0, "ingest_run_id": "ingest-overlap"}
                 for row in appended[:3]]
    new = {**appended[0], "event_id": 8_100_000, "user_id": newcomer, "ts": moment, "event_date": moment.date(),
           "ingest_run_id": "ingest-overlap"}
    events = Table.of(spark, config, "events")
    events.write(spark.createDataFrame([*corrected, new], _table(spark, config, "events").schema), "ingest-overlap")

    stored = _rows(config, "events").set_index("event_id")
    assert stored.loc[new["event_id"], "user_id"] == newcomer  # the new event is in
    for row in corrected:  # a stored event is never rewritten: the correction is not applied
        assert stored.loc[row["event_id"], "ingest_run_id"] == appended[0]["ingest_run_id"]
        before = next(old["rating"] for old in appended if old["event_id"] == row["event_id"])
        assert stored.loc[row["event_id"], "rating"] != row["rating"] and (
            before is None or stored.loc[row["event_id"], "rating"] == before)
    assert len(stored) == stored.index.nunique()

    assert events_to_process(config)
    (batch,) = run_stream(spark, config, trigger="available-now").batches
    assert batch.skipped is None and batch.events == 1 and batch.users == 1 and batch.as_of == moment
    fresh = _rows(config, "pair_embeddings").query("run_id == @batch.run_id")
    assert len(fresh) == batch.written > 0 and set(fresh.user_id) == {newcomer}
    assert (fresh.computed_at == moment).all()
    assert not events_to_process(config)
