import threading
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from solaris.serving.resolver import (
    TIER_IMPUTED,
    TIER_IMPUTED_ITEM,
    TIER_ITEM,
    TIER_NEIGHBOR_PAIR,
    TIER_NONE,
    TIER_PAIR,
    TIER_USER,
    IdRows,
    KeyIndex,
    Neighbors,
    Resolver,
    Tier,
    TierTables,
    coverage,
)

NOW = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
H = 3600.0


def _tables(dim=2, pair_expiry=NOW + timedelta(hours=1)):
    t = NOW.timestamp()
    pairs = Tier.build([np.array([1, 1]), np.array([10, 11])], [[1, 1], [2, 2]], [t - H, t - 2 * H],
                       [pair_expiry.timestamp(), t - 1])  # (1, 11) already expired
    users = Tier.build([np.array([1, 2])], [[3, 3], [4, 4]], [t - 5 * H] * 2, [t + H, t + H])
    imputed = Tier.build([np.array([2, 3])], [[5, 5], [6, 6]], [t - 7 * H] * 2, [t + H, t + H])
    return TierTables(dim, pairs, users, imputed, "snap-1")


def test_tier_order_and_expiry_at_read_time():
    emb, tier, age = _tables().resolve([1, 1, 2, 3, 4], [10, 11, 10, 10, 10], NOW)
    assert tier.tolist() == [TIER_PAIR, TIER_USER, TIER_USER, TIER_IMPUTED, TIER_NONE]
    # bit-exact: the resolver copies stored vectors, no arithmetic
    np.testing.assert_array_equal(emb, [[1, 1], [3, 3], [4, 4], [6, 6], [0, 0]])
    np.testing.assert_allclose(age[:4], [H, 5 * H, 5 * H, 7 * H])
    assert np.isnan(age[4]) and emb.dtype == np.float32 and tier.dtype == np.int8


def test_value_at_exact_expiry_is_not_served():
    tables = _tables(pair_expiry=NOW)
    _, tier, _ = tables.resolve([1], [10], NOW)
    assert tier.tolist() == [TIER_USER]
    _, tier, _ = tables.resolve([1], [10], NOW - timedelta(microseconds=1))
    assert tier.tolist() == [TIER_PAIR]


def test_item_tier_serves_a_brand_new_user_last():
    t = NOW.timestamp()
    tables = _tables()
    items = Tier.build([np.array([10, 12])], [[7, 7], [8, 8]], [t - 2 * H] * 2, [t + H, t - 1])  # item 12 expired
    tables = TierTables(tables.dim, tables.pairs, tables.users, tables.imputed, "snap-1", items)
    emb, tier, age = tables.resolve([99, 99, 99, 1], [10, 12, 13, 10], NOW)
    assert tier.tolist() == [TIER_ITEM, TIER_NONE, TIER_NONE, TIER_PAIR]  # a user with a pair keeps tier 1
    # bit-exact: the resolver copies stored vectors, no arithmetic
    np.testing.assert_array_equal(emb[:3], [[7, 7], [0, 0], [0, 0]])
    assert age[0] == 2 * H
    shares = coverage(tier)
    assert shares["tier5"] == 0.25 and shares["cumulative_tier5"] == 0.5 and shares["cumulative_tier4"] == 0.25


def _graph(users, neighbours, similarities, **rule):
    lengths = [len(n) for n in neighbours]
    offsets = np.r_[0, np.cumsum(lengths)]
    return Neighbors.build(users, offsets, np.concatenate(neighbours), np.concatenate(similarities), **rule)


def test_neighbour_pair_is_the_similarity_weighted_mean_of_the_neighbours_pairs_of_that_item():
    t = NOW.timestamp()
    # pairs of users 1 and 2 for item 10 (and user 2 for item 11, expired); user 7 has neither
    pairs = Tier.build([np.array([1, 2, 2]), np.array([10, 10, 11])], [[1, 0], [0, 1], [5, 5]],
                       [t - 3 * H, t - H, t - H], [t + H, t + H, t - 1])
    graph = _graph([7, 8], [np.array([1, 2, 3]), np.array([3])], [np.array([0.9, 0.3, 0.8]), np.array([0.5])])
    empty = Tier.empty(2, False)
    tables = TierTables(2, pairs, empty, empty, "snap", None, graph)
    emb, tier, age = tables.resolve([7, 7, 8, 1], [10, 11, 10, 10], NOW)
    assert tier.tolist() == [TIER_NEIGHBOR_PAIR, TIER_NONE, TIER_NONE, TIER_PAIR]  # (2, 11) expired; 3 has no pair
    np.testing.assert_allclose(emb[0], [0.9 / 1.2, 0.3 / 1.2], rtol=1e-6)
    assert age[0] == H  # the newest pair used
    strict = TierTables(2, pairs, empty, empty, "snap", None,
                        _graph([7], [np.array([1, 2])], [np.array([0.9, 0.3])], min_neighbors=2, min_similarity=0.5))
    assert strict.resolve([7], [10], NOW)[1].tolist() == [TIER_NONE]  # only one neighbour clears 0.5
    with pytest.raises(ValueError, match="one neighbour row per user"):
        _graph([7, 7], [np.array([1]), np.array([2])], [np.array([0.5]), np.array([0.5])])


def test_random_schedules_never_return_expired_values():
    """Every tier, the item tiers included: nothing at or after its expiry or computed after the request, and
    the best servable tier wins."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = 40
        t0 = NOW.timestamp()
        expiries = t0 + rng.uniform(-3, 3, size=(5, n)) * H
        keys = np.arange(n)
        items = rng.permutation(n)  # the item tier is keyed by item, not by the request's user
        # user u's only neighbour is u + n, whose pair (u + n, item of u) has its own expiry
        neighbour_expiry = t0 + rng.uniform(-3, 3, size=n) * H
        pair_users, pair_items = np.r_[keys, keys + n], np.r_[items, items]
        tables = TierTables(
            1,
            Tier.build([pair_users, pair_items], np.r_[np.zeros(n), np.full(n, 7.0)][:, None],
                       np.full(2 * n, t0 - H), np.r_[expiries[0], neighbour_expiry]),
            Tier.build([keys], np.ones((n, 1)), np.full(n, t0 - H), expiries[1]),
            Tier.build([keys], np.full((n, 1), 2.0), np.full(n, t0 - H), expiries[2]),
            "snap",
            Tier.build([items], np.full((n, 1), 3.0), np.full(n, t0 - H), expiries[3]),
            _graph(keys, [np.array([u + n]) for u in keys], [np.array([0.5])] * n),
            Tier.build([items], np.full((n, 1), 4.0), np.full(n, t0 - H), expiries[4]),
        )
        now = NOW + timedelta(hours=float(rng.uniform(-2, 2)))
        vectors, tier, _ = tables.resolve(keys, items, now)
        # servable: computed (an hour before t0) at or before now, and not expired (now may precede t0 - H)
        live = (t0 - H <= now.timestamp()) & (now.timestamp() < np.vstack([expiries[0], neighbour_expiry,
                                                                           expiries[1:]]))
        for code, value in ((TIER_PAIR, 0), (TIER_NEIGHBOR_PAIR, 7), (TIER_USER, 1), (TIER_IMPUTED, 2),
                            (TIER_ITEM, 3), (TIER_IMPUTED_ITEM, 4)):
            served = tier == code
            assert live[code - 1][served].all()  # nothing at or after its expiry, in any tier
            assert (vectors[served, 0] == value).all()
        # and the best servable tier always wins
        best = np.select(list(live), [1, 2, 3, 4, 5, 6], 0)
        np.testing.assert_array_equal(tier, best)  # bit-exact: integer tiers


def test_empty_tiers_and_mismatched_inputs():
    empty = TierTables(4, Tier.empty(4, True), Tier.empty(4, False), Tier.empty(4, False))
    emb, tier, _ = empty.resolve([1, 2], [3, 4], NOW)
    assert emb.shape == (2, 4) and (tier == TIER_NONE).all()
    with pytest.raises(ValueError):
        empty.resolve([1], [1, 2], NOW)
    with pytest.raises(ValueError, match="unique"):
        Tier.build([np.array([1, 1])], np.zeros((2, 1)), [0, 0], [1, 1])


def test_hot_swap_does_not_block_readers_and_keeps_dim():
    resolver = Resolver(_tables())
    results = []

    def reader():
        for _ in range(200):
            results.append(resolver.resolve([1], [10], NOW)[1][0])

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for thread in threads:
        thread.start()
    newer = _tables()
    newer = TierTables(2, Tier.empty(2, True), newer.users, newer.imputed, "snap-2")
    previous = resolver.swap(newer)
    for thread in threads:
        thread.join()
    assert previous.snapshot_id == "snap-1" and resolver.tables.snapshot_id == "snap-2"
    assert set(results) <= {TIER_PAIR, TIER_USER}
    assert resolver.resolve([1], [10], NOW)[1][0] == TIER_USER
    with pytest.raises(ValueError, match="dim"):
        resolver.swap(TierTables(3, Tier.empty(3, True), Tier.empty(3, False), Tier.empty(3, False)))


def test_coverage_shares():
    shares = coverage(np.array([1, 1, 2, 3, 0]))
    assert shares["tier1"] == 0.4 and shares["cumulative_tier2"] == 0.6
    assert shares["cumulative_tier3"] == 0.8 and shares["none"] == 0.2


def test_per_request_times():
    tables = _tables()
    later = NOW + timedelta(hours=2)  # pair (1, 10) expired by then, user aggregate too
    _, tier, age = tables.resolve([1, 1], [10, 10], np.array([NOW.timestamp(), later.timestamp()]))
    assert tier.tolist() == [TIER_PAIR, TIER_NONE]
    assert age[0] == H


def test_lookup_matches_a_dictionary_on_random_60_bit_ids():
    rng = np.random.default_rng(7)
    users = rng.integers(0, 2**60, 3000)
    items = rng.integers(0, 2**60, 3000)
    t = NOW.timestamp()
    embeddings = rng.standard_normal((3000, 2)).astype(np.float32)
    tables = TierTables(2, Tier.build([users, items], embeddings, np.full(3000, t), np.full(3000, t + H)),
                        Tier.empty(2, False), Tier.empty(2, False))
    truth = {(u, i): row for row, (u, i) in enumerate(zip(users, items))}
    query_users = np.concatenate([users[:500], rng.integers(0, 2**60, 500)])
    query_items = np.concatenate([items[:500], items[500:1000]])  # known items, mostly unknown pairs
    emb, tier, _ = tables.resolve(query_users, query_items, NOW)
    for k, (u, i) in enumerate(zip(query_users, query_items)):
        row = truth.get((u, i))
        if row is None:
            assert tier[k] == TIER_NONE and not emb[k].any()
        else:
            # bit-exact: the resolver copies stored vectors, no arithmetic
            assert tier[k] == TIER_PAIR and np.array_equal(emb[k], embeddings[row])


def test_key_index_finds_every_key_even_in_crowded_buckets():
    """The radix directory walks a whole bucket: keys sharing their top bits (one crowded bucket)
    are all found, and absent keys between, before and after them are not."""
    rng = np.random.default_rng(3)
    spread = np.sort(np.unique(rng.integers(0, 2**63, 2000, dtype=np.int64).astype(np.uint64) * np.uint64(2)))
    crowded = np.uint64(2**62) + np.arange(0, 40, 2, dtype=np.uint64)  # 20 keys in one bucket
    keys = np.unique(np.concatenate([spread, crowded]))
    index = KeyIndex.build(keys)
    np.testing.assert_array_equal(index.find(keys), np.arange(keys.size))  # bit-exact: integer rows
    absent = np.concatenate([crowded + np.uint64(1), spread + np.uint64(1), [np.uint64(0), np.uint64(2**64 - 1)]])
    assert (index.find(absent) == -1).all()


def test_user_keyed_tiers_match_a_dictionary_on_random_60_bit_ids():
    rng = np.random.default_rng(11)
    t = NOW.timestamp()
    aggregate_users, imputed_users = rng.integers(0, 2**60, 1000), rng.integers(0, 2**60, 1000)
    tables = TierTables(1, Tier.empty(1, True),
                        Tier.build([aggregate_users], np.ones((1000, 1)), np.full(1000, t), np.full(1000, t + H)),
                        Tier.build([imputed_users], np.full((1000, 1), 2.0), np.full(1000, t), np.full(1000, t + H)))
    queries = np.concatenate([aggregate_users[:300], imputed_users[:300], rng.integers(0, 2**60, 300)])
    _, tier, _ = tables.resolve(queries, np.zeros(queries.size, np.int64), NOW)
    expected = np.where(np.isin(queries, aggregate_users), TIER_USER,
                        np.where(np.isin(queries, imputed_users), TIER_IMPUTED, TIER_NONE))
    np.testing.assert_array_equal(tier, expected)  # bit-exact: integer tiers


def test_key_index_falls_back_to_binary_search_when_one_bucket_holds_everything():
    keys = np.uint64(2**62) + np.arange(0, 400, 2, dtype=np.uint64)  # 200 keys, one bucket
    index = KeyIndex.build(keys)
    assert index.width > 64
    np.testing.assert_array_equal(index.find(keys), np.arange(keys.size))  # bit-exact: integer rows
    assert (index.find(keys + np.uint64(1)) == -1).all()


def test_id_directory_is_the_same_dense_or_hashed():
    """Compact ids get a directory indexed by id, others the radix index: both give every id its
    rows and -1 for ids that are absent, negative or beyond the largest."""
    rng = np.random.default_rng(5)
    ids = np.unique(rng.integers(0, 5000, 800))
    rows = np.stack([np.arange(ids.size), np.where(np.arange(ids.size) % 3 == 0, -1, np.arange(ids.size) * 7)], axis=1)
    dense = IdRows.build(ids, rows)
    hashed = IdRows.build(np.append(ids, 2**60), np.vstack([rows, [[5, 5]]]))
    assert dense.index is None and hashed.index is not None
    queries = np.concatenate([ids, [-1, -2**62, 5000, 10**9, 2**62], np.setdiff1d(np.arange(5000), ids)[:100]])
    expected = np.full((queries.size, 2), -1)
    expected[: ids.size] = rows
    np.testing.assert_array_equal(dense.find(queries), expected)  # bit-exact: integer rows
    np.testing.assert_array_equal(hashed.find(queries), expected)  # bit-exact: integer rows
    assert (IdRows.build(np.empty(0, np.int64), np.empty((0, 2), np.int64)).find(queries) == -1).all()


def test_exact_pair_keys_never_match_ids_outside_32_bits():
    """A pair tier of 32-bit ids keys a pair exactly, without re-checking ids: a query whose ids do not
    fit in 32 bits (which would share the low bits of a stored pair) must miss, not alias."""
    t = NOW.timestamp()
    pairs = Tier.build([np.array([1, 2]), np.array([10, 20])], [[1.0], [2.0]], [t, t], [t + H, t + H])
    assert pairs.exact
    users = np.array([1, 2, 1 + 2**32, 2 - 2**32, -1, 1])
    items = np.array([10, 20, 10, 20, 10, 10 + 2**32])
    found = pairs.find(users, items)
    assert (found[:2] >= 0).all() and (found[2:] == -1).all()  # without the 32-bit check, rows 2, 3, 5 alias
    assert pairs.users[found[:2]].tolist() == [1, 2] and pairs.items[found[:2]].tolist() == [10, 20]
    assert not Tier.build([np.array([2**40]), np.array([1])], [[1.0]], [t], [t + H]).exact


@pytest.mark.parametrize("size", [1, 2, 3, 17, 100])
def test_key_index_of_few_keys_finds_them_and_nothing_else(size):
    """Small indexes (a bitmap of a few bits, one-key buckets) still find every key and no other."""
    rng = np.random.default_rng(size)
    keys = np.unique(rng.integers(0, 2**63, size, dtype=np.int64).astype(np.uint64) * np.uint64(2))
    index = KeyIndex.build(keys)
    np.testing.assert_array_equal(index.find(keys), np.arange(keys.size))  # bit-exact: integer rows
    assert (index.find(np.concatenate([keys + np.uint64(1), [np.uint64(0), np.uint64(2**64 - 1)]])) == -1).all()
