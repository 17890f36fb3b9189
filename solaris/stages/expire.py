"""Expire: delete pair embeddings whose TTL has passed and the history older than its retention, then VACUUM.

Deletes rows with ``expires_at <= as_of`` from ``pair_embeddings`` (whole expiry buckets at once
when they are entirely past, which Delta turns into metadata-only removes), then runs VACUUM with
the table's normal retention (Delta's 7-day guard is never disabled here: concurrent readers of
pinned snapshot versions keep working). ``--optimize`` compacts the still-live recent buckets.
The resolver also enforces ``now < expires_at`` at read time, so expiry is belt and braces.

Retention (``retention.*``; why each default: ``solaris.config.RetentionConfig``): the tables every
tick appends to - ``candidates``, ``pair_embeddings_log``, ``quarantine``, and the hourly chain's
rows of ``runs`` - lose their rows with a time column ``<= as_of - retention``; nothing a later
stage reads is older. Each delete is skipped without a Spark job when the Delta log's statistics
show no row that old, so most hours cost no more than before. A rerun deletes nothing new.

VACUUM runs at the hours whose as-of is a multiple of ``precompute.vacuum_every_hours`` (default
24: the midnight run), or always with ``--vacuum``, never with ``--no-vacuum``, on ``pair_embeddings``
and the trimmed tables alike. Why not every hour: VACUUM lists every file of the table, the dearest
part of a scheduled expire by far (its own process is cold), and with the 7-day retention guard a
file it could delete at one hour it can still delete a day later: running it daily frees the same
space, less than a day later.

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
from solaris.tick import StepContext

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

    from solaris.config import SolarisConfig

log = logging.getLogger("solaris.expire")


@dataclass(frozen=True)
class RetentionRule:
    """One table's retention: rows with ``column <= as_of - hours`` (and ``only``, when set) are deleted.

    ``partition``: the table's date partition column, ``to_date(column)``; the delete names it too so
    Spark reads only the partitions that can hold such rows.
    """

    table: str
    column: str
    hours: float
    partition: str | None = None
    only: str | None = None

    def cutoff(self, as_of: datetime) -> datetime:
        return as_of - timedelta(hours=self.hours)

    def predicate(self, as_of: datetime) -> str:
        """The Spark SQL delete predicate at ``as_of``."""
        cutoff = self.cutoff(as_of)
        parts = [f"{self.column} <= {literal(cutoff)}"]
        if self.partition:
            parts.insert(0, f"{self.partition} <= DATE '{cutoff:%Y-%m-%d}'")
        if self.only:
            parts.append(self.only)
        return " AND ".join(parts)


def retention_rules(config: SolarisConfig, hourly_jobs: tuple[str, ...]) -> tuple[RetentionRule, ...]:
    """The retention of every table the hourly chain appends to, from ``config.retention``.

    ``hourly_jobs``: the jobs whose ``runs`` rows are trimmed (``solaris.pipeline.HOURLY_JOBS``, from
    the stage list); the other jobs' rows (ingest, train_*) are a few a day and are kept: they record
    the events' id modes and the models' versions.
    """
    keep = config.retention
    jobs = ", ".join(f"'{job}'" for job in hourly_jobs)
    return (
        RetentionRule("candidates", "as_of", keep.candidates_hours, partition="run_date"),
        RetentionRule("pair_embeddings_log", "computed_at", keep.pair_embeddings_log_hours, partition="computed_date"),
        RetentionRule("quarantine", "seen_at", keep.quarantine_hours, partition="run_date"),
        RetentionRule("runs", "as_of", keep.runs_hours, only=f"job IN ({jobs})"),
    )


@dataclass(frozen=True)
class Trimmed:
    """What one table's retention did at this expire: rows with the time column ``<= cutoff`` deleted."""

    cutoff: str  # ISO-8601
    deleted: int


@dataclass(frozen=True)
class ExpireResult:
    """Rows deleted past their TTL, rows left, each retained table's trim, and which maintenance ran."""

    expired: int
    remaining: int
    candidates: Trimmed
    pair_embeddings_log: Trimmed
    quarantine: Trimmed
    runs: Trimmed
    optimized: bool
    vacuumed: bool


def is_vacuum_hour(as_of: datetime, every_hours: int) -> bool:
    """Whether the scheduled expire at ``as_of`` VACUUMs: its UTC epoch hour is a multiple of ``every_hours``.

    A pure function of the as-of, so a rerun of the same hour does what the first run did.
    """
    return int(as_of.timestamp() // 3600) % every_hours == 0


def trim(spark: SparkSession, config: SolarisConfig, rule: RetentionRule, as_of: datetime, vacuum: bool) -> Trimmed:
    """Apply ``rule`` at ``as_of`` (nothing when the table does not exist yet), VACUUM when asked."""
    cutoff = rule.cutoff(as_of)
    table = Table.of(spark, config, rule.table)
    if not table.exists():
        return Trimmed(cutoff=cutoff.isoformat(), deleted=0)
    deleted = table.delete_where(rule.predicate(as_of), bounded_by=(rule.column, cutoff))
    if vacuum:
        table.vacuum()
    return Trimmed(cutoff=cutoff.isoformat(), deleted=deleted)


def expire_pairs(spark: SparkSession, config: SolarisConfig, as_of: datetime, optimize: bool, vacuum: bool
                 ) -> tuple[int, int, int | None]:
    """Delete the pair embeddings past their TTL: (expired, remaining, table version); zeros without a table."""
    pairs = Table.of(spark, config, "pair_embeddings")
    if not pairs.exists():
        log.info("no pair_embeddings table yet at %s: nothing to expire", pairs.path)
        return 0, 0, None
    cutoff = literal(as_of)
    # Partition filter first so fully-expired buckets are dropped without rewriting files.
    expired = pairs.delete_where(f"expiry_bucket <= {cutoff} AND {expired_predicate(cutoff)}",
                                 bounded_by=(EXPIRES_AT, as_of))
    if optimize:
        pairs.compact_where(f"expiry_bucket > {cutoff}")
    if vacuum:
        pairs.vacuum()
    return expired, pairs.row_count(), pairs.version()


@dataclass(frozen=True)
class ExpireOptions:
    """``hourly_jobs``: the jobs whose ``runs`` rows the retention trims (``solaris.pipeline.HOURLY_JOBS``:
    the stage list's, handed down because a stage cannot import the list above it); ``optimize``:
    compact the live expiry buckets; ``vacuum``: VACUUM the trimmed tables at this run (the job decides
    it by the hour, :func:`is_vacuum_hour`; a replay once, at its last tick)."""

    hourly_jobs: tuple[str, ...]
    optimize: bool = False
    vacuum: bool = True


def run(step: StepContext, *, options: ExpireOptions) -> ExpireResult:
    spark, config, as_of, run_id, tick = step.spark, step.config, step.as_of, step.run_id, step.tick
    optimize, vacuum = options.optimize, options.vacuum
    record = RunRecord(run_id=run_id, job="expire", as_of=as_of)
    expired, remaining, version = expire_pairs(spark, config, as_of, optimize, vacuum)
    rules = retention_rules(config, options.hourly_jobs)
    trims = {rule.table: trim(spark, config, rule, as_of, vacuum) for rule in rules}
    record.rows_in, record.rows_out = expired + remaining, remaining
    if version is not None:
        record.table_versions = {"pair_embeddings": version}
    result = ExpireResult(expired=expired, remaining=remaining, candidates=trims["candidates"],
                          pair_embeddings_log=trims["pair_embeddings_log"], quarantine=trims["quarantine"],
                          runs=trims["runs"], optimized=optimize and version is not None,
                          vacuumed=vacuum)
    record.details = asdict(result)
    record.write(spark, config, "success", tick)
    log.info("expired %d pair embeddings with expires_at <= %s (%d remain); retention trimmed candidates %d, "
             "pair_embeddings_log %d, quarantine %d, runs %d rows%s", expired, as_of, remaining,
             result.candidates.deleted, result.pair_embeddings_log.deleted, result.quarantine.deleted,
             result.runs.deleted, "; vacuumed" if vacuum else "")
    return result
