"""Point-in-time model inputs built in Spark (events <= as_of), shared by scoring and KNN.

The Python side (:func:`solaris.features.features_from_histories`) turns these columns into the
exact features the models were trained on; the unit tests check both paths agree.
"""

from __future__ import annotations

from datetime import datetime


def visible_events(spark, config, as_of: datetime):
    from pyspark.sql import functions as F

    return spark.read.format("delta").load(config.table_path("events")).where(F.col("ts") <= F.lit(as_of))


def user_histories(events, users, history_length: int):
    """Per user: the last N events as lists oldest-first (``hist_items``, ``hist_labels``,
    ``hist_ts``) and ``user_count`` (all their events), for the users in ``users``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    mine = events.join(users, "user_id", "left_semi")
    recent = mine.withColumn(
        "rank", F.row_number().over(Window.partitionBy("user_id").orderBy(F.col("ts").desc(), F.col("item_id").desc()))
    ).where(F.col("rank") <= history_length)
    lists = recent.groupBy("user_id").agg(
        F.array_sort(F.collect_list(F.struct(
            F.unix_seconds("ts").alias("ts"), F.col("item_id").alias("item"), F.col("label").cast("float").alias("label")
        ))).alias("history")
    ).select("user_id", F.col("history.item").alias("hist_items"), F.col("history.label").alias("hist_labels"),
             F.col("history.ts").alias("hist_ts"))
    counts = mine.groupBy("user_id").agg(F.count("*").alias("user_count"))
    return lists.join(counts, "user_id")


def candidate_features(spark, config, candidates, as_of: datetime):
    """Join (user, item) candidates with history lists and user/item counters (events <= as_of)."""
    from pyspark.sql import functions as F

    events = visible_events(spark, config, as_of)
    users = candidates.select("user_id").distinct()
    items = candidates.select("item_id").distinct()
    histories = user_histories(events, users, config.model.history_length)
    counts = events.join(items, "item_id", "left_semi").groupBy("item_id").agg(
        F.count("*").alias("item_count"), F.sum("label").alias("item_likes"))
    empty_long = F.array().cast("array<bigint>")
    return (
        candidates.join(histories, "user_id", "left").join(counts, "item_id", "left")
        .select(
            "user_id", "item_id",
            F.coalesce("hist_items", empty_long).alias("hist_items"),
            F.coalesce("hist_labels", F.array().cast("array<float>")).alias("hist_labels"),
            F.coalesce("hist_ts", empty_long).alias("hist_ts"),
            F.coalesce("item_count", F.lit(0)).cast("bigint").alias("item_count"),
            F.coalesce("item_likes", F.lit(0.0)).cast("double").alias("item_likes"),
            F.coalesce("user_count", F.lit(0)).cast("bigint").alias("user_count"),
        )
    )
