"""``solaris`` command: one sub-command per pipeline stage, each the same code spark-submit runs.

    solaris ingest --input ml-1m
    solaris <stage> --help
"""

from __future__ import annotations

import importlib
import sys

from solaris.pipeline import CYCLE

# the hourly stages' commands come from the stage list (each has jobs/<name>.py); a half's replay
# measurements with an entry of their own (hit-rate) follow its stages
STAGE_COMMANDS: dict[str, tuple[str, str]] = {
    name.replace("_", "-"): (f"solaris.jobs.{name}", command)
    for half in ("precompute", "enrichment")
    for name, command in [*((stage.name, stage.command) for stage in CYCLE if stage.half == half),
                          *((measurement.name, measurement.command) for stage in CYCLE if stage.half == half
                            for measurement in stage.measurements)]
    if command is not None
}

# sub-command -> (module with main(argv), one-line summary)
COMMANDS: dict[str, tuple[str, str]] = {
    "ingest": ("solaris.jobs.ingest", "load MovieLens / CSV / Parquet / synthetic data into the events table"),
    "train-fm": ("solaris.jobs.train_fm", "train the foundation model on events up to --as-of"),
    "train-vm": ("solaris.jobs.train_vm", "train a vertical model variant (baseline = the verifier)"),
    "train-speculator": ("solaris.jobs.train_speculator", "learn speculation blend + request verifier on past ticks"),
    **STAGE_COMMANDS,
    "fast-lane": ("solaris.jobs.fast_lane", "sub-hourly candidates, score, publish for sessions new since the hour"),
    "stream": ("solaris.jobs.stream", "incremental precompute: a streaming query over events, per micro-batch"),
    "rollback": ("solaris.jobs.rollback", "list snapshots, or point serving's LATEST at an earlier one"),
    "replay": ("solaris.jobs.replay", "replay the hourly precompute over a time range (backfills, demo)"),
    "evaluate": ("solaris.jobs.evaluate", "knowledge-transfer evaluation: replay, every VM variant, report"),
}


def _usage() -> str:
    lines = ["usage: solaris <command> [options]", "", "commands:"]
    width = max(len(name) for name in COMMANDS) + 2  # names never run into their summaries
    lines += [f"  {name:<{width}}{summary}" for name, (_, summary) in COMMANDS.items()]
    lines += ["", "Run `solaris <command> --help` for the options of a command."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"solaris: unknown command {command!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[command][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
