import re
from datetime import datetime, timedelta, timezone

import pytest

from solaris.ingest.events import (
    INT_ID_PATTERN,
    PANDAS_MAX_TIME,
    REASONS,
    IdCounts,
    TimeBounds,
    choose_id_mode,
    epoch_seconds_sql,
    event_id_sql,
    id_counts_sql,
    parsed_id_sql,
    parsed_ts_sql,
    rejection_reason_sql,
    stable_id,
    stable_id_sql,
    time_bounds,
)

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)
FLOOR = datetime(1990, 1, 1, tzinfo=timezone.utc)
BOUNDS = TimeBounds(FLOOR, NOW + timedelta(hours=24))


def test_stable_id_is_deterministic_non_negative_and_namespaced():
    assert stable_id("user", "1m_123") == stable_id("user", "1m_123")
    assert stable_id("user", "1m_123") != stable_id("item", "1m_123")
    assert 0 <= stable_id("item", "Toy Story (1995)") < 2**60
    assert stable_id("user", "a") != stable_id("user", "b")


def test_stable_id_sql_rejects_injection_in_namespace():
    import pytest

    with pytest.raises(ValueError):
        stable_id_sql("user'; drop", "raw")
    assert "sha2" in event_id_sql()


def test_reason_order_and_optional_rules():
    as_of = datetime(2026, 1, 1, 5, tzinfo=timezone.utc)
    sql = rejection_reason_sql((True, False), (1.0, 5.0), TimeBounds(FLOOR, NOW, as_of), has_label=False)
    positions = [sql.index(f"'{reason}'") for reason in REASONS if f"'{reason}'" in sql]
    assert positions == sorted(positions)
    # hashed ids are never negative nor non-integer: only the integer column has those rules
    assert "negative user_id" in sql and "non-integer user_id" in sql
    assert "negative item_id" not in sql and "non-integer item_id" not in sql
    assert "TIMESTAMP '2026-01-01 05:00:00.000000'" in sql
    assert "invalid label" not in sql
    no_as_of = rejection_reason_sql((True, True), (1.0, 5.0), BOUNDS, has_label=True)
    assert "timestamp after as-of" not in no_as_of and "invalid label" in no_as_of
    # time sanity holds with or without an as-of
    assert "timestamp in the future" in no_as_of and "timestamp before floor" in no_as_of


def test_as_of_literal_is_converted_to_utc():
    paris = timezone(timedelta(hours=1))
    bounds = TimeBounds(FLOOR, NOW, datetime(2026, 1, 1, 6, tzinfo=paris))
    sql = rejection_reason_sql((True, True), (1.0, 5.0), bounds, has_label=False)
    assert "TIMESTAMP '2026-01-01 05:00:00.000000'" in sql


@pytest.mark.parametrize("value", ["0", "7", "42", "007", "9" * 18])
def test_integer_ids_match_the_pattern(value):
    assert re.fullmatch(INT_ID_PATTERN, value)


@pytest.mark.parametrize("value", ["-5", "abc", "1.5", "+7", "7.0", "1e3", "9" * 19, "", "u1x"])
def test_other_ids_do_not_match_the_pattern(value):
    """18 digits at most: every match fits a bigint (max 9223372036854775807, 19 digits)."""
    assert not re.fullmatch(INT_ID_PATTERN, value)


def test_integer_id_sql_only_casts_pattern_matches():
    sql = parsed_id_sql("raw_user", "user", id_is_int=True)
    assert INT_ID_PATTERN in sql and "CAST(trim(raw_user) AS BIGINT)" in sql and "try_cast" not in sql
    assert "sha2" in parsed_id_sql("raw_user", "user", id_is_int=False)
    values, integers = id_counts_sql("raw_item")
    assert values.startswith("count(") and INT_ID_PATTERN in integers


@pytest.mark.parametrize(
    "counts,hashed",
    [
        (IdCounts(100_004, 100_002), False),  # a handful of bad ids: keep the user's integers
        (IdCounts(10, 5), False),  # exactly the threshold: "most values" is inclusive
        (IdCounts(10, 4), True),  # mostly strings: hash every id
        (IdCounts(3, 0), True),
        (IdCounts(0, 0), False),  # no value at all: nothing to hash
    ],
)
def test_auto_id_mode_is_decided_from_counts(counts, hashed):
    mode = choose_id_mode("user_id", "auto", counts, 0.5)
    assert mode.hashed is hashed and mode.is_int is not hashed
    assert mode.audit() == {"mode": "hashed" if hashed else "int", "requested": "auto",
                            "values": counts.values, "integer_values": counts.integers}


def test_explicit_id_modes_ignore_counts_and_bad_modes_are_refused():
    assert choose_id_mode("item_id", "int", IdCounts(5, 0), 0.5).is_int
    assert choose_id_mode("item_id", "string", IdCounts(5, 5), 0.5).hashed
    assert choose_id_mode("item_id", "string", None, 0.5).audit() == {"mode": "hashed", "requested": "string"}
    with pytest.raises(ValueError, match="counts"):
        choose_id_mode("user_id", "auto", None, 0.5)
    with pytest.raises(ValueError, match="unknown id mode"):
        choose_id_mode("user_id", "hash", IdCounts(1, 1), 0.5)


def test_time_bounds_from_the_wall_clock_floor_and_as_of():
    as_of = datetime(2026, 6, 1, tzinfo=timezone.utc)
    bounds = time_bounds(NOW, 24, FLOOR, as_of, 2)
    assert bounds == TimeBounds(FLOOR, datetime(2026, 12, 2, tzinfo=timezone.utc), as_of + timedelta(hours=2))
    assert time_bounds(NOW.replace(tzinfo=None), 0, FLOOR).latest == NOW  # naive = UTC
    assert bounds.audit()["latest"] == "2026-12-02T00:00:00+00:00"


def test_time_bounds_a_reader_could_not_hold_are_refused():
    with pytest.raises(ValueError, match="range every reader can hold"):
        time_bounds(PANDAS_MAX_TIME - timedelta(hours=1), 24, FLOOR)  # a clock (or skew) past pandas' 2262
    with pytest.raises(ValueError, match="range every reader can hold"):
        time_bounds(NOW, 24, datetime(1600, 1, 1, tzinfo=timezone.utc))
    with pytest.raises(ValueError, match="not before"):
        time_bounds(NOW, 0, NOW)


def test_numbers_reach_the_timestamp_cast_only_within_bounds():
    """A raw number outside the bounds never reaches timestamp_micros, so no cast can overflow."""
    sql = parsed_ts_sql("raw_ts", BOUNDS)
    guard = f"BETWEEN {FLOOR.timestamp()!r}D AND {BOUNDS.latest.timestamp()!r}D"
    assert guard in sql
    assert sql.index(guard) < sql.index("timestamp_micros")
    reasons = rejection_reason_sql((True, True), (0.0, 5.0), BOUNDS, has_label=False)
    assert f"ts_seconds < {FLOOR.timestamp()!r}D THEN 'timestamp before floor'" in reasons
    assert f"ts_seconds > {BOUNDS.latest.timestamp()!r}D THEN 'timestamp in the future'" in reasons
    assert "timestamp_micros" not in epoch_seconds_sql("raw_ts")
