"""The two tables every stage writes beside its own: ``quarantine`` (rejected rows) and ``runs`` (audit).

Both go through :class:`solaris.storage.table.Table` like every other table: ``quarantine`` is
replaced per (source table, run) by its ``replace_where`` rule, ``runs`` is an ``upsert`` on
``(run_id, job)`` of rows built on the driver. Here: :class:`RunRecord`, the row a job fills in as
it goes; :class:`RunsLog`, the audit log's writes and the reads of it (the runs a replay has done);
and the quarantine row of a rejected input.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from solaris.config import SolarisConfig
from solaris.storage.engine import sql_str
from solaris.storage.table import SparkSource, Table
from solaris.timeutil import parse_utc

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from solaris.tick import Tick


def write_quarantine(
    spark: "SparkSession",
    config: SolarisConfig,
    rejected: "DataFrame",
    *, source_table: str,
    run_id: str,
    n_rejected: int | None = None,
) -> None:
    """Replace this run's quarantine rows for ``source_table`` with ``rejected``.

    ``rejected`` must carry ``reason``, ``payload`` (JSON string) and ``seen_at``. A caller that
    already counted it passes ``n_rejected``: with nothing to quarantine and nothing quarantined
    earlier by this run, the table is left as it is instead of committing an empty replacement
    (a Delta commit per hourly run for no change).
    """
    from pyspark.sql import functions as F

    rows = rejected.select(
        F.lit(source_table).alias("source_table"),
        F.lit(run_id).alias("run_id"),
        F.col("reason").cast("string"),
        F.col("payload").cast("string"),
        F.col("seen_at").cast("timestamp"),
        F.to_date("seen_at").alias("run_date"),
    )
    predicate = f"source_table = '{sql_str(source_table)}' AND run_id = '{sql_str(run_id)}'"
    table = Table.of(spark, config, "quarantine")
    if (
        n_rejected == 0
        and table.exists()
        and (not table.log.may_hold("run_id", run_id) or not table.any_rows(predicate))
    ):
        return  # same content as an empty replacement, without the commit (nor, usually, a Spark job)
    table.replace_where(rows, predicate)


def _runs_schema() -> StructType:
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("run_id", T.StringType(), False),
            T.StructField("job", T.StringType(), False),
            T.StructField("as_of", T.TimestampType(), True),
            T.StructField("started_at", T.TimestampType(), False),
            T.StructField("finished_at", T.TimestampType(), False),
            T.StructField("rows_in", T.LongType(), False),
            T.StructField("rows_out", T.LongType(), False),
            T.StructField("rows_quarantined", T.LongType(), False),
            T.StructField("status", T.StringType(), False),
            T.StructField("table_versions", T.MapType(T.StringType(), T.LongType()), False),
            T.StructField("details", T.StringType(), False),
        ]
    )


@dataclass(frozen=True)
class RunsLog:
    """The ``runs`` audit log: one row per (run, job), upserted on that key.

    Contract: :meth:`write` upserts rows in one commit (a rerun's row replaces the earlier one);
    :meth:`succeeded` says which of some runs finished a job; :meth:`newest_as_of` the latest as-of a
    job reached (the stream's clock); :meth:`frame` is the log as a Spark plan.

    >>> runs = RunsLog.of(spark, config)
    >>> runs.write([record_row])
    >>> runs.succeeded("hit_rate", {"precompute-20001201T000000Z"})
    """

    table: Table

    @classmethod
    def of(cls, spark: SparkSource, config: SolarisConfig) -> RunsLog:
        return cls(Table.of(spark, config, "runs"))

    def write(self, rows: list[tuple]) -> None:
        """Upsert ``rows`` on their ``(run_id, job)`` key in one commit (:meth:`Table.upsert_rows`).

        Why rows built on the driver and written with ``deltalake``: a handful of rows, written by every
        stage run on its own (each spark-submit, each Airflow task) and once per in-process tick. Spark's
        replaceWhere costs a snapshot rebuild, a scan for the files holding the keys and a write - Spark
        jobs and planning worth about a second in a warm session, more in a fresh one; ``deltalake``'s
        predicate overwrite does the same on the log and files in milliseconds, with the same guarantees.
        """
        # a stage redone in the block: its last row wins
        latest = list({(row[0], row[1]): row for row in rows}.values())
        self.table.upsert_rows(_arrow_rows(latest, _runs_schema()),
                               lambda: self.table.session().createDataFrame(latest, _runs_schema()))

    def succeeded(self, job: str, wanted: set[str]) -> set[str]:
        """The runs of ``wanted`` with a ``success`` row for ``job`` (none before the first write)."""
        if not self.table.exists():
            return set()
        rows = self.table.rows(["run_id"], equal={"job": job, "status": "success"})
        return set(rows.column("run_id").to_pylist()) & wanted

    def newest_as_of(self, job: str) -> datetime | None:
        """The latest ``as_of`` of ``job``'s successful runs (None: none), read on the driver."""
        if not self.table.exists():
            return None
        moments = [moment for moment in
                   self.table.rows(["as_of"], equal={"job": job, "status": "success"}).column("as_of").to_pylist()
                   if moment is not None]
        return parse_utc(max(moments)) if moments else None

    def frame(self) -> DataFrame:
        """The log as a lazy Spark frame (reports filter and aggregate it)."""
        return self.table.scan()


def _arrow_rows(rows: list[tuple], schema: StructType) -> Any:
    """Python row tuples of a Spark ``schema`` as a pyarrow table (timestamps in UTC, maps from dicts)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    columns = {column.name: [row[index] for row in rows] for index, column in enumerate(arrow_schema)}
    for column in arrow_schema:
        if pa.types.is_map(column.type):  # a Python dict per row -> its (key, value) pairs
            columns[column.name] = [None if value is None else list(value.items()) for value in columns[column.name]]
    return pa.Table.from_pydict(columns, schema=arrow_schema)


@dataclass
class RunRecord:
    """One row of the ``runs`` audit table; filled in by a job as it goes."""

    run_id: str
    job: str
    as_of: datetime | None
    started_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    rows_in: int = 0
    rows_out: int = 0
    rows_quarantined: int = 0
    status: str = "running"
    table_versions: dict[str, int | None] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    def write(self, spark: "SparkSession", config: SolarisConfig, status: str, tick: Tick | None = None) -> None:
        """Record the run with ``status``: into the tick's audit rows when the tick collects them
        (one commit when it closes, also after a failure: nothing is lost), else at once.

        Why a tick collects them: each write into ``runs`` is a Delta commit, and with Spark, which
        wrote it before, several jobs and seconds - more than most stages' real work when each of a
        tick's ten stages wrote its own. The rows, keys and idempotency are the same either way.
        """
        self.status = status
        row = (
            self.run_id,
            self.job,
            self.as_of,
            self.started_at,
            datetime.now(timezone.utc),
            int(self.rows_in),
            int(self.rows_out),
            int(self.rows_quarantined),
            status,
            {k: None if v is None else int(v) for k, v in self.table_versions.items()},
            json.dumps(self.details, sort_keys=True, default=str),
        )
        if tick is not None and tick.audit is not None:
            tick.audit.append(row)
        else:
            RunsLog.of(spark, config).write([row])


