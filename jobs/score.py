"""``solaris score`` and ``spark-submit jobs/score.py``: parse the arguments, then run
:mod:`solaris.stages.score` (its docstring is the ``--help`` text)."""

from __future__ import annotations

import argparse
import sys

from solaris.runtime import job_parser, run_stage
from solaris.stages import score as stage


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("solaris score", stage.__doc__)
    parser.add_argument("--fm", help="FM checkpoint under the warehouse (default: precompute.fm_checkpoint)")
    parser.add_argument("--verifier", help="verifier checkpoint (default: precompute.verifier_checkpoint)")
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_stage(
        build_parser(),
        argv,
        "score",
        "precompute",
        run=lambda step, args: stage.run(
            step, options=stage.ScoreOptions(fm_path=args.fm, verifier_path=args.verifier)),
        report=lambda config, result: (
            f"pair_embeddings: {config.table_path('pair_embeddings')} written={result.written} "
            f"verified={result.verified} candidates={result.candidates} quarantined={result.quarantined}"
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
