"""Verify, score and store: candidates -> verifier rule + FM pair embeddings -> ``pair_embeddings``.

For the run at ``--as-of t``:

1. point-in-time features in Spark: each candidate user's last N events with ``ts <= t`` (as
   lists) and each candidate item's event count up to ``t``;
2. the FM and the verifier score the candidates (under rule ``request`` only the kept ones, step 3)
   in ``udfs/fm_scoring`` (``mapInArrow``, models loaded once per Python worker, GPU when the task has
   one);
3. the verifier rule (threshold / top-k per user / global budget, ``precompute.verifier``) keeps
   the pairs worth storing; the rule and its effective threshold are recorded in ``runs``. Rule
   ``request`` (default) thresholds the speculator's P(requested within the TTL) of each candidate
   *before* the FM, so only the kept pairs are scored; rule ``relevance`` thresholds the baseline
   VM's like-probability after scoring every candidate;
4. verified pairs with non-finite or wrong-size embeddings go to ``quarantine``; the rest are
   MERGEd into ``pair_embeddings`` on (user_id, item_id) with ``computed_at = t`` and
   ``expires_at = t + ttl``, partitioned by expiry bucket. A re-scored pair replaces the old row
   and refreshes its TTL; rerunning the same run id changes nothing. The same rows are appended
   to ``pair_embeddings_log`` (per-run replace), the history the 24 h user aggregates read. Both
   writes go through the driver with ``deltalake`` when the rows fit
   (``storage.driver_max_rows``; why: ``solaris.storage.engine.choose_engine``), else through Spark.

    solaris score --as-of 2000-12-01T00:00:00Z
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, NamedTuple

from solaris.precompute.spark_features import candidate_features
from solaris.precompute.speculation import effective_threshold, locate_rank, written_budget
from solaris.runtime import JobInputError
from solaris.storage.audit import RunRecord, write_quarantine
from solaris.storage.table import Table
from solaris.storage.validity import expires_at_column
from solaris.tick import StepContext
from solaris.udfs.fm_scoring import OUTPUT_SCHEMA, ScoringSpec, make_scorer

if TYPE_CHECKING:  # pragma: no cover
    from datetime import datetime

    from pyspark.sql import DataFrame, SparkSession

    from solaris.config import SolarisConfig, VerifierConfig
    from solaris.tick import Tick

log = logging.getLogger("solaris.score")

PAIR_COLUMNS = (
    "user_id", "item_id", "embedding", "fm_score", "verifier_score", "fm_version", "verifier_version", "run_id",
    "source", "spec_score", "computed_at", "expires_at", "expiry_bucket",
)


@dataclass(frozen=True)
class ScoreResult:
    """Counts of one scoring run (candidates >= verified = written + quarantined) and its models."""

    candidates: int
    verified: int
    written: int
    quarantined: int
    effective_threshold: float | None
    fm_version: str
    verifier_version: str
    rule: str = "relevance"  # precompute.verifier.rule in effect (request falls back without request scores)
    scored: int = 0  # FM passes: every candidate under relevance, only the verified ones under request
    min_per_user: int = 0  # the rule's per-user floor in effect (pairs kept per user whatever their score)
    budget: int | None = None  # pairs the threshold could keep beyond the floor (global budget; None: none)


@dataclass(frozen=True)
class ScoreOptions:
    """Checkpoints under the warehouse instead of ``precompute.fm_checkpoint`` / ``verifier_checkpoint``
    (None: those); ``load_log_dir``: each model load appends a line there (tests, audits)."""

    fm_path: str | None = None
    verifier_path: str | None = None
    load_log_dir: str | None = None


def run(step: StepContext, *, options: ScoreOptions) -> ScoreResult:
    """Score this run's candidates: verify (before the FM under the request rule, after it otherwise),
    the FM pass, quarantine, then the TTL MERGE and the history log (:func:`write_pairs`)."""
    spark, config, as_of, run_id, tick = step.spark, step.config, step.as_of, step.run_id, step.tick
    fm_path, verifier_path, load_log_dir = options.fm_path, options.verifier_path, options.load_log_dir
    from pyspark.sql import functions as F

    from solaris.models.checkpoint import load_checkpoint, resolve_checkpoint

    pre = config.precompute
    fm_dir = resolve_checkpoint(config.resolve_under_warehouse(fm_path or pre.fm_checkpoint))
    verifier_dir = resolve_checkpoint(config.resolve_under_warehouse(verifier_path or pre.verifier_checkpoint))
    # Refuse a bad checkpoint on the driver, before any executor work or write.
    _, fm_meta = load_checkpoint(fm_dir, "fm", config.model.embedding_dim)
    _, verifier_meta = load_checkpoint(verifier_dir, "vm")
    record = RunRecord(run_id=run_id, job="score", as_of=as_of)

    stored = Table.of(spark, config, "candidates")
    if not stored.exists():
        raise JobInputError(f"no candidates table at {stored.path}: run `solaris candidates` first")
    candidates = stored.scan().where(F.col("run_id") == run_id)
    refuse_trimmed_run(config, stored, candidates, run_id, as_of)
    verifier = _effective_verifier(spark, config, candidates, run_id)
    rule = verifier.rule
    persisted: list[DataFrame] = []  # unpersisted whatever happens
    try:
        request_verified: Verified | None = None
        if rule == "request":
            # Verify before the FM: a pair unlikely to be requested within the TTL costs no FM pass.
            request_verified = _verify(candidates.where(F.col("request_score").isNotNull()), "request_score",
                                       verifier)
            persisted.append(request_verified.ranked)
            candidates = request_verified.kept
        spec = ScoringSpec(
            fm_checkpoint=str(fm_dir), verifier_checkpoint=str(verifier_dir), embedding_dim=config.model.embedding_dim,
            history_length=config.model.history_length, request_ts=int(as_of.timestamp()),
            model_batch_size=pre.model_batch_size, torch_threads=pre.torch_threads, load_log_dir=load_log_dir,
        )
        scored = scored_pairs(spark, config, candidates, as_of, spec, with_request_score=rule == "request", tick=tick)
        persisted.append(scored)
        if request_verified is not None:
            # verified before scoring; the written verifier_score is P(requested within the TTL)
            verification = request_verified
            verified = scored.withColumn("verifier_score", F.col("request_score").cast("float")).drop("request_score")
        else:
            verification = _verify(scored, "verifier_score", verifier)
            persisted.append(verification.ranked)
            verified = verification.kept
        threshold, n_candidates = verification.threshold, verification.rows
        n_scored = scored.count()
        n_verified, n_quarantined = write_pairs(spark, config, verified, run_id)
        pairs = Table.of(spark, config, "pair_embeddings")
        n_written = pairs.run_rows(run_id).num_rows
        record.rows_in, record.rows_out, record.rows_quarantined = n_candidates, n_written, n_quarantined
        record.table_versions = {"pair_embeddings": pairs.version()}
        result = ScoreResult(
            candidates=n_candidates,
            verified=n_verified,
            written=n_written,
            quarantined=n_quarantined,
            effective_threshold=None if threshold == float("inf") else threshold,
            fm_version=fm_meta["version"],
            verifier_version=verifier_meta["version"],
            rule=rule,
            scored=n_scored,
            min_per_user=verifier.active_min_per_user(),
            budget=verification.budget,
        )
        record.details = asdict(result)
        record.write(spark, config, "success", tick)
        log.info("run %s: %d candidates -> %d verified (threshold %.4f) -> %d written, %d quarantined",
                 run_id, n_candidates, n_verified, threshold, n_written, n_quarantined)
        return result
    finally:
        for frame in persisted:
            frame.unpersist()


def _effective_verifier(spark: SparkSession, config: SolarisConfig, candidates: DataFrame, run_id: str
                        ) -> VerifierConfig:
    """The configured verifier, or the relevance rule when the request rule has no request scores to read."""
    verifier = config.precompute.verifier
    if verifier.rule == "request" and ("request_score" not in candidates.columns or not _has_values(
            Table.of(spark, config, "candidates"), run_id, "request_score")):
        # candidates written without a request model (no speculator trained yet): the relevance rule,
        # with its own threshold and top-k
        log.warning("run %s: no request scores in the candidates (no speculator checkpoint at or before the "
                    "as-of: `solaris train-speculator`); verifier rule relevance instead", run_id)
        verifier = verifier.model_copy(update={"rule": "relevance"})
    return verifier


def scored_pairs(spark: SparkSession, config: SolarisConfig, candidates: DataFrame, as_of: datetime,
                 spec: ScoringSpec, *, with_request_score: bool, tick: Tick | None) -> DataFrame:
    """The FM + verifier pass over ``candidates`` (point-in-time features at ``as_of``), with each
    row's quarantine reason (None: good) and ``computed_at``; persisted (the caller unpersists)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    features = candidate_features(spark, config, candidates.select("user_id", "item_id"), as_of, tick)
    return (
        features.mapInArrow(make_scorer(spec), OUTPUT_SCHEMA)
        .join(candidates.select("user_id", "item_id", "source", "spec_score",
                                *(["request_score"] if with_request_score else [])), ["user_id", "item_id"])
        .withColumn(
            "quarantine_reason",
            F.when(F.col("quarantine_reason").isNotNull(), F.col("quarantine_reason"))
            .when(F.octet_length("embedding") != 4 * config.model.embedding_dim, F.lit("wrong embedding dimension"))
            .when(F.isnan("verifier_score"), F.lit("non-finite verifier_score")),
        )
        # the as-of into the cached rows, not into the queries that read them (the writes), so
        # their text does not carry it (solaris.precompute.spark_features.visible_events: why)
        .withColumn("computed_at", F.lit(as_of).cast("timestamp"))
        .persist(StorageLevel.MEMORY_AND_DISK)
    )


def refuse_trimmed_run(config: SolarisConfig, stored: Table, candidates: DataFrame, run_id: str,
                       as_of: datetime) -> None:
    """Refuse to score a run whose candidates the retention has deleted, instead of writing nothing.

    Why: ``expire`` keeps ``retention.candidates_hours`` of candidates, so clearing an hour's ``score``
    task later than that finds no rows for its run, and scoring nothing would look like a quiet hour.
    A run is taken as trimmed when it has no candidates and the table already holds a run that much
    later (from the log's statistics, no Spark job in the usual case of the newest run)."""
    newest = stored.log.newest("as_of")
    window = timedelta(hours=config.retention.candidates_hours)
    if newest is None or newest - as_of < window or not candidates.isEmpty():
        return
    raise JobInputError(
        f"no candidates left for {run_id}: expire keeps retention.candidates_hours={window / timedelta(hours=1):g} h "
        f"of them and the table already holds runs up to {newest.isoformat()}; rerun `solaris candidates "
        f"--as-of {as_of.isoformat()}` first (Airflow: clear the hour from its candidates task)")


def write_pairs(spark: SparkSession, config: SolarisConfig, verified: DataFrame, run_id: str) -> tuple[int, int]:
    """Quarantine the verified rows that failed a check, MERGE the good ones into ``pair_embeddings``
    (with their expiry) and replace the run's rows in the ``pair_embeddings_log`` history
    -> (verified rows, quarantined rows)."""
    from pyspark.sql import functions as F

    pre = config.precompute
    computed_at = F.col("computed_at")
    rows = verified.select(
        "*",
        F.lit(run_id).alias("run_id"),
        expires_at_column(computed_at, pre.ttl_hours).alias("expires_at"),
    ).withColumn("expiry_bucket", F.date_trunc(pre.expiry_bucket, "expires_at"))
    bad = rows.where(F.col("quarantine_reason").isNotNull()).select(
        F.col("quarantine_reason").alias("reason"),
        F.to_json(
            F.struct("user_id", "item_id", "fm_score", "verifier_score", "fm_version", "verifier_version", "run_id")
        ).alias("payload"),
        computed_at.alias("seen_at"),
    )
    good = rows.where(F.col("quarantine_reason").isNull()).select(*PAIR_COLUMNS)
    counts = rows.agg(
        F.count("*").alias("verified"), F.count_if(F.col("quarantine_reason").isNotNull()).alias("quarantined")
    ).collect()[0]
    n_verified, n_quarantined = int(counts["verified"]), int(counts["quarantined"])
    write_quarantine(spark, config, bad, source_table="pair_embeddings", run_id=run_id, n_rejected=n_quarantined)
    # Append-only history (trimmed by expire) for the 24 h user aggregates, which outlive the TTL.
    log_rows = good.withColumn("computed_date", F.to_date("computed_at"))
    # the same rows for both writes, computed once (None: Spark writes both from the frames)
    log_table = Table.of(spark, config, "pair_embeddings_log")
    collected = log_table.collect(log_rows, expected_rows=n_verified - n_quarantined)
    Table.of(spark, config, "pair_embeddings").write(
        good, run_id, rows=None if collected is None else collected.drop_columns(["computed_date"]))
    log_table.write(log_rows, run_id, rows=collected)
    return n_verified, n_quarantined


def _has_values(table: Table, run_id: str, column: str) -> bool:
    """Whether any of the run's rows in ``table`` has a non-null ``column`` (read from the run's files
    on the driver: :meth:`Table.run_rows`)."""
    values = table.run_rows(run_id, (column,)).column(column)
    return len(values) > values.null_count


class Verified(NamedTuple):
    """What the verifier rule kept, and the figures ``runs`` records about it."""

    kept: DataFrame
    threshold: float  # effective threshold (inf: nothing passes it; the per-user floor is kept anyway)
    rows: int  # input rows
    budget: int | None  # pairs the threshold could keep on top of the floor (None: no global budget)
    ranked: DataFrame  # the ranked input ``kept`` reads, persisted: the caller unpersists it when done


class Boundary(NamedTuple):
    """The k-th largest value of a column and the smallest value strictly above it (None: none)."""

    value: float
    next_above: float | None


def _verify(frame: DataFrame, column: str, rule: VerifierConfig) -> Verified:
    """The verifier rule on ``column``: each user's pairs ranked by score (ties by item id); the
    rule's per-user floor kept whatever its score; the other pairs within the per-user top-k kept at
    or above the effective threshold (absolute, raised so that the global budget holds). The rule in
    numpy, with its edge cases unit-tested: :func:`solaris.precompute.speculation.verify_mask`.

    Non-finite scores are left out of the threshold's inputs but not dropped here: a NaN compares
    above every threshold in Spark, so such rows reach the score stage's quarantine, as they should.
    """
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    score, rank = F.col(column), F.col("_rank")
    top_k, floor = rule.active_top_k(), rule.active_min_per_user()
    window = Window.partitionBy("user_id").orderBy(score.desc(), F.col("item_id"))
    # Persisted: the rule's own jobs (stats, histogram steps) and the stage's later reads of `kept`
    # would each recompute the window's shuffle and sort otherwise. Unpersisted by the caller.
    ranked = frame.withColumn("_rank", F.row_number().over(window)).persist(StorageLevel.MEMORY_AND_DISK)
    in_floor = rank <= floor
    decided = ~in_floor if top_k is None else ~in_floor & (rank <= top_k)  # what the threshold decides on
    if "quarantine_reason" in frame.columns:
        finite = F.col("quarantine_reason").isNull() | (F.col("quarantine_reason") != "non-finite verifier_score")
    else:
        finite = ~F.isnan(score)
    active = rule.active_threshold()
    eligible = decided & finite
    if active is not None:
        eligible = eligible & (score >= F.lit(float(active)))
    stats = ranked.agg(
        F.count("*").alias("rows"), F.countDistinct("user_id").alias("users"),
        F.count_if(in_floor).alias("floor"), F.count_if(eligible).alias("eligible"),
        F.min(F.when(eligible, score)).alias("lowest"), F.max(F.when(eligible, score)).alias("highest"),
    ).collect()[0]
    budget = written_budget(rule, int(stats["users"]), int(stats["floor"]))
    n_eligible = int(stats["eligible"])
    if n_eligible == 0 or budget == 0:
        threshold = float("inf")
    elif budget is None or n_eligible <= budget:
        # the numpy rule on these inputs: every eligible score passes
        threshold = effective_threshold([float(stats["lowest"])], active, None)
    else:
        # the threshold: the smallest score above the (budget + 1)-th largest, so ties at the
        # boundary all fall out rather than overshoot the budget
        boundary = _kth_largest(ranked.where(eligible), column, budget + 1, n_eligible, low=float(stats["lowest"]),
                                high=float(stats["highest"]))
        threshold = float("inf") if boundary.next_above is None else boundary.next_above
    passing = score >= F.lit(float(threshold)) if threshold != float("inf") else F.lit(False)
    kept = ranked.where(in_floor | (decided & passing)).drop("_rank")
    return Verified(kept, threshold, int(stats["rows"]), budget, ranked)


# Buckets of one histogram step of _kth_largest, and the size of a bucket whose distinct values are
# collected. Both bound what the driver holds, whatever the number of scores.
HISTOGRAM_BUCKETS = 65_536
COLLECT_BELOW = 65_536


def _kth_largest(frame: DataFrame, column: str, k: int, n: int, *, low: float, high: float,
                 buckets: int = HISTOGRAM_BUCKETS, collect_below: int = COLLECT_BELOW) -> Boundary:
    """The ``k``-th largest of ``column`` (``n`` values in ``[low, high]``), exactly, and the
    smallest value above it, without collecting the values above it (that would grow with the
    budget, hence with the data).

    Each step counts the values per bucket of equal width over ``[low, high]`` (one Spark job, at
    most ``buckets`` rows to the driver) and narrows to the bucket holding the k-th value
    (:func:`solaris.precompute.speculation.locate_rank`); once that bucket holds fewer than
    ``collect_below`` values, its distinct values and their counts are collected. The bucket key is a
    monotone function of the value (IEEE rounding is monotone), so buckets are ranges in value order,
    and every step splits its range (its lowest value goes to bucket 0, its highest to the last).
    The smallest value above the k-th comes from the same steps: the lowest value of the nearest
    non-empty bucket (or distinct value) above the chosen one, else the one carried from the step
    before, whose range lay entirely below it.
    """
    from pyspark.sql import functions as F

    score = F.col(column)
    next_above: float | None = None
    while low < high:
        within = frame.where(score.between(F.lit(low), F.lit(high)))
        if n < collect_below:
            rows = within.groupBy(score.alias("value")).agg(F.count("*").alias("n")).collect()
            counts = [(float(r["value"]), int(r["n"])) for r in rows]
            value, _ = locate_rank(counts, k)
            higher = [v for v, _ in counts if v > value]
            return Boundary(float(value), min(higher) if higher else next_above)
        key = F.least(F.floor((score - F.lit(low)) / F.lit(high - low) * F.lit(float(buckets))).cast("long"),
                      F.lit(buckets - 1))
        rows = within.groupBy(key.alias("bucket")).agg(
            F.count("*").alias("n"), F.min(score).alias("low"), F.max(score).alias("high")).collect()
        by_key = {int(r["bucket"]): r for r in rows}
        bucket, k = locate_rank([(b, int(r["n"])) for b, r in by_key.items()], k)
        higher = [float(r["low"]) for b, r in by_key.items() if b > bucket]
        if higher:
            next_above = min(higher)
        chosen = by_key[bucket]
        n, low, high = int(chosen["n"]), float(chosen["low"]), float(chosen["high"])
    return Boundary(low, next_above)
