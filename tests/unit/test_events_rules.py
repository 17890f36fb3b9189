from datetime import datetime, timezone

from solaris.ingest.events import REASONS, event_id_sql, rejection_reason_sql, stable_id, stable_id_sql


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
    sql = rejection_reason_sql((True, False), (1.0, 5.0), as_of, has_label=False)
    positions = [sql.index(f"'{reason}'") for reason in REASONS if f"'{reason}'" in sql]
    assert positions == sorted(positions)
    assert "negative user_id" in sql and "negative item_id" not in sql  # hashed ids cannot be negative
    assert "TIMESTAMP '2026-01-01 05:00:00.000000'" in sql
    assert "invalid label" not in sql
    no_as_of = rejection_reason_sql((True, True), (1.0, 5.0), None, has_label=True)
    assert "timestamp after as-of" not in no_as_of and "invalid label" in no_as_of


def test_as_of_literal_is_converted_to_utc():
    from datetime import timedelta

    paris = timezone(timedelta(hours=1))
    sql = rejection_reason_sql((True, True), (1.0, 5.0), datetime(2026, 1, 1, 6, tzinfo=paris), has_label=False)
    assert "TIMESTAMP '2026-01-01 05:00:00.000000'" in sql
