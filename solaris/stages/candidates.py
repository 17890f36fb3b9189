"""Speculate: write the (user, item) pairs likely to be requested in ``(as_of, as_of + horizon]``.

Runs ``sql/candidates.sql`` over events with ``ts <= as_of``: the sources (co-engagement, trending,
recent re-exposure, session continuation, popularity, and FM retrieval computed here with FAISS),
blended by the speculator's learned weights (``solaris.precompute.speculator_store.load_speculator``:
trained at or before the as-of)
or the config's hand weights; caps per user and by the global budget, and replaces this run's rows
in the ``candidates`` table (partitioned by run date). Rerunning the same run id gives the same rows.

    solaris candidates --as-of 2000-12-01T00:00:00Z
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import timedelta
from functools import reduce
from typing import TYPE_CHECKING

from solaris.precompute.spark_features import user_vectors, visible_events, within_hours
from solaris.precompute.speculation import candidate_params, item_stats_key
from solaris.precompute.speculator_store import load_speculator
from solaris.storage.audit import RunRecord
from solaris.storage.embedding_codec import decode
from solaris.storage.sql import literal, render, statements
from solaris.storage.table import Table
from solaris.tick import StepContext
from solaris.udfs.knn import user_representation_step
from solaris.udfs.retrieval import ITEM_SCHEMA, RETRIEVAL_SCHEMA, make_item_averager, make_retriever

if TYPE_CHECKING:  # pragma: no cover
    from datetime import datetime

    from pyspark.sql import DataFrame, SparkSession

    from solaris.config import SolarisConfig
    from solaris.precompute.speculation import Speculator
    from solaris.tick import Tick

log = logging.getLogger("solaris.candidates")


@dataclass(frozen=True)
class CandidatesResult:
    """What one speculation run wrote: pairs, distinct users, pairs per source rule, and the blend used."""

    pairs: int
    users: int
    by_source: dict[str, int] = field(default_factory=dict)
    blend: str = "hand"  # "learned <version>" or "hand" (config weights, also the fallback)


# The per-user views of a run that several sources and the features read: cached once per run (Why:
# the final query would otherwise recompute each of them from the events once per reader).
RUN_SHARED_VIEWS = ("active_users", "user_activity", "user_recent", "engaged")
# The item-item statistics views and the source that reads each (only a used view is materialised).
ITEM_STAT_VIEWS = {"item_cooc": "cooc", "item_next": "next"}
# The views of sql/candidates.sql each statistic is computed by (its key digests their SQL).
ITEM_STAT_INPUTS = {"item_cooc": ("cooc_window", "item_cooc"), "item_next": ("user_sequence", "item_next")}
# The item-item statistics of one period (precompute.candidates.item_stats_hours > 1), shared by the
# runs of that period in this Spark session: period -> {statistic key: materialised frame}. One period
# at a time.
_ITEM_STATS: dict[tuple, dict[str, DataFrame]] = {}
# A statement of sql/candidates.sql that creates a view: its name, and the query Spark stores as its text.
_VIEW = re.compile(r"^CREATE OR REPLACE TEMP VIEW (\w+)(?:\s+AS\s+(.*))?$", re.IGNORECASE | re.DOTALL)


@dataclass
class PreparedViews:
    """The views of sql/candidates.sql registered for one run: the final statement (per-user cap and
    global budget) and the frames the run cached for it (the retrieval parts, the run-shared views).

    Whoever prepared them calls :meth:`release` once the final statement's rows are written or
    collected (the views stay registered, uncached): nothing outlives the run.
    """

    final: str
    cached: list[DataFrame] = field(default_factory=list)

    def release(self) -> None:
        while self.cached:
            self.cached.pop().unpersist()


def retrieval_parts(spark: SparkSession, config: SolarisConfig, as_of: datetime,
                    only_users: DataFrame | None = None, tick: Tick | None = None) -> DataFrame:
    """The retrieval source: per active user, the top ``source_items`` unengaged items by inner
    product of FM user vectors with item vectors (mean vector of an item's recent engagers).
    ``only_users`` (a ``user_id`` frame): only they are queried (the fast lane). The frame is
    persisted (materialised here): the caller unpersists it."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from solaris.models.checkpoint import load_checkpoint, resolve_checkpoint

    rules, dim = config.precompute.candidates, config.model.embedding_dim
    empty = spark.createDataFrame([], RETRIEVAL_SCHEMA)
    if "retrieval" not in rules.sources:
        return empty
    fm_dir = resolve_checkpoint(config.resolve_under_warehouse(config.precompute.fm_checkpoint))
    if not (fm_dir / "weights.pt").is_file():
        log.warning("no FM checkpoint at %s: retrieval source skipped", fm_dir)
        return empty
    load_checkpoint(fm_dir, "fm", dim)  # refuse a bad checkpoint on the driver
    events = visible_events(spark, config, as_of, tick)
    window = events.where(within_hours(24 * rules.retrieval_days))
    active = events.where(within_hours(rules.lookback_hours)).select("user_id")
    if only_users is not None:
        active = active.join(only_users.select("user_id"), "user_id", "left_semi")
    # the fast lane represents only the users it needs; the hourly cycle shares every user's vector
    # with the KNN stage of the same tick (user_vectors), a superset that the joins below narrow
    wanted = window.select("user_id").union(active).distinct() if only_users is not None else None
    vectors, owned = user_vectors(spark, config, as_of, fm_dir=str(fm_dir),
                                  represent=user_representation_step(str(fm_dir), config, as_of), users=wanted,
                                  tick=tick)
    items = (window.select("user_id", "item_id").distinct().join(vectors, "user_id")
             .groupBy("item_id").applyInPandas(make_item_averager(dim), ITEM_SCHEMA)
             .orderBy("item_id").toArrow())  # the catalog's vectors: one row per item, like KNN's centroids
    if items.num_rows == 0:
        if owned:
            vectors.unpersist()
        return empty
    item_ids = items.column("item_id").to_numpy()
    broadcast = spark.sparkContext.broadcast((item_ids, decode(items.column("vector"), dim)))
    engaged = events.join(active.distinct(), "user_id", "left_semi").groupBy("user_id").agg(
        F.collect_set("item_id").alias("engaged"))
    queries = vectors.join(active.distinct(), "user_id", "left_semi").join(engaged, "user_id", "left")
    parts = queries.mapInArrow(make_retriever(broadcast, dim, rules.source_items), RETRIEVAL_SCHEMA)
    parts = parts.persist(StorageLevel.MEMORY_AND_DISK)
    parts.count()  # materialise, so the user vectors can go
    if owned:
        vectors.unpersist()
    broadcast.unpersist()
    return parts


def prepare_views(spark: SparkSession, config: SolarisConfig, as_of: datetime,
                  *, speculator: Speculator | None, users: DataFrame | None = None, tick: Tick | None = None
                  ) -> PreparedViews:
    """Register the views of sql/candidates.sql (``source_parts``, ``features``, ``candidate_pairs``...)
    for events <= as_of; the caller releases what they cached (:meth:`PreparedViews.release`).

    ``users`` (a ``user_id`` frame): speculate for them only (the fast lane); None: every active user.
    """
    from pyspark import StorageLevel

    rules = config.precompute.candidates
    blend = speculator.blend if speculator is not None and rules.blend == "learned" else None
    request = speculator.request if speculator is not None else None
    visible_events(spark, config, as_of, tick).createOrReplaceTempView("events")
    lane = users.select("user_id") if users is not None else spark.createDataFrame([], "user_id long")
    lane.createOrReplaceTempView("lane_users")  # the SQL names it either way; read only when restricted
    params = candidate_params(rules, as_of, blend, request, restrict_users=users is not None)
    *views, final = statements(render("candidates", **params))
    prepared = PreparedViews(final, [retrieval_parts(spark, config, as_of, users, tick)])
    try:
        prepared.cached[0].createOrReplaceTempView("retrieval_parts")
        period = (_PeriodStatistics(spark, config, params["stats_as_of"], views) if rules.item_stats_hours > 1
                  else None)
        for statement in views:
            name = _view_name(statement)
            if period is not None and ITEM_STAT_VIEWS.get(name) in rules.sources:
                period.frame(name, statement).createOrReplaceTempView(name)
                continue
            if not _registered_as(spark, name, statement):
                spark.sql(statement)
        if period is not None:
            period.store()
        for name in RUN_SHARED_VIEWS:  # in this order: each later view reads the cached active_users
            frame = spark.table(name).persist(StorageLevel.MEMORY_AND_DISK)
            prepared.cached.append(frame)
            frame.count()
    except BaseException:
        prepared.release()  # a failed run leaves nothing cached
        raise
    return prepared


def _view_name(statement: str) -> str:
    match = _VIEW.match(statement)
    return match.group(1) if match else ""


def _registered_as(spark: SparkSession, name: str, statement: str) -> bool:
    """Whether the session's temp view ``name`` is already the view ``statement`` creates (the same
    SQL text), so registering it again would change nothing.

    Why ask: registering a view analyses its whole chain of views (18 statements a run), and a temp
    view keeps its SQL text and resolves the views it names (``events``, ``retrieval_parts``,
    ``lane_users``) only when a query runs, so a view whose text has not changed since the last run
    already reads this run's inputs. The text is the one Spark stored (a view of that name
    registered by anyone else does not match); a catalog that cannot be asked means register. A kept
    view also keeps the SQL settings it was registered under; the pipeline's sessions do not change
    them between runs.
    """
    match = _VIEW.match(statement)
    if match is None or match.group(2) is None:
        return False
    try:
        view = spark._jsparkSession.sessionState().catalog().getTempView(name)  # noqa: SLF001 - no Python API
        if not view.isDefined():
            return False
        text = view.get().desc().viewText()
        return bool(text.isDefined() and text.get() == match.group(2))
    except Exception:  # noqa: BLE001 - another Spark's internals: register as before
        return False


class _PeriodStatistics:
    """The item-item statistics of one period (``item_stats_hours`` > 1): from this session's cache,
    else from the ``item_statistics`` table, else computed here and then stored in it.

    Why this is safe: a statistic depends only on the events <= ``stats_as_of`` (never later than any
    run of the period) and on the SQL in its key (:func:`item_stats_key`: settings and logic). The
    first run of a period computes and stores it; every later run of the period, in this session or
    another process, reads the same rows, so reruns give the same candidates. A late event stamped
    before ``stats_as_of`` that is ingested after that first run is seen from the next period on.
    A statistic with no rows stores nothing and is recomputed by each run (it is cheap then).
    """

    def __init__(self, spark: SparkSession, config: SolarisConfig, stats_as_of: datetime, views: list[str]):

        self.spark, self.config, self.stats_as_of = spark, config, stats_as_of
        self.table = Table.of(spark, config, "item_statistics")
        by_name = {_view_name(statement): statement for statement in views}
        self.keys = {name: item_stats_key(name, stats_as_of, [by_name[view] for view in inputs])
                     for name, inputs in ITEM_STAT_INPUTS.items()}
        period = (spark.sparkContext.applicationId, config.table_path("events"), stats_as_of)
        for old in [entry for entry in _ITEM_STATS if entry != period]:
            del _ITEM_STATS[old]  # local checkpoints: their blocks go when the frames are collected
        self.cached = _ITEM_STATS.setdefault(period, {})
        self.computed: dict[str, DataFrame] = {}
        self._stored: set[str] | None = None

    def stored_keys(self) -> set[str]:
        """The statistics in the table (its partitions), read from the Delta log: no Spark job."""
        if self._stored is None:
            self._stored = self.table.log.partitions("stats_key") if self.table.exists() else set()
        return self._stored

    def frame(self, name: str, statement: str) -> DataFrame:
        """The materialised statistic ``name`` (``item_a``, ``item_b``, ``n``) of this period."""
        from pyspark.sql import functions as F

        key = self.keys[name]
        if key not in self.cached:
            if key in self.stored_keys():
                stored = self.table.scan().where(F.col("stats_key") == key)
                self.cached[key] = _materialise(stored.select("item_a", "item_b", "n"))
                log.info("item statistic %s as of %s read from %s", name, self.stats_as_of, self.table.path)
            else:
                self.spark.sql(statement)
                self.cached[key] = self.computed[key] = _materialise(self.spark.table(name))
        return self.cached[key]

    def store(self) -> None:
        """Write the statistics this run computed, in one commit that also drops the periods older
        than ``item_stats_keep_days`` before this one (replacing this period's rows: idempotent)."""
        from pyspark.sql import functions as F

        if not self.computed:
            return
        statistic = {key: name for name, key in self.keys.items()}
        parts = [frame.select(F.lit(key).alias("stats_key"), F.lit(statistic[key]).alias("statistic"),
                              F.lit(self.stats_as_of).cast("timestamp").alias("stats_as_of"),
                              F.col("item_a").cast("long"), F.col("item_b").cast("long"), F.col("n").cast("long"))
                 for key, frame in self.computed.items()]
        rows = reduce(lambda a, b: a.unionByName(b), parts)
        keep_from = self.stats_as_of - timedelta(days=self.config.precompute.candidates.item_stats_keep_days)
        keys = ", ".join(f"'{key}'" for key in self.computed)
        self.table.replace_where(rows, f"stats_key IN ({keys}) OR stats_as_of < {literal(keep_from)}")
        log.info("item statistics as of %s stored in %s (%s)", self.stats_as_of, self.table.path,
                 ", ".join(statistic[key] for key in self.computed))
        self.computed.clear()


def _materialise(frame: DataFrame) -> DataFrame:
    """Compute now and cut the lineage (a local checkpoint, not ``persist``): the frame must not depend
    on this run's views, because replacing a temp view (``events`` at the next run)
    uncaches every cached plan built on the old one). A local checkpoint lives on the executors that
    computed it: a long session on a cluster that removes executors (dynamic allocation) should set
    ``item_stats_hours`` 1 (one process per stage, as the DAGs run, keeps nothing between runs)."""
    return frame.localCheckpoint(eager=True)


def build_candidates(spark: SparkSession, config: SolarisConfig, as_of: datetime, run_id: str,
                     *, speculator: Speculator | None = None, users: DataFrame | None = None,
                     tick: Tick | None = None) -> tuple[DataFrame, PreparedViews]:
    """DataFrame of this run's candidates (contract columns), computed from events <= as_of
    (for ``users`` only when given), and the prepared views it reads (release them once it is written)."""
    from pyspark.sql import functions as F

    prepared = prepare_views(spark, config, as_of, speculator=speculator, users=users, tick=tick)
    horizon_end = as_of + timedelta(hours=config.precompute.horizon_hours)
    return spark.sql(prepared.final).select(
        F.lit(run_id).alias("run_id"), "user_id", "item_id", "source", "spec_score", "request_score",
        F.lit(as_of).cast("timestamp").alias("as_of"),
        F.lit(horizon_end).cast("timestamp").alias("horizon_end"),
        F.to_date(F.lit(as_of).cast("timestamp")).alias("run_date"),
    ), prepared


@dataclass(frozen=True)
class CandidatesOptions:
    """``users``: a ``user_id`` frame restricting the run to them (the fast lane); None: every user."""

    users: DataFrame | None = None


def run(step: StepContext, *, options: CandidatesOptions) -> CandidatesResult:
    """Speculate and replace this run's rows; ``users`` (a ``user_id`` frame) restricts it to them
    (the fast lane: same sources, blend and caps, fewer users)."""
    spark, config, as_of, run_id, tick = step.spark, step.config, step.as_of, step.run_id, step.tick
    users = options.users
    import pyarrow.compute as pc

    record = RunRecord(run_id=run_id, job="candidates", as_of=as_of)
    speculator = load_speculator(config, as_of)
    learned = speculator is not None and config.precompute.candidates.blend == "learned"
    blend = f"learned {speculator.version}" if learned and speculator is not None else "hand"
    frame, prepared = build_candidates(spark, config, as_of, run_id, speculator=speculator, users=users,
                                       tick=tick)
    table = Table.of(spark, config, "candidates")
    try:
        table.write(frame, run_id)
    finally:
        prepared.release()
    written = table.run_rows(run_id, ("source", "user_id"))
    pairs, n_users = written.num_rows, len(pc.unique(written.column("user_id")))
    by_source = {str(entry["values"]): int(entry["counts"])
                 for entry in sorted(pc.value_counts(written.column("source")).to_pylist(),
                                     key=lambda entry: str(entry["values"]))}
    record.rows_out = pairs
    record.table_versions["candidates"] = table.version()
    record.details = {"users": n_users, "by_source": by_source, "blend": blend,
                      "request_model": None if speculator is None else speculator.version}
    record.write(spark, config, "success", tick)
    log.info("candidates at %s: %d pairs for %d users, blend %s %s", as_of, pairs, n_users, blend, by_source)
    return CandidatesResult(pairs=pairs, users=n_users, by_source=by_source, blend=blend)
