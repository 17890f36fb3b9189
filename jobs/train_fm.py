"""``solaris train-fm`` and ``spark-submit jobs/train_fm.py``: parse the arguments, then run
:mod:`solaris.stages.train_fm` (its docstring is the ``--help`` text)."""

from __future__ import annotations

import argparse
import sys

from solaris.runtime import add_common_args, as_of_arg, config_from_args, job_parser, run_job, setup_logging
from solaris.spark import get_spark
from solaris.stages import train_fm as stage
from solaris.timeutil import utc_stamp


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("solaris train-fm", stage.__doc__, with_as_of=False)
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
        from solaris.models.common import pick_device

        config = config_from_args(args)
        seed = config.seed if args.seed is None else args.seed
        device = pick_device(args.device != "cpu") if args.device != "cuda" else "cuda"
        folder, validation = stage.run(get_spark(config, "train-fm"), config, args.as_of,
                                       args.run_id or f"train_fm-{utc_stamp(args.as_of)}-s{seed}", seed=seed,
                                       output=config.resolve_under_warehouse(args.output), device=device)
        print(f"fm checkpoint: {folder} (fm_version {folder.name}, valid NE {validation['ne']:.4f})")

    return run_job("train-fm", body)


if __name__ == "__main__":
    sys.exit(main())
