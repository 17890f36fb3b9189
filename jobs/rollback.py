"""Roll serving back (or forward) to another published snapshot by repointing ``LATEST``.

Serving reads ``warehouse/snapshots/LATEST``; every manifest pins the Delta versions it serves, so
pointing ``LATEST`` at an older manifest serves exactly what was served then (as long as VACUUM
has not removed those versions' files: hourly manifests are kept ``enrichment.snapshots_kept``
hours, the stream's back to the oldest kept hourly one, far below Delta's 7-day retention). Before
switching, every tier of the target is loaded the way the resolver loads it, so a rollback to an
unreadable snapshot is refused. Without ``--to`` it lists the manifests, hourly
(``snapshot-<stamp>``) and stream (``snapshot-<stamp>-stream-b<batch>``) in as-of order; ``--to``
names either (usually an earlier hourly one). The next successful ``publish`` moves ``LATEST``
forward again, and the stream publishes every few minutes: pause the ``solaris_enrichment`` and
``solaris_stream`` DAGs first if the rollback must stick.

    solaris rollback                                   # list snapshots, LATEST marked
    solaris rollback --to snapshot-20001201T020000Z
"""

from __future__ import annotations

import argparse
import sys

from solaris.errors import RefusedError
from solaris.runtime import add_common_args, config_from_args, job_parser, run_job, setup_logging


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("solaris rollback", __doc__, with_as_of=False)
    parser.add_argument("--to", metavar="SNAPSHOT_ID", help="manifest to serve (default: only list them)")
    add_common_args(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)

    def body() -> None:
        from solaris.serving.resolver import load_snapshot
        from solaris.serving.snapshots import (
            SNAPSHOTS_DIR,
            find_manifest,
            latest_manifest_path,
            list_manifests,
            point_latest,
        )

        config = config_from_args(args)
        directory = config.warehouse / SNAPSHOTS_DIR
        if args.to:
            target = find_manifest(directory, args.to)
            try:
                load_snapshot(target)  # every pinned tier still readable
            except Exception as error:  # noqa: BLE001 - any unreadable tier refuses the switch
                raise RefusedError(f"{target.name} cannot be served, LATEST unchanged: {error}") from None
            path = point_latest(directory, target.stem)
            print(f"LATEST -> {path.name}")
            return
        latest = latest_manifest_path(directory)
        for path in list_manifests(directory):
            print(("* " if latest and path.name == latest.name else "  ") + path.stem)

    return run_job("rollback", body)


if __name__ == "__main__":
    sys.exit(main())
