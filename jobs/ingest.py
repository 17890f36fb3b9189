"""``solaris ingest`` and ``spark-submit jobs/ingest.py``: parse the arguments, then run
:mod:`solaris.stages.ingest` (its docstring is the ``--help`` text)."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone

from solaris.ingest.sources import LAYOUTS, ColumnMap, resolve_source
from solaris.runtime import (
    EXIT_OK,
    EXIT_WOULD_QUARANTINE,
    add_common_args,
    as_of_arg,
    config_from_args,
    run_job,
    setup_logging,
)
from solaris.spark import get_spark
from solaris.stages import ingest as stage


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="solaris ingest",
        description=stage.__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=stage.__doc__.split("\n\n", 2)[-1],
    )
    parser.add_argument("--input", required=True, help="file/folder, or ml-1m | ml-100k | synthetic")
    parser.add_argument("--layout", choices=LAYOUTS, help="input layout (default: detected from the name)")
    parser.add_argument("--dataset", help="dataset name recorded on each event (default: from the input)")
    parser.add_argument("--as-of", type=as_of_arg, help="events after this UTC time are quarantined")
    parser.add_argument("--id-mode", choices=["auto", "int", "string"], default="auto",
                        help="int: keep integer ids, quarantine rows with another id; string: hash every id to a "
                             "stable bigint (originals in id_map); auto: int unless most values are not integers")
    parser.add_argument("--validate-only", action="store_true",
                        help="read and check the input, print the counts by reason and sample rows, write nothing "
                             "(exit 0: clean, 3: rows would be quarantined)")
    parser.add_argument("--samples", type=int, default=3, help="--validate-only: sample rows shown per reason")
    parser.add_argument("--user-col", default="user_id", help="user column (csv/parquet)")
    parser.add_argument("--item-col", default="item_id", help="item column (csv/parquet)")
    parser.add_argument("--ts-col", default="timestamp", help="timestamp column: epoch seconds or ISO-8601")
    parser.add_argument("--rating-col", default="rating", help="rating column ('' if none)")
    parser.add_argument("--label-col", default="", help="0/1 label column ('' if none: label from rating)")
    parser.add_argument("--delimiter", default=",", help="CSV delimiter")
    add_common_args(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)

    def body() -> int:
        now = datetime.now(timezone.utc)  # the wall clock, read once: the bound of "timestamp in the future"
        config = config_from_args(args)
        columns = ColumnMap(args.user_col, args.item_col, args.ts_col, args.rating_col or None, args.label_col or None)
        spec = resolve_source(args.input, layout=args.layout, dataset=args.dataset, columns=columns,
                              id_mode=args.id_mode, csv_delimiter=args.delimiter)
        spark = get_spark(config, "ingest")
        if args.validate_only:
            report = stage.validate(spark, config, spec, args.as_of, now=now, samples=args.samples)
            print(report.render())
            return EXIT_OK if report.clean else EXIT_WOULD_QUARANTINE
        result = stage.ingest(spark, config, spec, args.as_of, args.run_id or f"ingest-{spec.dataset}", now=now)
        print(f"events: {result.events_path}  valid={result.rows_valid} quarantined={result.rows_quarantined}")
        return EXIT_OK

    return run_job("ingest", body)


if __name__ == "__main__":
    sys.exit(main())
