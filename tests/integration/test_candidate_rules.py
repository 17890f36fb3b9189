"""sql/candidates.sql on tiny hand-made events: each rule, the anti-join, caps and budget."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest

from solaris.stages.candidates import build_candidates
from solaris.tick import StepContext

AS_OF = datetime(2026, 1, 10, 12, 0, tzinfo=timezone.utc)


def _events(spark, config, rows):
    frame = spark.createDataFrame(
        [(i, u, it, (AS_OF - timedelta(hours=h)).replace(tzinfo=None), 1.0, 5.0) for i, (u, it, h) in enumerate(rows)],
        "event_id long, user_id long, item_id long, ts timestamp, label double, rating double",
    )
    frame.write.format("delta").mode("overwrite").save(config.table_path("events"))


def _rules_config(config, **overrides):
    from solaris.config import load_config
    from tests.conftest import TEST_OVERRIDES

    # the three rule sources with hand weights unless a test says otherwise (the rules under test here)
    # and item statistics as of the run (each test's events sit hours before it, after midnight)
    rules = {"sources": "[cooc, trending, recent]", "blend": "hand", "item_stats_hours": 1, **overrides}
    settings = [f"precompute.candidates.{k}={v}" for k, v in rules.items()]
    return load_config(overrides=[*TEST_OVERRIDES, f"warehouse={config.warehouse}", *settings])


def _pairs(spark, config, as_of=AS_OF, **overrides):
    frame, prepared = build_candidates(spark, _rules_config(config, **overrides), as_of, "run-x")
    try:
        rows = frame.collect()
    finally:
        prepared.release()  # the views stay registered (some tests read them), uncached
    return {(r["user_id"], r["item_id"]): r for r in rows}


@pytest.fixture
def world(spark, make_config):
    config = make_config()
    _events(spark, config, [
        # user 1 and 2 both engaged items 10 and 11 -> 10 and 11 co-occur
        (1, 10, 5), (1, 11, 4), (2, 10, 30), (2, 11, 29), (2, 12, 28),
        # user 3: active recently, engaged only item 10 -> cooc suggests 11 and 12
        (3, 10, 1),
        # user 4: last active 300 h ago -> outside the 168 h lookback, gets nothing
        (4, 10, 300),
        # item 13 is trending (many recent events by others)
        (5, 13, 2), (6, 13, 3), (7, 13, 4), (8, 13, 5),
        # an event after as-of must be invisible (negative hours = future)
        (3, 99, -1),
    ])
    return config


def test_rules_sources_and_point_in_time(spark, world):
    pairs = _pairs(spark, world)
    users = {u for u, _ in pairs}
    assert 4 not in users  # inactive user
    assert all(item != 99 for _, item in pairs)  # future event never used
    assert "cooc" in pairs[(3, 11)]["source"]
    assert "cooc" in pairs[(3, 12)]["source"]
    assert "trending" in pairs[(3, 13)]["source"]
    assert pairs[(3, 10)]["source"] == "recent"  # own recent item, re-exposure rule only
    # cooc/trending never propose what the user already engaged
    assert "trending" not in pairs[(5, 13)]["source"]
    assert all(r["spec_score"] > 0 for r in pairs.values())


def test_per_user_cap_and_global_budget(spark, world):
    capped = _pairs(spark, world, per_user=1)
    per_user = {}
    for user, _ in capped:
        per_user[user] = per_user.get(user, 0) + 1
    assert max(per_user.values()) == 1
    budget = _pairs(spark, world, budget=3)
    assert len(budget) == 3
    everything = _pairs(spark, world)
    top3 = sorted(everything.values(), key=lambda r: (-r["spec_score"], r["user_id"], r["item_id"]))[:3]
    assert set(budget) == {(r["user_id"], r["item_id"]) for r in top3}


def test_session_continuation_and_the_source_list_of_each_pair(spark, make_config):
    """item_next counts, per item pair, each time b is among the next_window events the same user engaged
    after a (by time, then item id; never an item after itself); a pair's `source` lists every rule that
    proposed it, once each, in alphabetical order."""
    config = make_config()
    # user 1 engages item 10 twice, and 11 and 12 at one timestamp (ordered by item id)
    rows = [(1, 10, 9), (1, 11, 8), (1, 12, 8), (1, 10, 7), (1, 13, 6),
            (2, 11, 5), (2, 13, 4), (2, 12, 3), (3, 10, 2), (3, 14, 1)]
    _events(spark, config, rows)
    window = 2
    pairs = _pairs(spark, config, sources="[cooc, trending, recent, next, popular]", next_window=window)
    expected: Counter = Counter()
    for user in {u for u, _, _ in rows}:
        sequence = [item for _, item in sorted((-hours, item) for u, item, hours in rows if u == user)]
        for position, first in enumerate(sequence):
            expected.update((first, later) for later in sequence[position + 1:position + 1 + window] if later != first)
    assert {(r["item_a"], r["item_b"]): r["n"] for r in spark.table("item_next").collect()} == dict(expected)
    proposed: dict = {}
    for row in spark.table("source_parts").collect():
        proposed.setdefault((row["user_id"], row["item_id"]), set()).add(row["source"])
    assert {key: ",".join(sorted(proposed[key])) for key in pairs} == {key: r["source"] for key, r in pairs.items()}
    assert any("," in r["source"] for r in pairs.values())  # some pair has several rules


def test_a_run_caches_the_shared_per_user_views_once_and_releases_them_after_its_write(spark, world):
    """Asked of Spark's cache of query plans (``catalog.isCached``), not of the count of persisted RDDs:
    Delta persists the state of each table snapshot it reads or writes, so that count moves with
    every commit."""
    from solaris.config import load_config
    from solaris.stages import candidates
    from tests.conftest import TEST_OVERRIDES

    def cached() -> list[bool]:
        return [spark.catalog.isCached(name) for name in candidates.RUN_SHARED_VIEWS]

    # views only: their readers (train_speculator, the bench) need them cached until they release them
    pairs, prepared = candidates.build_candidates(spark, _rules_config(world), AS_OF, "run-x")
    assert len(prepared.cached) == 1 + len(candidates.RUN_SHARED_VIEWS) and all(cached())  # + retrieval parts
    assert all(view.is_cached for view in prepared.cached[1:])
    assert pairs.count() > 0
    prepared.release()
    assert prepared.cached == [] and not any(cached())
    config = load_config(overrides=[*TEST_OVERRIDES, f"warehouse={world.warehouse}"])
    assert candidates.run(StepContext(spark, config, AS_OF, "run-release"),
                          options=candidates.CandidatesOptions()).pairs > 0
    assert not any(cached())  # the run released what it cached


def test_a_view_kept_from_the_run_before_reads_this_run_s_events(spark, world, monkeypatch):
    """prepare_views registers a view again only when its SQL text changed since the last run (the
    windows read the as-of from the events, so most views do not change from one hour to the next);
    a kept view resolves the new run's events when queried: the run gives what a run with every
    view registered afresh gives, and not what the run before gave."""
    from pyspark.sql import SparkSession

    from solaris.precompute.speculation import candidate_params
    from solaris.stages import candidates
    from solaris.storage.sql import render, statements

    earlier_as_of = AS_OF - timedelta(hours=3)
    earlier = _pairs(spark, world, as_of=earlier_as_of)
    created: list[str] = []
    real_sql = SparkSession.sql

    def counting_sql(self, query, *args, **kwargs):
        if query.lstrip().upper().startswith("CREATE"):
            created.append(query)
        return real_sql(self, query, *args, **kwargs)

    monkeypatch.setattr(SparkSession, "sql", counting_sql)
    kept = _pairs(spark, world)
    monkeypatch.undo()
    # only the views whose text changed with the hour were registered again (here: the item
    # statistics' windows, as of each run under item_stats_hours 1)
    rules = _rules_config(world).precompute.candidates
    before, now = (statements(render("candidates", **candidate_params(rules, at)))[:-1]
                   for at in (earlier_as_of, AS_OF))
    changed = [candidates._view_name(statement) for statement in now if statement not in before]
    assert 0 < len(changed) < len(now)
    assert [candidates._view_name(statement) for statement in created] == changed
    # a view of one of those names with another text (whoever registered it) is replaced, not trusted
    spark.sql("CREATE OR REPLACE TEMP VIEW trending AS SELECT 13L AS item_id, 0.5D AS score")
    assert _pairs(spark, world) == kept
    for statement in now:
        spark.catalog.dropTempView(candidates._view_name(statement))
    assert kept == _pairs(spark, world) and kept != earlier


def test_no_active_users_gives_no_candidates(spark, world):
    assert _pairs(spark, world, lookback_hours=0.5) == {}


def test_a_window_that_ends_at_the_as_of_excludes_its_start(spark, world):
    """User 3's event sits exactly 1 h before the as-of: outside a 1 h lookback (the window is
    (as_of - 1 h, as_of]), inside one a microsecond longer."""
    assert _pairs(spark, world, lookback_hours=1) == {}
    assert {user for user, _ in _pairs(spark, world, lookback_hours=1 + 1 / 3.6e9)} == {3}


def test_an_event_after_as_of_changes_neither_candidates_nor_learned_models(spark, make_config):
    """Point-in-time and determinism: candidates (all sources), the blend and the request verifier
    learned at AS_OF are the same with or without events after AS_OF, and the same on a rerun."""
    from solaris.stages.train_speculator import fit

    every_source = {"sources": "[cooc, trending, recent, next, popular, retrieval]", "blend": "learned"}
    # 3 training ticks (default 8): the question is whether later events leak in, not the fit's quality
    config = make_config(*(f"precompute.candidates.{key}={value}" for key, value in every_source.items()),
                         "precompute.speculator.ticks=3")
    past = [(u, 10 + (u + k) % 7, 30 - k - u % 5) for u in range(1, 12) for k in range(8)]
    _events(spark, config, past)
    before = _pairs(spark, config, **every_source)
    model = fit(spark, config, AS_OF)
    _events(spark, config, [*past, (3, 99, -1), (4, 12, -2), (20, 11, -0.5)])
    assert _pairs(spark, config, **every_source) == before and _pairs(spark, config, **every_source) == before
    assert fit(spark, config, AS_OF) == model


def test_daily_item_statistics_are_as_of_midnight_and_shared_by_the_day_s_runs(spark, make_config):
    """precompute.candidates.item_stats_hours=24: co-occurrence counts events up to midnight only; the
    day's runs in one session reuse one computation, and reusing it equals computing it afresh."""
    from solaris.stages import candidates

    config = make_config()
    _events(spark, config, [
        (2, 10, 30), (2, 11, 29),  # yesterday: 10 and 11 co-occur
        (9, 20, 3), (9, 21, 2),  # today (09:00, 10:00): 20 and 21 co-occur, after midnight
        (3, 10, 1), (10, 20, 1),  # the users asking at 12:00
    ])
    sources = {"sources": "[cooc]"}
    hourly = _pairs(spark, config, **sources)
    assert (3, 11) in hourly and (10, 21) in hourly
    candidates._ITEM_STATS.clear()
    daily = {**sources, "item_stats_hours": 24}
    earlier = _pairs(spark, config, as_of=AS_OF - timedelta(hours=1), **daily)
    (period, shared), = candidates._ITEM_STATS.items()
    (key, frame), = shared.items()
    assert AS_OF.replace(hour=0) in period and key.startswith("item_cooc-20260110T000000Z-")
    at_noon = _pairs(spark, config, **daily)
    assert candidates._ITEM_STATS[period][key] is frame  # reused, not recomputed
    assert (3, 11) in at_noon and (10, 21) not in at_noon  # today's co-occurrence waits for tomorrow
    assert (3, 11) in earlier
    candidates._ITEM_STATS.clear()
    assert _pairs(spark, config, **daily) == at_noon


def test_a_period_s_item_statistics_are_stored_once_and_read_by_runs_in_other_sessions(spark, make_config):
    """The first run of a period stores its statistics in `item_statistics`; a run of the same period in
    another process (here: the session cache emptied) reads them instead of recomputing, a changed
    setting gets its own rows, and periods older than item_stats_keep_days go at the next store."""
    from delta.tables import DeltaTable

    from solaris.stages import candidates
    from solaris.storage.table import Table

    config = make_config()
    _events(spark, config, [(2, 10, 30), (2, 11, 29), (3, 10, 1), (5, 12, 2), (5, 13, 1)])
    daily = {"sources": "[cooc, next]", "item_stats_hours": 24}
    path = config.table_path("item_statistics")
    candidates._ITEM_STATS.clear()
    first = _pairs(spark, config, **daily)
    keys = Table.at(path).log.partitions("stats_key")
    assert {key.split("-")[0] for key in keys} == {"item_cooc", "item_next"} and Table.at(path).version() == 0
    assert (3, 11) in first and "cooc" in first[(3, 11)]["source"]

    candidates._ITEM_STATS.clear()  # another process, the same period: reads them, stores nothing
    assert _pairs(spark, config, **daily) == first
    assert Table.at(path).version() == 0

    # what it reads is the stored rows: a stored co-occurrence (10 -> 77) reaches user 3's candidates
    cooc_key = next(key for key in keys if key.startswith("item_cooc"))
    DeltaTable.forPath(spark, path).update(f"stats_key = '{cooc_key}' AND item_b = 11", {"item_b": "77"})
    candidates._ITEM_STATS.clear()
    assert (3, 77) in _pairs(spark, config, **daily)

    candidates._ITEM_STATS.clear()  # other settings, other statistics: computed and stored beside
    assert (3, 77) not in _pairs(spark, config, **daily, cooc_neighbors=5)
    assert len(Table.at(path).log.partitions("stats_key")) == 3

    candidates._ITEM_STATS.clear()  # eight days later: this period stored, the ones > 7 days older dropped
    _pairs(spark, config, as_of=AS_OF + timedelta(days=8), **daily)
    later = Table.at(path).log.partitions("stats_key")
    assert len(later) == 2 and all("-20260118T000000Z-" in key for key in later)
