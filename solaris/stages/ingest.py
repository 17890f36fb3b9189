"""Ingest interaction data into the ``events`` Delta table (docs/architecture.md §6).

Reads MovieLens (``ratings.dat``, ``u.data``), RecBole atomic ``*.inter`` files (the packaged
``ml-1m`` / ``ml-100k``), generic CSV/Parquet, or the seeded synthetic generator; validates every row
(rules in :mod:`solaris.ingest.events`); writes valid rows to ``events`` (an insert-only MERGE on
``event_id``: a stored event is never rewritten), string ids to ``id_map``, and every rejected row
to ``quarantine`` with its reason. Nothing is written when the
input has no valid row. Rerunning with the same ``--run-id`` leaves the tables unchanged.

    spark-submit --jars "$(ls jars/*.jar | paste -sd,)" jobs/ingest.py --input ml-100k
    solaris ingest --input ml-1m
    solaris ingest --input synthetic --set synthetic.n_events=1000000
    solaris ingest --input ratings.csv --validate-only

Ids are the user's: with --id-mode auto an id column that is mostly non-negative integers
(ingest.auto_int_min_share) keeps its integers and rows with another id (-5, abc, 1.5) are
quarantined; only a column of mostly non-integers is hashed (originals in id_map). Events earlier
than ingest.min_event_time or later than the wall clock + ingest.wall_clock_skew_hours are
quarantined, with or without --as-of (docs/operations.md, "Ingest").

exit codes: 0 done (with --validate-only: no row would be quarantined); 1 unexpected failure;
2 input refused, nothing written (missing file or column, empty input, no valid row);
3 --validate-only only: some rows would be quarantined (counts and samples printed), nothing written.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterator

from solaris.config import SolarisConfig
from solaris.ingest import events as rules
from solaris.ingest.events import IdCounts, IdMode, TimeBounds
from solaris.ingest.sources import ColumnMap, SourceError, SourceSpec
from solaris.ingest.synthetic import generate_chunk, item_world
from solaris.runtime import (
    JobInputError,
)
from solaris.storage.audit import RunRecord, write_quarantine
from solaris.storage.table import Table

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("solaris.ingest")

RAW_COLUMNS = ("raw_user", "raw_item", "raw_ts", "raw_rating", "raw_label")


@dataclass(frozen=True)
class IngestResult:
    rows_in: int
    rows_valid: int
    rows_quarantined: int
    reasons: dict[str, int]
    events_path: str
    id_modes: tuple[IdMode, IdMode] | None = None


@dataclass(frozen=True)
class Classified:
    """Every raw row parsed, with ``reason`` (NULL = valid), and how this run keyed ids and bounded time."""

    rows: DataFrame
    id_modes: tuple[IdMode, IdMode]
    bounds: TimeBounds

    @property
    def id_is_int(self) -> tuple[bool, bool]:
        return (self.id_modes[0].is_int, self.id_modes[1].is_int)


@dataclass(frozen=True)
class ValidationReport:
    """What an ingest of the input would do (``--validate-only``); nothing was written."""

    source: str
    rows_in: int
    rows_valid: int
    reasons: dict[str, int]
    samples: dict[str, list[dict[str, str | None]]]
    id_modes: tuple[IdMode, IdMode]
    bounds: TimeBounds

    @property
    def rows_quarantined(self) -> int:
        return self.rows_in - self.rows_valid

    @property
    def clean(self) -> bool:
        return self.rows_quarantined == 0

    def render(self) -> str:
        """The printed report: totals, how ids are keyed, the time bounds, counts and samples by reason."""
        lines = [
            f"validate-only: {self.source}: {self.rows_in} rows read, {self.rows_valid} valid, "
            f"{self.rows_quarantined} would be quarantined; nothing written",
            "ids: " + ", ".join(_describe_id_mode(mode) for mode in self.id_modes),
            f"event times accepted: {self.bounds.floor.isoformat()} .. {self.bounds.latest.isoformat()}"
            + ("" if self.bounds.as_of_limit is None else f", and <= {self.bounds.as_of_limit.isoformat()} (as-of)"),
        ]
        if self.rows_valid == 0:
            lines.append("no valid row: ingest would refuse this input")
        for reason in sorted(self.reasons, key=_reason_order):
            lines.append(f"{self.reasons[reason]:>10}  {reason}")
            lines += [f"{'e.g.':>16} {json.dumps(sample)}" for sample in self.samples.get(reason, [])]
        return "\n".join(lines)


def _reason_order(reason: str) -> int:
    return rules.REASONS.index(reason) if reason in rules.REASONS else len(rules.REASONS)


def _describe_id_mode(mode: IdMode) -> str:
    text = f"{mode.column}={'hashed' if mode.hashed else 'int'} (--id-mode {mode.requested}"
    if mode.counts is not None:
        text += f": {mode.counts.integers} of {mode.counts.values} values are integers"
    return text + ")"


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
        *[(_as_text(frame, source) if source else F.lit(None).cast("string")).alias(target)
          for target, source in wanted.items()]
    )


def _as_text(frame: DataFrame, source: str) -> Any:
    """A source column as the text the rules read (CSV columns already are text).

    Why floating-point columns are special: pandas stores an integer column that has a missing
    value as float64, so a Parquet file's ids arrive as ``7.0`` (not an integer id) and its epoch
    seconds as ``1.7672256E9`` (not a number the rules read). An integral value below 2^53 (exact in
    a double) becomes its integer text, NaN becomes NULL (missing), others plain decimal text.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, FloatType

    column = F.col(f"`{source}`")
    if not isinstance(frame.schema[source].dataType, (DoubleType, FloatType)):
        return column.cast("string")
    decimal = F.expr(f"CAST(try_cast(`{source}` AS DECIMAL(38, 9)) AS STRING)")
    return (
        F.when(F.isnan(column), F.lit(None).cast("string"))
        .when((column == F.floor(column)) & (F.abs(column) < float(2**53)), column.cast("bigint").cast("string"))
        .otherwise(F.coalesce(decimal, column.cast("string")))
    )


def _synthetic_raw(spark: SparkSession, config: SolarisConfig) -> DataFrame:
    from pyspark.sql import functions as F

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


def id_modes(raw: DataFrame, spec: SourceSpec, config: SolarisConfig) -> tuple[IdMode, IdMode]:
    """How the user and item columns are keyed, decided by :func:`solaris.ingest.events.choose_id_mode`.

    For ``auto``, one Spark aggregation counts each column's non-blank and integer-id values.
    """
    from pyspark.sql import functions as F

    counts: tuple[IdCounts | None, IdCounts | None] = (None, None)
    if spec.id_mode == "auto":
        exprs = [F.expr(sql) for column in ("raw_user", "raw_item") for sql in rules.id_counts_sql(column)]
        row = raw.agg(*exprs).collect()[0]
        counts = (IdCounts(int(row[0]), int(row[1])), IdCounts(int(row[2]), int(row[3])))
    share = config.ingest.auto_int_min_share
    modes = (
        rules.choose_id_mode("user_id", spec.id_mode, counts[0], share),
        rules.choose_id_mode("item_id", spec.id_mode, counts[1], share),
    )
    for mode in modes:
        _log_id_mode(mode, share)
    return modes


def _log_id_mode(mode: IdMode, min_share: float) -> None:
    """INFO when ids are kept as asked; WARNING when auto hashes a column or quarantines some of its rows."""
    counts, name = mode.counts, mode.column
    if counts is None:
        log.info("id mode %s=%s (--id-mode %s)", name, "hashed" if mode.hashed else "int", mode.requested)
    elif mode.hashed:
        log.warning(
            "%s: only %d of %d values (%.1f%%) are non-negative integers, below ingest.auto_int_min_share=%g: "
            "every %s is hashed to a stable bigint, originals kept in id_map (--id-mode int keeps the integers "
            "and quarantines the other rows)",
            name, counts.integers, counts.values, 100 * counts.share, min_share, name,
        )
    elif counts.integers < counts.values:
        log.warning(
            "%s: %d of %d values are not non-negative integers: integer ids kept, those rows are quarantined "
            "(negative / non-integer %s); --id-mode string would hash every id instead",
            name, counts.values - counts.integers, counts.values, name,
        )
    else:
        log.info("id mode %s=int (auto: all %d values are integers)", name, counts.values)


def event_time_bounds(config: SolarisConfig, as_of: datetime | None, now: datetime) -> TimeBounds:
    """The run's accepted event times (:func:`solaris.ingest.events.time_bounds`); a bad setting is refused."""
    settings = config.ingest
    try:
        return rules.time_bounds(now, settings.wall_clock_skew_hours, settings.min_event_time, as_of,
                                 settings.max_future_skew_hours)
    except ValueError as error:
        raise JobInputError(str(error)) from None


def classify(
    raw: DataFrame, spec: SourceSpec, config: SolarisConfig, as_of: datetime | None, now: datetime
) -> Classified:
    """Parse raw rows and attach ``reason`` (NULL for valid rows), duplicates included.

    ``now`` is the run's wall clock, read once at the job's entry: the rules stay deterministic.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    bounds = event_time_bounds(config, as_of, now)
    modes = id_modes(raw, spec, config)
    parsed = raw.select(
        *RAW_COLUMNS,
        F.expr(rules.parsed_id_sql("raw_user", "user", modes[0].is_int)).alias("user_id"),
        F.expr(rules.parsed_id_sql("raw_item", "item", modes[1].is_int)).alias("item_id"),
        F.expr(rules.parsed_ts_sql("raw_ts", bounds)).alias("ts"),
        F.expr(rules.epoch_seconds_sql("raw_ts")).alias("ts_seconds"),
        F.expr("try_cast(trim(raw_rating) AS DOUBLE)").alias("rating"),
        F.expr("try_cast(trim(raw_label) AS DOUBLE)").alias("label_in"),
    )
    reason = rules.rejection_reason_sql(
        (modes[0].is_int, modes[1].is_int), (config.ingest.rating_min, config.ingest.rating_max), bounds,
        has_label=bool(spec.columns.label),
    )
    parsed = parsed.withColumn("reason", F.expr(reason)).drop("ts_seconds")
    # Among otherwise-valid rows, two of one event_id (the same (user, item, ts), or a hash collision)
    # are duplicates; keep one deterministically (ordering on the row's content, not on file
    # position). `events`' insert-only MERGE needs a source unique on its key (it would insert both).
    # Only valid rows compete: a rejected row of the same key never displaces a valid one.
    window = Window.partitionBy(F.col("reason").isNull(), F.expr(rules.event_id_sql())).orderBy(
        F.col("rating").asc_nulls_last(), F.col("label_in").asc_nulls_last(), *[F.col(c) for c in RAW_COLUMNS]
    )
    ranked = parsed.withColumn("_rank", F.when(F.col("reason").isNull(), F.row_number().over(window)))
    rows = ranked.withColumn(
        "reason", F.when(F.col("_rank") > 1, F.lit("duplicate event")).otherwise(F.col("reason"))
    ).drop("_rank")
    return Classified(rows, modes, bounds)


def _count_reasons(classified: Classified, spec: SourceSpec) -> tuple[int, int, dict[str, int]]:
    """(rows read, valid rows, quarantined rows by reason); an empty input is refused."""
    from pyspark.sql import functions as F

    reason_rows = classified.rows.groupBy("reason").agg(F.count("*").alias("n")).collect()
    counts = {row["reason"]: int(row["n"]) for row in reason_rows}
    rows_valid = counts.pop(None, 0)
    rows_in = rows_valid + sum(counts.values())
    if rows_in == 0:
        raise JobInputError(f"input {spec.path} is empty; nothing written")
    level = logging.WARNING if counts else logging.INFO
    log.log(level, "read %d rows: %d valid, %d quarantined %s", rows_in, rows_valid, rows_in - rows_valid,
            dict(sorted(counts.items(), key=lambda item: _reason_order(item[0]))) if counts else "")
    return rows_in, rows_valid, counts


def ingest(
    spark: SparkSession,
    config: SolarisConfig,
    spec: SourceSpec,
    as_of: datetime | None,
    run_id: str,
    *, now: datetime | None = None,
) -> IngestResult:
    """Validate ``spec``'s rows and write them: valid to ``events``, rejected to ``quarantine``.

    ``now``: the wall clock of the run (default: read here, once); events later than it plus
    ``ingest.wall_clock_skew_hours`` are quarantined.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    now = now or datetime.now(timezone.utc)
    log.info("ingest %s (%s) from %s as run %s", spec.dataset, spec.layout, spec.path, run_id)
    record = RunRecord(run_id=run_id, job="ingest", as_of=as_of)
    classified = classify(read_raw(spark, spec, config), spec, config, as_of, now)
    classified = replace(classified, rows=classified.rows.persist(StorageLevel.MEMORY_AND_DISK))
    rows = classified.rows
    try:
        rows_in, rows_valid, counts = _count_reasons(classified, spec)
        if rows_valid == 0:
            raise JobInputError(f"input {spec.path} has no valid rows ({rows_in} rejected: {counts}); nothing written")

        valid = rows.where(F.col("reason").isNull())
        seen_at = as_of or valid.agg(F.max("ts")).collect()[0][0]
        _check_id_collisions(valid, classified.id_is_int)

        rejected = rows.where(F.col("reason").isNotNull()).select(
            "reason",
            F.to_json(F.struct(*RAW_COLUMNS)).alias("payload"),
            F.lit(seen_at).cast("timestamp").alias("seen_at"),
        )
        write_quarantine(spark, config, rejected, source_table="events", run_id=run_id)

        id_rows = _id_map_rows(valid, classified.id_is_int, spec.dataset)
        if id_rows is not None:
            Table.of(spark, config, "id_map").write(id_rows, run_id)

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
        Table.of(spark, config, "events").write(events, run_id)

        record.rows_in, record.rows_out, record.rows_quarantined = rows_in, rows_valid, rows_in - rows_valid
        record.details = {
            "dataset": spec.dataset, "layout": spec.layout, "input": spec.path, "reasons": counts,
            # how the tables are keyed, for downstream readers: int = the input's own ids, hashed = id_map
            "id_modes": {mode.column: mode.audit() for mode in classified.id_modes},
            "event_time_bounds": classified.bounds.audit(),
        }
        for name in ("events", "quarantine", "id_map"):
            version = Table.of(spark, config, name).version()
            if version is not None:
                record.table_versions[name] = version
        record.write(spark, config, "success")
        events_path = config.table_path("events")
        log.info("events table: %s (version %s)", events_path, record.table_versions.get("events"))
        return IngestResult(rows_in, rows_valid, rows_in - rows_valid, counts, events_path, classified.id_modes)
    finally:
        rows.unpersist()


def validate(
    spark: SparkSession,
    config: SolarisConfig,
    spec: SourceSpec,
    as_of: datetime | None,
    *, now: datetime | None = None,
    samples: int = 3,
) -> ValidationReport:
    """Everything :func:`ingest` checks, without writing anything (no table, no ``runs`` row).

    The same :func:`classify` as a real ingest, so the counts are the ones it would quarantine
    (against this run's wall clock); up to ``samples`` raw rows per reason show what is wrong.
    """
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    now = now or datetime.now(timezone.utc)
    classified = classify(read_raw(spark, spec, config), spec, config, as_of, now)
    classified = replace(classified, rows=classified.rows.persist(StorageLevel.MEMORY_AND_DISK))
    rows = classified.rows
    try:
        rows_in, rows_valid, counts = _count_reasons(classified, spec)
        if rows_valid:
            _check_id_collisions(rows.where(F.col("reason").isNull()), classified.id_is_int)
        examples: dict[str, list[dict[str, str | None]]] = {}
        if counts and samples > 0:
            window = Window.partitionBy("reason").orderBy(*[F.col(c).asc_nulls_first() for c in RAW_COLUMNS])
            picked = (rows.where(F.col("reason").isNotNull()).withColumn("_n", F.row_number().over(window))
                      .where(F.col("_n") <= samples).select("reason", *RAW_COLUMNS).collect())
            for row in sorted(picked, key=lambda r: (r["reason"], [r[c] or "" for c in RAW_COLUMNS])):
                examples.setdefault(row["reason"], []).append({c: row[c] for c in RAW_COLUMNS})
        return ValidationReport(spec.path, rows_in, rows_valid, counts, examples, classified.id_modes,
                                classified.bounds)
    finally:
        rows.unpersist()


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
