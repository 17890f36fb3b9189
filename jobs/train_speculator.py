"""``solaris train-speculator`` and ``spark-submit jobs/train_speculator.py``: parse the arguments, then run
:mod:`solaris.stages.train_speculator` (its docstring is the ``--help`` text)."""

from __future__ import annotations

import argparse
import sys

from solaris.runtime import add_common_args, as_of_arg, config_from_args, job_parser, run_job, setup_logging
from solaris.spark import get_spark
from solaris.stages import train_speculator as stage
from solaris.timeutil import utc_stamp


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("solaris train-speculator", stage.__doc__, with_as_of=False)
    parser.add_argument("--as-of", type=as_of_arg, required=True, help="learn from ticks whose labels are <= this")
    add_common_args(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)

    def body() -> None:
        config = config_from_args(args)
        folder, speculator = stage.run(get_spark(config, "train-speculator"), config, args.as_of,
                                       args.run_id or f"train_speculator-{utc_stamp(args.as_of)}")
        print(f"speculator: {folder} (version {speculator.version}, {len(speculator.ticks)} ticks)")

    return run_job("train-speculator", body)


if __name__ == "__main__":
    sys.exit(main())
