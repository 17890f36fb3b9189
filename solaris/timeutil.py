"""UTC time parsing shared by every CLI (pure). Jobs never read the wall clock for data decisions."""

from __future__ import annotations

from datetime import datetime, timezone


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
