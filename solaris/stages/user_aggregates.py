"""Tier 3: per-user mean of the pair embeddings computed in the last 24 h.

At ``--as-of t``: reads ``pair_embeddings_log`` rows with ``t - window < computed_at <= t`` (the
latest row per pair, so a pair re-scored every hour is not over-weighted; only the pairs of the FM
version of the user's newest pair), averages each user's
embeddings (plain or recency-weighted, optional L2 normalisation: :func:`solaris.enrichment.aggregates.aggregate_users`)
with one ``mapInArrow`` call per batch of whole users (repartitioned by user, sorted within
partitions; no per-user Python call: :mod:`solaris.enrichment.window_means`), and MERGEs
``user_embeddings`` on ``user_id`` with ``expires_at = t + enrichment.ttl_hours``.
Rerunning the same run id changes nothing.

    solaris user-aggregates --as-of 2000-12-01T03:00:00Z
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from solaris.enrichment.window_means import write_window_means
from solaris.storage.audit import RunRecord
from solaris.storage.table import Table
from solaris.tick import StepContext

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

log = logging.getLogger("solaris.user_aggregates")


@dataclass(frozen=True)
class UserAggregatesResult:
    """Users whose tier-3 aggregate this run wrote, from how many pair embeddings, since when."""

    users: int
    pairs: int
    window_start: str | None


@dataclass(frozen=True)
class UserAggregatesOptions:
    """``users``: a ``user_id`` frame restricting the run to them (the stream's micro-batches); None:
    every user with a pair in the window. ``enrichment.*`` settles everything else."""

    users: DataFrame | None = None


def run(step: StepContext, *, options: UserAggregatesOptions) -> UserAggregatesResult:
    spark, config, as_of, run_id, tick = step.spark, step.config, step.as_of, step.run_id, step.tick
    enrichment = config.enrichment
    record = RunRecord(run_id=run_id, job="user_aggregates", as_of=as_of)
    log_path = config.table_path("pair_embeddings_log")
    if not Table.of(spark, config, "pair_embeddings_log").exists():
        log.warning("no pair_embeddings_log yet at %s: no user aggregates", log_path)
        record.write(spark, config, "success", tick)
        return UserAggregatesResult(users=0, pairs=0, window_start=None)
    window_start = as_of - timedelta(hours=enrichment.window_hours)
    means = write_window_means(spark, config, as_of, run_id, key="user_id", table="user_embeddings",
                               window_hours=enrichment.window_hours, ttl_hours=enrichment.ttl_hours,
                               only=options.users)
    result = UserAggregatesResult(users=means.keys, pairs=means.pairs, window_start=window_start.isoformat())
    record.rows_out, record.rows_in = means.keys, means.pairs
    record.table_versions = {"user_embeddings": means.version}
    record.details = asdict(result)
    record.write(spark, config, "success", tick)
    log.info("user aggregates at %s: %d users from %d pair embeddings computed since %s",
             as_of, means.keys, means.pairs, window_start)
    return result
