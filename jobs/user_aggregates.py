"""``solaris user-aggregates`` and ``spark-submit jobs/user_aggregates.py``: parse the arguments, then run
:mod:`solaris.stages.user_aggregates` (its docstring is the ``--help`` text)."""

from __future__ import annotations

import argparse
import sys

from solaris.runtime import job_parser, run_stage
from solaris.stages import user_aggregates as stage


def build_parser() -> argparse.ArgumentParser:
    return job_parser("solaris user-aggregates", stage.__doc__)


def main(argv: list[str] | None = None) -> int:
    return run_stage(
        build_parser(), argv, "user-aggregates", "enrichment",
        run=lambda step, args: stage.run(step, options=stage.UserAggregatesOptions()),
        report=lambda config, result: f"user_embeddings: {config.table_path('user_embeddings')} users={result.users}",
    )


if __name__ == "__main__":
    sys.exit(main())
