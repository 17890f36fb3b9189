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
   to ``pair_embeddings_log`` (per-run replace), the history the 24 h user aggregates read.

    solaris score --as-of 2000-12-01T00:00:00Z
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from solaris.runtime import JobInputError, job_parser, run_stage

if TYPE_CHECKING:  # pragma: no cover
    from datetime import datetime

    from pyspark.sql import DataFrame, SparkSession

    from solaris.config import SolarisConfig, VerifierConfig

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


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("solaris score", __doc__)
    parser.add_argument("--fm", help="FM checkpoint under the warehouse (default: precompute.fm_checkpoint)")
    parser.add_argument("--verifier", help="verifier checkpoint (default: precompute.verifier_checkpoint)")
    return parser


def run(spark: SparkSession, config: SolarisConfig, as_of: datetime, run_id: str, fm_path: str | None = None,
        verifier_path: str | None = None, load_log_dir: str | None = None) -> ScoreResult:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from solaris.models.checkpoint import load_checkpoint, resolve_checkpoint
    from solaris.precompute.spark_features import candidate_features
    from solaris.storage.tables import RunRecord, merge_if_new_run, replace_where, table_version, write_quarantine
    from solaris.udfs.fm_scoring import OUTPUT_SCHEMA, ScoringSpec, make_scorer

    pre = config.precompute
    fm_dir = resolve_checkpoint(config.resolve_under_warehouse(fm_path or pre.fm_checkpoint))
    verifier_dir = resolve_checkpoint(config.resolve_under_warehouse(verifier_path or pre.verifier_checkpoint))
    # Refuse a bad checkpoint on the driver, before any executor work or write.
    _, fm_meta = load_checkpoint(fm_dir, "fm", config.model.embedding_dim)
    _, verifier_meta = load_checkpoint(verifier_dir, "vm")
    record = RunRecord(run_id=run_id, job="score", as_of=as_of)

    candidates_path = config.table_path("candidates")
    from solaris.storage.tables import table_exists

    if not table_exists(spark, candidates_path):
        raise JobInputError(f"no candidates table at {candidates_path}: run `solaris candidates` first")
    candidates = spark.read.format("delta").load(candidates_path).where(F.col("run_id") == run_id)
    verifier = pre.verifier
    if verifier.rule == "request" and ("request_score" not in candidates.columns
                                       or not candidates.where(F.col("request_score").isNotNull()).limit(1).count()):
        # candidates written without a request model (no speculator trained yet): the relevance rule,
        # with its own threshold and top-k
        log.warning("run %s: no request scores in the candidates (no speculator checkpoint at or before the "
                    "as-of: `solaris train-speculator`); verifier rule relevance instead", run_id)
        verifier = verifier.model_copy(update={"rule": "relevance"})
    rule = verifier.rule
    request_verified: tuple[DataFrame, float, int] | None = None
    if rule == "request":
        # Verify before the FM: a pair unlikely to be requested within the TTL costs no FM pass.
        request_verified = _verify(candidates.where(F.col("request_score").isNotNull()), "request_score",
                                   verifier)
        candidates = request_verified[0]
    spec = ScoringSpec(
        fm_checkpoint=str(fm_dir), verifier_checkpoint=str(verifier_dir), embedding_dim=config.model.embedding_dim,
        history_length=config.model.history_length, request_ts=int(as_of.timestamp()),
        model_batch_size=pre.model_batch_size, torch_threads=pre.torch_threads, load_log_dir=load_log_dir,
    )
    features = candidate_features(spark, config, candidates.select("user_id", "item_id"), as_of)
    scored = (
        features.mapInArrow(make_scorer(spec), OUTPUT_SCHEMA)
        .join(candidates.select("user_id", "item_id", "source", "spec_score",
                                *(["request_score"] if rule == "request" else [])), ["user_id", "item_id"])
        .withColumn(
            "quarantine_reason",
            F.when(F.col("quarantine_reason").isNotNull(), F.col("quarantine_reason"))
            .when(F.octet_length("embedding") != 4 * config.model.embedding_dim, F.lit("wrong embedding dimension"))
            .when(F.isnan("verifier_score"), F.lit("non-finite verifier_score")),
        )
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        if request_verified is not None:
            # verified before scoring; the written verifier_score is P(requested within the TTL)
            _, threshold, n_candidates = request_verified
            verified = scored.withColumn("verifier_score", F.col("request_score").cast("float")).drop("request_score")
        else:
            verified, threshold, n_candidates = _verify(scored, "verifier_score", verifier)
        n_scored = scored.count()
        computed_at = F.lit(as_of).cast("timestamp")
        expires_at = computed_at + F.expr(f"make_dt_interval(0, 0, 0, {float(pre.ttl_hours) * 3600.0})")
        rows = verified.select(
            "*",
            F.lit(run_id).alias("run_id"),
            computed_at.alias("computed_at"),
            expires_at.alias("expires_at"),
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
        write_quarantine(spark, config, bad, "pair_embeddings", run_id, n_rejected=n_quarantined)
        path = config.table_path("pair_embeddings")
        merge_if_new_run(good, path, keys=["user_id", "item_id"], partition_by=["expiry_bucket"])
        # Append-only history (trimmed by expire) for the 24 h user aggregates, which outlive the TTL.
        log_rows = good.withColumn("computed_date", F.to_date("computed_at"))
        replace_where(log_rows, config.table_path("pair_embeddings_log"), f"run_id = '{run_id}'", ["computed_date"])

        n_written = spark.read.format("delta").load(path).where(F.col("run_id") == run_id).count()
        record.rows_in, record.rows_out, record.rows_quarantined = n_candidates, n_written, n_quarantined
        record.table_versions = {"pair_embeddings": table_version(spark, path)}
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
        )
        record.details = asdict(result)
        record.write(spark, config, "success")
        log.info(
            "run %s: %d candidates -> %d verified (threshold %.4f) -> %d written, %d quarantined",
            run_id,
            n_candidates,
            n_verified,
            threshold,
            n_written,
            n_quarantined,
        )
        return result
    finally:
        scored.unpersist()


def _verify(frame: DataFrame, column: str, rule: VerifierConfig) -> tuple[DataFrame, float, int]:
    """The verifier rule on ``column``: effective threshold (absolute, raised by the global budget),
    then the rule's top-k per user, plus its per-user floor (the user's best pairs whatever their
    score); users' pairs ranked by score, ties by item id. The rule in numpy, with its edge cases
    unit-tested: :func:`solaris.precompute.speculation.verify_mask`. Returns (kept rows, threshold,
    input rows)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from solaris.precompute.speculation import effective_threshold

    n_rows, scores = _threshold_inputs(frame, rule, column)
    threshold = effective_threshold(scores, rule)
    passing = F.col(column) >= F.lit(float(threshold)) if threshold != float("inf") else F.lit(False)
    top_k, floor = rule.active_top_k(), rule.active_min_per_user()
    if top_k is None and floor == 0:
        return frame.where(passing), threshold, n_rows
    window = Window.partitionBy("user_id").orderBy(F.col(column).desc(), F.col("item_id"))
    rank = F.col("_rank")
    keep = passing if top_k is None else passing & (rank <= top_k)
    if floor > 0:
        keep = keep | (rank <= floor)
    kept = frame.withColumn("_rank", F.row_number().over(window)).where(keep).drop("_rank")
    return kept, threshold, n_rows


def _threshold_inputs(scored: DataFrame, rule: VerifierConfig,
                      column: str = "verifier_score") -> tuple[int, list[float]]:
    """Candidate count and the few verifier scores the threshold rule depends on, in one Spark job.

    The driver never collects every score (that grows with the data): the rule only needs the
    top ``budget + 1`` passing scores when a global budget is set, else the lowest passing score:
    the Spark form of :func:`solaris.precompute.speculation.threshold_inputs`, whose unit test shows the
    threshold from that subset equals the threshold from all scores.
    """
    from pyspark.sql import functions as F

    score = F.col(column)
    if "quarantine_reason" in scored.columns:
        finite = F.col("quarantine_reason").isNull() | (F.col("quarantine_reason") != "non-finite verifier_score")
    else:
        finite = ~F.isnan(score)
    active = rule.active_threshold()
    passing = finite & (score >= F.lit(float(active))) if active is not None else finite
    if rule.budget is None:
        row = scored.agg(F.count("*").alias("n"), F.min(F.when(passing, score)).alias("lowest")).collect()[0]
        return int(row["n"]), [] if row["lowest"] is None else [float(row["lowest"])]
    top = scored.where(passing).orderBy(score.desc()).limit(rule.budget + 1).select(column).collect()
    return scored.count(), [float(row[0]) for row in top]


def main(argv: list[str] | None = None) -> int:
    return run_stage(
        build_parser(),
        argv,
        "score",
        "precompute",
        run=lambda spark, config, args, run_id: run(spark, config, args.as_of, run_id, args.fm, args.verifier),
        report=lambda config, result: (
            f"pair_embeddings: {config.table_path('pair_embeddings')} written={result.written} "
            f"verified={result.verified} candidates={result.candidates} quarantined={result.quarantined}"
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
