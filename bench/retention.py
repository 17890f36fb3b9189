"""Do the appended tables stay bounded? Rows and bytes per table after each of N replayed hours.

Copies the events and the model checkpoints (speculator too, when present) of an ingested + trained
warehouse into a fresh work folder (the source is never written), then runs
:func:`solaris.pipeline.run_cycle` with the replay measurements at ``--ticks`` consecutive hours from
``--start`` in one Spark session, as ``solaris replay`` does, except that ``expire`` VACUUMs on the
schedule's cadence (``precompute.vacuum_every_hours``) rather than at the last tick only.

After each tick it prints, per table (``candidates``, ``pair_embeddings_log``, ``quarantine``,
``runs``, ``pair_embeddings``): the live rows and live bytes of the latest Delta version (from the
log's add actions, no Spark job) and the bytes on disk (data files not yet VACUUMed and the log
included). Live figures are what the retention bounds; disk bytes fall only when VACUUM may delete
the removed files, i.e. 7 days after their removal (Delta's guard, never disabled here).

    .venv/bin/python bench/retention.py --warehouse <ml-1m> --start 2000-11-20T03:00:00Z --ticks 48
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

TABLES = ("candidates", "pair_embeddings_log", "quarantine", "runs", "pair_embeddings")


@dataclass(frozen=True)
class Footprint:
    """One table's size at one moment: live rows and bytes of its latest version, bytes on disk."""

    rows: int
    live_bytes: int
    disk_bytes: int


def disk_bytes(folder: Path) -> int:
    """Bytes of every file under ``folder`` (removed-but-not-vacuumed data files and the log included)."""
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def footprint(folder: Path) -> Footprint:
    """The table's live rows and bytes (its latest version's add actions) and its bytes on disk; zeros
    when the table does not exist yet."""
    from solaris.storage.table import Table

    if not (folder / "_delta_log").is_dir():
        return Footprint(0, 0, 0)
    actions = Table.at(str(folder)).log.files()
    rows = sum(value or 0 for value in actions.column("num_records").to_pylist()) if actions.num_rows else 0
    size = sum(actions.column("size_bytes").to_pylist()) if actions.num_rows else 0
    return Footprint(int(rows), int(size), disk_bytes(folder))


def prepare(source: Path, work: Path) -> None:
    """A fresh work warehouse holding the source's events, id map and model checkpoints."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for name in ("events", "id_map"):
        if (source / name).exists():
            shutil.copytree(source / name, work / name)
    for role in ("fm", "vm_baseline", "speculator"):
        if (source / "models" / role).exists():
            shutil.copytree(source / "models" / role, work / "models" / role)


def mib(value: int) -> str:
    return f"{value / 2**20:.1f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warehouse", required=True, help="ingested warehouse with models/fm and models/vm_baseline")
    parser.add_argument("--start", required=True, help="first tick (UTC)")
    parser.add_argument("--ticks", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2, help="Spark local[N]")
    parser.add_argument("--work-dir", default="/tmp/solaris-bench-retention")
    parser.add_argument("--json", help="also write the per-tick figures here (rewritten after every tick)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--resume", action="store_true", help="continue on the work folder's warehouse (a later "
                        "--start) instead of a fresh copy")
    args = parser.parse_args(argv)

    from solaris.config import load_config
    from solaris.pipeline import CANDIDATES, EXPIRE, run_cycle, tick_schedule
    from solaris.runtime import setup_logging
    from solaris.spark import get_spark
    from solaris.stages.expire import is_vacuum_hour
    from solaris.timeutil import parse_utc

    setup_logging("WARNING")
    work = Path(args.work_dir) / "warehouse"
    if not args.resume:
        prepare(Path(args.warehouse).resolve(), work)
    config = load_config(overrides=[f"warehouse={work}", f"spark.master=local[{args.threads}]", *args.overrides])
    spark = get_spark(config, "bench-retention")
    start = parse_utc(args.start)
    schedule = tick_schedule(start, start + timedelta(hours=args.ticks), 1.0)
    print("rows / live MiB / disk MiB per table after each tick")
    print(f"{'tick':<18}{'s':>6}{'expire':>7} {'vac':>3} " + " ".join(f"{name[:22]:>26}" for name in TABLES))
    rows = []
    for tick in schedule:
        vacuum = is_vacuum_hour(tick, config.precompute.vacuum_every_hours)
        started = time.perf_counter()
        cycle = run_cycle(spark, config, tick, measure=True, vacuum=vacuum)
        seconds = time.perf_counter() - started
        sizes = {name: footprint(Path(config.table_path(name))) for name in TABLES}
        expire = cycle.seconds.get(EXPIRE.name, 0.0)
        rows.append({"as_of": tick.isoformat(), "seconds": seconds, "expire_seconds": expire, "vacuumed": vacuum,
                     "candidates_written": cycle.require(CANDIDATES).pairs,
                     "tables": {name: asdict(size) for name, size in sizes.items()}})
        print(f"{tick:%Y-%m-%d %H:%M}Z{seconds:>6.0f}{expire:>7.1f} {'yes' if vacuum else '':>3} " + " ".join(
            f"{f'{size.rows:,}/{mib(size.live_bytes)}/{mib(size.disk_bytes)}':>26}" for size in sizes.values()),
            flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps({"ticks": rows}, indent=2))


if __name__ == "__main__":
    main()
