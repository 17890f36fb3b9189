"""Ingest interaction data into the ``events`` Delta table (docs/architecture.md §6).

Reads MovieLens (``ratings.dat``, ``u.data``), RecBole atomic ``*.inter`` files (the packaged
``ml-1m`` / ``ml-100k``), generic CSV/Parquet, or the seeded synthetic generator; validates every row
(rules in :mod:`solaris.ingest.events`); writes valid rows to ``events`` (MERGE on ``event_id``), string ids
to ``id_map``, and every rejected row to ``quarantine`` with its reason. Nothing is written when the
input has no valid row. Rerunning with the same ``--run-id`` leaves the tables unchanged.

    spark-submit --jars "$(ls jars/*.jar | paste -sd,)" jobs/ingest.py --input ml-100k
    solaris ingest --input ml-1m
    solaris ingest --input synthetic --set synthetic.n_events=1000000
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Iterator

from solaris.config import SolarisConfig
from solaris.ingest import events as rules
from solaris.ingest.sources import LAYOUTS, ColumnMap, SourceError, SourceSpec, resolve_source
from solaris.runtime import JobInputError, add_common_args, as_of_arg, config_from_args, run_job, setup_logging

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("solaris.ingest")

RAW_COLUMNS = ("raw_user", "raw_item", "raw_ts", "raw_rating", "raw_label")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="solaris ingest",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 2)[-1],
    )
    parser.add_argument("--input", required=True, help="file/folder, or ml-1m | ml-100k | synthetic")
    parser.add_argument("--layout", choices=LAYOUTS, help="input layout (default: detected from the name)")
    parser.add_argument("--dataset", help="dataset name recorded on each event (default: from the input)")
    parser.add_argument("--as-of", type=as_of_arg, help="events after this UTC time are quarantined")
    parser.add_argument("--id-mode", choices=["auto", "int", "string"], default="auto",
                        help="int: keep integer ids; string: hash ids to stable bigints; auto: int when all digits")
    parser.add_argument("--user-col", default="user_id", help="user column (csv/parquet)")
    parser.add_argument("--item-col", default="item_id", help="item column (csv/parquet)")
    parser.add_argument("--ts-col", default="timestamp", help="timestamp column: epoch seconds or ISO-8601")
    parser.add_argument("--rating-col", default="rating", help="rating column ('' if none)")
    parser.add_argument("--label-col", default="", help="0/1 label column ('' if none: label from rating)")
    parser.add_argument("--delimiter", default=",", help="CSV delimiter")
    add_common_args(parser)
    return parser


@dataclass(frozen=True)
class IngestResult:
    rows_in: int
    rows_valid: int
    rows_quarantined: int
    reasons: dict[str, int]
    events_path: str


def read_raw(spark: SparkSession, spec: SourceSpec, config: SolarisConfig) -> DataFrame:
    """Any supported layout -> DataFrame of string columns ``raw_user .. raw_label``."""
    from pyspark.sql import functions as F

    if spec.layout in ("ml-ratings-dat", "ml-u-data"):
        separator = "::" if spec.layout == "ml-ratings-dat" else "\t"
        parts = F.split(F.col("value"), separator)
        frame = spark.read.text(spec.path).where(F.trim("value") != "")
        return frame.select(
            parts.getItem(0).alias("raw_user"),
            parts.getItem(1).alias("raw_item"),
            parts.getItem(3).alias("raw_ts"),
            parts.getItem(2).alias("raw_rating"),
            F.lit(None).cast("string").alias("raw_label"),
        )
    if spec.layout == "synthetic":
        return _synthetic_raw(spark, config)
    if spec.layout == "parquet":
        frame = spark.read.parquet(spec.path)
    else:
        frame = (
            spark.read.option("header", True)
            .option("sep", spec.csv_delimiter)
            .option("quote", "" if spec.layout == "recbole-atomic" else '"')
            .option("inferSchema", False)
            .option("mode", "PERMISSIVE")
            .csv(spec.path)
        )
        if spec.layout == "recbole-atomic":  # header fields look like "user_id:token"
            frame = frame.toDF(*[name.rsplit(":", 1)[0] for name in frame.columns])
    return _select_columns(frame, spec.columns, spec.path)


def _select_columns(frame: DataFrame, columns: ColumnMap, path: str) -> DataFrame:
    from pyspark.sql import functions as F

    present = set(frame.columns)
    wanted = {"raw_user": columns.user, "raw_item": columns.item, "raw_ts": columns.ts,
              "raw_rating": columns.rating, "raw_label": columns.label}
    missing = [name for name in (columns.user, columns.item, columns.ts) if name not in present]
    for optional in (columns.rating, columns.label):
        if optional and optional not in present:
            missing.append(optional)
    if missing:
        raise SourceError(f"{path}: missing column(s) {missing}; columns present: {sorted(present)}")
    if not columns.rating and not columns.label:
        raise SourceError("need a rating column or a label column")
    extra = sorted(present - {c for c in wanted.values() if c})
    if extra:
        log.info("ignoring extra input columns: %s", extra)
    return frame.select(
        *[
            (F.col(f"`{source}`").cast("string") if source else F.lit(None).cast("string")).alias(target)
            for target, source in wanted.items()
        ]
    )


def _synthetic_raw(spark: SparkSession, config: SolarisConfig) -> DataFrame:
    from pyspark.sql import functions as F

    from solaris.ingest.synthetic import generate_chunk, item_world

    synthetic, seed = config.synthetic, config.seed

    def chunks(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        items = item_world(synthetic, seed)  # once per task, identical in every task
        for batch in batches:
            for chunk in batch["id"].tolist():
                yield generate_chunk(synthetic, seed, int(chunk), items)

    schema = "user_id long, item_id long, timestamp long, rating double"
    generated = spark.range(0, synthetic.chunks, numPartitions=synthetic.chunks).mapInPandas(chunks, schema)
    return generated.select(
        F.col("user_id").cast("string").alias("raw_user"),
        F.col("item_id").cast("string").alias("raw_item"),
        F.col("timestamp").cast("string").alias("raw_ts"),
        F.col("rating").cast("string").alias("raw_rating"),
        F.lit(None).cast("string").alias("raw_label"),
    )


def _all_digits(raw: DataFrame, column: str) -> bool:
    from pyspark.sql import functions as F

    value = F.trim(F.col(column))
    offending = raw.where(value.isNotNull() & (value != "") & ~value.rlike("^-?[0-9]{1,18}$")).limit(1).count()
    return offending == 0


def classify(
    raw: DataFrame, spec: SourceSpec, config: SolarisConfig, as_of: datetime | None
) -> tuple[DataFrame, tuple[bool, bool]]:
    """Parse raw rows and attach ``reason`` (NULL for valid rows), duplicates included."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if spec.id_mode == "auto":
        id_is_int = (_all_digits(raw, "raw_user"), _all_digits(raw, "raw_item"))
    else:
        id_is_int = (spec.id_mode == "int",) * 2
    log.info("id mode: user=%s item=%s", *("int" if flag else "hashed string" for flag in id_is_int))
    limit = rules.as_of_limit(as_of, config.ingest.max_future_skew_hours)
    parsed = raw.select(
        *RAW_COLUMNS,
        F.expr(rules.parsed_id_sql("raw_user", "user", id_is_int[0])).alias("user_id"),
        F.expr(rules.parsed_id_sql("raw_item", "item", id_is_int[1])).alias("item_id"),
        F.expr(rules.parsed_ts_sql("raw_ts")).alias("ts"),
        F.expr("try_cast(trim(raw_rating) AS DOUBLE)").alias("rating"),
        F.expr("try_cast(trim(raw_label) AS DOUBLE)").alias("label_in"),
    )
    reason = rules.rejection_reason_sql(
        id_is_int, (config.ingest.rating_min, config.ingest.rating_max), limit, has_label=bool(spec.columns.label)
    )
    parsed = parsed.withColumn("reason", F.expr(reason))
    # Among otherwise-valid rows, the same (user, item, ts) twice is a duplicate; keep one
    # deterministically (ordering on the row's content, not on file position).
    window = Window.partitionBy("user_id", "item_id", "ts").orderBy(
        F.col("rating").asc_nulls_last(), F.col("label_in").asc_nulls_last(), *[F.col(c) for c in RAW_COLUMNS]
    )
    ranked = parsed.withColumn("_rank", F.when(F.col("reason").isNull(), F.row_number().over(window)))
    return ranked.withColumn(
        "reason", F.when(F.col("_rank") > 1, F.lit("duplicate event")).otherwise(F.col("reason"))
    ).drop("_rank"), id_is_int


def ingest(
    spark: SparkSession, config: SolarisConfig, spec: SourceSpec, as_of: datetime | None, run_id: str
) -> IngestResult:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from solaris.storage.tables import RunRecord, merge_into, table_version, write_quarantine

    log.info("ingest %s (%s) from %s as run %s", spec.dataset, spec.layout, spec.path, run_id)
    record = RunRecord(run_id=run_id, job="ingest", as_of=as_of)
    classified, id_is_int = classify(read_raw(spark, spec, config), spec, config, as_of)
    classified = classified.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        reason_rows = classified.groupBy("reason").agg(F.count("*").alias("n")).collect()
        counts = {row["reason"]: row["n"] for row in reason_rows}
        rows_valid = int(counts.pop(None, 0))
        rows_in = rows_valid + sum(counts.values())
        log.info("read %d rows: %d valid, %d quarantined %s", rows_in, rows_valid, rows_in - rows_valid, counts or "")
        if rows_in == 0:
            raise JobInputError(f"input {spec.path} is empty; nothing written")
        if rows_valid == 0:
            raise JobInputError(f"input {spec.path} has no valid rows ({rows_in} rejected: {counts}); nothing written")

        valid = classified.where(F.col("reason").isNull())
        seen_at = as_of or valid.agg(F.max("ts")).collect()[0][0]
        _check_id_collisions(valid, id_is_int)

        rejected = classified.where(F.col("reason").isNotNull()).select(
            "reason",
            F.to_json(F.struct(*RAW_COLUMNS)).alias("payload"),
            F.lit(seen_at).cast("timestamp").alias("seen_at"),
        )
        write_quarantine(spark, config, rejected, "events", run_id)

        id_rows = _id_map_rows(valid, id_is_int, spec.dataset)
        if id_rows is not None:
            merge_into(id_rows, config.table_path("id_map"), keys=["namespace", "raw_id"])

        events = valid.select(
            F.expr(rules.event_id_sql()).alias("event_id"),
            "user_id",
            "item_id",
            "ts",
            F.expr(rules.label_sql(config.ingest.label_threshold)).alias("label"),
            "rating",
            F.to_date("ts").alias("event_date"),
            F.lit(spec.dataset).alias("dataset"),
            F.lit(run_id).alias("ingest_run_id"),
        )
        events_path = config.table_path("events")
        merge_into(events, events_path, keys=["event_id"], partition_by=["event_date"])

        record.rows_in, record.rows_out, record.rows_quarantined = rows_in, rows_valid, rows_in - rows_valid
        record.details = {"dataset": spec.dataset, "layout": spec.layout, "input": spec.path, "reasons": counts}
        for name in ("events", "quarantine", "id_map"):
            version = table_version(spark, config.table_path(name))
            if version is not None:
                record.table_versions[name] = version
        record.write(spark, config, "success")
        log.info("events table: %s (version %s)", events_path, record.table_versions.get("events"))
        return IngestResult(rows_in, rows_valid, rows_in - rows_valid, counts, events_path)
    finally:
        classified.unpersist()


def _check_id_collisions(valid: DataFrame, id_is_int: tuple[bool, bool]) -> None:
    from pyspark.sql import functions as F

    for (column, raw), is_int in zip((("user_id", "raw_user"), ("item_id", "raw_item")), id_is_int, strict=True):
        if is_int:
            continue
        clashes = valid.groupBy(column).agg(F.countDistinct(F.trim(raw)).alias("n")).where("n > 1").limit(1).collect()
        if clashes:
            raise JobInputError(f"hash collision on {column} {clashes[0][column]}: use --id-mode int or report it")


def _id_map_rows(valid: DataFrame, id_is_int: tuple[bool, bool], dataset: str) -> DataFrame | None:
    from pyspark.sql import functions as F

    parts = [
        valid.select(F.lit(namespace).alias("namespace"), F.trim(raw).alias("raw_id"), F.col(column).alias("id"))
        for (namespace, raw, column), is_int in zip(
            (("user", "raw_user", "user_id"), ("item", "raw_item", "item_id")), id_is_int, strict=True
        )
        if not is_int
    ]
    if not parts:
        return None
    rows = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
    return rows.distinct().withColumn("dataset", F.lit(dataset))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)

    def body() -> None:
        from solaris.spark import get_spark

        config = config_from_args(args)
        columns = ColumnMap(args.user_col, args.item_col, args.ts_col, args.rating_col or None, args.label_col or None)
        spec = resolve_source(args.input, args.layout, args.dataset, columns, args.id_mode, args.delimiter)
        spark = get_spark(config, "ingest")
        result = ingest(spark, config, spec, args.as_of, args.run_id or f"ingest-{spec.dataset}")
        print(f"events: {result.events_path}  valid={result.rows_valid} quarantined={result.rows_quarantined}")

    return run_job("ingest", body)


if __name__ == "__main__":
    sys.exit(main())
