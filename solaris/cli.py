"""``solaris`` command: one sub-command per pipeline stage, each the same code spark-submit runs.

    solaris ingest --input ml-1m
    solaris <stage> --help
"""

from __future__ import annotations

import importlib
import sys

# sub-command -> (module with main(argv), one-line summary)
COMMANDS: dict[str, tuple[str, str]] = {
    "ingest": ("solaris.jobs.ingest", "load MovieLens / CSV / Parquet / synthetic data into the events table"),
    "train-fm": ("solaris.jobs.train_fm", "train the foundation model on events up to --as-of"),
    "train-vm": ("solaris.jobs.train_vm", "train a vertical model variant (baseline = the verifier)"),
    "train-speculator": ("solaris.jobs.train_speculator", "learn speculation blend + request verifier on past ticks"),
    "candidates": ("solaris.jobs.candidates", "speculate the (user, item) pairs of the next horizon"),
    "score": ("solaris.jobs.score", "FM-score and verify candidates, write pair_embeddings with TTL"),
    "expire": ("solaris.jobs.expire", "delete expired pair embeddings and history past retention; VACUUM at midnight"),
    "hit-rate": ("solaris.jobs.hit_rate", "speculation hit rate of a run against the requests that arrived"),
    "user-aggregates": ("solaris.jobs.user_aggregates", "tier 3: 24 h mean of each user's pair embeddings"),
    "knn": ("solaris.jobs.knn", "FAISS k-means + per-cluster KNN over FM user representations"),
    "impute": ("solaris.jobs.impute", "tier 4: impute users without an aggregate from their neighbours"),
    "item-aggregates": ("solaris.jobs.item_aggregates", "tiers 5-6: 24 h item means; other items via FM item space"),
    "publish": ("solaris.jobs.publish", "quality gate, then an atomic snapshot manifest for the resolver"),
    "fast-lane": ("solaris.jobs.fast_lane", "sub-hourly candidates, score, publish for sessions new since the hour"),
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
