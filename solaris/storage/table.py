"""The storage API: a Delta table of the warehouse, every read and write of it, by its write rule.

Why a class: each table is written by one rule (docs/architecture.md §4) - a MERGE on its key where
a newer ``computed_at`` wins and the same run changes nothing, one atomic replacement of the run's
rows, an upsert on its key, or a whole replacement - with the same keys, partitions and row order
wherever it is written. The rules are stated once, in :data:`WRITE_RULES`, and a stage says only
*what* it writes: ``Table.of(spark, config, "imputed_embeddings").write(frame, run_id)``.

Every access goes to one of two engines (:class:`~solaris.storage.spark_engine.SparkEngine`,
:class:`~solaris.storage.driver_engine.DriverEngine`), the one :func:`~solaris.storage.engine.choose_engine`
names for it; what the transaction log alone answers (version, counts, statistics) is read by
:class:`~solaris.storage.delta_log.DeltaLog`. The time rules (servable at, expiry) are
:mod:`solaris.storage.validity`'s. The events reader is :class:`solaris.storage.events.Events`, the
audit log :class:`solaris.storage.audit.RunsLog`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, Sequence, Union

from solaris.config import StorageConfig
from solaris.storage.delta_log import DeltaLog
from solaris.storage.driver_engine import DriverEngine
from solaris.storage.engine import Access, Engine, choose_engine, is_commit_conflict, sql_str, standard_sql_str
from solaris.storage.spark_engine import SparkEngine
from solaris.storage.sql import SQL_DIR
from solaris.storage.validity import servable_column, servable_filter

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

    from solaris.config import SolarisConfig

log = logging.getLogger(__name__)

# A Spark session, a function that starts one when first needed (a caller that may need none), or None.
SparkSource = Union["SparkSession", Callable[[], "SparkSession"], None]


@dataclass(frozen=True)
class WriteRule:
    """How a run's rows enter a table.

    ``merge_newer``: upsert on ``keys``; a row of a later ``computed_at`` replaces the stored one, a
    row of the same run leaves it untouched (reruns are no-ops, a late older run never overwrites a
    newer one). ``replace_run``: the run's rows are replaced in one commit (a rerun replaces its own).
    ``replace_where``: the rows of a predicate the writer names are replaced in one commit.
    ``overwrite``: the whole table is replaced (it holds current state, recomputed whole by each run).
    ``upsert``: MERGE on ``keys``, the incoming row replacing a stored one of the same key (ingest's
    id map: a re-ingest of the same input changes nothing; the ``runs`` audit: a rerun's row
    replaces the earlier one).
    ``insert_new``: MERGE on ``keys`` that only inserts the rows whose key is not stored; a stored
    row is never rewritten (ingest's events). Why: events are immutable facts, and the stream reads
    the table's appends (Delta's streaming source with ``skipChangeCommits``), which skips a commit
    that rewrites files whole, the new rows in it included. Delta commits an insert-only MERGE as
    an append, so a re-ingest overlapping stored events still hands its new ones to the stream. The
    price: a corrected event whose key is stored is not applied (delete the stored row first). The
    writer hands over rows unique on ``keys`` (two new rows of one key would both be inserted).
    ``order_by``: the order of the rows in a driver write. Spark hands collected rows over in no fixed
    order, and the file's order is the order the next stage reads them in (e.g. the FM's batches,
    whose float rounding depends on which rows share a batch): sorted, a rerun writes the same file.
    """

    kind: Literal["merge_newer", "replace_run", "replace_where", "overwrite", "upsert", "insert_new"]
    keys: tuple[str, ...] = ()
    partition_by: tuple[str, ...] = ()
    order_by: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind in ("merge_newer", "upsert", "insert_new") and not self.keys:
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
    # ingest: the validated events (insert-only: immutable, and read as appends by the stream) and
    # the raw-id map of hashed inputs
    "events": WriteRule("insert_new", keys=("event_id",), partition_by=("event_date",)),
    "id_map": WriteRule("upsert", keys=("namespace", "raw_id")),
    # the audit tables every stage writes (solaris.storage.audit): a (source table, run)'s rejected
    # rows replaced whole, and one row per (run, job)
    "quarantine": WriteRule("replace_where", partition_by=("run_date",)),
    "runs": WriteRule("upsert", keys=("run_id", "job")),
}


class _Collect:
    """The type of :data:`COLLECT`."""


# Table.write's default ``rows``: collect them there when the engine rule sends the write to the driver.
COLLECT = _Collect()


@dataclass(frozen=True)
class Table:
    """The Delta table ``name`` at ``path``, written by ``rule`` (None: read-only here).

    Contract: reads never see a half-written commit; every write is one commit by the table's rule,
    idempotent for its run and redone on a lost commit race; each access runs on the engine
    :func:`choose_engine` names (``storage.driver_max_rows`` bounds the driver's share), and a driver
    access ``deltalake`` refuses is redone by Spark. ``spark`` may be a function starting a session
    on first use, or None for a process without Spark (then everything runs on the driver).

    >>> pairs = Table.of(spark, config, "pair_embeddings")
    >>> pairs.write(frame, run_id)                       # MERGE, the newer run wins
    >>> pairs.run_rows(run_id).num_rows                  # what the run left in the table
    >>> pairs.frame(servable_at=as_of)                   # a Spark frame of the servable rows
    """

    spark: SparkSource
    name: str
    path: str
    rule: WriteRule | None
    storage: StorageConfig = field(default_factory=StorageConfig)

    @classmethod
    def of(cls, spark: SparkSource, config: SolarisConfig, name: str) -> Table:
        """The warehouse table ``name`` (a field of ``config.tables``) with its write rule."""
        return cls(spark, name, config.table_path(name), WRITE_RULES.get(name), config.storage)

    @classmethod
    def at(cls, path: str, *, spark: SparkSource = None, storage: StorageConfig | None = None,
           rule: WriteRule | None = None) -> Table:
        """A table at any ``path`` (a pinned snapshot's, a copy's, a benchmark's scratch table)."""
        return cls(spark, path.rstrip("/").rsplit("/", 1)[-1], path, rule, storage or StorageConfig())

    # --- the log (deltalake on the driver, whichever engine reads the data) ---------------------------

    @property
    def log(self) -> DeltaLog:
        """The table's transaction log: version, row counts, partitions, per-file statistics."""
        return DeltaLog(self.path)

    def exists(self) -> bool:
        """Whether a table has been committed at the path (asked before most reads and writes: Spark's
        ``isDeltaTable`` would bring the snapshot up to date each time)."""
        if self.engine_for(Access.LOG) is Engine.DRIVER:
            try:
                return self.version() is not None
            except Exception:  # a reader feature deltalake lacks: Spark can
                if self.spark is None:
                    raise
        return self._spark().exists(self.path)

    def version(self) -> int | None:
        """The latest committed version, or None before the first write."""
        return self.log.version()

    def row_count(self, version: int | None = None) -> int:
        """Rows at ``version`` (None: the latest) from the log's statistics, the files' own counts if missing."""
        logged = self.log.row_count(version)
        if logged is not None:
            return logged
        from deltalake import DeltaTable  # pragma: no cover - every writer here records the statistic

        return int(DeltaTable(self.path, version=version).to_pyarrow_dataset().count_rows())  # pragma: no cover

    # --- reads ----------------------------------------------------------------------------------------

    def scan(self, version: int | None = None) -> DataFrame:
        """The table (at ``version``) as a lazy Spark frame to build a plan on: always Spark."""
        self.engine_for(Access.SPARK_PLAN)
        return self._spark().scan(self.path, version)

    def changes(self, *, starting_version: int, max_files_per_trigger: int) -> DataFrame:
        """The rows the table's commits add from ``starting_version`` on, as a Spark streaming frame
        (``spark.readStream``): always Spark. The query's checkpoint, not this call, records how far
        it got; ``max_files_per_trigger`` bounds the files of one micro-batch.

        A commit that rewrites stored rows (a MERGE that updated some, a DELETE) is skipped whole
        (Delta's ``skipChangeCommits``): only appended rows are new to a reader of changes. Hence
        ``events``' ``insert_new`` rule, whose MERGE Delta commits as an append.
        """
        self.engine_for(Access.SPARK_PLAN)
        return self._spark().changes(self.path, starting_version=starting_version,
                                     max_files_per_trigger=max_files_per_trigger)

    def frame(self, columns: Sequence[str] | None = None, *, servable_at: datetime | None = None) -> DataFrame:
        """The table (only its rows servable at ``servable_at`` when given) as a Spark frame.

        Why not always Spark's reader: before planning a scan it brings the table's snapshot up to
        date and filters its files with Spark jobs, seconds for a table of a few thousand rows the
        tick has just committed to; a small local table is read by ``deltalake`` and handed to Spark
        as Arrow. For small current-state tables (impute's inputs): a frame made from Arrow carries
        no size statistics, so Spark never broadcasts it and plans a large one's joins worse.
        """
        if self.engine_for(Access.FRAME, count=lambda _: self._logged_rows()) is Engine.DRIVER:
            rows = DriverEngine.read(self.path, columns, None if servable_at is None else servable_filter(servable_at))
            if rows is not None:
                return DriverEngine.to_spark(self.session(), rows)
        frame = self._spark().scan(self.path)
        if servable_at is not None:
            frame = frame.where(servable_column(servable_at))
        return frame if columns is None else frame.select(*columns)

    def rows(self, columns: Sequence[str] | None = None, *, equal: Mapping[str, object] | None = None,
             version: int | None = None) -> Any:
        """``columns`` of the rows (at ``version``) whose columns equal the values of ``equal``, as a
        pyarrow table on the driver."""
        def spark_filter() -> Any:
            from pyspark.sql import functions as F

            return [F.col(column) == value for column, value in (equal or {}).items()]

        where = None
        if equal:
            import pyarrow.dataset as ds

            for column, value in equal.items():
                clause = ds.field(column) == value
                where = clause if where is None else where & clause
        return self._driver_rows(lambda: DriverEngine.read(self.path, columns, where, version),
                                 spark_filter, columns, version)

    def servable_rows(self, as_of: datetime, columns: Sequence[str], *, version: int | None = None) -> Any:
        """``columns`` of the rows servable at ``as_of`` (``computed_at <= as_of < expires_at``), at
        ``version``, as a pyarrow table on the driver."""
        return self._driver_rows(lambda: DriverEngine.read(self.path, columns, servable_filter(as_of), version),
                                 lambda: [servable_column(as_of)], columns, version)

    def run_rows(self, run_id: str, columns: Sequence[str] = ("run_id",)) -> Any:
        """``columns`` of the rows run ``run_id`` holds, as a pyarrow table: what a write left for the run
        (on a rerun, the first run's rows), which the stages report. On the driver only the files
        whose statistics admit the run are read."""
        def spark_filter() -> Any:
            return [f"run_id = '{sql_str(run_id)}'"]

        return self._driver_rows(lambda: DriverEngine.run_rows(self.path, run_id, columns), spark_filter, columns)

    def any_rows(self, predicate: str) -> bool:
        """Whether a row matches the Spark SQL ``predicate`` (a Spark scan, files pruned by the log's statistics)."""
        return not self.scan().where(predicate).isEmpty()

    def decoded_view(self) -> DataFrame:
        """Temp view ``pair_embeddings_decoded``: the table plus ``embedding_array`` (array<float>)
        (``sql/pair_embeddings_view.sql``)."""
        self.scan().createOrReplaceTempView("pair_embeddings_raw")
        statement = "\n".join(line for line in (SQL_DIR / "pair_embeddings_view.sql").read_text().splitlines()
                              if not line.startswith("--"))
        session = self.session()
        session.sql(statement)
        return session.table("pair_embeddings_decoded")

    # --- writes ---------------------------------------------------------------------------------------

    def collect(self, frame: DataFrame, expected_rows: int | None = None) -> Any:
        """``frame``'s rows on the driver, in the rule's order, or None: the engine rule sends the write
        to Spark. ``expected_rows``: a count the stage made anyway, so a larger write is not even
        collected; without it at most the bound + 1 rows are collected. For a stage writing the same
        rows to two tables, collected once.

        ``order_by``: Spark hands collected rows over in no fixed order, and the written file's order
        is the order the next stage reads them in (e.g. the FM's batches, whose float rounding depends
        on which rows share a batch): sorted, a rerun writes the same file.
        """
        limited: list[Any] = []

        def count(limit: int) -> int:
            limited.append(frame.limit(limit).toArrow())
            return int(limited[0].num_rows)

        if self.engine_for(Access.WRITE_FRAME, rows=expected_rows, count=count) is Engine.SPARK:
            return None
        rows = limited[0] if limited else frame.toArrow()
        if not limited and self.engine_for(Access.WRITE_FRAME, rows=rows.num_rows) is Engine.SPARK:
            return None  # the count the stage passed was short
        order_by = self._rule().order_by
        return rows.sort_by([(column, "ascending") for column in order_by]) if order_by else rows

    def write(self, frame: DataFrame, run_id: str, *, rows: Any = COLLECT, expected_rows: int | None = None) -> None:
        """Write run ``run_id``'s rows ``frame`` by the table's rule.

        ``rows``: the same rows already on the driver (from :meth:`collect`), or None to have Spark
        write ``frame``; by default they are collected here when the engine rule says so.
        """
        rule, keys, parts = self._rule(), list(self._rule().keys), list(self._rule().partition_by)
        if rule.kind == "replace_where":
            raise ValueError(f"{self.name} is written by replace_where(frame, predicate)")
        if rule.kind in ("overwrite", "upsert", "insert_new"):
            self.engine_for(Access.SPARK_PLAN)
            if rule.kind == "overwrite":
                self._spark().overwrite(frame, self.path)
            elif rule.kind == "insert_new":
                self._spark().insert_new(frame, self.path, keys, parts)
            else:
                self._spark().upsert(frame, self.path, keys, parts)
            return
        collected = self.collect(frame, expected_rows) if rows is COLLECT else rows
        spark = self._spark_of(frame)
        if rule.kind == "merge_newer":
            self._driver_else_spark(None if collected is None else
                                    lambda: DriverEngine.merge_newer(collected, self.path, keys, parts),
                                    lambda: spark.merge_newer(frame, self.path, keys, parts))
        else:
            self._driver_else_spark(None if collected is None else
                                    lambda: DriverEngine.replace_run(collected, self.path, run_id, parts),
                                    lambda: spark.replace_where(frame, self.path, f"run_id = '{sql_str(run_id)}'",
                                                                parts))

    def replace_where(self, frame: DataFrame, predicate: str) -> None:
        """Replace the rows matching the Spark SQL ``predicate`` with ``frame`` in one commit (Spark)."""
        rule = self._rule()
        if rule.kind != "replace_where":
            raise ValueError(f"{self.name} is written by its {rule.kind} rule, not by a predicate")
        self.engine_for(Access.SPARK_PLAN)
        self._spark_of(frame).replace_where(frame, self.path, predicate, list(rule.partition_by))

    def write_rows(self, rows: Any) -> None:
        """Merge rows computed on the driver (a pyarrow table) by the table's merge-newer rule.

        Why: a small table computed on the driver (tier 6) would otherwise go to Spark only for the
        MERGE, about a second of Spark jobs for a few thousand rows; ``deltalake`` merges them in
        milliseconds, with the same rule and guarantees.
        """
        rule = self._rule()
        if rule.kind != "merge_newer":
            raise ValueError(f"{self.name}: only merge_newer tables take driver rows alone")
        self.engine_for(Access.WRITE_ROWS)
        DriverEngine.merge_newer(rows, self.path, list(rule.keys), list(rule.partition_by))

    def upsert_rows(self, rows: Any, spark_frame: Callable[[], DataFrame]) -> None:
        """Replace the stored rows of the (string) keys ``rows`` (a pyarrow table) holds with ``rows``, in one
        ``deltalake`` commit; ``spark_frame`` gives the same rows to Spark if ``deltalake`` refuses the table.

        Written as a predicate overwrite: two writers of the same keys at once conflict (the later
        commit sees the other's rows under its predicate) and the loser redoes its write, so a key
        never holds two rows.
        """
        rule = self._rule()
        if rule.kind != "upsert":
            raise ValueError(f"{self.name} is written by its {rule.kind} rule, not by an upsert")
        keys, parts = list(rule.keys), list(rule.partition_by)
        values = sorted({tuple(row[key] for key in keys) for row in rows.select(keys).to_pylist()})
        for value in (v for key_values in values for v in key_values):
            if not isinstance(value, str):
                raise TypeError(f"upsert_rows keys must be strings, got {type(value).__name__} {value!r}")

        def predicate(quote: Callable[[str], str]) -> str:
            return " OR ".join("(" + " AND ".join(f"{key} = '{quote(value)}'"
                                                  for key, value in zip(keys, key_values, strict=True)) + ")"
                               for key_values in values)

        self.engine_for(Access.WRITE_ROWS)
        self._driver_else_spark(
            lambda: DriverEngine.replace(rows, self.path, predicate(standard_sql_str), parts),
            lambda: self._spark().replace_where(spark_frame(), self.path, predicate(sql_str), parts))

    def append(self, frame: DataFrame, *, partition_by: Sequence[str] = ()) -> None:
        """Append ``frame`` to a table without a write rule (a copy, a benchmark's scratch table)."""
        if self.rule is not None:
            raise ValueError(f"{self.name} is written by its {self.rule.kind} rule, not appended to")
        self.engine_for(Access.SPARK_PLAN)
        self._spark_of(frame).append(frame, self.path, partition_by)

    def delete_where(self, predicate: str, *, bounded_by: tuple[str, datetime] | None = None) -> int:
        """Delete the rows matching the Spark SQL ``predicate`` in one commit; the rows it removed, from the
        commit's own metrics rather than a counting job first (Delta commits nothing when no row matches).

        ``bounded_by``: ``(column, bound)`` such that the predicate matches only rows with ``column <=
        bound``. When the log's statistics show no live row there, nothing can match and no Spark job
        runs: an hourly expiry usually has nothing due in the first TTL hours, and a Spark DELETE that
        matches nothing still plans and scans the table.
        """
        if bounded_by is not None and self.log.none_at_or_below(*bounded_by):
            return 0
        before = self.version()
        self.engine_for(Access.SPARK_PLAN)
        self._spark().delete(self.path, predicate)
        return self.log.commit_metrics(before, "DELETE").get("numDeletedRows", 0)

    def compact_where(self, predicate: str) -> None:
        """OPTIMIZE (bin-packing compaction) of the files matching the partition ``predicate``."""
        self.engine_for(Access.SPARK_PLAN)
        self._spark().compact(self.path, predicate)

    def vacuum(self) -> None:
        """VACUUM with Delta's default retention: the 7-day guard stays on."""
        self.engine_for(Access.SPARK_PLAN)
        self._spark().vacuum(self.path)

    # --- engine plumbing ------------------------------------------------------------------------------

    def engine_for(self, access: Access, *, rows: int | None = None,
                   count: Callable[[int], int | None] | None = None) -> Engine:
        """:func:`choose_engine` for an access to this table (its path, its session or none)."""
        return choose_engine(self.storage, self.path, access, has_spark=self.spark is not None, rows=rows,
                             count=count)

    def _logged_rows(self) -> int | None:
        try:
            return self.log.row_count()
        except Exception:  # noqa: BLE001 - no table, or a log deltalake cannot read: Spark's
            return None

    def session(self) -> SparkSession:
        """The Spark session (started now if the table was given a function starting one)."""
        if self.spark is None:
            raise RuntimeError(f"{self.path}: this access needs Spark, and the table was opened without a session")
        return self.spark() if callable(self.spark) else self.spark

    def _spark(self) -> SparkEngine:
        return SparkEngine(self.session())

    def _spark_of(self, frame: DataFrame) -> SparkEngine:
        return SparkEngine(frame.sparkSession)

    def _driver_rows(self, on_driver: Callable[[], Any], spark_filter: Callable[[], list[Any]],
                     columns: Sequence[str] | None, version: int | None = None) -> Any:
        """Rows on the driver by the engine rule: ``on_driver`` (None: it could not), else a Spark read."""
        if self.engine_for(Access.ROWS) is Engine.DRIVER:
            rows = on_driver()
            if rows is not None or self.spark is None:
                return rows
        frame = self._spark().scan(self.path, version)
        for condition in spark_filter():
            frame = frame.where(condition)
        return (frame if columns is None else frame.select(*columns)).toArrow()

    def _driver_else_spark(self, with_driver: Callable[[], None] | None, with_spark: Callable[[], None]) -> None:
        """Write with ``deltalake`` (``with_driver``; None: the rule chose Spark); Spark instead when
        ``deltalake`` refuses the table. A refused write committed nothing (one commit or none), so
        Spark's replaces no half-written state; a conflict still lost after every retry is raised."""
        if with_driver is not None:
            try:
                with_driver()
                return
            except Exception as error:  # filtered just below
                if is_commit_conflict(error):
                    raise
                log.warning("deltalake could not write %s (%s: %s); writing it with Spark instead", self.path,
                            type(error).__name__, error)
        with_spark()

    def _rule(self) -> WriteRule:
        if self.rule is None:
            raise ValueError(f"{self.name} has no write rule in solaris.storage.table.WRITE_RULES")
        return self.rule
