"""``solaris impute`` and ``spark-submit jobs/impute.py``: parse the arguments, then run
:mod:`solaris.stages.impute` (its docstring is the ``--help`` text)."""

from __future__ import annotations

import argparse
import sys

from solaris.runtime import job_parser, run_stage
from solaris.stages import impute as stage


def build_parser() -> argparse.ArgumentParser:
    return job_parser("solaris impute", stage.__doc__)


def main(argv: list[str] | None = None) -> int:
    return run_stage(
        build_parser(), argv, "impute", "enrichment",
        run=lambda step, args: stage.run(step, options=stage.ImputeOptions()),
        report=lambda config, result: (f"imputed_embeddings: {config.table_path('imputed_embeddings')} "
                                       f"imputed={result.imputed}"),
    )


if __name__ == "__main__":
    sys.exit(main())
