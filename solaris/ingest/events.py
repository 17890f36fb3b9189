"""Rules that turn raw input rows into contract-conforming ``events`` rows (pure: no Spark import).

The ingest job runs these as Spark SQL expressions; building the SQL here, from plain arguments,
keeps every rule readable in one place and unit-testable without a JVM (the Feast approach).

Raw rows carry string columns ``raw_user``, ``raw_item``, ``raw_ts``, ``raw_rating``,
``raw_label``. Each row either becomes an event or gets exactly one quarantine ``reason`` (the
first rule it fails, in the order of :data:`REASONS`).
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone

# Quarantine reasons, in the order they are checked.
REASONS = (
    "missing user_id",
    "missing item_id",
    "unparseable user_id",
    "unparseable item_id",
    "negative user_id",
    "negative item_id",
    "missing timestamp",
    "unparseable timestamp",
    "timestamp after as-of",
    "unparseable rating",
    "rating out of range",
    "invalid label",
    "missing rating and label",
    "duplicate event",
)

_HASH_HEX_DIGITS = 15  # 60 bits: always a non-negative bigint, collisions checked at ingest


def stable_id(namespace: str, raw: str) -> int:
    """Stable bigint for a string id: the first 60 bits of sha256(namespace 0x1f raw).

    Stable across runs, machines and Spark versions (unlike ``hash()``), so ids survive re-ingest
    and mean the same in every table. :func:`stable_id_sql` is the identical Spark expression.
    """
    digest = hashlib.sha256(f"{namespace}\x1f{raw}".encode("utf-8")).hexdigest()
    return int(digest[:_HASH_HEX_DIGITS], 16)


def stable_id_sql(namespace: str, column: str) -> str:
    """Spark SQL expression equal to :func:`stable_id` for a string column."""
    if not namespace.isidentifier():
        raise ValueError(f"namespace must be an identifier, got {namespace!r}")
    return (
        f"CAST(conv(substr(sha2(concat('{namespace}', '\\u001f', {column}), 256), 1, {_HASH_HEX_DIGITS}), 16, 10)"
        " AS BIGINT)"
    )


def event_id_sql(user_col: str = "user_id", item_col: str = "item_id", ts_col: str = "ts") -> str:
    """Deterministic event key from (user, item, timestamp in microseconds)."""
    return stable_id_sql("event", f"concat_ws('|', {user_col}, {item_col}, unix_micros({ts_col}))")


def _is_blank(column: str) -> str:
    return f"({column} IS NULL OR trim({column}) = '')"


def parsed_id_sql(raw_column: str, namespace: str, id_is_int: bool) -> str:
    """Expression giving the bigint id of a raw id column (NULL when it cannot be parsed)."""
    if id_is_int:
        return f"try_cast(trim({raw_column}) AS BIGINT)"
    return f"CASE WHEN {_is_blank(raw_column)} THEN NULL ELSE {stable_id_sql(namespace, f'trim({raw_column})')} END"


def parsed_ts_sql(raw_column: str = "raw_ts") -> str:
    """Epoch seconds (integer or fractional) or an ISO-8601 string -> UTC timestamp, else NULL."""
    return (
        f"CASE WHEN trim({raw_column}) RLIKE '^-?[0-9]+(\\\\.[0-9]+)?$' "
        f"THEN timestamp_micros(CAST(try_cast(trim({raw_column}) AS DOUBLE) * 1000000 AS BIGINT)) "
        f"ELSE try_to_timestamp(trim({raw_column})) END"
    )


def rejection_reason_sql(
    id_is_int: tuple[bool, bool],
    rating_range: tuple[float, float],
    as_of: datetime | None,
    has_label: bool,
) -> str:
    """One CASE expression naming the first rule a parsed raw row fails (NULL = valid).

    Expects columns ``raw_*`` plus the parsed ``user_id``, ``item_id``, ``ts``, ``rating``,
    ``label_in`` computed with the helpers above. Duplicates are found afterwards with a window.
    """
    user_is_int, item_is_int = id_is_int
    low, high = rating_range
    clauses = [
        (_is_blank("raw_user"), "missing user_id"),
        (_is_blank("raw_item"), "missing item_id"),
        ("user_id IS NULL", "unparseable user_id"),
        ("item_id IS NULL", "unparseable item_id"),
    ]
    if user_is_int:
        clauses.append(("user_id < 0", "negative user_id"))
    if item_is_int:
        clauses.append(("item_id < 0", "negative item_id"))
    clauses += [(_is_blank("raw_ts"), "missing timestamp"), ("ts IS NULL", "unparseable timestamp")]
    if as_of is not None:
        clauses.append((f"ts > TIMESTAMP '{_sql_ts(as_of)}'", "timestamp after as-of"))
    clauses += [
        (f"NOT {_is_blank('raw_rating')} AND rating IS NULL", "unparseable rating"),
        (f"rating IS NOT NULL AND (isnan(rating) OR rating < {low!r} OR rating > {high!r})", "rating out of range"),
    ]
    if has_label:
        clauses.append(
            (f"NOT {_is_blank('raw_label')} AND (label_in IS NULL OR label_in NOT IN (0.0, 1.0))", "invalid label")
        )
    clauses.append(("rating IS NULL AND label_in IS NULL", "missing rating and label"))
    body = " ".join(f"WHEN {cond} THEN '{reason}'" for cond, reason in clauses)
    return f"CASE {body} ELSE NULL END"


def label_sql(label_threshold: float) -> str:
    """An explicit 0/1 label wins; otherwise label = rating >= threshold."""
    return f"CAST(coalesce(label_in, CASE WHEN rating >= {label_threshold!r} THEN 1.0 ELSE 0.0 END) AS DOUBLE)"


def as_of_limit(as_of: datetime | None, skew_hours: float) -> datetime | None:
    """Latest event time accepted: the run's as-of plus the configured clock skew."""
    return None if as_of is None else as_of + timedelta(hours=skew_hours)


def _sql_ts(value: datetime) -> str:
    """Timestamp literal in UTC (the session time zone); naive datetimes are taken as UTC."""
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")
