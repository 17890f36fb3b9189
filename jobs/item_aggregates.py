"""``solaris item-aggregates`` and ``spark-submit jobs/item_aggregates.py``: parse the arguments, then run
:mod:`solaris.stages.item_aggregates` (its docstring is the ``--help`` text)."""

from __future__ import annotations

import argparse
import sys

from solaris.runtime import job_parser, run_stage
from solaris.stages import item_aggregates as stage


def build_parser() -> argparse.ArgumentParser:
    return job_parser("solaris item-aggregates", stage.__doc__)


def main(argv: list[str] | None = None) -> int:
    return run_stage(
        build_parser(), argv, "item-aggregates", "enrichment",
        run=lambda step, args: stage.run(step, options=stage.ItemAggregatesOptions()),
        report=lambda config, result: (f"item_embeddings: {config.table_path('item_embeddings')} items={result.items}; "
                                       f"imputed_item_embeddings: imputed={result.imputed_items}"),
    )


if __name__ == "__main__":
    sys.exit(main())
