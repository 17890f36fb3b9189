"""Rules that turn raw input rows into contract-conforming ``events`` rows (pure: no Spark import).

The ingest job runs these as Spark SQL expressions; building the SQL here, from plain arguments,
keeps every rule readable in one place and unit-testable without a JVM (the Feast approach).

Raw rows carry string columns ``raw_user``, ``raw_item``, ``raw_ts``, ``raw_rating``,
``raw_label``. Each row either becomes an event or gets exactly one quarantine ``reason`` (the
first rule it fails, in the order of :data:`REASONS`).

Two principles (issue #48, docs/operations.md "Ingest"):

* **Keys are the user's.** An integer id column stays integer: a row whose id is not a
  non-negative integer is quarantined, it never re-keys the other rows. Ids are hashed only with
  ``--id-mode string`` or when most values of the column are not integers (:func:`choose_id_mode`).
* **Time is sane.** An event earlier than the configured floor or later than the ingest's wall
  clock (+ skew) is quarantined, and a raw number outside those bounds never reaches a timestamp
  cast, so no value can overflow and every table stays readable by Spark, deltalake, pyarrow and
  pandas (whose timestamps are int64 nanoseconds: 1677-09-21 .. 2262-04-11).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

# Quarantine reasons, in the order they are checked.
REASONS = (
    "missing user_id",
    "missing item_id",
    "negative user_id",
    "negative item_id",
    "non-integer user_id",
    "non-integer item_id",
    "missing timestamp",
    "unparseable timestamp",
    "timestamp before floor",
    "timestamp in the future",
    "timestamp after as-of",
    "unparseable rating",
    "rating out of range",
    "invalid label",
    "missing rating and label",
    "duplicate event",
)

# An integer id: 1 to 18 digits, so it always fits a bigint (whose maximum has 19 digits). Anything
# else (``-5``, ``abc``, ``1.5``, ``+7``, 19+ digits) is not an integer id.
INT_ID_PATTERN = "^[0-9]{1,18}$"
_NEGATIVE_ID_PATTERN = "^-[0-9]+$"
_EPOCH_PATTERN = "^-?[0-9]+(\\\\.[0-9]+)?$"  # epoch seconds, integer or fractional (SQL-escaped)

# Timestamps pandas can hold (int64 nanoseconds), which bound every event time a table may hold.
PANDAS_MIN_TIME = datetime(1677, 9, 22, tzinfo=timezone.utc)
PANDAS_MAX_TIME = datetime(2262, 4, 11, tzinfo=timezone.utc)

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
    """Expression giving the bigint id of a raw id column (NULL when it is not a valid id).

    Integer ids are kept as they are, and only when they match :data:`INT_ID_PATTERN` (no cast
    can fail or overflow); hashed ids are :func:`stable_id_sql` of the trimmed text.
    """
    if id_is_int:
        return f"CASE WHEN trim({raw_column}) RLIKE '{INT_ID_PATTERN}' THEN CAST(trim({raw_column}) AS BIGINT) END"
    return f"CASE WHEN {_is_blank(raw_column)} THEN NULL ELSE {stable_id_sql(namespace, f'trim({raw_column})')} END"


@dataclass(frozen=True)
class IdCounts:
    """How many non-blank values an id column has, and how many of them are integer ids."""

    values: int
    integers: int

    @property
    def share(self) -> float:
        """Share of the non-blank values that are integer ids (1.0 for a column with no value)."""
        return self.integers / self.values if self.values else 1.0


@dataclass(frozen=True)
class IdMode:
    """How one id column is keyed: its own integers, or stable hashes of its strings (``id_map``)."""

    column: str
    hashed: bool
    requested: str  # the --id-mode asked for: auto | int | string
    counts: IdCounts | None = None  # counted for ``auto`` only

    @property
    def is_int(self) -> bool:
        return not self.hashed

    def audit(self) -> dict[str, Any]:
        """What the ``runs`` record says about this column, so readers know how the table is keyed."""
        details: dict[str, Any] = {"mode": "hashed" if self.hashed else "int", "requested": self.requested}
        if self.counts is not None:
            details.update(values=self.counts.values, integer_values=self.counts.integers)
        return details


def id_counts_sql(raw_column: str) -> tuple[str, str]:
    """Aggregate expressions counting (non-blank values, integer-id values) of a raw id column."""
    return (
        f"count(CASE WHEN NOT {_is_blank(raw_column)} THEN 1 END)",
        f"count(CASE WHEN trim({raw_column}) RLIKE '{INT_ID_PATTERN}' THEN 1 END)",
    )


def choose_id_mode(column: str, requested: str, counts: IdCounts | None, min_share: float) -> IdMode:
    """Pick how ``column`` is keyed from the requested ``--id-mode`` and, for ``auto``, its counts.

    ``auto`` keeps integer ids when at least ``min_share`` of the non-blank values are integer ids:
    a handful of bad values (``-5``, ``abc``) are then quarantined instead of re-keying every row to
    hashes the user's own systems do not know. Only a column that is mostly not integers is hashed.
    """
    if requested == "int":
        return IdMode(column, hashed=False, requested=requested, counts=counts)
    if requested == "string":
        return IdMode(column, hashed=True, requested=requested, counts=counts)
    if requested != "auto":
        raise ValueError(f"unknown id mode {requested!r}; expected auto, int or string")
    if counts is None:
        raise ValueError("id mode auto needs the column's counts")
    return IdMode(column, hashed=counts.share < min_share, requested=requested, counts=counts)


@dataclass(frozen=True)
class TimeBounds:
    """Event times an ingest accepts: ``floor <= ts <= latest`` and, with an as-of, ``ts <= as_of_limit``."""

    floor: datetime
    latest: datetime
    as_of_limit: datetime | None = None

    def audit(self) -> dict[str, str | None]:
        return {
            "floor": self.floor.isoformat(),
            "latest": self.latest.isoformat(),
            "as_of_limit": None if self.as_of_limit is None else self.as_of_limit.isoformat(),
        }


def time_bounds(
    now: datetime,
    wall_clock_skew_hours: float,
    min_event_time: datetime,
    as_of: datetime | None = None,
    as_of_skew_hours: float = 0.0,
) -> TimeBounds:
    """The accepted event times of a run whose wall clock (read once at the job's entry) is ``now``.

    Refuses bounds a table could not hold: a floor before pandas' first timestamp, a latest time
    after its last (a wrong clock or skew), or a floor after the latest time.
    """
    floor, latest = _utc(min_event_time), _utc(now) + timedelta(hours=wall_clock_skew_hours)
    if floor < PANDAS_MIN_TIME or latest > PANDAS_MAX_TIME:
        raise ValueError(
            f"event time bounds {floor.isoformat()} .. {latest.isoformat()} leave the range every reader can "
            f"hold ({PANDAS_MIN_TIME.date()} .. {PANDAS_MAX_TIME.date()}): check ingest.min_event_time, "
            "ingest.wall_clock_skew_hours and the clock"
        )
    if floor >= latest:
        raise ValueError(
            f"ingest.min_event_time {floor.isoformat()} is not before the wall clock + skew {latest.isoformat()}"
        )
    return TimeBounds(floor, latest, as_of_limit(as_of, as_of_skew_hours))


def epoch_seconds_sql(raw_column: str = "raw_ts") -> str:
    """Raw time -> epoch seconds as DOUBLE (NULL when unparseable), without any timestamp cast.

    Numbers are taken as they are (however large: a double never overflows), ISO-8601 strings
    through ``try_to_timestamp``; the range rules compare this value, so they can run before the
    cast in :func:`parsed_ts_sql` that a huge number would overflow.
    """
    return (
        f"CASE WHEN trim({raw_column}) RLIKE '{_EPOCH_PATTERN}' THEN try_cast(trim({raw_column}) AS DOUBLE) "
        f"ELSE unix_micros(try_to_timestamp(trim({raw_column}))) / 1000000.0D END"
    )


def parsed_ts_sql(raw_column: str, bounds: TimeBounds) -> str:
    """Epoch seconds (integer or fractional) or an ISO-8601 string -> UTC timestamp, else NULL.

    A number is converted only inside ``bounds`` (else NULL: its row is quarantined by
    :func:`rejection_reason_sql`), so ``timestamp_micros`` never sees a value it would overflow.
    """
    low, high = _epoch_literal(bounds.floor), _epoch_literal(bounds.latest)
    number = f"try_cast(trim({raw_column}) AS DOUBLE)"
    return (
        f"CASE WHEN trim({raw_column}) RLIKE '{_EPOCH_PATTERN}' "
        f"THEN CASE WHEN {number} BETWEEN {low} AND {high} "
        f"THEN timestamp_micros(CAST({number} * 1000000 AS BIGINT)) END "
        f"ELSE try_to_timestamp(trim({raw_column})) END"
    )


def rejection_reason_sql(
    id_is_int: tuple[bool, bool],
    rating_range: tuple[float, float],
    bounds: TimeBounds,
    has_label: bool,
) -> str:
    """One CASE expression naming the first rule a parsed raw row fails (NULL = valid).

    Expects columns ``raw_*`` plus the parsed ``user_id``, ``item_id``, ``ts``, ``ts_seconds``
    (:func:`epoch_seconds_sql`), ``rating``, ``label_in`` computed with the helpers above.
    Duplicates are found afterwards with a window.
    """
    low, high = rating_range
    clauses = [(_is_blank("raw_user"), "missing user_id"), (_is_blank("raw_item"), "missing item_id")]
    int_columns = [(raw, column) for raw, column, is_int in
                   (("raw_user", "user_id", id_is_int[0]), ("raw_item", "item_id", id_is_int[1])) if is_int]
    # An integer column's id is NULL unless the raw value is an integer id (hashed ids never are NULL).
    clauses += [(f"trim({raw}) RLIKE '{_NEGATIVE_ID_PATTERN}'", f"negative {column}") for raw, column in int_columns]
    clauses += [(f"{column} IS NULL", f"non-integer {column}") for _, column in int_columns]
    floor, latest = _epoch_literal(bounds.floor), _epoch_literal(bounds.latest)
    clauses += [
        (_is_blank("raw_ts"), "missing timestamp"),
        ("ts_seconds IS NULL", "unparseable timestamp"),
        (f"ts_seconds < {floor}", "timestamp before floor"),
        (f"ts_seconds > {latest}", "timestamp in the future"),
        ("ts IS NULL", "unparseable timestamp"),
    ]
    if bounds.as_of_limit is not None:
        clauses.append((f"ts > TIMESTAMP '{_sql_ts(bounds.as_of_limit)}'", "timestamp after as-of"))
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


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def _epoch_literal(value: datetime) -> str:
    """A time as a DOUBLE literal of epoch seconds (the unit of :func:`epoch_seconds_sql`)."""
    return f"{_utc(value).timestamp()!r}D"


def _sql_ts(value: datetime) -> str:
    """Timestamp literal in UTC (the session time zone); naive datetimes are taken as UTC."""
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")
