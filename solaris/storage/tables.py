"""The Delta primitives under :class:`solaris.storage.table.Table`: idempotent writes, reads of the log.

Stages reach tables through ``Table`` (its write rules) and :mod:`solaris.storage.audit`; this
module holds what those call. Every write here is keyed so that rerunning a job for the same
``run_id`` replaces its own output instead of duplicating it (docs/architecture.md §4): MERGE on
the table key, or one atomic replacement of a run's rows for per-run tables - by Spark, or by
``deltalake`` from the driver for writes small enough to collect (:func:`driver_rows`).
"""

from __future__ import annotations

import logging
import os
import random
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from solaris.config import SolarisConfig
from solaris.storage.validity import servable_column, servable_filter

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from pyspark.sql import Column, DataFrame, SparkSession


Result = TypeVar("Result")

log = logging.getLogger(__name__)



COMMIT_ATTEMPTS = 6


def _is_commit_conflict(error: BaseException) -> bool:
    """True for Delta's optimistic-concurrency failures (another writer committed first), Spark's or deltalake's."""
    from deltalake.exceptions import CommitFailedError

    if isinstance(error, CommitFailedError):
        # deltalake raises this class for every failed commit; only a concurrent writer's is worth a redo
        # (not e.g. a table feature it cannot write, which the caller handles otherwise)
        message = str(error).lower()
        return "concurrent" in message or "changed since last commit" in message or "already exists" in message
    try:
        from delta.exceptions.base import (
            ConcurrentWriteException,
            DeltaConcurrentModificationException,
            MetadataChangedException,
            ProtocolChangedException,
        )
    except ImportError:  # pragma: no cover
        return False
    if isinstance(error, (DeltaConcurrentModificationException, ProtocolChangedException, ConcurrentWriteException,
                          MetadataChangedException)):
        return True
    # Errors that reach Python unconverted (e.g. two sessions creating the same table) keep Delta's
    # error class in their message.
    return "DELTA_PROTOCOL_CHANGED" in str(error) or "DELTA_CONCURRENT" in str(error)


def with_commit_retry(write: Callable[[], Result], what: str, attempts: int = COMMIT_ATTEMPTS) -> Result:
    """Run ``write()`` and redo it when a concurrent writer won the Delta commit race.

    Why this is safe: every write of the pipeline is idempotent for its run (MERGE keyed on the
    table key, ``replaceWhere`` on its own run), so redoing it against the new table state gives
    the same result as if it had run after the other writer - no lost update, no duplicate.
    """
    for attempt in range(1, attempts + 1):
        try:
            return write()
        except Exception as error:  # filtered just below
            if attempt == attempts or not _is_commit_conflict(error):
                raise
            pause = min(30.0, 0.5 * 2 ** (attempt - 1)) * (0.5 + random.random())
            log.warning("%s: concurrent Delta commit (%s), retry %d/%d in %.1fs", what,
                        type(error).__name__, attempt, attempts - 1, pause)
            time.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover


def table_exists(spark: "SparkSession", path: str) -> bool:
    """Whether a Delta table has been committed at ``path``.

    For a local folder (or a local path not there yet) the log is read with ``deltalake``: Spark's
    ``isDeltaTable`` brings the table's snapshot up to date, which after every commit is Spark jobs,
    and the stages ask before most reads and writes. Other storage, or a log ``deltalake`` cannot
    read, is asked of Spark.
    """
    import os

    from delta.tables import DeltaTable

    if "://" not in path and (os.path.isdir(path) or not os.path.exists(path)):
        try:
            return table_version(spark, path) is not None
        except Exception:  # noqa: BLE001 - e.g. a reader feature deltalake lacks: Spark can
            pass
    return DeltaTable.isDeltaTable(spark, path)


def table_version(spark: "SparkSession", path: str) -> int | None:
    """Latest committed Delta version of a table, or None when it does not exist yet.

    Read from the transaction log with ``deltalake`` (no Spark job): asking Spark
    for ``history(1)`` ran a job per call, and every stage asks after each write.
    """
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return int(DeltaTable(path).version())
    except TableNotFoundError:
        return None


def _add_actions(path: str, version: int | None = None) -> Any:
    """The live data files of a Delta table (at ``version``; None: the latest) with their statistics, as a
    pyarrow table (from the log)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    return pa.table(DeltaTable(path, version=version).get_add_actions(flatten=True))


def table_digest(path: str) -> str | None:
    """Digest of a Delta table's content at its latest version, from its log (no data read): its live files'
    names and sizes, which Delta never rewrites in place. None when the table does not exist."""
    import hashlib

    from deltalake.exceptions import TableNotFoundError

    try:
        files = _add_actions(path)
    except TableNotFoundError:
        return None
    digest = hashlib.sha256()
    names, sizes = files.column("path").to_pylist(), files.column("size_bytes").to_pylist()
    for name, size in sorted(zip(names, sizes, strict=True)):
        digest.update(f"{name}\t{size}\n".encode())
    return digest.hexdigest()[:20]


def logged_row_count(path: str, version: int | None = None) -> int | None:
    """Rows of the table at ``version`` from its log's per-file statistics, reading no data; None when a
    file has no row count (then only reading it would tell)."""
    import pyarrow.compute as pc

    records = _add_actions(path, version).column("num_records")
    return None if records.null_count else int(pc.sum(records).as_py() or 0)


def rows_at_version(path: str, version: int, columns: Sequence[str], where: Any = None) -> Any:
    """``columns`` of the table at exactly ``version`` (a pinned snapshot), filtered by the pyarrow
    expression ``where``, read on the driver with ``deltalake``: for small tables read whole (the tiers
    a snapshot pins), where Spark's snapshot, listing and job per table cost more than the rows."""
    from deltalake import DeltaTable

    return DeltaTable(path, version=version).to_pyarrow_dataset().to_table(columns=list(columns), filter=where)


def table_rows(path: str) -> int:
    """Row count of a Delta table from the per-file ``numRecords`` statistics of its log (no Spark job).

    Why: counting a table with Spark is a job per call; every Spark writer here records the
    statistic, so the log already holds the answer. Falls back to reading the files' row counts
    with pyarrow only if a file lacks it.
    """
    from deltalake import DeltaTable

    logged = logged_row_count(path)
    if logged is not None:
        return logged
    return int(DeltaTable(path).to_pyarrow_dataset().count_rows())  # pragma: no cover - stats always written here


def run_rows(spark: "SparkSession", path: str, run_id: str, columns: Sequence[str] = ("run_id",)) -> Any:
    """``columns`` of the rows that run ``run_id`` holds in a Delta table, as a pyarrow table.

    Why: every writing stage reports what its write left in the table for its run - on a rerun that
    is the rows the first run wrote, which a MERGE's changed-row metrics would not count. With Spark
    that read-back is a snapshot, a plan and a job per stage and tick for a few thousand rows; here
    the live files come from the Delta log, the files whose ``run_id`` statistics exclude the run
    are skipped, and the rest are read with pyarrow from their local paths. Spark reads the table
    instead for storage that is not a local folder, files with deletion vectors or without
    ``run_id`` statistics, a partition column in ``columns``, and anything pyarrow cannot read
    (e.g. a table with column mapping). ``columns`` are the table's column names.
    """
    import os
    from urllib.parse import unquote, urlparse

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    def with_spark() -> Any:
        predicate = f"run_id = '{_sql_str(run_id)}'"
        return spark.read.format("delta").load(path).where(predicate).select(*columns).toArrow()

    try:
        files = _add_actions(path) if os.path.isdir(path) else None
    except Exception:  # noqa: BLE001 - a table feature deltalake cannot read: Spark can
        files = None
    if files is None:
        return with_spark()
    names = files.column_names
    vectors = [name for name in names if name.startswith("deletionVector")]
    if ("min.run_id" not in names or "max.run_id" not in names
            or any(f"partition.{column}" in names for column in columns)
            or any(files.column(name).null_count < files.num_rows for name in vectors)):
        return with_spark()
    parts = []
    try:
        for entry in files.filter(_may_hold_mask(files, "run_id", run_id)).column("path").to_pylist():
            local = urlparse(entry).path if "://" in entry else os.path.join(path, unquote(entry))
            part = pq.read_table(local, columns=sorted({*columns, "run_id"}), partitioning=None)
            # Delta writers differ in how they store a column: deltalake's MERGE as string_view (which
            # pyarrow's filter cannot take yet), a driver write with the frame's non-null flags
            part = part.cast(pa.schema([(field.with_type(pa.string()) if field.type == pa.string_view() else field)
                                        .with_nullable(True) for field in part.schema]))
            parts.append(part.filter(pc.equal(part.column("run_id"), run_id)).select(list(columns)))
        if not parts:
            return pa.table({name: pa.array([], pa.null()) for name in columns})
        return pa.concat_tables(parts)
    except (OSError, ValueError, KeyError, pa.ArrowException):  # e.g. column mapping: other physical names
        return with_spark()


def servable_rows(spark: "SparkSession", path: str, as_of: datetime, columns: Sequence[str]) -> Any:
    """``columns`` of the rows of a small Delta table servable at ``as_of`` (``computed_at <= as_of <
    expires_at``), as a pyarrow table.

    Why: a stage that reads back a table it has just written (tier 6 reads the item aggregates the
    same run MERGEd) makes Spark rebuild the new version's snapshot and plan a scan - seconds of
    Spark jobs for a few thousand rows; ``deltalake`` reads the same version from the log and the
    files. For the recently engaged catalogue only, never for users or pairs. Spark reads instead
    when the table is not a local folder or ``deltalake`` cannot read it (a table feature it lacks).
    """
    rows = driver_table(path, None, columns, servable_filter(as_of))
    if rows is not None:
        return rows
    return spark.read.format("delta").load(path).where(servable_column(as_of)).select(*columns).toArrow()


def arrow_frame(spark: "SparkSession", rows: Any) -> "DataFrame":
    """Rows already on the driver (a pyarrow table) as a Spark DataFrame.

    The view and large variants of strings, binaries and lists that ``deltalake`` may hand back are
    cast to the plain types first, the ones Spark maps to its own.
    """
    import pyarrow as pa

    def plain(kind: Any) -> Any:
        if kind in (pa.string_view(), pa.large_string()):
            return pa.string()
        if kind in (pa.binary_view(), pa.large_binary()):
            return pa.binary()
        if pa.types.is_large_list(kind) or pa.types.is_list_view(kind) or pa.types.is_list(kind):
            return pa.list_(plain(kind.value_type))
        return kind

    schema = pa.schema([field.with_type(plain(field.type)) for field in rows.schema])
    return spark.createDataFrame(rows.cast(schema) if schema != rows.schema else rows)


def driver_table(path: str, max_rows: int | None, columns: Sequence[str] | None = None, where: Any = None) -> Any:
    """A local Delta table's rows (``columns``, those matching the Arrow filter ``where``) read on the
    driver with ``deltalake``; None when it is not a local folder, ``deltalake`` cannot read it, or it
    holds more than ``max_rows`` rows (from the log's statistics; None: no bound). Spark reads it then.
    """
    import os

    import pyarrow as pa
    import pyarrow.compute as pc

    if "://" in path or not os.path.isdir(path):
        return None
    try:
        from deltalake import DeltaTable

        table = DeltaTable(path)  # one log read for the count and the files
        if max_rows is not None:
            records = pa.table(table.get_add_actions(flatten=True)).column("num_records")
            if records.null_count or (pc.sum(records).as_py() or 0) > max_rows:  # unknown counts: Spark's
                return None
        return table.to_pyarrow_dataset().to_table(columns=None if columns is None else list(columns), filter=where)
    except Exception as error:  # noqa: BLE001 - e.g. a reader feature deltalake lacks: Spark can
        log.warning("deltalake could not read %s (%s: %s); reading it with Spark instead", path,
                    type(error).__name__, error)
        return None


def stored_partitions(path: str, column: str) -> set[str]:
    """The values of partition column ``column`` that live files of the table hold, from its Delta
    log (no Spark job): whether a partition was written, without asking Spark."""
    files = _add_actions(path)
    name = f"partition.{column}"
    if files.num_rows == 0:
        return set()
    if name not in files.column_names:
        raise ValueError(f"{path} is not partitioned by {column!r}")
    return {value for value in files.column(name).to_pylist() if value is not None}


def may_hold(path: str, column: str, value: str) -> bool:
    """False only when no live file of the table can hold a row with ``column = value``.

    Decided from the per-file min/max statistics in the Delta log (no Spark job): a file whose
    range excludes the value cannot hold it. True means "maybe" (the caller then asks Spark).
    """
    import pyarrow.compute as pc

    files = _add_actions(path)
    if files.num_rows == 0:
        return False
    names = files.column_names
    if f"min.{column}" not in names or f"max.{column}" not in names:
        return True
    return bool(pc.any(_may_hold_mask(files, column, value)).as_py())


def newest_logged(path: str, column: str) -> datetime | None:
    """The largest ``column`` value of the table's live rows from its log's per-file maximum statistics (no
    Spark job, no data read); None when the table is empty or a file lacks the statistic. Delta truncates a
    timestamp's statistics to milliseconds, so the answer can be up to 1 ms below the true maximum."""
    import pyarrow.compute as pc

    files = _add_actions(path)
    name = f"max.{column}"
    if files.num_rows == 0 or name not in files.column_names or files.column(name).null_count:
        return None
    newest = pc.max(files.column(name)).as_py()
    return newest if newest is None or newest.tzinfo else newest.replace(tzinfo=timezone.utc)


def none_at_or_below(path: str, column: str, bound: datetime) -> bool:
    """True only when no live row of the table can have ``column <= bound``.

    Decided from the per-file minimum statistics in the Delta log (no Spark job): every live file's
    minimum above the bound. False means "maybe" (no statistics, or a file at or below the bound).
    Delta truncates a timestamp's statistics to milliseconds, which can only lower a minimum, so a
    minimum above the bound is a true one.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    files = _add_actions(path)
    if files.num_rows == 0:
        return True
    name = f"min.{column}"
    if name not in files.column_names:
        return False
    low = files.column(name)
    if low.null_count:
        return False
    return bool(pc.all(pc.greater(low, pa.scalar(bound, type=low.type))).as_py())


def _may_hold_mask(files: Any, column: str, value: str) -> Any:
    """Per live file (a row of :func:`_add_actions`): False only when its ``column`` min/max
    statistics exclude ``value``; the caller checked that the statistics columns exist."""
    import pyarrow.compute as pc

    low, high = files.column(f"min.{column}"), files.column(f"max.{column}")
    unknown = pc.or_(pc.is_null(low), pc.is_null(high))
    return pc.or_(unknown, pc.and_(pc.less_equal(low, value), pc.greater_equal(high, value)))


def commit_metrics(path: str, after_version: int | None, operation: str) -> dict[str, int]:
    """Summed ``operationMetrics`` of the ``operation`` commits (e.g. ``DELETE``) made after
    ``after_version`` (None: every commit).

    Read from the Delta log with ``deltalake`` (no Spark job): e.g. the rows a DELETE removed,
    instead of counting them with a Spark job before deleting.
    """
    from deltalake import DeltaTable

    table = DeltaTable(path)
    newer = table.version() - (-1 if after_version is None else after_version)
    totals: dict[str, int] = {}
    if newer <= 0:
        return totals
    for commit in table.history(newer):
        if after_version is not None and int(commit.get("version", after_version + 1)) <= after_version:
            continue
        if commit.get("operation") != operation:
            continue
        for key, value in (commit.get("operationMetrics") or {}).items():
            try:
                totals[key] = totals.get(key, 0) + int(value)
            except (TypeError, ValueError):
                continue
    return totals


def _ensure_table(df: "DataFrame", path: str, partition_by: Sequence[str]) -> None:
    """Create an empty Delta table with ``df``'s schema (and partitioning) unless one exists."""
    if not table_exists(df.sparkSession, path):
        writer = df.limit(0).write.format("delta").mode("ignore")
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        writer.save(path)


def merge_into(
    df: "DataFrame",
    path: str,
    keys: Sequence[str],
    partition_by: Sequence[str] = (),
) -> None:
    """Upsert ``df`` into the Delta table at ``path`` on ``keys`` (created on first use)."""
    from delta.tables import DeltaTable

    spark = df.sparkSession
    condition = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in keys)

    def write() -> None:
        _ensure_table(df, path, partition_by)
        (
            DeltaTable.forPath(spark, path)
            .alias("t")
            .merge(df.alias("s"), condition)
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute()
        )

    with_commit_retry(write, f"MERGE into {path}")


# merge_if_new_run's rule: when a stored row is replaced by the incoming one (target t, source s)
_NEWER_ROW = "s.computed_at > t.computed_at OR (s.computed_at = t.computed_at AND s.run_id <> t.run_id)"


def _same_key(keys: Sequence[str]) -> str:
    """merge_if_new_run's match condition (target t, source s), for Spark's MERGE and deltalake's alike."""
    return " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)


def driver_rows(df: "DataFrame", max_rows: int, expected_rows: int | None = None, order_by: Sequence[str] = ()) -> Any:
    """``df``'s rows on the driver (a pyarrow table) for a ``deltalake`` write, or None: Spark writes.

    Why: a tick's stages write a few thousand to a few hundred thousand rows each, and Spark's
    MERGE or replaceWhere costs about a second of fixed work per write (snapshot, planning, the
    source's materialisation, the scan for files to rewrite, the commit) - more than computing the
    rows. Collected once, the same rows are written by ``deltalake`` in milliseconds, and a stage
    that writes them twice (score: the tier-1 MERGE and the log) computes them once. Bounded by
    ``max_rows`` (``spark.driver_max_rows``; 0: always Spark), so the driver never holds more:
    with ``expected_rows`` known (a count the stage made anyway) a larger write is not collected
    at all; otherwise at most ``max_rows + 1`` rows are collected (a limit), and one more than the
    bound leaves the whole write to Spark.

    ``order_by``: the rows are sorted by these columns, because the order in which Spark hands them
    over is not fixed (the limit gathers partitions in whatever order they arrive) and the written
    file's row order is the order the next stage reads them in - e.g. score's FM batches, whose
    float rounding depends on which pairs share a batch. Sorted, a rerun writes the same file.
    """
    if max_rows <= 0 or (expected_rows is not None and expected_rows > max_rows):
        return None
    rows = df.toArrow() if expected_rows is not None else df.limit(max_rows + 1).toArrow()
    if rows.num_rows > max_rows:
        log.info("more than spark.driver_max_rows=%d rows to write: Spark writes them", max_rows)
        return None
    return rows.sort_by([(column, "ascending") for column in order_by]) if order_by else rows


def _with_deltalake_else_spark(with_deltalake: Callable[[], None], with_spark: Callable[[], None], path: str) -> None:
    """Write with ``deltalake``; Spark instead when ``deltalake`` refuses the table (not for a lost race).

    A refused ``deltalake`` write commits nothing (one commit or none), so Spark's write replaces
    no half-written state; a conflict still losing after every retry is raised, as Spark's would be.
    """
    try:
        with_deltalake()
        return
    except Exception as error:  # filtered just below
        if _is_commit_conflict(error):
            raise
        log.warning("deltalake could not write %s (%s: %s); writing it with Spark instead", path,
                    type(error).__name__, error)
    with_spark()


def merge_if_new_run(df: "DataFrame", path: str, keys: Sequence[str], partition_by: Sequence[str] = (),
                     rows: Any = None) -> None:
    """Upsert on ``keys``: a row from a later ``computed_at`` replaces the stored one (refreshing its
    TTL); a row written by the same ``run_id`` is left untouched, so rerunning a run is a no-op even
    if floats wobble; and a late, older run (a backfill, or the slower of two concurrent runs)
    never overwrites what a newer run wrote - the final table does not depend on commit order.

    ``rows``: ``df`` already on the driver (:func:`driver_rows`), merged with ``deltalake``
    (:func:`merge_rows_if_new_run`); Spark merges ``df`` when there are none or ``deltalake``
    refuses the table."""
    if rows is not None:
        _with_deltalake_else_spark(lambda: merge_rows_if_new_run(rows, path, keys, partition_by),
                                   lambda: merge_if_new_run(df, path, keys, partition_by), path)
        return
    from delta.tables import DeltaTable

    spark = df.sparkSession
    condition = _same_key(keys)

    def write() -> None:
        _ensure_table(df, path, partition_by)
        (
            DeltaTable.forPath(spark, path).alias("t")
            .merge(df.alias("s"), condition)
            .whenMatchedUpdateAll(condition=_NEWER_ROW)
            .whenNotMatchedInsertAll()
            .execute()
        )

    with_commit_retry(write, f"MERGE into {path}")


def merge_rows_if_new_run(rows: Any, path: str, keys: Sequence[str], partition_by: Sequence[str] = ()) -> None:
    """:func:`merge_if_new_run` for rows already on the driver (a pyarrow table), with ``deltalake``.

    Why: a stage that computes a small table on the driver (tier 6: the recently engaged items)
    would otherwise hand it to Spark only for the MERGE, whose planning, source materialisation,
    file scan and rewrite cost about a second of Spark jobs for a few thousand rows; ``deltalake``
    merges them in milliseconds. The same rule and guarantees: a concurrent commit that conflicts
    makes the merge redo (:func:`with_commit_retry`); the table is created empty first, so rows are
    only ever merged into an existing table.
    """
    from deltalake import DeltaTable

    condition = _same_key(keys)

    def write() -> None:
        _create_empty_with_deltalake(path, rows.schema, partition_by)
        (DeltaTable(path).merge(source=rows, predicate=condition, source_alias="s", target_alias="t")
         .when_matched_update_all(predicate=_NEWER_ROW)
         .when_not_matched_insert_all()
         .execute())

    with_commit_retry(write, f"merge into {path}")
    _checkpoint_at_spark_s_interval(path)


def replace_run(df: "DataFrame", path: str, run_id: str, partition_by: Sequence[str] = (), rows: Any = None) -> None:
    """Replace run ``run_id``'s rows of a per-run table with ``df`` in one commit (a rerun replaces its own).

    ``rows``: ``df`` already on the driver (:func:`driver_rows`), written with ``deltalake``'s
    predicate overwrite - the same one commit, and a concurrent writer of the same run conflicts and
    redoes it (:func:`with_commit_retry`); Spark's replaceWhere writes ``df`` when there are none
    or ``deltalake`` refuses the table.
    """
    if rows is not None:
        predicate = f"run_id = '{_standard_sql_str(run_id)}'"
        _with_deltalake_else_spark(
            lambda: with_commit_retry(lambda: _overwrite_with_deltalake(path, rows, predicate, partition_by),
                                      f"replace run {run_id!r} in {path}"),
            lambda: replace_run(df, path, run_id, partition_by), path)
        return
    replace_where(df, path, f"run_id = '{_sql_str(run_id)}'", partition_by)


def replace_where(df: "DataFrame", path: str, predicate: str, partition_by: Sequence[str] = ()) -> None:
    """Atomically replace the rows matching ``predicate`` with ``df`` (one Delta commit)."""
    spark = df.sparkSession
    writer = df.write.format("delta")
    if partition_by:
        writer = writer.partitionBy(*partition_by)

    def write() -> None:
        if table_exists(spark, path):
            writer.mode("overwrite").option("replaceWhere", predicate).save(path)
        else:  # first writer creates the table; a concurrent creator makes this retry as a replaceWhere
            writer.mode("append").save(path)

    with_commit_retry(write, f"replaceWhere {predicate!r} in {path}")


def upsert_rows(rows: Any, path: str, keys: Sequence[str], spark_frame: Callable[[], "DataFrame"],
                partition_by: Sequence[str] = ()) -> None:
    """Replace the stored rows of the keys ``rows`` (a pyarrow table) holds with ``rows``, in one commit.

    An upsert on string ``keys`` written as a predicate overwrite: ``deltalake`` replaces the rows
    matching the keys' values and adds ``rows`` in one commit; two writers of the same keys at once
    conflict (the later commit sees the other's added rows under its predicate) and the loser redoes
    its write (:func:`with_commit_retry`), so a key never holds two rows. ``spark_frame`` builds the
    same rows as a Spark DataFrame for Spark's replaceWhere, used only when ``deltalake`` refuses the
    table (e.g. a table feature it cannot write).
    """
    values = sorted({tuple(row[key] for key in keys) for row in rows.select(list(keys)).to_pylist()})
    for value in (v for key_values in values for v in key_values):
        if not isinstance(value, str):
            raise TypeError(f"upsert_rows keys must be strings, got {type(value).__name__} {value!r}")

    def predicate(quote: Callable[[str], str]) -> str:
        return " OR ".join(
            "(" + " AND ".join(f"{key} = '{quote(value)}'" for key, value in zip(keys, key_values, strict=True)) + ")"
            for key_values in values)

    _with_deltalake_else_spark(
        lambda: with_commit_retry(
            lambda: _overwrite_with_deltalake(path, rows, predicate(_standard_sql_str), partition_by),
            f"upsert of {rows.num_rows} rows into {path}"),
        lambda: replace_where(spark_frame(), path, predicate(_sql_str), partition_by),
        path)


def overwrite(df: "DataFrame", path: str) -> None:
    """Replace the whole table with ``df`` in one commit (its schema too): for tables that hold current
    state only, which a rerun recomputes whole."""
    write = df.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
    with_commit_retry(lambda: write.save(path), f"overwrite {path}")


def _overwrite_with_deltalake(path: str, rows: Any, predicate: str, partition_by: Sequence[str] = ()) -> None:
    """Replace the rows matching ``predicate`` with ``rows`` (a pyarrow table) in one ``deltalake``
    commit, creating the table empty first; the one predicate overwrite of ``runs`` and :func:`replace_run`."""
    from deltalake import write_deltalake

    _create_empty_with_deltalake(path, rows.schema, partition_by)
    write_deltalake(path, rows, mode="overwrite", predicate=predicate)
    _checkpoint_at_spark_s_interval(path)


def _checkpoint_at_spark_s_interval(path: str) -> None:
    """Write a checkpoint when the latest commit (a ``deltalake`` one) lands on the table's interval.

    Why: Spark checkpoints its own commits every ``delta.checkpointInterval`` (10 unless the table
    says otherwise), ``deltalake`` only every 100 of its own. A table most of whose commits are now
    ``deltalake``'s would otherwise grow a log of JSON commits that every Spark reader and every
    new snapshot replays from the last checkpoint. Only an optimisation: a failure is logged, the
    write it follows stands.
    """
    from deltalake import DeltaTable

    try:
        table = DeltaTable(path)
        interval = int(table.metadata().configuration.get("delta.checkpointInterval") or 10)
        version = table.version()
        written = os.path.exists(os.path.join(path, "_delta_log", f"{version:020d}.checkpoint.parquet"))
        if interval > 0 and version > 0 and version % interval == 0 and not written:
            table.create_checkpoint()
    except Exception as error:  # noqa: BLE001 - the next commit on the interval tries again
        log.warning("no checkpoint of %s (%s: %s)", path, type(error).__name__, error)


def _create_empty_with_deltalake(path: str, schema: Any, partition_by: Sequence[str] = ()) -> None:
    """Create an empty table of ``schema`` unless one exists.

    Why empty first: a write that creates the table reads nothing, so ``deltalake`` commits it,
    should another writer create the table first, as a plain append after that one - two rows for
    one key. Creating an empty table is harmless twice; every row is then written into an existing
    table, where a concurrent writer of the same keys is a conflict. Every column is nullable, as
    in the tables Spark creates: the table contract is the same whichever engine wrote first.
    """
    import pyarrow as pa
    from deltalake import DeltaTable

    if DeltaTable.is_deltatable(path):
        return
    nullable = pa.schema([column.with_nullable(True) for column in schema])
    try:
        DeltaTable.create(path, schema=nullable, mode="ignore", partition_by=list(partition_by) or None)
    except Exception:
        if not DeltaTable.is_deltatable(path):
            raise  # not a lost creation race


def _sql_str(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


def _standard_sql_str(value: str) -> str:
    """A string literal's body in standard SQL (``deltalake``'s predicates): a quote is doubled."""
    return value.replace("'", "''")


def rating_column(events: "DataFrame") -> "Column":
    """The events' ``rating``; null on every row of a table without the column (written by hand, or
    before the column existed), so the feedback levels then come from the label."""
    from pyspark.sql import functions as F

    return F.col("rating") if "rating" in events.columns else F.lit(None).cast("double").alias("rating")


def events_until(
    spark: "SparkSession", config: SolarisConfig, as_of: datetime, since: datetime | None = None
) -> pd.DataFrame:
    """pandas frame ``user_id, item_id, ts (epoch s), label, rating`` of events with ``since < ts <= as_of``.

    The point-in-time rule of docs/architecture.md §2 in one place: jobs at ``as_of`` never see later events.
    """
    from pyspark.sql import functions as F

    events = spark.read.format("delta").load(config.table_path("events"))
    condition = F.col("ts") <= F.lit(as_of)
    if since is not None:
        condition &= F.col("ts") > F.lit(since)
    return events.where(condition).select("user_id", "item_id", F.unix_seconds("ts").alias("ts"), "label",
                                          rating_column(events)).toPandas()


def events_until_on_driver(config: SolarisConfig, as_of: datetime) -> pd.DataFrame | None:
    """:func:`events_until` (``since`` unset) read with ``deltalake`` on the driver, no Spark; ``None``
    when the events table is not a local folder or ``deltalake`` cannot read it (the caller then asks Spark).

    Why: a caller that turns every event into driver arrays anyway (the evaluation) needs no Spark job
    for it, and without one a rerun that finds every result already computed starts no JVM at all.
    Same rule and columns as :func:`events_until`: ``ts`` as whole epoch seconds (Spark's
    ``unix_seconds``: the floor of the microseconds).
    """
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.dataset as ds

    path = config.table_path("events")
    if not os.path.isdir(path):
        return None
    try:
        from deltalake import DeltaTable

        stamp = as_of if as_of.tzinfo is not None else as_of.replace(tzinfo=timezone.utc)
        dataset = DeltaTable(path).to_pyarrow_dataset()
        columns = ["user_id", "item_id", "ts", "label", *(["rating"] if "rating" in dataset.schema.names else [])]
        table = dataset.to_table(columns=columns, filter=ds.field("ts") <= stamp)
        micros = table.column("ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_numpy()
        return pd.DataFrame({"user_id": table.column("user_id").to_numpy(),
                             "item_id": table.column("item_id").to_numpy(),
                             "ts": np.floor_divide(micros, 1_000_000), "label": table.column("label").to_numpy(),
                             "rating": (table.column("rating").to_numpy(zero_copy_only=False) if "rating" in columns
                                        else np.full(table.num_rows, np.nan))})
    except Exception as error:  # noqa: BLE001 - e.g. a reader feature deltalake lacks: Spark can
        log.warning("deltalake could not read %s (%s: %s); reading it with Spark instead", path,
                    type(error).__name__, error)
        return None


def register_decoded_view(spark: "SparkSession", path: str) -> "DataFrame":
    """Temp view ``pair_embeddings_decoded``: the table plus ``embedding_array`` (array<float>)."""
    from solaris.storage.sql import SQL_DIR

    spark.read.format("delta").load(path).createOrReplaceTempView("pair_embeddings_raw")
    statement = "\n".join(
        line for line in (SQL_DIR / "pair_embeddings_view.sql").read_text().splitlines() if not line.startswith("--")
    )
    spark.sql(statement)
    return spark.table("pair_embeddings_decoded")


def training_events(spark: "SparkSession", config: SolarisConfig, as_of: datetime) -> pd.DataFrame:
    """Events up to ``as_of`` for a training job, refused when there are none."""
    return refuse_no_events(events_until(spark, config, as_of), config, as_of)


def refuse_no_events(frame: pd.DataFrame, config: SolarisConfig, as_of: datetime) -> pd.DataFrame:
    """``frame`` (events up to ``as_of``), refused when it holds none: a training job has nothing to learn."""
    from solaris.runtime import JobInputError

    if frame.empty:
        raise JobInputError(f"no events with ts <= {as_of.isoformat()} in {config.table_path('events')}")
    return frame
