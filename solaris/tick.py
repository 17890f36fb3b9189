"""The context of one tick: what the stages run at one as-of share, handed to each of them explicitly.

Why an object and not module variables: the stages of an hourly tick share Spark frames (the events
visible at the as-of, every user's history, the FM's user vectors) and write their ``runs`` rows in
one commit. That state used to live in module-level dictionaries and a module-level buffer that a
stage found on its own, so a reader following ``as_of`` from :func:`solaris.pipeline.run_cycle` lost
the trail there, and anything left behind outlived the tick. Here it lives exactly as long as the
block that opened the tick (:func:`solaris.pipeline.open_tick`): frames are unpersisted and the
audit rows written when it closes. A stage run on its own (spark-submit, an Airflow task) gets no
tick: it reads the table and writes its ``runs`` row at once.

:class:`StepContext` is what every stage's ``run(step, *, options)`` is handed: the session, the
config, the as-of, the run id it writes under and the tick (``None`` for a stage run alone).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Hashable

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

    from solaris.config import SolarisConfig


@dataclass
class Tick:
    """One tick at ``as_of``: its shared frames by key and the ``runs`` rows its stages wrote.

    ``frames``: persisted Spark frames the stages of this tick share (bound: this tick; released by
    :meth:`release`). ``audit``: the ``runs`` rows held for one commit at the end of the tick
    (``None``: every stage writes its row at once).
    """

    as_of: datetime
    frames: dict[Hashable, DataFrame] = field(default_factory=dict)
    audit: list[tuple] | None = None

    def frame(self, key: Hashable) -> DataFrame | None:
        """The frame kept under ``key`` in this tick, or None."""
        return self.frames.get(key)

    def keep(self, key: Hashable, frame: DataFrame) -> DataFrame:
        """Persist ``frame`` (memory, spilling to disk) for the rest of the tick and return it."""
        from pyspark import StorageLevel

        if key in self.frames:
            raise KeyError(f"tick {self.as_of.isoformat()} already keeps a frame under {key!r}")
        kept = frame.persist(StorageLevel.MEMORY_AND_DISK)
        self.frames[key] = kept
        return kept

    def check(self, as_of: datetime) -> Tick:
        """This tick, after checking a stage was asked to run at its as-of (a clear error otherwise)."""
        if as_of != self.as_of:
            raise ValueError(f"a stage at {as_of.isoformat()} was handed the tick of {self.as_of.isoformat()}")
        return self

    def release(self) -> None:
        """Unpersist every frame the tick kept (the audit rows stay for the caller to write)."""
        while self.frames:
            _, frame = self.frames.popitem()
            frame.unpersist()


@dataclass(frozen=True)
class StepContext:
    """What one stage run is handed: where (``spark``, ``config``), when (``as_of``), under which
    ``run_id`` it writes, and the ``tick`` it shares frames and audit rows with (``None``: run alone).

    The same for every stage, so a stage's own settings live in its typed options, not here.
    """

    spark: SparkSession
    config: SolarisConfig
    as_of: datetime
    run_id: str
    tick: Tick | None = None
