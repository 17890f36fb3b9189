"""VACUUM of a tick-sized Delta table, with Spark's file-listing parallelism and with the session's.

Why: Delta's VACUUM lists a table's directories in a Spark job whose task count is
``spark.sql.sources.parallelPartitionDiscovery.parallelism``, 10,000 by default. On a local master
those are ten thousand near-empty tasks run a thread at a time; ``solaris.spark.partition_conf``
sets it to the session's shuffle partitions instead. This script times the same VACUUM both ways on
a table shaped like ``pair_embeddings`` (``--commits`` appends and deletes, partitioned by
``expiry_bucket``), alternating the two settings ``--repeats`` times, and prints the medians and
their ratio. The first VACUUM of each setting warms the JVM and is left out of the median.

    .venv/bin/python bench/vacuum.py --commits 12 --repeats 5
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

SPARK_DEFAULT_LISTING = 10_000
LISTING = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


def medians(seconds: dict[str, list[float]]) -> dict[str, float]:
    """Median seconds per setting, the first (warm-up) VACUUM of each left out when there are more."""
    return {name: statistics.median(times[1:] if len(times) > 1 else times) for name, times in seconds.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=12, help="appends (each followed by a delete) before VACUUM")
    parser.add_argument("--rows", type=int, default=2000, help="rows per append")
    parser.add_argument("--repeats", type=int, default=5, help="VACUUMs per setting (the first not counted)")
    parser.add_argument("--threads", type=int, default=2, help="Spark local[N]")
    args = parser.parse_args(argv)

    from solaris.config import load_config
    from solaris.spark import get_spark
    from solaris.storage.table import Table

    work = Path(tempfile.mkdtemp(prefix="solaris-bench-vacuum-"))
    config = load_config(overrides=[f"warehouse={work}", f"spark.master=local[{args.threads}]"])
    spark = get_spark(config, "bench-vacuum")
    ours = spark.conf.get(LISTING)
    pairs = Table.at(str(work / "pairs"), spark=spark)
    try:
        for commit in range(args.commits):
            pairs.append(spark.range(args.rows).selectExpr("id AS user_id", f"id % 97 + {commit} AS item_id",
                                                           f"{commit % 6} AS expiry_bucket"),
                         partition_by=("expiry_bucket",))
            pairs.delete_where(f"expiry_bucket = {(commit + 3) % 6}")
        seconds: dict[str, list[float]] = {"spark default": [], "session": []}
        for _ in range(args.repeats):
            for name, value in (("spark default", str(SPARK_DEFAULT_LISTING)), ("session", ours)):
                spark.conf.set(LISTING, value)
                started = time.perf_counter()
                pairs.vacuum()
                seconds[name].append(time.perf_counter() - started)
        result = medians(seconds)
        print(f"VACUUM of a {args.commits}-commit table on local[{args.threads}], median of "
              f"{max(args.repeats - 1, 1)} (first left out):")
        print(f"  listing parallelism {SPARK_DEFAULT_LISTING:>6} (Spark's default): {result['spark default']:7.1f} s")
        print(f"  listing parallelism {ours:>6} (the session's):  {result['session']:7.1f} s")
        print(f"  ratio: {result['spark default'] / result['session']:.1f}x")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
