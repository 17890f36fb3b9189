"""When a stored value may be served: the two time rules of docs/architecture.md §2, written once.

Every table of served values (pair embeddings, user and item aggregates, imputed embeddings) carries
``computed_at`` and ``expires_at``:

* **expiry**: ``expires_at = computed_at + ttl`` (:func:`expires_at`, :func:`expires_at_column`);
* **servable at** ``as_of``: ``computed_at <= as_of < expires_at`` (:func:`is_servable`,
  :func:`servable_column`, :func:`servable_filter`, :func:`servable_mask`). A value computed after
  ``as_of`` is invisible to a run at ``as_of`` (a backfill of an earlier hour must not see later
  values); at ``expires_at`` exactly it is already expired.

Why one module: the rules are read by three engines - Spark jobs (columns), the ``deltalake``
fast paths (Arrow dataset filters) and the resolver (numpy arrays over a loaded snapshot) - and each
spelling must say the same thing. Stages call these functions instead of writing the comparison out.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import numpy as np

from solaris.timeutil import parse_utc

if TYPE_CHECKING:
    import pyarrow.dataset as ds
    from pyspark.sql import Column

COMPUTED_AT, EXPIRES_AT = "computed_at", "expires_at"


def expires_at(computed_at: datetime, ttl_hours: float) -> datetime:
    """The expiry of a value computed at ``computed_at`` that lives ``ttl_hours``."""
    return computed_at + timedelta(hours=ttl_hours)


def expires_at_column(computed_at: Column, ttl_hours: float) -> Column:
    """:func:`expires_at` as a Spark column (seconds precision of a day-time interval)."""
    from pyspark.sql import functions as F

    return computed_at + F.expr(f"make_dt_interval(0, 0, 0, {float(ttl_hours) * 3600.0})")


def is_servable(as_of: datetime, computed_at: datetime, expiry: datetime) -> bool:
    """``computed_at <= as_of < expires_at`` for one value."""
    return parse_utc(computed_at) <= parse_utc(as_of) < parse_utc(expiry)


def servable_column(as_of: datetime) -> Column:
    """The servable-at rule as a Spark filter on a table with ``computed_at`` and ``expires_at``."""
    from pyspark.sql import functions as F

    return (F.col(COMPUTED_AT) <= F.lit(as_of)) & (F.col(EXPIRES_AT) > F.lit(as_of))


def servable_filter(as_of: datetime) -> ds.Expression:
    """The servable-at rule as an Arrow dataset filter (the ``deltalake`` read paths)."""
    import pyarrow.dataset as ds

    stamp = parse_utc(as_of)  # naive times are UTC, as everywhere in the warehouse
    return (ds.field(COMPUTED_AT) <= stamp) & (ds.field(EXPIRES_AT) > stamp)


def servable_mask(now_seconds: np.ndarray, computed_at_seconds: np.ndarray,
                  expires_at_seconds: np.ndarray) -> np.ndarray:
    """The servable-at rule over arrays of epoch seconds (broadcasting, as numpy does)."""
    return (computed_at_seconds <= now_seconds) & (now_seconds < expires_at_seconds)


def expired_predicate(cutoff: str) -> str:
    """SQL predicate of the rows no run at or after ``cutoff`` (a SQL timestamp literal) may serve."""
    return f"{EXPIRES_AT} <= {cutoff}"
