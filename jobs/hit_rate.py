"""``solaris hit-rate`` and ``spark-submit jobs/hit_rate.py``: parse the arguments, then run
:mod:`solaris.stages.hit_rate` (its docstring is the ``--help`` text)."""

from __future__ import annotations

import argparse
import sys

from solaris.runtime import job_parser, run_stage
from solaris.stages import hit_rate as stage


def build_parser() -> argparse.ArgumentParser:
    return job_parser("solaris hit-rate", stage.__doc__)


def main(argv: list[str] | None = None) -> int:
    return run_stage(
        build_parser(), argv, "hit-rate", "precompute",
        run=lambda step, args: stage.run(step, options=stage.HitRateOptions()),
        report=lambda config, result: (
            f"hit rate: candidates {stage.percent_text(result.candidates.hit_rate)}, "
            f"verified {stage.percent_text(result.verified.hit_rate)} of {result.requests} requests"
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
