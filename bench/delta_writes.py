"""The fixed cost of one Delta commit of each kind a tick makes, and the floor it puts under a tick.

Why: a tick of the hourly cycle costs about the same on a 120-user synthetic world (1,540 pairs) as
on MovieLens-1M (34,000 pairs), so its seconds are not the data's. A tick makes nine Delta commits
(``bench/cycle.py`` lists them by table): five ``merge_if_new_run`` (pair, user and item embeddings,
imputed users and items), three replacements of a run's or a key's rows (candidates, the pair log,
the ``runs`` audit) and one overwrite (``user_neighbors``). Up to ``storage.driver_max_rows`` rows,
the merges and replacements are collected to the driver and written by ``deltalake``
(``driver_*`` kinds: the collect included); above it, Spark writes them (the other kinds). This
script times each kind alone, through the pipeline's own :class:`solaris.storage.table.Table`,
on a small Delta table whose source is a cheap in-memory frame, so what it measures is the engines'
own work per commit (planning, the jobs a MERGE runs, the log) and not a stage's computation.
Multiplied by the tick's commits it is the floor of a tick's wall time on this machine with today's
tables.

Every kind is written ``--repeats`` times into its own fresh table; the first two writes of each
kind pay table creation and JVM warm-up and are left out of the median. Every tenth commit of a
table also writes a Delta checkpoint, which is part of the real cost and stays in.

    .venv/bin/python bench/delta_writes.py --rows 2000,34000
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

# Commits of one tick by kind (bench/cycle.py: nine commits, by table), with an hour's rows under the bound.
TICK_WRITES = {"driver_merge_if_new_run": 5, "driver_replace_run": 3, "overwrite": 1}
# Measured for comparison: the same writes by Spark (beyond the bound, or storage.driver_max_rows=0).
SPARK_WRITES = ("merge_if_new_run", "merge_into", "replace_where")


def parse_writes(text: str) -> dict[str, int]:
    """``kind=count,...`` -> counts; only the kinds this script measures."""
    counts: dict[str, int] = {}
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        kind, _, count = part.partition("=")
        if kind not in (*TICK_WRITES, *SPARK_WRITES):
            raise SystemExit(f"unknown write kind {kind!r}; known: {', '.join((*TICK_WRITES, *SPARK_WRITES))}")
        counts[kind] = int(count)
    return counts


def floor_seconds(medians: dict[str, float], writes: dict[str, int]) -> float:
    """Seconds of a tick spent committing alone: each kind's median times its commits per tick."""
    return sum(medians[kind] * count for kind, count in writes.items())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="2000,34000", help="rows per write (comma-separated sizes)")
    parser.add_argument("--repeats", type=int, default=10, help="writes per kind and size (first two not counted)")
    parser.add_argument("--dim", type=int, default=16, help="embedding length of each row")
    parser.add_argument("--threads", type=int, default=2, help="Spark local[N]")
    parser.add_argument("--tick-writes", default=",".join(f"{k}={v}" for k, v in TICK_WRITES.items()),
                        help="commits of one tick by kind, for the floor (default: today's tick)")
    args = parser.parse_args(argv)
    if args.repeats < 3:
        parser.error("--repeats must be at least 3 (the first two writes are warm-up)")
    writes = parse_writes(args.tick_writes)

    from pyspark.sql import functions as F

    from solaris.config import load_config
    from solaris.spark import get_spark
    from solaris.storage.table import Table, WriteRule

    work = Path(tempfile.mkdtemp(prefix="solaris-bench-delta-"))
    config = load_config(overrides=[f"warehouse={work}", f"spark.master=local[{args.threads}]",
                                    f"spark.shuffle_partitions={args.threads}"])
    spark = get_spark(config, "bench-delta-writes")

    def source(rows: int, serial: int):
        # A run's rows: a key, its run id and time, an embedding (all from literals: cheap to compute).
        return (spark.range(rows).withColumnRenamed("id", "user_id")
                .withColumn("computed_at", F.expr(f"timestamp_seconds({serial})"))
                .withColumn("run_id", F.lit(f"run-{serial}"))
                .withColumn("embedding", F.array(*[F.lit(float(j)) for j in range(args.dim)])))

    def table(path: str, *rule: object, **parts: object) -> Table:
        return Table.at(path, spark=spark, storage=config.storage, rule=WriteRule(*rule, **parts))  # type: ignore[arg-type]

    # rows=None: Spark writes, whatever the engine rule would choose (the comparison kinds)
    kinds: dict[str, Callable[[object, str, int], None]] = {
        "driver_merge_if_new_run": lambda frame, path, serial: table(path, "merge_newer", keys=("user_id",)).write(
            frame, f"run-{serial}"),
        "driver_replace_run": lambda frame, path, serial: table(path, "replace_run").write(frame, f"run-{serial}"),
        "merge_if_new_run": lambda frame, path, serial: table(path, "merge_newer", keys=("user_id",)).write(
            frame, f"run-{serial}", rows=None),
        "merge_into": lambda frame, path, serial: table(path, "upsert", keys=("user_id", "run_id")).write(
            frame, f"run-{serial}"),
        "replace_where": lambda frame, path, serial: table(path, "replace_run").write(frame, f"run-{serial}",
                                                                                      rows=None),
        "overwrite": lambda frame, path, serial: table(path, "overwrite").write(frame, f"run-{serial}"),
    }
    sizes = [int(size) for size in args.rows.split(",")]
    print(f"seconds per commit, median of writes 3..{args.repeats} (Spark local[{args.threads}], {args.dim}-d rows)")
    print(f"{'kind':<24}" + "".join(f"{f'{size:,} rows':>14}" for size in sizes) + "   per tick")
    medians: dict[int, dict[str, float]] = {size: {} for size in sizes}
    for kind, write in kinds.items():
        cells = []
        for size in sizes:
            path = str(work / f"{kind}-{size}")
            seconds = []
            for serial in range(args.repeats):
                started = time.perf_counter()
                write(source(size, serial), path, serial)
                seconds.append(time.perf_counter() - started)
            medians[size][kind] = statistics.median(seconds[2:])
            cells.append(f"{medians[size][kind]:>14.2f}")
        print(f"{kind:<24}" + "".join(cells) + f"   {writes.get(kind, 0):>8}", flush=True)
    total = sum(writes.values())
    print(f"{'tick floor':<24}" + "".join(f"{floor_seconds(medians[size], writes):>14.1f}" for size in sizes)
          + f"   {total:>8}  (seconds of a tick spent in its {total} commits alone)")
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
