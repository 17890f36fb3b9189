"""Item tier: per-item mean of the pair embeddings computed in the last window (default 24 h).

Why: tiers 1-3 are keyed by the requesting user, so a user with no event before the snapshot (the
first hour of an onboarding burst) is served nothing. The item's own mean interaction embedding is
the best a brand-new user can get: it says how the FM sees this item across the users it was just
scored for. The resolver tries it last (``solaris.tiers.TIER_ITEM``).

At ``--as-of t``: reads ``pair_embeddings_log`` rows with ``t - enrichment.item_window_hours <
computed_at <= t`` (the latest row per pair, so a pair re-scored every hour is not over-weighted),
averages each item's embeddings over the users it was scored for (the user tier's executor,
``jobs/user_aggregates.write_window_means``, keyed by item; items with fewer than
``enrichment.item_min_pairs`` finite pairs get no row), and MERGEs ``item_embeddings`` on ``item_id``
with ``expires_at = t + enrichment.item_ttl_hours``. Rerunning the same run id changes nothing.

    solaris item-aggregates --as-of 2000-12-01T03:00:00Z
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from solaris.runtime import job_parser, run_stage

if TYPE_CHECKING:  # pragma: no cover
    from datetime import datetime

    from pyspark.sql import SparkSession

    from solaris.config import SolarisConfig

log = logging.getLogger("solaris.item_aggregates")


@dataclass(frozen=True)
class ItemAggregatesResult:
    """Items whose aggregate this run wrote, from how many pair embeddings, since when."""

    items: int
    pairs: int
    window_start: str | None


def build_parser() -> argparse.ArgumentParser:
    return job_parser("solaris item-aggregates", __doc__)


def run(spark: SparkSession, config: SolarisConfig, as_of: datetime, run_id: str) -> ItemAggregatesResult:
    from solaris.jobs.user_aggregates import write_window_means
    from solaris.storage.tables import RunRecord, table_exists

    enrichment = config.enrichment
    record = RunRecord(run_id=run_id, job="item_aggregates", as_of=as_of)
    log_path = config.table_path("pair_embeddings_log")
    if not table_exists(spark, log_path):
        log.warning("no pair_embeddings_log yet at %s: no item aggregates", log_path)
        record.write(spark, config, "success")
        return ItemAggregatesResult(items=0, pairs=0, window_start=None)
    window_start = as_of - timedelta(hours=enrichment.item_window_hours)
    means = write_window_means(spark, config, as_of, run_id, key="item_id", table="item_embeddings",
                               window_hours=enrichment.item_window_hours, ttl_hours=enrichment.item_ttl_hours,
                               min_pairs=enrichment.item_min_pairs)
    result = ItemAggregatesResult(items=means.keys, pairs=means.pairs, window_start=window_start.isoformat())
    record.rows_out, record.rows_in = means.keys, means.pairs
    record.table_versions = {"item_embeddings": means.version}
    record.details = asdict(result)
    record.write(spark, config, "success")
    log.info("item aggregates at %s: %d items from %d pair embeddings computed since %s",
             as_of, means.keys, means.pairs, window_start)
    return result


def main(argv: list[str] | None = None) -> int:
    return run_stage(
        build_parser(), argv, "item-aggregates", "enrichment",
        run=lambda spark, config, args, run_id: run(spark, config, args.as_of, run_id),
        report=lambda config, result: f"item_embeddings: {config.table_path('item_embeddings')} items={result.items}",
    )


if __name__ == "__main__":
    sys.exit(main())
