"""``solaris candidates`` and ``spark-submit jobs/candidates.py``: parse the arguments, then run
:mod:`solaris.stages.candidates` (its docstring is the ``--help`` text)."""

from __future__ import annotations

import argparse
import sys

from solaris.runtime import job_parser, run_stage
from solaris.stages import candidates as stage


def build_parser() -> argparse.ArgumentParser:
    return job_parser("solaris candidates", stage.__doc__)


def main(argv: list[str] | None = None) -> int:
    return run_stage(
        build_parser(),
        argv,
        "candidates",
        "precompute",
        run=lambda step, args: stage.run(step, options=stage.CandidatesOptions()),
        report=lambda config, result: (
            f"candidates: {config.table_path('candidates')} pairs={result.pairs} users={result.users}"
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
