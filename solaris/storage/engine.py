"""Which engine performs an access to a Delta table - Spark, or ``deltalake`` and Arrow on the driver -
decided by one rule, :func:`choose_engine`, whose one size bound is ``storage.driver_max_rows``.

Why two engines: Spark's fixed cost per access (a snapshot brought up to date, planning, jobs) is
about a second, more than reading or writing a tick's few thousand rows on the driver; but only
Spark scales past what one process holds, reads storage other than a local folder here, and builds
the lazy plans the stages compute with. Why one rule: the choice used to be made in nine places
with four different bounds; it is the one thing a reader needs to know about where an access runs.

Also here, because every write of both engines goes through it: :func:`with_commit_retry`, the redo
of a write that lost Delta's optimistic commit race.
"""

from __future__ import annotations

import logging
import random
import time
from enum import Enum
from typing import TYPE_CHECKING, Callable, Sequence, TypeVar

if TYPE_CHECKING:  # pragma: no cover
    from solaris.config import StorageConfig

log = logging.getLogger(__name__)

Result = TypeVar("Result")

COMMIT_ATTEMPTS = 6


class Engine(Enum):
    """Who performs an access: Spark, or ``deltalake`` / pyarrow in the driver process."""

    SPARK = "spark"
    DRIVER = "driver"


class Access(Enum):
    """What an access is, which is what the engine rule depends on.

    ``LOG``: whether the table exists. ``SPARK_PLAN``: an access only Spark implements - a lazy scan
    the caller keeps building a Spark plan on (its partitioning and file pruning are Spark's), a
    frame written by overwrite / replaceWhere / key MERGE, DELETE, OPTIMIZE, VACUUM. ``FRAME``: a
    whole (small) table, or a pinned check over several, handed to Spark or computed from. ``ROWS``:
    rows the caller needs on the driver anyway (Arrow or pandas). ``WRITE_FRAME``: a Spark frame's
    rows written by a run rule (merge-newer, run replacement). ``WRITE_ROWS``: rows already on the
    driver (the audit rows, tier 6).
    """

    LOG = "log"
    SPARK_PLAN = "spark_plan"
    FRAME = "frame"
    ROWS = "rows"
    WRITE_FRAME = "write_frame"
    WRITE_ROWS = "write_rows"


_BOUNDED = (Access.FRAME, Access.WRITE_FRAME)


def is_local(path: str) -> bool:
    """Whether ``path`` is a folder of this machine's file system (not a ``scheme://`` URI)."""
    return "://" not in path


def choose_engine(storage: StorageConfig, paths: str | Sequence[str], access: Access, *, has_spark: bool = True,
                  rows: int | None = None, count: Callable[[int], int | None] | None = None) -> Engine:
    """The engine of one access to the table(s) at ``paths``: the one place the choice is made.

    The rule, in order:

    1. no Spark session to be had (``has_spark`` False: the resolver, a tool without a JVM): the driver;
    2. ``SPARK_PLAN``: Spark (nothing else implements it);
    3. ``WRITE_ROWS``: the driver (the rows are there already; ``deltalake`` writes them in milliseconds);
    4. a read of a table that is not a local folder: Spark (``deltalake`` reads of object stores are
       untested here, and Spark's readers are the ones a cluster is configured for);
    5. ``LOG`` and ``ROWS``: the driver (Spark would collect the same rows to the driver);
    6. ``FRAME`` and ``WRITE_FRAME``: the driver when the rows are known to be at most
       ``storage.driver_max_rows`` (0: never), else Spark. ``rows`` is a count the caller has (a
       stage's own count, the log's statistics); without one, ``count(limit)`` is asked for a count
       that need not go past ``limit`` = the bound + 1 (a write collects at most that many rows),
       None meaning unknown (then Spark).

    A driver access that ``deltalake`` refuses (a table feature it lacks) is redone by Spark by the
    caller; that fallback is not a choice.
    """
    many = [paths] if isinstance(paths, str) else list(paths)
    if not has_spark:
        return Engine.DRIVER
    if access is Access.SPARK_PLAN:
        return Engine.SPARK
    if access is Access.WRITE_ROWS:
        return Engine.DRIVER
    if access is not Access.WRITE_FRAME and not all(is_local(path) for path in many):
        return Engine.SPARK
    if access not in _BOUNDED:
        return Engine.DRIVER
    bound = storage.driver_max_rows
    if bound <= 0 or (rows is not None and rows > bound):
        return Engine.SPARK
    if rows is None and count is not None:
        rows = count(bound + 1)
    if rows is None or rows > bound:
        if rows is not None:
            log.info("%s: %d rows, more than storage.driver_max_rows=%d: Spark", ", ".join(many), rows, bound)
        return Engine.SPARK
    return Engine.DRIVER


def is_commit_conflict(error: BaseException) -> bool:
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
            if attempt == attempts or not is_commit_conflict(error):
                raise
            pause = min(30.0, 0.5 * 2 ** (attempt - 1)) * (0.5 + random.random())
            log.warning("%s: concurrent Delta commit (%s), retry %d/%d in %.1fs", what,
                        type(error).__name__, attempt, attempts - 1, pause)
            time.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover


def sql_str(value: str) -> str:
    """A string literal's body in Spark SQL (backslash escapes)."""
    return value.replace("\\", "\\\\").replace("'", "\\'")


def standard_sql_str(value: str) -> str:
    """A string literal's body in standard SQL (``deltalake``'s predicates): a quote is doubled."""
    return value.replace("'", "''")
