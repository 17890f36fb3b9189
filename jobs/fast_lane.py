"""Fast lane: candidates -> score -> publish, between hourly runs, for users whose session just started.

At ``--as-of t`` (a few minutes past an hour, e.g. :15/:30/:45; the DAG runs every
``fast_lane.interval_minutes``):

1. picks the fast-lane users (``solaris.precompute.fast_lane.select_users``): an event in
   ``(t - lookback_minutes, t]`` and none in the ``absence_hours`` before that window, at most
   ``max_users`` of them. Nothing else to do when there are none;
2. runs the hourly ``candidates`` stage for those users only (same SQL, sources, blend; per-user cap
   ``fast_lane.per_user``, budget ``max_users * per_user``) and the hourly ``score`` stage on them
   (FM + verifier, TTL MERGE into ``pair_embeddings``, rows appended to ``pair_embeddings_log``);
3. runs ``publish``: a new manifest ``snapshot-<t>`` pinning the new ``pair_embeddings`` version
   next to the last hourly enrichment's tier tables, so serving picks up the new pairs (the delta).

Every write is keyed on the run id ``fast-lane-<t>`` (never an hourly ``precompute-``/``enrichment-``
id), so rerunning a tick replaces its own candidates and leaves its pairs as they are. Only events
``<= t`` are read. On the hour it does nothing: the hourly cycle runs then and publishes
``snapshot-<t>`` itself. The lane chains hourly stages, so it is defined beside the hourly cycle
(:func:`solaris.pipeline.run_fast_lane`); this file is its entry point.

    solaris fast-lane --as-of 2000-11-19T18:15:00Z
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from solaris.pipeline import FastLaneResult, run_fast_lane
from solaris.precompute.fast_lane import RUN_PREFIX
from solaris.runtime import job_parser, run_stage

if TYPE_CHECKING:  # pragma: no cover
    from solaris.config import SolarisConfig


def build_parser() -> argparse.ArgumentParser:
    return job_parser("solaris fast-lane", __doc__)


def _report(config: SolarisConfig, result: FastLaneResult) -> str:
    if result.skipped:
        return f"fast lane: skipped ({result.skipped})"
    scored, published = result.score, result.publish
    return (f"fast lane: users={len(result.users)} (new={result.new} returning={result.returning}) "
            f"fm_pairs={scored.scored if scored else 0} written={scored.written if scored else 0} "
            f"snapshot={published.manifest if published else None}")


def main(argv: list[str] | None = None) -> int:
    return run_stage(
        build_parser(),
        argv,
        "fast_lane",
        RUN_PREFIX,
        run=lambda step, args: run_fast_lane(step.spark, step.config, step.as_of, step.run_id),
        report=_report,
    )


if __name__ == "__main__":
    sys.exit(main())
