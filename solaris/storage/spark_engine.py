"""The Spark engine: every read and write of a Delta table that Spark performs (delta-spark's API).

Used by :class:`solaris.storage.table.Table` when :func:`solaris.storage.engine.choose_engine` says
Spark, and as the fallback of a driver access ``deltalake`` refuses. Every write is idempotent for
its run (docs/architecture.md §4) and redone on a lost commit race (:func:`with_commit_retry`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Sequence

from solaris.storage.engine import with_commit_retry

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

# merge_newer's rule: when a stored row is replaced by the incoming one (target t, source s)
NEWER_ROW = "s.computed_at > t.computed_at OR (s.computed_at = t.computed_at AND s.run_id <> t.run_id)"


def same_key(keys: Sequence[str]) -> str:
    """merge_newer's match condition (target t, source s), for Spark's MERGE and deltalake's alike."""
    return " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)


@dataclass(frozen=True)
class SparkEngine:
    """Delta reads and writes through the Spark session ``spark``."""

    spark: SparkSession

    def exists(self, path: str) -> bool:
        """Whether a Delta table is committed at ``path`` (Spark's ``isDeltaTable``)."""
        from delta.tables import DeltaTable

        return bool(DeltaTable.isDeltaTable(self.spark, path))

    def scan(self, path: str, version: int | None = None) -> DataFrame:
        """The table (at ``version``; None: the latest) as a lazy Spark frame."""
        reader = self.spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return reader.load(path)

    def changes(self, path: str, *, starting_version: int, max_files_per_trigger: int) -> DataFrame:
        """The rows appended from ``starting_version`` on, as a streaming frame (commits that rewrite
        rows are skipped: ``skipChangeCommits``)."""
        return (self.spark.readStream.format("delta")
                .option("startingVersion", str(starting_version))
                .option("skipChangeCommits", "true")
                .option("maxFilesPerTrigger", str(max_files_per_trigger))
                .load(path))

    def ensure_table(self, frame: DataFrame, path: str, partition_by: Sequence[str]) -> None:
        """Create an empty table with ``frame``'s schema (and partitioning) unless one exists."""
        if not self.exists(path):
            writer = frame.limit(0).write.format("delta").mode("ignore")
            if partition_by:
                writer = writer.partitionBy(*partition_by)
            writer.save(path)

    def merge_newer(self, frame: DataFrame, path: str, keys: Sequence[str], partition_by: Sequence[str] = ()) -> None:
        """MERGE on ``keys``: a later ``computed_at`` replaces the stored row, the same run leaves it."""
        self._merge(frame, path, partition_by, condition=same_key(keys), matched="newer")

    def upsert(self, frame: DataFrame, path: str, keys: Sequence[str], partition_by: Sequence[str] = ()) -> None:
        """MERGE on ``keys`` (null-safe), the incoming row replacing a stored one (created on first use)."""
        condition = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in keys)
        self._merge(frame, path, partition_by, condition=condition, matched="replace")

    def insert_new(self, frame: DataFrame, path: str, keys: Sequence[str], partition_by: Sequence[str] = ()) -> None:
        """MERGE on ``keys`` inserting only the rows whose key is not stored (created on first use).

        No matched clause: Delta commits an insert-only MERGE as an append (new files, none removed),
        which a streaming reader with ``skipChangeCommits`` reads. ``frame`` must be unique on ``keys``.
        """
        self._merge(frame, path, partition_by, condition=same_key(keys), matched="keep")

    def _merge(self, frame: DataFrame, path: str, partition_by: Sequence[str], *, condition: str,
               matched: Literal["newer", "replace", "keep"]) -> None:
        """The one MERGE of the key rules (created on first use, retried on a lost commit race): new
        keys are inserted; a stored row of a matched key is replaced when the incoming one is newer
        (``newer``), always (``replace``), or never (``keep``: no matched clause, an append)."""
        from delta.tables import DeltaTable

        def write() -> None:
            self.ensure_table(frame, path, partition_by)
            merge = DeltaTable.forPath(self.spark, path).alias("t").merge(frame.alias("s"), condition)
            if matched == "newer":
                merge = merge.whenMatchedUpdateAll(condition=NEWER_ROW)
            elif matched == "replace":
                merge = merge.whenMatchedUpdateAll()
            merge.whenNotMatchedInsertAll().execute()

        what = "insert-only MERGE" if matched == "keep" else "MERGE"
        with_commit_retry(write, f"{what} into {path}")

    def replace_where(self, frame: DataFrame, path: str, predicate: str, partition_by: Sequence[str] = ()) -> None:
        """Atomically replace the rows matching the Spark SQL ``predicate`` with ``frame`` (one commit)."""
        writer = frame.write.format("delta")
        if partition_by:
            writer = writer.partitionBy(*partition_by)

        def write() -> None:
            if self.exists(path):
                writer.mode("overwrite").option("replaceWhere", predicate).save(path)
            else:  # first writer creates the table; a concurrent creator makes this retry as a replaceWhere
                writer.mode("append").save(path)

        with_commit_retry(write, f"replaceWhere {predicate!r} in {path}")

    def overwrite(self, frame: DataFrame, path: str) -> None:
        """Replace the whole table with ``frame`` in one commit, its schema too."""
        write = frame.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
        with_commit_retry(lambda: write.save(path), f"overwrite {path}")

    def append(self, frame: DataFrame, path: str, partition_by: Sequence[str] = ()) -> None:
        """Append ``frame`` (a table of no write rule: a copy, a benchmark's scratch table)."""
        writer = frame.write.format("delta").mode("append")
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        with_commit_retry(lambda: writer.save(path), f"append to {path}")

    def delete(self, path: str, predicate: str) -> None:
        from delta.tables import DeltaTable

        with_commit_retry(lambda: DeltaTable.forPath(self.spark, path).delete(predicate),
                          f"delete {predicate!r} from {path}")

    def compact(self, path: str, predicate: str) -> None:
        from delta.tables import DeltaTable

        with_commit_retry(lambda: DeltaTable.forPath(self.spark, path).optimize().where(predicate)
                          .executeCompaction(), f"optimize {path}")

    def vacuum(self, path: str) -> None:
        from delta.tables import DeltaTable

        DeltaTable.forPath(self.spark, path).vacuum()

    def to_arrow(self, frame: DataFrame) -> Any:
        """``frame``'s rows on the driver as a pyarrow table."""
        return frame.toArrow()
