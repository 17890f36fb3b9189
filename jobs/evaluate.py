"""``solaris evaluate`` and ``spark-submit jobs/evaluate.py``: parse the arguments, then run
:mod:`solaris.drivers.evaluate` (its docstring is the ``--help`` text)."""

from __future__ import annotations

import argparse
import sys

from solaris.drivers import evaluate as driver
from solaris.runtime import add_common_args, as_of_arg, config_from_args, job_parser, run_job, setup_logging
from solaris.spark import get_spark


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("solaris evaluate", driver.__doc__, with_as_of=False)
    parser.add_argument(
        "--as-of", type=as_of_arg, nargs="+", dest="as_of",
        help="T0 of each window: end of training, start of its scored window (default: evaluation.t0s, else the "
        "densest evaluation.windows windows of the data)",
    )
    parser.add_argument("--name", help="output folder under <warehouse>/evaluation (default: t0-<T0>)")
    parser.add_argument("--quick", action="store_true", help="CI preset: " + " ".join(driver.QUICK_OVERRIDES))
    parser.add_argument("--force", action="store_true", help="recompute seeds that already have a result")
    add_common_args(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)

    def body() -> None:
        if args.quick:
            args.overrides = [*driver.QUICK_OVERRIDES, *args.overrides]
        config = config_from_args(args)
        summary = driver.run(lambda: get_spark(config, "evaluate"), config, args.as_of, args.name, args.force)
        print("\n".join(driver.summary_lines(summary)))

    return run_job("evaluate", body)


if __name__ == "__main__":
    sys.exit(main())
