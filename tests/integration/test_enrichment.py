"""Tiers 2-6 on real Spark + Delta + FAISS: aggregates, KNN, imputation, item aggregates and their
imputation, publish, resolver."""

from __future__ import annotations

import json
from datetime import timedelta

import numpy as np
import pytest

from solaris.drivers import replay
from solaris.enrichment.items import impute_items
from solaris.pipeline import COVERAGE, ITEM_AGGREGATES, KNN
from solaris.serving.resolver import (
    TIER_IMPUTED,
    TIER_IMPUTED_ITEM,
    TIER_ITEM,
    TIER_NEIGHBOR_PAIR,
    TIER_PAIR,
    TIER_USER,
    Resolver,
)
from solaris.serving.snapshots import QualityGateError
from solaris.stages import publish
from solaris.storage.embedding_codec import decode
from solaris.tick import StepContext
from tests.world import T0, copy_world

ENRICH = ["precompute.candidates.lookback_hours=24"]  # on top of the shared world's settings


def _table(spark, config, name):
    return spark.read.format("delta").load(config.table_path(name))


@pytest.fixture(scope="module")
def replayed(spark, world_template, tmp_path_factory):
    config = copy_world(world_template, tmp_path_factory.mktemp("enrich") / "warehouse", *ENRICH)
    summary = replay.run(spark, config, T0, T0 + timedelta(hours=2))
    return config, summary


def test_replay_fills_every_tier_and_coverage_grows_with_the_hierarchy(spark, replayed):
    config, summary = replayed
    assert len(summary) == 2
    for tick in summary:
        coverage, knn = tick.require(COVERAGE), tick.require(KNN)
        assert coverage.cumulative(1) <= coverage.cumulative(2) <= coverage.cumulative(3) <= coverage.cumulative(4)
        assert knn.k == 5 and 0 <= knn.recall <= 1
    last = summary[-1].require(COVERAGE)
    assert last.cumulative(3) > last.cumulative(1)
    assert _table(spark, config, "user_embeddings").count() > 0
    assert _table(spark, config, "imputed_embeddings").count() > 0


def test_user_aggregate_is_the_mean_of_the_windows_pair_embeddings(spark, replayed):
    config, _ = replayed
    dim = config.model.embedding_dim
    users = _table(spark, config, "user_embeddings").toPandas()
    row = users.sort_values("n_pairs").iloc[-1]
    log = _table(spark, config, "pair_embeddings_log").where(f"user_id = {row.user_id}").toPandas()
    log = log[(log.computed_at > row.window_start) & (log.computed_at <= row.computed_at)]
    latest = log.sort_values("computed_at").groupby("item_id").tail(1)
    assert len(latest) == row.n_pairs
    np.testing.assert_allclose(decode([row.embedding], dim)[0], decode(latest.embedding.tolist(), dim).mean(axis=0),
                               rtol=1e-5, atol=1e-6)
    assert row.expires_at - row.computed_at == timedelta(hours=config.enrichment.ttl_hours)


def test_item_aggregate_is_the_mean_over_users_and_serves_a_user_with_no_history(spark, replayed):
    config, _ = replayed
    dim = config.model.embedding_dim
    items = _table(spark, config, "item_embeddings").toPandas()
    assert len(items) and (items.n_pairs >= config.enrichment.item_min_pairs).all()
    row = items.sort_values(["n_pairs", "item_id"]).iloc[-1]
    log = _table(spark, config, "pair_embeddings_log").where(f"item_id = {row.item_id}").toPandas()
    log = log[(log.computed_at > row.window_start) & (log.computed_at <= row.computed_at)]
    latest = log.sort_values("computed_at").groupby("user_id").tail(1)  # one row per user of the item
    assert len(latest) == row.n_pairs
    np.testing.assert_allclose(decode([row.embedding], dim)[0], decode(latest.embedding.tolist(), dim).mean(axis=0),
                               rtol=1e-5, atol=1e-6)
    assert row.expires_at - row.computed_at == timedelta(hours=config.enrichment.item_ttl_hours)
    resolver = Resolver.from_snapshots(config.warehouse / "snapshots")
    never_seen_user = 10**12
    emb, tier, _ = resolver.resolve([never_seen_user], [row.item_id], row.computed_at.to_pydatetime())
    assert tier.tolist() == [TIER_ITEM]
    # bit-exact: the resolver copies the stored vector, no arithmetic
    np.testing.assert_array_equal(emb[0], decode([row.embedding], dim)[0])


def test_items_without_an_aggregate_are_imputed_from_the_fm_item_space_and_served_after_it(spark, replayed):
    """Tier 6 rows: exactly the recently engaged items lacking a servable aggregate at that run, each
    equal to the pure rule on the FM's item embeddings, and served to a new user only when tier 5 has nothing."""
    import torch

    from solaris.models.checkpoint import load_checkpoint

    config, summary = replayed
    dim = config.model.embedding_dim
    as_of = summary[-1].as_of
    imputed = _table(spark, config, "imputed_item_embeddings").toPandas()
    latest = imputed[imputed.computed_at == imputed.computed_at.max()]
    assert len(latest) and summary[-1].require(ITEM_AGGREGATES).imputed_items == len(latest)
    assert (latest.n_neighbors >= 1).all() and (latest.n_neighbors <= config.enrichment.item_neighbors).all()
    assert ((latest.similarity > 0) & (latest.similarity <= 1 + 1e-6)).all()
    assert (latest.expires_at - latest.computed_at == timedelta(hours=config.enrichment.item_ttl_hours)).all()
    at = f"TIMESTAMP '{as_of:%Y-%m-%d %H:%M:%S}'"
    aggregates = _table(spark, config, "item_embeddings").where(
        f"computed_at <= {at} AND expires_at > {at}").toPandas()
    assert not set(latest.item_id) & set(aggregates.item_id)  # only items lacking a servable aggregate
    start = as_of - timedelta(hours=config.enrichment.item_catalog_hours)
    engaged = set(_table(spark, config, "events").where(
        f"ts <= {at} AND ts > TIMESTAMP '{start:%Y-%m-%d %H:%M:%S}'").toPandas().item_id)
    assert set(latest.item_id) <= engaged - set(aggregates.item_id)
    # the rule, recomputed from the FM checkpoint and the aggregates, gives the stored rows
    fm, _ = load_checkpoint(config.resolve_under_warehouse(config.precompute.fm_checkpoint), "fm", dim)
    with torch.no_grad():
        def space(ids):
            return fm.item_emb(torch.as_tensor(np.asarray(ids, dtype=np.int64))).numpy()

        targets = np.array(sorted(engaged - set(aggregates.item_id)), dtype=np.int64)
        expected = impute_items(targets, space(targets), source_ids=aggregates.item_id.to_numpy(),
                                source_vectors=space(aggregates.item_id),
                                source_embeddings=decode(aggregates.embedding.tolist(), dim),
                                k=config.enrichment.item_neighbors,
                                min_similarity=config.enrichment.item_neighbor_min_similarity)
    stored = latest.set_index("item_id").loc[expected.item_ids]
    np.testing.assert_allclose(decode(stored.embedding.tolist(), dim), expected.embeddings, rtol=1e-5, atol=1e-6)
    # served to a never-seen user for such an item, after the item aggregate
    row = latest.sort_values("item_id").iloc[0]
    resolver = Resolver.from_snapshots(config.warehouse / "snapshots")
    emb, tier, _ = resolver.resolve([10**12], [row.item_id], as_of)
    assert tier.tolist() == [TIER_IMPUTED_ITEM]
    # bit-exact: the resolver copies the stored vector, no arithmetic
    np.testing.assert_array_equal(emb[0], decode([row.embedding], dim)[0])


def test_neighbors_and_imputation_provenance(spark, replayed):
    config, _ = replayed
    neighbors = _table(spark, config, "user_neighbors").toPandas()
    assert (neighbors.neighbor_ids.map(len) <= 5).all() and (neighbors.neighbor_ids.map(len) > 0).all()
    assert not any(user in list(ids) for user, ids in zip(neighbors.user_id, neighbors.neighbor_ids))
    assert all(np.all(np.diff(np.asarray(s)) <= 1e-6) for s in neighbors.similarities)
    imputed = _table(spark, config, "imputed_embeddings").toPandas()
    aggregated = set(_table(spark, config, "user_embeddings").where(
        f"expires_at > TIMESTAMP '{(T0 + timedelta(hours=1)):%Y-%m-%d %H:%M:%S}'").toPandas().user_id)
    latest = imputed[imputed.computed_at == imputed.computed_at.max()]
    assert not (set(latest.user_id) & aggregated)  # only users lacking a servable aggregate
    assert (latest.n_neighbors >= 1).all() and np.isfinite(decode(latest.embedding.tolist(), 16)).all()


def test_resolver_serves_the_published_snapshot_with_tiers(spark, replayed):
    config, _ = replayed
    snapshots = config.warehouse / "snapshots"
    resolver = Resolver.from_snapshots(snapshots)
    manifest = json.loads((snapshots / (snapshots / "LATEST").read_text().strip()).read_text())
    assert resolver.tables.snapshot_id == manifest["snapshot_id"] == "snapshot-20260108T010000Z"
    provenance = manifest["provenance"]  # the code, config, events and FM behind the snapshot
    assert provenance["events_digest"] and provenance["models"]["fm"] and provenance["config_digest"]
    pairs = _table(spark, config, "pair_embeddings").toPandas().head(5)
    now = T0 + timedelta(hours=1, minutes=30)
    emb, tier, age = resolver.resolve(pairs.user_id, pairs.item_id, now)
    assert (tier == TIER_PAIR).all() and np.isfinite(emb).all() and (age >= 0).all()
    users = _table(spark, config, "imputed_embeddings").toPandas().user_id.head(3)
    _, tier, _ = resolver.resolve(users, np.full(len(users), -1), now)
    assert set(tier.tolist()) <= {TIER_USER, TIER_IMPUTED}
    assert resolver.reload_if_newer(snapshots) is False


def test_neighbour_pair_tier_serves_the_neighbours_pairs_of_the_requested_item(spark, replayed):
    config, _ = replayed
    dim = config.model.embedding_dim
    resolver = Resolver.from_snapshots(config.warehouse / "snapshots")
    now = T0 + timedelta(hours=1, minutes=30)
    live = f"expires_at > TIMESTAMP '{now:%Y-%m-%d %H:%M:%S}'"
    pairs = _table(spark, config, "pair_embeddings").where(live).toPandas()
    neighbours = _table(spark, config, "user_neighbors").toPandas()
    own = set(zip(pairs.user_id, pairs.item_id))
    by_user = {user: group for user, group in pairs.groupby("user_id")}
    for user, ids, sims in zip(neighbours.user_id, neighbours.neighbor_ids, neighbours.similarities):
        borrowed = [(v, s, row) for v, s in zip(ids, sims) if s > 0 and v in by_user
                    for row in by_user[v].itertuples() if (user, row.item_id) not in own]
        if borrowed:
            item = borrowed[0][2].item_id
            break
    else:
        pytest.fail("no user whose neighbour has a pair the user lacks: the world is too small for this test")
    used = [(s, decode([row.embedding], dim)[0]) for v, s, row in borrowed if row.item_id == item]
    expected = sum(s * e for s, e in used) / sum(s for s, _ in used)
    emb, tier, age = resolver.resolve([user], [item], now)
    assert tier.tolist() == [TIER_NEIGHBOR_PAIR] and age[0] > 0
    np.testing.assert_allclose(emb[0], expected, rtol=1e-5, atol=1e-6)


def test_publish_checks_small_tier_tables_on_the_driver_as_spark_does(spark, replayed):
    """The gate's figures from deltalake + pyarrow equal those of publish's Spark action, and the
    bound sends larger tables to Spark."""
    from solaris.config import StorageConfig
    from solaris.stages.publish import EMBEDDING_TABLES, _pinned, _servable_stats, _servable_stats_on_driver
    from solaris.storage.table import Table

    config, _ = replayed
    as_of = T0 + timedelta(hours=2)
    pinned = {name: _pinned(spark, config.table_path(name)) for name in EMBEDDING_TABLES
              if Table.of(spark, config, name).exists()}
    neighbors = _pinned(spark, config.table_path("user_neighbors"))
    dim = config.model.embedding_dim
    on_driver = _servable_stats_on_driver(pinned, neighbors, as_of, dim, StorageConfig(driver_max_rows=10**6))
    known = spark.read.format("delta").option("versionAsOf", neighbors.version).load(neighbors.path).select("user_id")
    assert on_driver == _servable_stats(spark, pinned, known, as_of, dim)
    assert len(pinned) == 5 and on_driver.users_covered > 0 and on_driver.rows["pair_embeddings"] > 0
    assert on_driver.fm_versions
    assert _servable_stats_on_driver(pinned, neighbors, as_of, dim, StorageConfig(driver_max_rows=10)) is None
    assert _servable_stats_on_driver(pinned, neighbors, as_of, dim, StorageConfig(driver_max_rows=0)) is None


def test_publish_gate_refuses_nan_embeddings_and_keeps_latest(spark, replayed, monkeypatch):
    config, _ = replayed
    snapshots = config.warehouse / "snapshots"
    before = (snapshots / "LATEST").read_text()
    path = config.table_path("user_embeddings")
    bad = (
        spark.read.format("delta")
        .load(path)
        .limit(1)
        .selectExpr(
            "user_id + 999999 AS user_id",
            "unhex(repeat('0000C07F', 16)) AS embedding",
            "n_pairs",
            "window_start",
            "window_end",
            "computed_at",
            "TIMESTAMP '2030-01-01 00:00:00' AS expires_at",
            "fm_version",
            "'poison' AS run_id",
        )
    )
    poison_user = int(bad.first()["user_id"])
    bad.write.format("delta").mode("append").save(path)
    with_spark = config.model_copy(update={"storage": config.storage.model_copy(update={"driver_max_rows": 0})})
    spark_check = publish._servable_stats
    for checked_by in (config, with_spark):  # the gate on the driver (small tables), then with Spark
        with monkeypatch.context() as patched:
            if checked_by is config:
                patched.setattr(publish, "_servable_stats", lambda *args: pytest.fail("Spark checked small tables"))
            with pytest.raises(QualityGateError, match="user_embeddings: 1 rows with non-finite"):
                publish.run(StepContext(spark, checked_by, T0 + timedelta(hours=2), "enrichment-poison"),
                            options=publish.PublishOptions())
    assert publish._servable_stats is spark_check
    assert (snapshots / "LATEST").read_text() == before
    # readers of the current manifest are unaffected: it pins the versions before the poison
    resolver = Resolver.from_snapshots(snapshots)
    _, tier, _ = resolver.resolve([poison_user], [-1], T0 + timedelta(hours=1))
    assert tier.tolist() == [0]


def test_a_tick_represents_its_users_once_for_retrieval_and_knn(spark, replayed):
    """Inside a tick the FM user vectors are computed once, shared (not owned by the stage that asked)
    and dropped when the tick ends; outside a tick, and for a restricted set of users (the fast lane),
    each caller gets its own frame. The shared vectors equal the ones computed alone, and the score
    stage's pair features built from the tick's shared histories equal the ones it builds alone."""
    from solaris.models.checkpoint import resolve_checkpoint
    from solaris.pipeline import open_tick
    from solaris.precompute.spark_features import candidate_features, tick_histories, user_vectors
    from solaris.udfs.knn import user_representation_step

    config, _ = replayed
    fm = str(resolve_checkpoint(config.resolve_under_warehouse(config.precompute.fm_checkpoint)))
    as_of = T0 + timedelta(hours=1)
    step = user_representation_step(fm, config, as_of)
    pairs = _table(spark, config, "candidates").select("user_id", "item_id").distinct().limit(200)
    pairs = spark.createDataFrame(pairs.toPandas())  # a fixed set of pairs for both runs

    def features(frame):
        return sorted((tuple(row[:2]), tuple(tuple(value) if isinstance(value, list) else value for value in row[2:]))
                      for row in frame.collect())

    alone, alone_owned = user_vectors(spark, config, as_of, fm_dir=fm, represent=step)
    features_alone = features(candidate_features(spark, config, pairs, as_of))
    with open_tick(spark, config, as_of, batch_audit=False) as tick:
        assert tick_histories(spark, config, tick, create=False) is None  # only the representations build them
        first, first_owned = user_vectors(spark, config, as_of, fm_dir=fm, represent=step, tick=tick)
        second, second_owned = user_vectors(spark, config, as_of, fm_dir=fm, represent=step, tick=tick)
        lane, lane_owned = user_vectors(spark, config, as_of, fm_dir=fm, represent=step,
                                            users=first.select("user_id").limit(3), tick=tick)
        assert first is second and not first_owned and not second_owned
        assert lane_owned and lane is not first and lane.count() == 3
        shared = sorted((row.user_id, bytes(row.vector)) for row in first.collect())
        assert tick_histories(spark, config, tick, create=False) is not None
        features_shared = features(candidate_features(spark, config, pairs, as_of, tick))
        kept = list(tick.frames.values())
        assert len(kept) == 3 and all(frame.is_cached for frame in kept)  # events, histories, vectors
    assert alone_owned and shared == sorted((row.user_id, bytes(row.vector)) for row in alone.collect())
    assert len(shared) > 2 and not tick.frames and not any(frame.is_cached for frame in kept)  # released
    assert len(features_alone) == 200 and features_shared == features_alone
    assert sum(1 for _, values in features_alone if values[0]) > 100  # most pairs' users have a history
    alone.unpersist()
    lane.unpersist()


def test_knn_on_the_driver_writes_the_lists_of_the_distributed_search(spark, replayed, tmp_path):
    """Under enrichment.knn_driver_max_users the search runs on the driver: on the same vectors and
    stored index it writes the same neighbour lists, similarities and clusters as the Spark groups."""
    import shutil

    from solaris.stages import knn

    config, _ = replayed
    warehouse = tmp_path / "warehouse"
    shutil.copytree(config.warehouse, warehouse)
    as_of = T0 + timedelta(hours=2)

    def search(max_users: int):
        settings = config.model_copy(update={
            "warehouse": warehouse,
            "enrichment": config.enrichment.model_copy(update={"knn_driver_max_users": max_users})})
        result = knn.run(StepContext(spark, settings, as_of, f"knn-{max_users}"), options=knn.KnnOptions())
        rows = sorted((row.user_id, list(row.neighbor_ids), list(row.similarities), row.cluster_id)
                      for row in _table(spark, settings, "user_neighbors").collect())
        return result, rows

    distributed, spark_lists = search(0)
    local, driver_lists = search(10_000)
    assert (distributed.search_on, local.search_on) == ("spark", "driver")
    assert local.index_reused and (local.clusters, local.nprobe) == (distributed.clusters, distributed.nprobe)
    assert len(driver_lists) == distributed.users > 2 and any(len(row[1]) == 5 for row in driver_lists)
    # bit-exact (similarities too): the driver repeats the Spark groups' per-cluster FAISS searches on the
    # same members and queries in user-id order (knn.ivf_neighbours), in this process on this machine
    assert driver_lists == spark_lists
    # the recall's exact reference is computed per partition in Spark and over everyone on the driver:
    # the same neighbours up to float near-ties at the k-th place
    assert local.recall == pytest.approx(distributed.recall, abs=0.01)
