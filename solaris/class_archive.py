"""The workload `make setup` runs once so the JVM can archive the classes a pipeline job loads.

Why: a driver JVM that runs one hourly stage (an Airflow task's spark-submit) spends seconds
loading, parsing and verifying the ~20,000 classes of Spark, Delta and their dependencies before
and while it does the stage's work. Java's class-data sharing (CDS) stores those classes, already
parsed and verified, in an archive file that later JVMs map instead. `scripts/setup.sh` runs this
file under spark-submit with ``-XX:ArchiveClassesAtExit=<file>``: every class the workload loads
goes into the archive, and :func:`solaris.spark.driver_java_options` hands the archive to every
driver JVM (``spark.class_data_archive``). A class the workload never touched is loaded from its
JAR as usual, so the workload only has to cover the common paths: Delta writes of every kind the
tables use (create, replaceWhere, both MERGEs, DELETE, VACUUM), time-travel reads, the joins,
windows and aggregates of the stages' SQL, and the Arrow / pandas UDF round trips.

    spark-submit --jars <delta jars> --driver-java-options -XX:ArchiveClassesAtExit=a.jsa solaris/class_archive.py
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from solaris.config import load_config
from solaris.spark import get_spark

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import SparkSession

log = logging.getLogger("solaris.class_archive")


def _halve(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import pyarrow.compute as pc

    for batch in batches:
        yield batch.filter(pc.equal(pc.bit_wise_and(batch.column(0), 1), 0))


def _score(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    for frame in frames:
        yield frame.assign(score=frame["item_id"] / 100.0)


def exercise(spark: SparkSession, folder: Path) -> None:
    """Run each kind of Spark and Delta work the pipeline's stages do, on a few thousand rows."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from solaris.storage.table import Table, WriteRule

    events = spark.range(3000).select(
        (F.col("id") % 60).alias("user_id"),
        (F.col("id") % 90).alias("item_id"),
        F.timestamp_seconds(F.lit(975_628_800) + F.col("id") * 60).alias("ts"),
        F.lit("class-archive").alias("run_id"),
        F.timestamp_seconds(F.lit(975_628_800) + F.col("id")).alias("computed_at"),
        F.unhex(F.lit("00" * 64)).alias("embedding"),
    ).withColumn("day", F.to_date("ts"))
    path, key = str(folder / "pairs"), ("user_id", "item_id", "ts")
    pairs = Table.at(path, spark=spark, rule=WriteRule("replace_where", partition_by=("day",)))
    pairs.replace_where(events, "day >= '2000-01-01'")
    pairs.replace_where(events.where("user_id < 10"), "user_id < 10")
    # rows=None: Spark's MERGE, whatever the engine rule would choose for so few rows
    Table.at(path, spark=spark, rule=WriteRule("merge_newer", keys=key, partition_by=("day",))).write(
        events.where("user_id < 30"), "class-archive", rows=None)
    Table.at(path, spark=spark, rule=WriteRule("upsert", keys=key, partition_by=("day",))).write(
        events.where("user_id >= 30").withColumn("run_id", F.lit("again")), "again")
    pairs.delete_where("user_id = 1")
    # a time-travel read (publish pins versions)
    first = pairs.scan(version=0).select("user_id").distinct().toPandas()
    pairs.vacuum()  # default retention, as expire runs it (deletes nothing here)

    table = pairs.scan()
    table.createOrReplaceTempView("class_archive_pairs")
    recent = Window.partitionBy("user_id").orderBy(F.desc("ts"))
    ranked = table.withColumn("rank", F.row_number().over(recent)).where("rank <= 5")
    cooc = (ranked.alias("a").join(ranked.alias("b"), "user_id")
            .where("a.item_id <> b.item_id")
            .groupBy(F.col("a.item_id").alias("item"), F.col("b.item_id").alias("other"))
            .agg(F.count("*").alias("n"), F.approx_count_distinct("user_id").alias("users")))
    top = cooc.withColumn("k", F.dense_rank().over(Window.partitionBy("item").orderBy(F.desc("n"))))
    top.where("k <= 3").orderBy(F.desc("n")).limit(20).collect()
    spark.sql(
        "SELECT user_id, count(DISTINCT item_id) AS items, max(ts) AS last, percentile_approx(item_id, 0.5) AS mid "
        "FROM class_archive_pairs WHERE ts > timestamp'2000-12-01 00:00:00' GROUP BY user_id HAVING items > 1"
    ).join(spark.createDataFrame(first), "user_id", "left_anti").count()
    scored = table.select("user_id", "item_id").mapInPandas(_score, "user_id long, item_id long, score double")
    scored.mapInArrow(_halve, scored.schema).groupBy("user_id").agg(F.avg("score")).toPandas()
    table.select("user_id", "embedding").limit(100).toPandas()
    spark.catalog.dropTempView("class_archive_pairs")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="solaris/class_archive.py", description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)sZ %(levelname)s %(name)s: %(message)s")
    folder = Path(tempfile.mkdtemp(prefix="solaris-class-archive-"))
    try:
        config = load_config(overrides=[f"warehouse={folder / 'warehouse'}", "spark.shuffle_partitions=2"])
        spark = get_spark(config, "class-archive")
        exercise(spark, folder)
        spark.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    log.info("class archive workload done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
