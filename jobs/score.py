"""Score, verify and store: candidates -> FM pair embeddings -> verifier -> ``pair_embeddings``.

For the run at ``--as-of t``:

1. point-in-time features in Spark: each candidate user's last N events with ``ts <= t`` (as
   lists) and each candidate item's event count up to ``t``;
2. the FM and the verifier score every candidate in ``udfs/fm_scoring`` (``mapInArrow``, models
   loaded once per Python worker, GPU when the task has one);
3. the verifier rule (threshold / top-k per user / global budget, ``precompute.verifier``) keeps
   the relevant pairs; the effective threshold is recorded in ``runs``;
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

    from pyspark.sql import Column, DataFrame, SparkSession

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
    from solaris.precompute.speculation import effective_threshold
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
    spec = ScoringSpec(
        fm_checkpoint=str(fm_dir), verifier_checkpoint=str(verifier_dir), embedding_dim=config.model.embedding_dim,
        history_length=config.model.history_length, request_ts=int(as_of.timestamp()),
        model_batch_size=pre.model_batch_size, torch_threads=pre.torch_threads, load_log_dir=load_log_dir,
    )
    features = candidate_features(spark, config, candidates.select("user_id", "item_id"), as_of)
    scored = (
        features.mapInArrow(make_scorer(spec), OUTPUT_SCHEMA)
        .join(candidates.select("user_id", "item_id", "source", "spec_score"), ["user_id", "item_id"])
        .withColumn(
            "quarantine_reason",
            F.when(F.col("quarantine_reason").isNotNull(), F.col("quarantine_reason"))
            .when(F.octet_length("embedding") != 4 * config.model.embedding_dim, F.lit("wrong embedding dimension"))
            .when(F.isnan("verifier_score"), F.lit("non-finite verifier_score")),
        )
    )
    # Without a global budget the threshold rule needs no pass of its own: the absolute threshold
    # keeps exactly the pairs the effective one keeps, and the two numbers the rule reports
    # (candidates, lowest passing score) come in the same Spark action as the verified counts. With
    # a budget, the top ``budget + 1`` scores are fetched first (one more action).
    scored = scored.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        n_candidates: int | None = None  # known here only with a budget; else from the counting action below
        if pre.verifier.budget is None:
            threshold = -float("inf") if pre.verifier.threshold is None else float(pre.verifier.threshold)
        else:
            n_candidates, scores = _threshold_inputs(scored, pre.verifier)
            threshold = effective_threshold(scores, pre.verifier)
        verified = scored.where(
            F.col("verifier_score") >= F.lit(float(threshold)) if threshold != float("inf") else F.lit(False)
        )
        if pre.verifier.top_k_per_user is not None:
            from pyspark.sql import Window

            window = Window.partitionBy("user_id").orderBy(F.col("verifier_score").desc(), F.col("item_id"))
            verified = (
                verified.withColumn("_rank", F.row_number().over(window))
                .where(F.col("_rank") <= pre.verifier.top_k_per_user)
                .drop("_rank")
            )
        computed_at = F.lit(as_of).cast("timestamp")
        expires_at = computed_at + F.expr(f"make_dt_interval(0, 0, 0, {float(pre.ttl_hours) * 3600.0})")
        rows = (
            verified.select(
                "*",
                F.lit(run_id).alias("run_id"),
                computed_at.alias("computed_at"),
                expires_at.alias("expires_at"),
            )
            .withColumn("expiry_bucket", F.date_trunc(pre.expiry_bucket, "expires_at"))
            .withColumn("computed_date", F.to_date("computed_at"))
        )
        # one action scores the candidates into the cache and counts what the rule and the audit need
        counts = rows.agg(
            F.count("*").alias("verified"), F.count_if(F.col("quarantine_reason").isNotNull()).alias("quarantined")
        ).crossJoin(scored.agg(*_threshold_observations(pre.verifier))).collect()[0]
        n_verified, n_quarantined = int(counts["verified"]), int(counts["quarantined"])
        if pre.verifier.budget is None:
            n_candidates, lowest = int(counts["candidates"]), counts["lowest_passing"]
            threshold = effective_threshold([] if lowest is None else [float(lowest)], pre.verifier)
            if threshold == float("inf"):  # nothing passes: the rule keeps no pair, not even a quarantined one
                rows, n_verified, n_quarantined = rows.where(F.lit(False)), 0, 0
        assert n_candidates is not None
        if n_candidates == 0:
            log.warning("run %s has no candidates; nothing to score", run_id)

        bad = rows.where(F.col("quarantine_reason").isNotNull()).select(
            F.col("quarantine_reason").alias("reason"),
            F.to_json(
                F.struct("user_id", "item_id", "fm_score", "verifier_score", "fm_version", "verifier_version", "run_id")
            ).alias("payload"),
            computed_at.alias("seen_at"),
        )
        good = rows.where(F.col("quarantine_reason").isNull())
        write_quarantine(spark, config, bad, "pair_embeddings", run_id, n_rejected=n_quarantined)
        path = config.table_path("pair_embeddings")
        merge_if_new_run(good.select(*PAIR_COLUMNS), path, keys=["user_id", "item_id"], partition_by=["expiry_bucket"])
        # Append-only history (trimmed by expire) for the 24 h user aggregates, which outlive the TTL.
        replace_where(good.select(*PAIR_COLUMNS, "computed_date"), config.table_path("pair_embeddings_log"),
                      f"run_id = '{run_id}'", ["computed_date"])

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


def _passing(rule: VerifierConfig) -> Column:
    """Rows whose verifier score counts for the threshold rule: finite and at least the absolute threshold."""
    from pyspark.sql import functions as F

    score = F.col("verifier_score")
    finite = F.col("quarantine_reason").isNull() | (F.col("quarantine_reason") != "non-finite verifier_score")
    return finite & (score >= F.lit(float(rule.threshold))) if rule.threshold is not None else finite


def _threshold_observations(rule: VerifierConfig) -> list[Column]:
    """What the rule needs without a budget, as aggregates of the scoring pass: the candidate count
    and the lowest passing score (see :func:`_threshold_inputs`)."""
    from pyspark.sql import functions as F

    return [F.count(F.lit(1)).alias("candidates"),
            F.min(F.when(_passing(rule), F.col("verifier_score"))).alias("lowest_passing")]


def _threshold_inputs(scored: DataFrame, rule: VerifierConfig) -> tuple[int, list[float]]:
    """Candidate count and the few verifier scores the threshold rule depends on, in one Spark job.

    The driver never collects every score (that grows with the data): the rule only needs the
    top ``budget + 1`` passing scores when a global budget is set, else the lowest passing score:
    the Spark form of :func:`solaris.precompute.speculation.threshold_inputs`, whose unit test shows the
    threshold from that subset equals the threshold from all scores.
    """
    from pyspark.sql import functions as F

    score = F.col("verifier_score")
    passing = _passing(rule)
    if rule.budget is None:
        row = scored.agg(F.count("*").alias("n"), F.min(F.when(passing, score)).alias("lowest")).collect()[0]
        return int(row["n"]), [] if row["lowest"] is None else [float(row["lowest"])]
    top = scored.where(passing).orderBy(score.desc()).limit(rule.budget + 1).select("verifier_score").collect()
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
