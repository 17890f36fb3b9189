"""``solaris knn`` and ``spark-submit jobs/knn.py``: parse the arguments, then run
:mod:`solaris.stages.knn` (its docstring is the ``--help`` text)."""

from __future__ import annotations

import argparse
import sys

from solaris.runtime import job_parser, run_stage
from solaris.stages import knn as stage


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("solaris knn", stage.__doc__)
    parser.add_argument("--fm", help="FM checkpoint under the warehouse (default: precompute.fm_checkpoint)")
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_stage(
        build_parser(), argv, "knn", "enrichment",
        run=lambda step, args: stage.run(step, options=stage.KnnOptions(fm_path=args.fm)),
        report=lambda config, result: (f"user_neighbors: {config.table_path('user_neighbors')} users={result.users} "
                                       f"recall@{result.k}={result.recall:.3f}"),
    )


if __name__ == "__main__":
    sys.exit(main())
