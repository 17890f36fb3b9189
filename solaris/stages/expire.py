"""Expire: delete pair embeddings whose TTL has passed, then VACUUM (retention guard left on).

Deletes rows with ``expires_at <= as_of`` from ``pair_embeddings`` (whole expiry buckets at once
when they are entirely past, which Delta turns into metadata-only removes), then runs VACUUM with
the table's normal retention (Delta's 7-day guard is never disabled here: concurrent readers of
pinned snapshot versions keep working). ``--optimize`` compacts the still-live recent buckets.
The resolver also enforces ``now < expires_at`` at read time, so expiry is belt and braces.

VACUUM runs at the hours whose as-of is a multiple of ``precompute.vacuum_every_hours`` (default
24: the midnight run), or always with ``--vacuum``, never with ``--no-vacuum``. Why not every hour:
VACUUM lists every file of the table, the dearest part of a scheduled expire by far (its own
process is cold), and with the 7-day retention guard a file it could delete at one hour it can
still delete a day later: running it daily frees the same space, less than a day later.

    solaris expire --as-of 2000-12-01T06:00:00Z
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from solaris.storage.audit import RunRecord
from solaris.storage.sql import literal
from solaris.storage.table import Table
from solaris.storage.validity import EXPIRES_AT, expired_predicate

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

    from solaris.config import SolarisConfig
    from solaris.tick import Tick

log = logging.getLogger("solaris.expire")


@dataclass(frozen=True)
class ExpireResult:
    """Rows deleted past their TTL, rows left, log rows trimmed, and which maintenance ran."""

    expired: int
    remaining: int
    log_trimmed: int
    optimized: bool
    vacuumed: bool


def is_vacuum_hour(as_of: datetime, every_hours: int) -> bool:
    """Whether the scheduled expire at ``as_of`` VACUUMs: its UTC epoch hour is a multiple of ``every_hours``.

    A pure function of the as-of, so a rerun of the same hour does what the first run did.
    """
    return int(as_of.timestamp() // 3600) % every_hours == 0


def run(spark: SparkSession, config: SolarisConfig, as_of: datetime, run_id: str, optimize: bool = False,
        vacuum: bool = True, *, tick: Tick | None = None) -> ExpireResult:
    record = RunRecord(run_id=run_id, job="expire", as_of=as_of)
    pairs = Table.of(spark, config, "pair_embeddings")
    if not pairs.exists():
        log.info("no pair_embeddings table yet at %s: nothing to expire", pairs.path)
        record.write(spark, config, "success", tick)
        return ExpireResult(expired=0, remaining=0, log_trimmed=0, optimized=False, vacuumed=False)
    cutoff = literal(as_of)
    # Partition filter first so fully-expired buckets are dropped without rewriting files.
    expired = pairs.delete_where(f"expiry_bucket <= {cutoff} AND {expired_predicate(cutoff)}",
                                 bounded_by=(EXPIRES_AT, as_of))
    if optimize:
        pairs.compact_where(f"expiry_bucket > {cutoff}")
    if vacuum:
        pairs.vacuum()
    pairs_log = Table.of(spark, config, "pair_embeddings_log")
    trimmed = 0
    if pairs_log.exists():
        horizon = as_of - timedelta(hours=config.enrichment.log_retention_hours)
        trimmed = pairs_log.delete_where(f"computed_at <= {literal(horizon)}", bounded_by=("computed_at", horizon))
    remaining = pairs.row_count()
    record.rows_in, record.rows_out = expired + remaining, remaining
    record.table_versions = {"pair_embeddings": pairs.version()}
    result = ExpireResult(expired=expired, remaining=remaining, log_trimmed=trimmed, optimized=optimize,
                          vacuumed=vacuum)
    record.details = asdict(result)
    record.write(spark, config, "success", tick)
    log.info("expired %d pair embeddings with expires_at <= %s; %d remain", expired, as_of, remaining)
    return result
