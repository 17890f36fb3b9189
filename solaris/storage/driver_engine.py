"""The driver engine: reads and writes of a Delta table with ``deltalake`` and pyarrow, no Spark.

Used by :class:`solaris.storage.table.Table` when :func:`solaris.storage.engine.choose_engine` says
the driver. The same rules and guarantees as the Spark engine's: one commit per write, a lost
commit race redone (:func:`with_commit_retry`), tables created empty first so that every row is
merged into an existing table, every column nullable as in the tables Spark creates. A method that
returns None could not do the access (a table feature ``deltalake`` or pyarrow lacks): the caller
asks Spark.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Sequence
from urllib.parse import unquote, urlparse

from solaris.storage.delta_log import DeltaLog, may_hold_mask
from solaris.storage.engine import standard_sql_str, with_commit_retry
from solaris.storage.spark_engine import NEWER_ROW, same_key

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


class DriverEngine:
    """Delta reads and writes on the driver (``deltalake``, pyarrow); stateless."""

    @staticmethod
    def read(path: str, columns: Sequence[str] | None = None, where: Any = None, version: int | None = None, *,
             optional: Sequence[str] = ()) -> Any:
        """``columns`` (None: all; those of ``optional`` only if the table has them) of the rows matching
        the Arrow filter ``where``, at ``version``, as a pyarrow table; None when ``deltalake`` cannot
        read the table."""
        try:
            from deltalake import DeltaTable

            dataset = DeltaTable(path, version=version).to_pyarrow_dataset()
            wanted = None if columns is None else [column for column in columns
                                                   if column not in optional or column in dataset.schema.names]
            return dataset.to_table(columns=wanted, filter=where)
        except Exception as error:  # noqa: BLE001 - e.g. a reader feature deltalake lacks: Spark can
            log.warning("deltalake could not read %s (%s: %s); reading it with Spark instead", path,
                        type(error).__name__, error)
            return None

    @staticmethod
    def run_rows(path: str, run_id: str, columns: Sequence[str]) -> Any:
        """``columns`` of run ``run_id``'s rows, as a pyarrow table, or None (Spark reads them).

        The live files come from the log, the files whose ``run_id`` statistics exclude the run are
        skipped, and the rest are read with pyarrow from their local paths. None for files with
        deletion vectors or without ``run_id`` statistics, a partition column in ``columns``, and
        anything pyarrow cannot read (e.g. a table with column mapping).
        """
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        try:
            files = DeltaLog(path).files()
        except Exception:  # noqa: BLE001 - a table feature deltalake cannot read: Spark can
            return None
        names = files.column_names
        vectors = [name for name in names if name.startswith("deletionVector")]
        if ("min.run_id" not in names or "max.run_id" not in names
                or any(f"partition.{column}" in names for column in columns)
                or any(files.column(name).null_count < files.num_rows for name in vectors)):
            return None
        parts = []
        try:
            for entry in files.filter(may_hold_mask(files, "run_id", run_id)).column("path").to_pylist():
                local = urlparse(entry).path if "://" in entry else os.path.join(path, unquote(entry))
                part = pq.read_table(local, columns=sorted({*columns, "run_id"}), partitioning=None)
                # Delta writers differ in how they store a column: deltalake's MERGE as string_view (which
                # pyarrow's filter cannot take yet), a driver write with the frame's non-null flags
                part = part.cast(pa.schema([(field.with_type(pa.string()) if field.type == pa.string_view()
                                             else field).with_nullable(True) for field in part.schema]))
                parts.append(part.filter(pc.equal(part.column("run_id"), run_id)).select(list(columns)))
            if not parts:
                return pa.table({name: pa.array([], pa.null()) for name in columns})
            return pa.concat_tables(parts)
        except (OSError, ValueError, KeyError, pa.ArrowException):  # e.g. column mapping: other physical names
            return None

    @staticmethod
    def merge_newer(rows: Any, path: str, keys: Sequence[str], partition_by: Sequence[str] = ()) -> None:
        """MERGE ``rows`` (a pyarrow table) on ``keys`` by the newer-run rule of :class:`SparkEngine.merge_newer`."""
        from deltalake import DeltaTable

        def write() -> None:
            create_empty(path, rows.schema, partition_by)
            (DeltaTable(path).merge(source=rows, predicate=same_key(keys), source_alias="s", target_alias="t")
             .when_matched_update_all(predicate=NEWER_ROW)
             .when_not_matched_insert_all()
             .execute())

        with_commit_retry(write, f"merge into {path}")
        checkpoint_at_spark_s_interval(path)

    @staticmethod
    def replace(rows: Any, path: str, predicate: str, partition_by: Sequence[str] = ()) -> None:
        """Replace the rows matching the standard-SQL ``predicate`` with ``rows`` in one commit."""
        from deltalake import write_deltalake

        def write() -> None:
            create_empty(path, rows.schema, partition_by)
            write_deltalake(path, rows, mode="overwrite", predicate=predicate)

        with_commit_retry(write, f"replace {predicate[:80]!r} in {path}")
        checkpoint_at_spark_s_interval(path)

    @staticmethod
    def replace_run(rows: Any, path: str, run_id: str, partition_by: Sequence[str] = ()) -> None:
        DriverEngine.replace(rows, path, f"run_id = '{standard_sql_str(run_id)}'", partition_by)

    @staticmethod
    def to_spark(spark: SparkSession, rows: Any) -> DataFrame:
        """Rows on the driver (a pyarrow table) as a Spark frame; the view and large variants of strings,
        binaries and lists ``deltalake`` may hand back are cast to the plain types Spark maps."""
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


def checkpoint_at_spark_s_interval(path: str) -> None:
    """Write a checkpoint when the latest commit (a ``deltalake`` one) lands on the table's interval.

    Why: Spark checkpoints its own commits every ``delta.checkpointInterval`` (10 unless the table
    says otherwise), ``deltalake`` only every 100 of its own. A table most of whose commits are
    ``deltalake``'s would otherwise grow a log of JSON commits that every Spark reader replays from
    the last checkpoint. Only an optimisation: a failure is logged, the write it follows stands.
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


def create_empty(path: str, schema: Any, partition_by: Sequence[str] = ()) -> None:
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
