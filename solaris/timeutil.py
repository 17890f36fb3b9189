"""UTC time parsing shared by every CLI (pure). Jobs never read the wall clock for data decisions,
except ingest, which reads it once at its entry to quarantine events from the future (docs/operations.md)."""

from __future__ import annotations

from datetime import datetime, timezone

STAMP_FORMAT = "%Y%m%dT%H%M%SZ"


def utc_stamp(moment: datetime) -> str:
    """Compact UTC stamp ``20001201T000000Z`` used in run ids, snapshot ids and file names."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime(STAMP_FORMAT)


def window_micros(hours: float) -> int:
    """A window of ``hours`` in whole microseconds, Spark's timestamp unit: windows compared against a
    time column (``ts > timestamp_micros(unix_micros(tick_as_of) - n)``) rather than a time literal."""
    return round(hours * 3_600_000_000)


def default_run_id(stage: str, as_of: datetime) -> str:
    """Deterministic run id: one hourly run of a stage is one id, whoever triggers it."""
    return f"{stage}-{utc_stamp(as_of)}"


def parse_utc(value: str | datetime) -> datetime:
    """Parse ``2026-01-01T05:00:00Z`` / ``2026-01-01 05:00`` / epoch seconds into an aware UTC datetime."""
    if isinstance(value, datetime):
        parsed = value
    else:
        text = str(value).strip()
        try:
            return datetime.fromtimestamp(float(text), tz=timezone.utc)
        except ValueError:
            pass
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"cannot parse time {value!r}; use ISO-8601 like 2026-01-01T05:00:00Z") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.astimezone(timezone.utc)
