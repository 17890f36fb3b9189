"""The fast lane on real Spark + Delta: after an hourly cycle, a new session gets tier-1 pairs and a snapshot.

The shared world after one hourly cycle at T0 (so there is a snapshot and `user_neighbors`), then two
brand-new users appended to `events`: one whose first events fall in the fast lane's window, one
whose first event is after the as-of (must not be picked: point in time).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from pyspark.sql import functions as F

from solaris.pipeline import run_fast_lane, run_ids
from solaris.precompute.fast_lane import activity_from_events, run_id, select_users
from solaris.serving.resolver import TIER_PAIR, Resolver
from tests.conftest import table_checksum
from tests.world import T0, copy_world, run_solaris_main, world_argv

AS_OF = T0 + timedelta(minutes=15)
NEW_USER, LATE_USER = 9_000_001, 9_000_002
# a short absence so some of the synthetic world's own users count as returning, not only the injected one
LANE = ["fast_lane.absence_hours=2", "fast_lane.per_user=10"]


def _append_events(spark, config, user_id, moments):
    """Copy real events (real items) under a new user id and the given timestamps."""
    path = config.table_path("events")
    events = spark.read.format("delta").load(path)
    rows = events.orderBy("event_id").limit(len(moments)).collect()
    frame = spark.createDataFrame(
        [{**row.asDict(), "event_id": user_id * 10 + index, "user_id": user_id, "ts": moment,
          "event_date": moment.date()} for index, (row, moment) in enumerate(zip(rows, moments))],
        events.schema)
    frame.write.format("delta").mode("append").save(path)


@pytest.fixture(scope="module")
def lane(spark, served_template, tmp_path_factory):
    # the served world: the hourly cycle at T0 ran with the world's settings (it reads no fast_lane.* key)
    config = copy_world(served_template, tmp_path_factory.mktemp("lane") / "warehouse", *LANE)
    _append_events(spark, config, NEW_USER, [AS_OF - timedelta(minutes=9), AS_OF - timedelta(minutes=4)])
    _append_events(spark, config, LATE_USER, [AS_OF + timedelta(minutes=1)])
    return config


def _table(spark, config, name):
    return spark.read.format("delta").load(config.table_path(name))


def test_fast_lane_scores_and_publishes_the_new_sessions_only(spark, lane):
    config = lane
    hourly_snapshot = (config.warehouse / "snapshots" / "LATEST").read_text().strip()
    result = run_fast_lane(spark, config, AS_OF, run_id(AS_OF))

    # the Spark selection equals the plain-Python rule on the same events (all of them: the rule drops ts > as_of)
    events = _table(spark, config, "events").select("user_id", F.unix_seconds("ts").alias("ts")).toPandas()
    moments = [(int(user), T0.fromtimestamp(int(ts), tz=T0.tzinfo)) for user, ts in events.itertuples(index=False)]
    expected = select_users(activity_from_events(moments, AS_OF, config.fast_lane), AS_OF, config.fast_lane)
    assert result.users == expected.users and NEW_USER in result.users and LATE_USER not in result.users
    assert result.new >= 1 and result.returning >= 1

    candidates = _table(spark, config, "candidates").where(F.col("run_id") == run_id(AS_OF)).toPandas()
    assert len(candidates) == result.candidates.pairs > 0
    assert set(candidates.user_id) <= set(result.users) and NEW_USER in set(candidates.user_id)
    assert candidates.groupby("user_id").size().max() <= 10  # fast_lane.per_user

    pairs = _table(spark, config, "pair_embeddings").where(F.col("run_id") == run_id(AS_OF)).toPandas()
    assert len(pairs) == result.score.written > 0 and result.score.scored >= result.score.written
    assert set(pairs.user_id) <= set(result.users)
    assert (pairs.computed_at == AS_OF.replace(tzinfo=None)).all()
    # the hourly run's rows are still there, under their own run id
    hourly = _table(spark, config, "pair_embeddings").where(F.col("run_id") == run_ids(T0)["precompute"]).count()
    assert hourly > 0

    # a new snapshot, pinning the fast lane's pair_embeddings version, serves the new pairs as tier 1
    latest = (config.warehouse / "snapshots" / "LATEST").read_text().strip()
    assert latest == "snapshot-20260108T001500Z.json" != hourly_snapshot
    assert result.publish is not None and result.publish.manifest.endswith(latest)
    resolver = Resolver.from_snapshots(config.warehouse / "snapshots")
    _, tiers, _ = resolver.resolve(pairs.user_id.to_numpy(), pairs.item_id.to_numpy(), AS_OF + timedelta(minutes=5))
    assert (tiers == TIER_PAIR).all()
    runs = _table(spark, config, "runs").where(F.col("run_id") == run_id(AS_OF)).toPandas()
    assert {"fast_lane", "candidates", "score", "publish"} <= set(runs.job) and (runs.status == "success").all()


def test_rerun_of_the_same_tick_changes_no_table(spark, lane):
    """The rerun through the job's entry point (``solaris fast-lane``, what the DAG's spark-submit runs):
    its default run id is the tick's, so it replaces its own candidates and leaves its pairs as they are."""
    config = lane
    run_fast_lane(spark, config, AS_OF, run_id(AS_OF))  # idempotent whether or not the test above ran first
    before = {name: table_checksum(config.table_path(name)) for name in ("candidates", "pair_embeddings")}
    again = run_solaris_main(world_argv(config.warehouse, "fast-lane", "--as-of", f"{AS_OF:%Y-%m-%dT%H:%M:%SZ}",
                                        extra=LANE))
    assert again.returncode == 0, again.stderr[-3000:]
    after = {name: table_checksum(config.table_path(name)) for name in ("candidates", "pair_embeddings")}
    assert before == after
    report = again.stdout.strip().splitlines()[-1]
    assert report.startswith("fast lane: users=") and int(report.split("written=")[1].split()[0]) > 0
    assert "snapshot-20260108T001500Z.json" in report


def test_on_the_hour_and_without_new_sessions_nothing_is_written(spark, lane):
    config = lane
    versions = {name: spark.sql(f"DESCRIBE HISTORY delta.`{config.table_path(name)}`").count()
                for name in ("candidates", "pair_embeddings")}
    assert run_fast_lane(spark, config, T0 + timedelta(hours=1), "x").skipped == "hourly tick"
    # far past the data: nobody has an event in the window
    quiet = T0 + timedelta(days=30, minutes=15)
    assert run_fast_lane(spark, config, quiet, run_id(quiet)).skipped == "no fast-lane users"
    assert versions == {name: spark.sql(f"DESCRIBE HISTORY delta.`{config.table_path(name)}`").count()
                        for name in ("candidates", "pair_embeddings")}
