"""``solaris replay`` and ``spark-submit jobs/replay.py``: parse the arguments, then run
:mod:`solaris.drivers.replay` (its docstring is the ``--help`` text)."""

from __future__ import annotations

import argparse
import sys

from solaris.drivers import replay as driver
from solaris.runtime import add_common_args, as_of_arg, config_from_args, run_job, setup_logging
from solaris.spark import get_spark


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="solaris replay", description=driver.__doc__.split("\n\n")[0],
                                     epilog=driver.__doc__.split("\n\n", 2)[-1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--start", type=as_of_arg, required=True, help="first tick (UTC)")
    parser.add_argument("--end", type=as_of_arg, required=True, help="end of the range (exclusive)")
    parser.add_argument("--step-hours", type=float, default=1.0)
    parser.add_argument("--force", action="store_true", help="redo ticks that already succeeded")
    add_common_args(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)

    def body() -> None:
        config = config_from_args(args)
        spark = get_spark(config, "replay")
        summary = driver.run(spark, config, args.start, args.end, step_hours=args.step_hours, force=args.force)
        for cycle in summary:
            print(driver.summary_line(cycle))
        print(f"replayed {len(summary)} ticks into {config.table_path('pair_embeddings')}")

    return run_job("replay", body)


if __name__ == "__main__":
    sys.exit(main())
