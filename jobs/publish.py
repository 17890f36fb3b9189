"""``solaris publish`` and ``spark-submit jobs/publish.py``: parse the arguments, then run
:mod:`solaris.stages.publish` (its docstring is the ``--help`` text)."""

from __future__ import annotations

import argparse
import sys

from solaris.runtime import job_parser, run_stage
from solaris.stages import publish as stage


def build_parser() -> argparse.ArgumentParser:
    return job_parser("solaris publish", stage.__doc__)


def main(argv: list[str] | None = None) -> int:
    return run_stage(
        build_parser(),
        argv,
        "publish",
        "enrichment",
        run=lambda step, args: stage.run(step, options=stage.PublishOptions()),
        report=lambda config, result: f"snapshot: {result.manifest} coverage={result.coverage:.3f}",
    )


if __name__ == "__main__":
    sys.exit(main())
