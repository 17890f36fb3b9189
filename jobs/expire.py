"""``solaris expire`` and ``spark-submit jobs/expire.py``: parse the arguments, then run
:mod:`solaris.stages.expire` (its docstring is the ``--help`` text)."""

from __future__ import annotations

import argparse
import sys

from solaris.pipeline import HOURLY_JOBS
from solaris.runtime import job_parser, run_stage
from solaris.stages import expire as stage


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("solaris expire", stage.__doc__)
    parser.add_argument("--optimize", action="store_true", help="compact small files of live expiry buckets")
    vacuum = parser.add_mutually_exclusive_group()
    vacuum.add_argument("--vacuum", action="store_true", default=None,
                        help="VACUUM at this run whatever the hour (it never bypasses the retention guard)")
    vacuum.add_argument("--no-vacuum", dest="vacuum", action="store_false",
                        help="no VACUUM at this run (default: at hours that are multiples of "
                             "precompute.vacuum_every_hours)")
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_stage(
        build_parser(),
        argv,
        "expire",
        "precompute",
        run=lambda step, args: stage.run(step, options=stage.ExpireOptions(
            hourly_jobs=HOURLY_JOBS, optimize=args.optimize,
            vacuum=(stage.is_vacuum_hour(step.as_of, step.config.precompute.vacuum_every_hours) if args.vacuum is None
                    else args.vacuum),
        )),
        report=lambda config, result: (
            f"expired={result.expired} from {config.table_path('pair_embeddings')}; trimmed "
            f"candidates={result.candidates.deleted} pair_embeddings_log={result.pair_embeddings_log.deleted} "
            f"quarantine={result.quarantine.deleted} runs={result.runs.deleted}"),
    )


if __name__ == "__main__":
    sys.exit(main())
