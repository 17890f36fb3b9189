"""Train the foundation model on events up to ``--as-of`` and save a versioned checkpoint.

Training examples are point-in-time: each event's features come from the user's events strictly
before it; the validation slice (early stopping) is the latest part of the window by time.

    solaris train-fm --as-of 2000-12-01T00:00:00Z
    spark-submit --jars "$(ls jars/*.jar | paste -sd,)" jobs/train_fm.py --as-of 2000-12-01T00:00:00Z
"""

from __future__ import annotations

import argparse
import logging
import sys

from solaris.runtime import add_common_args, as_of_arg, config_from_args, job_parser, run_job, setup_logging
from solaris.timeutil import utc_stamp

log = logging.getLogger("solaris.train_fm")


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("solaris train-fm", __doc__, with_as_of=False)
    parser.add_argument("--as-of", type=as_of_arg, required=True, help="train on events with ts <= this UTC time")
    parser.add_argument("--seed", type=int, help="training seed (default: config seed)")
    parser.add_argument("--output", default="models/fm", help="checkpoint root under the warehouse")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    add_common_args(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)

    def body() -> None:
        from solaris.models.checkpoint import save_checkpoint
        from solaris.models.common import pick_device
        from solaris.models.training import EventArrays, train_fm, training_metadata
        from solaris.spark import get_spark
        from solaris.storage.tables import RunRecord, training_events

        config = config_from_args(args)
        output = config.resolve_under_warehouse(args.output)
        seed = config.seed if args.seed is None else args.seed
        device = pick_device(args.device != "cpu") if args.device != "cuda" else "cuda"
        spark = get_spark(config, "train-fm")
        run_id = args.run_id or f"train_fm-{utc_stamp(args.as_of)}-s{seed}"
        record = RunRecord(run_id=run_id, job="train_fm", as_of=args.as_of)
        events = EventArrays.from_frame(training_events(spark, config, args.as_of))
        log.info(
            "training FM on %d events (%d users) up to %s on %s",
            len(events),
            len(set(events.user_id)),
            args.as_of,
            device,
        )
        result = train_fm(events, config, seed, device=device)
        metadata = training_metadata("fm", args.as_of, seed, events, result)
        folder = save_checkpoint(result.model, output, metadata)
        record.rows_in, record.rows_out = len(events), 1
        record.details = {"checkpoint": str(folder), "version": folder.name, **result.validation}
        record.write(spark, config, "success")
        print(f"fm checkpoint: {folder} (fm_version {folder.name}, valid NE {result.validation['ne']:.4f})")

    return run_job("train-fm", body)


if __name__ == "__main__":
    sys.exit(main())
