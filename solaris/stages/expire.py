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

from solaris.storage.sql import literal
from solaris.storage.tables import RunRecord, commit_metrics, table_exists, table_rows, table_version, with_commit_retry
from solaris.storage.validity import expired_predicate

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
    from delta.tables import DeltaTable


    record = RunRecord(run_id=run_id, job="expire", as_of=as_of)
    path = config.table_path("pair_embeddings")
    if not table_exists(spark, path):
        log.info("no pair_embeddings table yet at %s: nothing to expire", path)
        record.write(spark, config, "success", tick)
        return ExpireResult(expired=0, remaining=0, log_trimmed=0, optimized=False, vacuumed=False)
    table = DeltaTable.forPath(spark, path)
    cutoff = literal(as_of)
    # No counting job before the delete: Delta commits only when rows match, and the commit's own
    # metrics say how many rows it removed (read from the log, like the remaining row count).
    before = table_version(spark, path)
    # Partition filter first so fully-expired buckets are dropped without rewriting files.
    with_commit_retry(lambda: table.delete(f"expiry_bucket <= {cutoff} AND {expired_predicate(cutoff)}"),
                      f"expire {path}")
    expired = commit_metrics(path, before, "DELETE").get("numDeletedRows", 0)
    if optimize:
        with_commit_retry(lambda: table.optimize().where(f"expiry_bucket > {cutoff}").executeCompaction(),
                          f"optimize {path}")
    if vacuum:
        table.vacuum()  # default retention: the 7-day guard stays on
    log_path = config.table_path("pair_embeddings_log")
    trimmed = 0
    if table_exists(spark, log_path):
        horizon = literal(as_of - timedelta(hours=config.enrichment.log_retention_hours))
        log_before = table_version(spark, log_path)
        with_commit_retry(lambda: DeltaTable.forPath(spark, log_path).delete(f"computed_at <= {horizon}"),
                          f"trim {log_path}")
        trimmed = commit_metrics(log_path, log_before, "DELETE").get("numDeletedRows", 0)
    remaining = table_rows(path)
    record.rows_in, record.rows_out = expired + remaining, remaining
    record.table_versions = {"pair_embeddings": table_version(spark, path)}
    result = ExpireResult(expired=expired, remaining=remaining, log_trimmed=trimmed, optimized=optimize,
                          vacuumed=vacuum)
    record.details = asdict(result)
    record.write(spark, config, "success", tick)
    log.info("expired %d pair embeddings with expires_at <= %s; %d remain", expired, as_of, remaining)
    return result
