"""The events reader: the ``events`` table read by the point-in-time rule of docs/architecture.md §2.

Why a class of its own: every job at ``as_of`` reads only events with ``ts <= as_of`` (and the
replay measurements only a later window), as Spark plans or as driver frames; the cut, the columns
and the ``ts`` unit (whole epoch seconds, Spark's ``unix_seconds``) are written here once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from solaris.runtime import JobInputError
from solaris.storage.driver_engine import DriverEngine
from solaris.storage.engine import Access, Engine
from solaris.storage.table import SparkSource, Table

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from pyspark.sql import Column, DataFrame

    from solaris.config import SolarisConfig

# The columns of :meth:`Events.pandas`, ``ts`` in epoch seconds.
COLUMNS = ("user_id", "item_id", "ts", "label", "rating")


def rating_column(events: DataFrame) -> Column:
    """The events' ``rating``; null on every row of a table without the column (written by hand, or
    before the column existed), so the feedback levels then come from the label."""
    from pyspark.sql import functions as F

    return F.col("rating") if "rating" in events.columns else F.lit(None).cast("double").alias("rating")


@dataclass(frozen=True)
class Events:
    """The ``events`` table, read up to an as-of.

    Contract: :meth:`window` is a Spark plan of the events in ``(since, until]``; :meth:`pandas` the
    events in ``(since, as_of]`` as a pandas frame of :data:`COLUMNS` - read on the driver with
    ``deltalake`` when the engine rule allows (a local table), by Spark otherwise, the same rows
    either way; :meth:`training` the same, refused when empty.

    >>> events = Events.of(spark, config)
    >>> frame = events.pandas(as_of)                     # user_id, item_id, ts (epoch s), label, rating
    >>> plan = events.window(since=as_of, until=as_of + timedelta(hours=1))
    >>> new = events.changes(starting_version=12, max_files_per_trigger=100)   # a streaming frame
    """

    table: Table

    @classmethod
    def of(cls, spark: SparkSource, config: SolarisConfig) -> Events:
        return cls(Table.of(spark, config, "events"))

    def window(self, *, until: datetime | None = None, since: datetime | None = None) -> DataFrame:
        """The events with ``since < ts <= until`` (either bound optional) as a lazy Spark frame."""
        from pyspark.sql import functions as F

        events = self.table.scan()
        if until is not None:
            events = events.where(F.col("ts") <= F.lit(until))
        if since is not None:
            events = events.where(F.col("ts") > F.lit(since))
        return events

    def changes(self, *, starting_version: int, max_files_per_trigger: int) -> DataFrame:
        """The events appended from the table's ``starting_version`` on, as a Spark streaming frame
        (:meth:`solaris.storage.table.Table.changes`: a commit that rewrites stored events is skipped)."""
        return self.table.changes(starting_version=starting_version, max_files_per_trigger=max_files_per_trigger)

    def pandas(self, as_of: datetime, *, since: datetime | None = None) -> pd.DataFrame:
        """:data:`COLUMNS` of the events with ``since < ts <= as_of``, ``ts`` as whole epoch seconds.

        Why on the driver when it can: the caller turns every event into driver arrays anyway (the
        evaluation, training, the coverage measurement), and without a Spark job a rerun that finds
        every result computed starts no JVM at all.
        """
        if self.table.engine_for(Access.ROWS) is Engine.DRIVER:
            frame = self._on_driver(as_of, since)
            if frame is not None:
                return frame
        return self._with_spark(as_of, since)

    def training(self, as_of: datetime) -> pd.DataFrame:
        """:meth:`pandas` up to ``as_of`` for a training job, refused when there are none to learn from."""
        frame = self.pandas(as_of)
        if frame.empty:
            raise JobInputError(f"no events with ts <= {as_of.isoformat()} in {self.table.path}")
        return frame

    def _with_spark(self, as_of: datetime, since: datetime | None) -> pd.DataFrame:
        """:meth:`pandas` read by Spark."""
        from pyspark.sql import functions as F

        events = self.window(until=as_of, since=since)
        return events.select("user_id", "item_id", F.unix_seconds("ts").alias("ts"), "label",
                             rating_column(events)).toPandas()

    def _on_driver(self, as_of: datetime, since: datetime | None) -> Any:
        """:meth:`pandas` read with ``deltalake``; None when it cannot read the table."""
        import numpy as np
        import pandas as pd
        import pyarrow as pa
        import pyarrow.dataset as ds

        def utc(moment: datetime) -> datetime:
            return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)

        where = ds.field("ts") <= utc(as_of)
        if since is not None:
            where = where & (ds.field("ts") > utc(since))
        table = DriverEngine.read(self.table.path, COLUMNS, where, optional=("rating",))
        if table is None:
            return None
        columns = table.column_names
        micros = table.column("ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_numpy()
        return pd.DataFrame({"user_id": table.column("user_id").to_numpy(),
                             "item_id": table.column("item_id").to_numpy(),
                             "ts": np.floor_divide(micros, 1_000_000), "label": table.column("label").to_numpy(),
                             "rating": (table.column("rating").to_numpy(zero_copy_only=False) if "rating" in columns
                                        else np.full(table.num_rows, np.nan))})
