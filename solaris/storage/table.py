"""One table of the warehouse as a tick's stages use it: its write rule, and every read and write of it.

Why a class: each tick table is written by one rule (docs/architecture.md §4) - a MERGE on its key
where a newer ``computed_at`` wins and the same run changes nothing, or one atomic replacement of
the run's rows - with the same keys, partitions and row order wherever it is written. The rules are
stated once, in :data:`WRITE_RULES`, and a stage says only *what* it writes: ``Table.of(spark,
config, "imputed_embeddings").write(frame, run_id)``.

Which engine performs an access is decided here too, by one rule: a write small enough to collect
(at most ``spark.driver_max_rows`` rows; none collected when a count says it is larger) is
collected once and written with ``deltalake`` from the driver; anything larger, or refused by
``deltalake`` (a table feature it lacks), is written by Spark. Reads back of a run's rows and of the
rows servable at an as-of take the files straight from the Delta log when the table is a local
folder, Spark otherwise. The primitives live in :mod:`solaris.storage.tables`; the time rules
(servable at, expiry) in :mod:`solaris.storage.validity`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Literal, Sequence

from solaris.storage.tables import (
    arrow_frame,
    commit_metrics,
    driver_rows,
    driver_table,
    merge_if_new_run,
    merge_into,
    merge_rows_if_new_run,
    none_at_or_below,
    overwrite,
    replace_run,
    replace_where,
    run_rows,
    servable_rows,
    table_exists,
    table_rows,
    table_version,
    upsert_rows,
    with_commit_retry,
)
from solaris.storage.validity import servable_column, servable_filter

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

    from solaris.config import SolarisConfig


@dataclass(frozen=True)
class WriteRule:
    """How a run's rows enter a table.

    ``merge_newer``: upsert on ``keys``; a row of a later ``computed_at`` replaces the stored one, a
    row of the same run leaves it untouched (reruns are no-ops, a late older run never overwrites a
    newer one). ``replace_run``: the run's rows are replaced in one commit (a rerun replaces its own).
    ``replace_where``: the rows of a predicate the writer names are replaced in one commit.
    ``overwrite``: the whole table is replaced (it holds current state, recomputed whole by each run).
    ``upsert``: MERGE on ``keys``, the incoming row replacing a stored one of the same key (ingest's
    events and id map: a re-ingest of the same input changes nothing; the ``runs`` audit: a rerun's
    row replaces the earlier one).
    ``order_by``: the order of the rows in a driver write. Spark hands collected rows over in no fixed
    order, and the file's order is the order the next stage reads them in (e.g. the FM's batches,
    whose float rounding depends on which rows share a batch): sorted, a rerun writes the same file.
    """

    kind: Literal["merge_newer", "replace_run", "replace_where", "overwrite", "upsert"]
    keys: tuple[str, ...] = ()
    partition_by: tuple[str, ...] = ()
    order_by: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind in ("merge_newer", "upsert") and not self.keys:
            raise ValueError(f"a {self.kind} table needs its key columns")


# Every table the pipeline writes, by name (config.table_path), with its rule.
WRITE_RULES: dict[str, WriteRule] = {
    "candidates": WriteRule("replace_run", partition_by=("run_date",), order_by=("user_id", "item_id")),
    "pair_embeddings": WriteRule("merge_newer", keys=("user_id", "item_id"), partition_by=("expiry_bucket",),
                                 order_by=("user_id", "item_id")),
    "pair_embeddings_log": WriteRule("replace_run", partition_by=("computed_date",), order_by=("user_id", "item_id")),
    "user_embeddings": WriteRule("merge_newer", keys=("user_id",), order_by=("user_id",)),
    "imputed_embeddings": WriteRule("merge_newer", keys=("user_id",), order_by=("user_id",)),
    "item_embeddings": WriteRule("merge_newer", keys=("item_id",), order_by=("item_id",)),
    "imputed_item_embeddings": WriteRule("merge_newer", keys=("item_id",)),  # computed on the driver
    "user_neighbors": WriteRule("overwrite"),
    # the item-item statistics of the periods a run computed, and the expired periods, in one commit
    "item_statistics": WriteRule("replace_where", partition_by=("stats_key",)),
    # ingest: the validated events and the raw-id map of hashed inputs
    "events": WriteRule("upsert", keys=("event_id",), partition_by=("event_date",)),
    "id_map": WriteRule("upsert", keys=("namespace", "raw_id")),
    # the audit tables every stage writes (solaris.storage.audit): a (source table, run)'s rejected
    # rows replaced whole, and one row per (run, job)
    "quarantine": WriteRule("replace_where", partition_by=("run_date",)),
    "runs": WriteRule("upsert", keys=("run_id", "job")),
}

class _Collect:
    """The type of :data:`COLLECT`."""


# Table.write's default ``rows``: collect them there when they are few enough (the engine rule above).
COLLECT = _Collect()


@dataclass(frozen=True)
class Table:
    """A Delta table at ``path`` written by ``rule`` (None: read-only here), with the driver-write bound."""

    spark: SparkSession
    name: str
    path: str
    rule: WriteRule | None
    driver_max_rows: int

    @classmethod
    def of(cls, spark: SparkSession, config: SolarisConfig, name: str) -> Table:
        return cls(spark, name, config.table_path(name), WRITE_RULES.get(name), config.spark.driver_max_rows)

    def exists(self) -> bool:
        return table_exists(self.spark, self.path)

    def version(self) -> int | None:
        """The latest committed version, or None before the first write (from the log, no Spark job)."""
        return table_version(self.spark, self.path)

    def run_rows(self, run_id: str, columns: Sequence[str] = ("run_id",)) -> Any:
        """``columns`` of the rows run ``run_id`` holds, as a pyarrow table: what a write left for the run
        (on a rerun, the first run's rows), which the stages report."""
        return run_rows(self.spark, self.path, run_id, columns)

    def frame(self, columns: Sequence[str] | None = None, *, servable_at: datetime | None = None) -> DataFrame:
        """The table (only its rows servable at ``servable_at`` when given) as a Spark DataFrame.

        Why not always Spark's reader: before planning a scan it brings the table's snapshot up to
        date and filters its files with Spark jobs, seconds for a table of a few thousand rows that
        the tick has just committed to. So a local table of at most ``spark.driver_max_rows`` rows
        (from the log's statistics) is read on the driver with ``deltalake`` and handed to Spark as
        Arrow (:func:`driver_table`); anything larger, not local, or that ``deltalake`` cannot read
        is read by Spark. For small current-state tables (impute's inputs): a frame made from Arrow
        carries no size statistics, so Spark never broadcasts it and plans a large one's joins worse.
        """
        rows = driver_table(self.path, self.driver_max_rows, columns,
                            None if servable_at is None else servable_filter(servable_at))
        if rows is not None:
            return arrow_frame(self.spark, rows)
        frame = self.spark.read.format("delta").load(self.path)
        if servable_at is not None:
            frame = frame.where(servable_column(servable_at))
        return frame if columns is None else frame.select(*columns)

    def servable_rows(self, as_of: datetime, columns: Sequence[str]) -> Any:
        """``columns`` of the rows servable at ``as_of``, as a pyarrow table (small tables only)."""
        return servable_rows(self.spark, self.path, as_of, columns)

    def collect(self, frame: DataFrame, expected_rows: int | None = None) -> Any:
        """``frame``'s rows on the driver, in the rule's order, or None when there are too many (Spark
        writes them). ``expected_rows``: a count the stage made anyway, so a larger write is not even
        collected. For a stage writing the same rows to two tables, collected once."""
        return driver_rows(frame, self.driver_max_rows, expected_rows, self._rule().order_by)

    def write(self, frame: DataFrame, run_id: str, *, rows: Any = COLLECT, expected_rows: int | None = None) -> None:
        """Write run ``run_id``'s rows ``frame`` by the table's rule.

        ``rows``: the same rows already on the driver (from :meth:`collect`), or None to have Spark
        write ``frame``; by default they are collected here when few enough.
        """
        rule = self._rule()
        if rule.kind == "overwrite":
            overwrite(frame, self.path)
            return
        if rule.kind == "replace_where":
            raise ValueError(f"{self.name} is written by replace_where(frame, predicate)")
        if rule.kind == "upsert":
            merge_into(frame, self.path, list(rule.keys), list(rule.partition_by))
            return
        collected = self.collect(frame, expected_rows) if rows is COLLECT else rows
        if rule.kind == "merge_newer":
            merge_if_new_run(frame, self.path, list(rule.keys), list(rule.partition_by), rows=collected)
        else:
            replace_run(frame, self.path, run_id, list(rule.partition_by), rows=collected)

    def replace_where(self, frame: DataFrame, predicate: str) -> None:
        """Replace the rows matching the Spark SQL ``predicate`` with ``frame`` in one commit."""
        rule = self._rule()
        if rule.kind != "replace_where":
            raise ValueError(f"{self.name} is written by its {rule.kind} rule, not by a predicate")
        replace_where(frame, self.path, predicate, list(rule.partition_by))

    def write_rows(self, rows: Any) -> None:
        """Merge rows computed on the driver (a pyarrow table) by the table's rule, with ``deltalake``."""
        rule = self._rule()
        if rule.kind != "merge_newer":
            raise ValueError(f"{self.name}: only merge_newer tables take driver rows alone")
        merge_rows_if_new_run(rows, self.path, list(rule.keys), list(rule.partition_by))

    def upsert_rows(self, rows: Any, spark_frame: Callable[[], DataFrame]) -> None:
        """Upsert rows built on the driver (a pyarrow table, string keys) with ``deltalake``
        (:func:`upsert_rows`); ``spark_frame`` gives them to Spark if ``deltalake`` refuses the table."""
        rule = self._rule()
        if rule.kind != "upsert":
            raise ValueError(f"{self.name} is written by its {rule.kind} rule, not by an upsert")
        upsert_rows(rows, self.path, list(rule.keys), spark_frame, list(rule.partition_by))

    def any_rows(self, predicate: str) -> bool:
        """Whether a row matches the Spark SQL ``predicate`` (a Spark scan, files pruned by the log's statistics)."""
        return not self.spark.read.format("delta").load(self.path).where(predicate).isEmpty()

    def row_count(self) -> int:
        """Rows of the latest version, from the log's statistics (no Spark job)."""
        return table_rows(self.path)

    def delete_where(self, predicate: str, *, bounded_by: tuple[str, datetime] | None = None) -> int:
        """Delete the rows matching the Spark SQL ``predicate`` in one commit (redone on a concurrent
        commit, as every write here); the rows it removed, from the commit's own metrics rather than a
        counting job first (Delta commits nothing when no row matches).

        ``bounded_by``: ``(column, bound)`` such that the predicate matches only rows with ``column <=
        bound``. When the log's statistics show no live row there (:func:`none_at_or_below`), nothing
        can match and no Spark job runs: an hourly expiry usually has nothing due in the first TTL
        hours, and a Spark DELETE that matches nothing still plans and scans the table.
        """
        from delta.tables import DeltaTable

        if bounded_by is not None and none_at_or_below(self.path, *bounded_by):
            return 0
        before = self.version()
        with_commit_retry(lambda: DeltaTable.forPath(self.spark, self.path).delete(predicate),
                          f"delete {predicate!r} from {self.path}")
        return commit_metrics(self.path, before, "DELETE").get("numDeletedRows", 0)

    def compact_where(self, predicate: str) -> None:
        """OPTIMIZE (bin-packing compaction) of the files matching the partition ``predicate``."""
        from delta.tables import DeltaTable

        with_commit_retry(lambda: DeltaTable.forPath(self.spark, self.path).optimize().where(predicate)
                          .executeCompaction(), f"optimize {self.path}")

    def vacuum(self) -> None:
        """VACUUM with Delta's default retention: the 7-day guard stays on."""
        from delta.tables import DeltaTable

        DeltaTable.forPath(self.spark, self.path).vacuum()

    def _rule(self) -> WriteRule:
        if self.rule is None:
            raise ValueError(f"{self.name} has no write rule in solaris.storage.table.WRITE_RULES")
        return self.rule
