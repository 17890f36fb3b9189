"""What a Delta table's transaction log says without reading data: version, live files and their statistics.

Why its own class: the stages ask these questions around every read and write (does the table exist,
which version did my write make, how many rows, can a file hold this run, is anything due to
expire), and the log answers each in milliseconds with ``deltalake``, where Spark would bring its
snapshot up to date and run a job. Whichever engine then reads or writes the data, the log is read
here; :class:`solaris.storage.table.Table` exposes these answers.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any


@dataclass(frozen=True)
class DeltaLog:
    """The transaction log of the Delta table at ``path``, read with ``deltalake`` on the driver."""

    path: str

    def version(self) -> int | None:
        """Latest committed version, or None when no table exists yet (asking Spark for ``history(1)``
        ran a job per call, and every stage asks after each write)."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return int(DeltaTable(self.path).version())
        except TableNotFoundError:
            return None

    def files(self, version: int | None = None) -> Any:
        """The live data files (at ``version``; None: the latest) with their statistics, as a pyarrow table."""
        import pyarrow as pa
        from deltalake import DeltaTable

        return pa.table(DeltaTable(self.path, version=version).get_add_actions(flatten=True))

    def digest(self) -> str | None:
        """Digest of the table's content at its latest version: its live files' names and sizes, which
        Delta never rewrites in place. None when the table does not exist."""
        from deltalake.exceptions import TableNotFoundError

        try:
            files = self.files()
        except TableNotFoundError:
            return None
        digest = hashlib.sha256()
        names, sizes = files.column("path").to_pylist(), files.column("size_bytes").to_pylist()
        for name, size in sorted(zip(names, sizes, strict=True)):
            digest.update(f"{name}\t{size}\n".encode())
        return digest.hexdigest()[:20]

    def row_count(self, version: int | None = None) -> int | None:
        """Rows at ``version`` from the per-file statistics; None when a file has no row count (then only
        reading it would tell)."""
        import pyarrow.compute as pc

        records = self.files(version).column("num_records")
        return None if records.null_count else int(pc.sum(records).as_py() or 0)

    def partitions(self, column: str) -> set[str]:
        """The values of partition column ``column`` that live files hold: whether a partition was written."""
        files = self.files()
        name = f"partition.{column}"
        if files.num_rows == 0:
            return set()
        if name not in files.column_names:
            raise ValueError(f"{self.path} is not partitioned by {column!r}")
        return {value for value in files.column(name).to_pylist() if value is not None}

    def may_hold(self, column: str, value: str) -> bool:
        """False only when no live file's min/max statistics of ``column`` admit ``value``; True means
        "maybe" (the caller then reads)."""
        import pyarrow.compute as pc

        files = self.files()
        if files.num_rows == 0:
            return False
        names = files.column_names
        if f"min.{column}" not in names or f"max.{column}" not in names:
            return True
        return bool(pc.any(may_hold_mask(files, column, value)).as_py())

    def newest(self, column: str) -> datetime | None:
        """The largest ``column`` value of the live rows from the files' maximum statistics; None when the
        table is empty or a file lacks the statistic. Delta truncates a timestamp's statistics to
        milliseconds, so the answer can be up to 1 ms below the true maximum."""
        import pyarrow.compute as pc

        files = self.files()
        name = f"max.{column}"
        if files.num_rows == 0 or name not in files.column_names or files.column(name).null_count:
            return None
        newest = pc.max(files.column(name)).as_py()
        return newest if newest is None or newest.tzinfo else newest.replace(tzinfo=timezone.utc)

    def none_at_or_below(self, column: str, bound: datetime) -> bool:
        """True only when no live row can have ``column <= bound``: every file's minimum above it. False
        means "maybe". Delta's millisecond truncation can only lower a minimum, so one above is true."""
        import pyarrow as pa
        import pyarrow.compute as pc

        files = self.files()
        if files.num_rows == 0:
            return True
        name = f"min.{column}"
        if name not in files.column_names:
            return False
        low = files.column(name)
        if low.null_count:
            return False
        return bool(pc.all(pc.greater(low, pa.scalar(bound, type=low.type))).as_py())

    def commit_metrics(self, after_version: int | None, operation: str) -> dict[str, int]:
        """Summed ``operationMetrics`` of the ``operation`` commits (e.g. ``DELETE``) after ``after_version``
        (None: every commit): e.g. the rows a DELETE removed, instead of a counting job before it."""
        from deltalake import DeltaTable

        table = DeltaTable(self.path)
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

    def is_local_folder(self) -> bool:
        """Whether the table is a folder of this machine (where pyarrow can open its files directly)."""
        return "://" not in self.path and os.path.isdir(self.path)


def may_hold_mask(files: Any, column: str, value: str) -> Any:
    """Per live file (a row of :meth:`DeltaLog.files`): False only when its ``column`` min/max statistics
    exclude ``value``; the caller checked that the statistics columns exist."""
    import pyarrow.compute as pc

    low, high = files.column(f"min.{column}"), files.column(f"max.{column}")
    unknown = pc.or_(pc.is_null(low), pc.is_null(high))
    return pc.or_(unknown, pc.and_(pc.less_equal(low, value), pc.greater_equal(high, value)))
