"""Point-in-time model inputs built in Spark (events <= as_of), shared by scoring and KNN.

The Python side (:func:`solaris.models.features.features_from_histories`) turns these columns into the
exact features the models were trained on; the unit tests check both paths agree.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Callable

from solaris.storage.events import Events, rating_column
from solaris.timeutil import window_micros

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column, DataFrame, SparkSession

    from solaris.config import SolarisConfig
    from solaris.tick import Tick

# Keys of the frames a tick shares (solaris.tick.Tick.frames): the visible events, every user's
# history (per history length), the FM's user representations (per FM checkpoint folder).
TICK_EVENTS = "visible_events"


def _histories_key(history_length: int) -> tuple[str, int]:
    return ("histories", history_length)


def _vectors_key(fm_dir: str) -> tuple[str, str]:
    return ("user_vectors", fm_dir)


EVENT_COLUMNS = ("user_id", "item_id", "ts", "label", "rating")
# The tick's as-of as a column of every visible event (see visible_events).
TICK_AS_OF = "tick_as_of"


def within_hours(hours: float, column: str = "ts") -> Column:
    """``column > as_of - hours`` on :func:`visible_events` rows, with the as-of read from the rows'
    ``tick_as_of`` column instead of written into the query (same rows; why: visible_events).

    ``column`` stays alone on its side of the comparison: on uncached events ``tick_as_of`` is a
    constant, Spark folds the bound into a timestamp and the scan skips the files outside the window."""
    from pyspark.sql import functions as F

    return F.col(column) > F.timestamp_micros(F.unix_micros(TICK_AS_OF) - F.lit(window_micros(hours)))


def visible_events(spark: SparkSession, config: SolarisConfig, as_of: datetime, tick: Tick | None = None,
                   *, since: datetime | None = None) -> DataFrame:
    """Events with ``ts <= as_of`` (the point-in-time rule), columns the stages use, and the as-of
    itself as column ``tick_as_of``; with ``since``, only those with ``ts > since`` (the stream's
    micro-batches: ``solaris.precompute.stream.events_since``).

    With a ``tick`` that keeps them (:func:`keep_visible_events`) this is the tick's cached frame,
    so the stages of one tick (candidates, score, knn) read the events table once, not once each.

    Why the as-of as a column: Spark generates and compiles Java code per query, and reuses the
    compiled class only for identical source text. A time written into a query as a literal (a
    window start, ``as_of`` itself) is in that text, so a long session compiled and JIT-optimised
    the same code again every hour. Windows written against the cached column
    (:func:`within_hours`, ``sql/candidates.sql``) keep the text the same from one tick to the next.
    The filter at the table scan stays a literal: there it is what skips files (and outside a tick's
    cache the windows fold back into literals at the scan, so a stage run alone skips files as before).
    """
    from pyspark.sql import functions as F

    cached = tick.check(as_of).frame(TICK_EVENTS) if tick is not None else None
    if cached is not None:
        return cached
    events = Events.of(spark, config).window(until=as_of, since=since)
    return events.select(
        *event_columns(events), F.lit(as_of).cast("timestamp").alias(TICK_AS_OF))


def event_columns(events: DataFrame) -> list[Column]:
    """:data:`EVENT_COLUMNS` of an events table, ``rating`` null where the table has none (:func:`rating_column`)."""
    from pyspark.sql import functions as F

    return [rating_column(events) if name == "rating" else F.col(name) for name in EVENT_COLUMNS]


def keep_visible_events(spark: SparkSession, config: SolarisConfig, tick: Tick, *, since: datetime | None = None
                        ) -> DataFrame:
    """Cache the events visible at the tick's as-of (after ``since`` when given) for every stage the
    tick is handed to.

    Safe because nothing inside a tick writes events, and point-in-time by construction: the
    cached frame holds only ``ts <= as_of``. Reads of later events (the replay measurements) go
    to the table, never to this cache. The tick unpersists it when it closes.
    """
    return tick.keep(TICK_EVENTS, visible_events(spark, config, tick.as_of, since=since))


def tick_histories(spark: SparkSession, config: SolarisConfig, tick: Tick | None, create: bool = True
                   ) -> DataFrame | None:
    """Every user's :func:`user_histories` at the tick's as-of, kept until the tick ends; None
    without a tick that keeps its events, and None when ``create`` is False and the tick has not
    built them yet.

    Why: the FM reads the same point-in-time history of a user up to three times in one hourly tick
    (the retrieval source's and the KNN stage's user representations, and the score stage's pair
    features). A user's history does not depend on which other users are computed with it, so the
    rows the score stage joins are exactly the ones it would build for its candidates' users. The
    representations build them for everyone (``create``); the score stage only reuses them, so the
    fast lane, whose representations cover its few users, never pays for everyone's.
    """
    if tick is None or tick.frame(TICK_EVENTS) is None:
        return None
    key = _histories_key(config.model.history_length)
    kept = tick.frame(key)
    if kept is None and create:
        events = visible_events(spark, config, tick.as_of, tick)
        kept = tick.keep(key, user_histories(events, None, config.model.history_length))
    return kept


def user_vectors(spark: SparkSession, config: SolarisConfig, as_of: datetime, *, fm_dir: str,
                 represent: Callable[[DataFrame], DataFrame],
                 users: DataFrame | None = None, tick: Tick | None = None) -> tuple[DataFrame, bool]:
    """The FM's user representations at ``as_of`` (``user_id``, ``vector``) -> (frame, owned).

    ``represent`` turns :func:`user_histories` rows into them with the FM in ``fm_dir``
    (``solaris.udfs.knn.user_representation_step``; passed in because the UDFs sit downstream of
    this module).

    ``users`` (a ``user_id`` frame) None means every user with a visible event. With a ``tick`` that
    keeps its events, that set is computed once per tick and FM and shared: the retrieval source
    of ``candidates`` and the ``knn`` stage both represent users with the same FM, from the same
    histories, at the same as-of, so the second pass only repeated the first. The shared frame is
    kept until the tick ends (``owned`` False: the caller must not unpersist it). Otherwise the
    frame is computed for the caller, persisted, and ``owned`` (the caller unpersists it).
    """
    from pyspark import StorageLevel

    shared = users is None and tick is not None and tick.check(as_of).frame(TICK_EVENTS) is not None
    key = _vectors_key(fm_dir)
    if shared and tick is not None:
        kept = tick.frame(key)
        if kept is not None:
            return kept, False
    histories = tick_histories(spark, config, tick) if shared else None
    if histories is None:
        histories = user_histories(visible_events(spark, config, as_of, tick), users, config.model.history_length)
    if shared and tick is not None:
        return tick.keep(key, represent(histories)), False
    return represent(histories).persist(StorageLevel.MEMORY_AND_DISK), True


def feedback_level() -> Column:
    """:func:`solaris.models.features.feedback_levels` of each event row, as a Spark column: 1 + the
    rating rounded half to even (``bround``, numpy's ``rint``) and clipped to 1..5 stars; without a
    rating 1 if liked else 0. One rule, two engines: tests/integration/test_precompute.py compares them."""
    from pyspark.sql import functions as F

    rated = F.col("rating").isNotNull() & ~F.isnan("rating")
    stars = F.least(F.greatest(F.bround("rating", 0), F.lit(1.0)), F.lit(5.0)).cast("int") + 1
    return F.when(rated, stars).otherwise((F.col("label") > 0.5).cast("int"))


def user_histories(events: DataFrame, users: DataFrame | None, history_length: int) -> DataFrame:
    """Per user: the last N events as lists oldest-first (``hist_items``, ``hist_labels``,
    ``hist_feedback``, ``hist_ts``) and ``user_count`` (all their events), for the users in ``users``
    (None: every user in ``events``)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    mine = events if users is None else events.join(users, "user_id", "left_semi")
    recent = mine.withColumn(
        "rank", F.row_number().over(Window.partitionBy("user_id").orderBy(F.col("ts").desc(), F.col("item_id").desc()))
    ).where(F.col("rank") <= history_length)
    lists = (
        recent.groupBy("user_id")
        .agg(
            F.array_sort(
                F.collect_list(
                    F.struct(
                        F.unix_seconds("ts").alias("ts"),
                        F.col("item_id").alias("item"),
                        F.col("label").cast("float").alias("label"),
                        feedback_level().alias("feedback"),
                    )
                )
            ).alias("history")
        )
        .select(
            "user_id",
            F.col("history.item").alias("hist_items"),
            F.col("history.label").alias("hist_labels"),
            F.col("history.feedback").alias("hist_feedback"),
            F.col("history.ts").alias("hist_ts"),
        )
    )
    counts = mine.groupBy("user_id").agg(F.count("*").alias("user_count"))
    return lists.join(counts, "user_id")


def candidate_features(spark: SparkSession, config: SolarisConfig, candidates: DataFrame, as_of: datetime,
                       tick: Tick | None = None) -> DataFrame:
    """Join (user, item) candidates with history lists and user/item counters (events <= as_of);
    inside an hourly tick, the tick's histories of every user when its user representations built
    them (:func:`tick_histories`)."""
    from pyspark.sql import functions as F

    events = visible_events(spark, config, as_of, tick)
    items = candidates.select("item_id").distinct()
    histories = tick_histories(spark, config, tick, create=False)  # visible_events checked the tick's as-of
    if histories is None:
        histories = user_histories(events, candidates.select("user_id").distinct(), config.model.history_length)
    counts = (
        events.join(items, "item_id", "left_semi")
        .groupBy("item_id")
        .agg(F.count("*").alias("item_count"), F.sum("label").alias("item_likes"))
    )
    empty_long = F.array().cast("array<bigint>")
    return (
        candidates.join(histories, "user_id", "left")
        .join(counts, "item_id", "left")
        .select(
            "user_id",
            "item_id",
            F.coalesce("hist_items", empty_long).alias("hist_items"),
            F.coalesce("hist_labels", F.array().cast("array<float>")).alias("hist_labels"),
            F.coalesce("hist_feedback", F.array().cast("array<int>")).alias("hist_feedback"),
            F.coalesce("hist_ts", empty_long).alias("hist_ts"),
            F.coalesce("item_count", F.lit(0)).cast("bigint").alias("item_count"),
            F.coalesce("item_likes", F.lit(0.0)).cast("double").alias("item_likes"),
            F.coalesce("user_count", F.lit(0)).cast("bigint").alias("user_count"),
        )
    )
