"""Stream: the incremental precompute, a Structured Streaming query over the Delta ``events`` table.

Per micro-batch of new events: the batch's users are re-speculated from their events up to the
batch's newest event time (the hourly candidates rules, restricted to them), scored by the FM
(verifier rule, TTL MERGE into ``pair_embeddings``, rows in ``pair_embeddings_log``), their tier-3
aggregates refreshed, and a manifest ``snapshot-<as-of>-stream-b<batch>`` published for serving.
Run id ``stream-<as-of>-b<batch id>``: a batch redone after a crash replaces its own rows. The
query's checkpoint lives under the warehouse (``stream.checkpoint_dir``); a restart resumes from it.

  --trigger available-now    process what is committed, in micro-batches, then exit (DAG solaris_stream)
  --trigger processing-time  run until stopped, a micro-batch at most every stream.interval_seconds;
                             SIGTERM or SIGINT stops it cleanly (exit code 0), a restart resumes

    solaris stream --trigger available-now
"""

from __future__ import annotations

import argparse
import sys

from solaris.drivers.stream import StreamResult, run_stream
from solaris.precompute.stream import TRIGGERS
from solaris.runtime import add_common_args, config_from_args, job_parser, run_job, setup_logging
from solaris.spark import get_spark


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("solaris stream", __doc__, with_as_of=False)
    parser.add_argument("--trigger", choices=TRIGGERS, default="available-now",
                        help="available-now: process what is there, then exit (default); "
                             "processing-time: long-running, a micro-batch every stream.interval_seconds")
    add_common_args(parser)
    return parser


def _report(result: StreamResult) -> str:
    if result.stopped:
        return f"stream: stopped by {result.stopped}"
    if result.waiting:
        return f"stream: waiting ({result.waiting})"
    done = [batch for batch in result.batches if batch.skipped is None]
    return (f"stream: batches={len(result.batches)} events={sum(batch.events for batch in done)} "
            f"users={sum(batch.users for batch in done)} fm_pairs={sum(batch.scored for batch in done)} "
            f"written={sum(batch.written for batch in done)} "
            f"snapshot={next((batch.manifest for batch in reversed(done) if batch.manifest), None)}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.run_id:
        parser.error("--run-id: the stream's run ids are per micro-batch (stream-<as-of>-b<batch id>)")
    setup_logging(args.log_level)

    def body() -> None:
        config = config_from_args(args)
        # a short-lived driver for an available-now run (the scheduled one), the full JIT for a long query
        spark = get_spark(config, "stream", one_stage=args.trigger == "available-now")
        print(_report(run_stream(spark, config, trigger=args.trigger)))

    return run_job("stream", body)


if __name__ == "__main__":
    sys.exit(main())
