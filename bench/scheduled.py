"""The scheduled path's hourly cycle through Airflow: seconds per task, split into start-up and work.

Copies the events and the FM / verifier (and speculator) checkpoints of an ingested + trained warehouse into a fresh
work folder (as ``bench/cycle.py`` does), gives the run its own Airflow home (metadata DB migrated,
``spark_default`` -> ``local[*]``) and, for ``--hours`` consecutive hours from ``--start``, runs
``airflow dags test solaris_precompute`` and then ``solaris_enrichment`` with the ``as_of`` Param:
the same DAG files, ``SparkSubmitOperator`` tasks and spark-submit command lines a scheduled hour
runs (the ``pair_embeddings`` Asset that starts the enrichment run is replaced by the explicit
``as_of``). ``--set KEY=VALUE`` overrides reach every task through a config file
(``$SOLARIS_CONFIG``), as a deployment's YAML would.

Every spark-submit task is split, from the ``airflow dags test`` output, into:

* **start-up**: the task started -> its driver has a SparkSession (Airflow's task runner,
  spark-submit's launcher, the driver JVM, Python imports, the session with Delta);
* **work**: SparkSession -> the job logged ``<job> finished`` (the stage itself, in a cold JVM);
* **exit**: -> the task ended (the JVM's and Python's shutdown, Airflow's bookkeeping).

    .venv/bin/python bench/scheduled.py --warehouse <ml-1m warehouse> --start 2000-12-01T00:00:00Z --hours 2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Iterable

ROOT = Path(__file__).resolve().parents[1]
DAGS = ("solaris_precompute", "solaris_enrichment")

_STAMP = r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d+)Z"
_TASK_START = re.compile(_STAMP + r" .*\[DAG TEST\] starting task_id=(\w+)")
_TASK_END = re.compile(_STAMP + r" .*\[DAG TEST\] end task task_id=(\w+)")
_SESSION = re.compile(_STAMP + r" .*INFO solaris\.spark: spark session ")
_FINISHED = re.compile(_STAMP + r" .*INFO solaris: [\w-]+ finished in ")


@dataclass(frozen=True)
class TaskPhases:
    """One task of a DAG run: when it started, had its SparkSession, finished its job, ended."""

    task_id: str
    started: datetime
    ended: datetime
    session: datetime | None = None
    finished: datetime | None = None

    @property
    def seconds(self) -> float:
        return (self.ended - self.started).total_seconds()

    @property
    def is_spark(self) -> bool:
        return self.session is not None and self.finished is not None

    def split(self) -> tuple[float, float, float]:
        """(start-up, work, exit) seconds of a spark-submit task."""
        assert self.session is not None and self.finished is not None, self.task_id
        return ((self.session - self.started).total_seconds(), (self.finished - self.session).total_seconds(),
                (self.ended - self.finished).total_seconds())


def task_phases(lines: Iterable[str]) -> list[TaskPhases]:
    """Tasks of one ``airflow dags test`` output in the order they ran (they run one at a time)."""
    tasks: list[TaskPhases] = []
    current: dict[str, Any] | None = None
    for line in lines:
        if match := _TASK_START.search(line):
            current = {"task_id": match[2], "started": datetime.fromisoformat(match[1])}
        elif current is None:
            continue
        elif match := _SESSION.search(line):
            current.setdefault("session", datetime.fromisoformat(match[1]))
        elif match := _FINISHED.search(line):
            current["finished"] = datetime.fromisoformat(match[1])
        elif (match := _TASK_END.search(line)) and match[2] == current["task_id"]:
            tasks.append(TaskPhases(ended=datetime.fromisoformat(match[1]), **current))
            current = None
    return tasks


def overrides_yaml(overrides: Iterable[str]) -> dict[str, Any]:
    """``["a.b=1", "a.c=x"]`` -> ``{"a": {"b": 1, "c": "x"}}`` (values parsed as YAML, like ``--set``)."""
    import yaml

    tree: dict[str, Any] = {}
    for override in overrides:
        key, _, value = override.partition("=")
        *parents, leaf = key.strip().split(".")
        node = tree
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = yaml.safe_load(value) if value.strip() else ""
    return tree


def airflow_env(work: Path, config_file: Path | None) -> dict[str, str]:
    """What ``scripts/airflow-env.sh`` needs to set up this run's own Airflow home and warehouse."""
    env = {**os.environ, "SOLARIS_AIRFLOW_HOME": str(work / "airflow_home"),
           "SOLARIS_WAREHOUSE": str(work / "warehouse")}
    if config_file is not None:
        env["SOLARIS_CONFIG"] = str(config_file)
        env["SOLARIS_HOME"] = str(ROOT)  # relative paths of the config (jars) stay the checkout's
    return env


def airflow(*args: str) -> list[str]:
    """argv of an ``airflow`` command in the embedded Airflow's environment (``scripts/airflow-env.sh``)."""
    return ["bash", "-c", f'source "{ROOT / "scripts" / "airflow-env.sh"}" && exec airflow "$@"', "airflow", *args]


def run(command: list[str], env: dict[str, str], log: Path) -> list[str]:
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed (exit {done.returncode}); log: {log}")
    return done.stdout.splitlines()


def print_hour(as_of: datetime, tasks: list[TaskPhases]) -> None:
    print(f"\n{as_of:%Y-%m-%d %H:%M}Z      task s  start-up    work    exit")
    for task in tasks:
        if task.is_spark:
            startup, work, exit_ = task.split()
            print(f"  {task.task_id:<18}{task.seconds:7.1f}   {startup:7.1f} {work:7.1f} {exit_:7.1f}")
        else:
            print(f"  {task.task_id:<18}{task.seconds:7.1f}   (no Spark)")
    spark = [task for task in tasks if task.is_spark]
    total = sum(task.seconds for task in tasks)
    startup = sum(task.split()[0] for task in spark)
    work = sum(task.split()[1] for task in spark)
    print(f"  {'hour':<18}{total:7.1f}   {startup:7.1f} {work:7.1f} {total - startup - work:7.1f}"
          f"   ({len(spark)} spark-submits; start-up {100 * startup / total:.0f} % of the hour)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warehouse", required=True, help="ingested warehouse with models/fm and models/vm_baseline")
    parser.add_argument("--start", required=True, help="first hour (UTC)")
    parser.add_argument("--hours", type=int, default=2)
    parser.add_argument("--work-dir", default="/tmp/solaris-bench-scheduled")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", help="also write the per-task phases here")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cycle import prepare  # bench/cycle.py: the same fresh copy of events and checkpoints

    from solaris.timeutil import parse_utc

    work = Path(args.work_dir)
    prepare(Path(args.warehouse), work / "warehouse")
    config_file = None
    if args.overrides:
        import yaml

        config_file = work / "conf" / "solaris.yaml"
        config_file.parent.mkdir(parents=True)
        config_file.write_text(yaml.safe_dump(overrides_yaml(args.overrides)))
    env = airflow_env(work, config_file)
    (work / "logs").mkdir()
    run(["bash", str(ROOT / "scripts" / "airflow-setup.sh")], env, work / "logs" / "airflow-setup.log")
    print(f"[bench] work folder {work}; Airflow home {env['SOLARIS_AIRFLOW_HOME']}; "
          f"overrides {args.overrides or 'none'}", flush=True)

    start = parse_utc(args.start)
    results: list[dict[str, Any]] = []
    hours: list[list[TaskPhases]] = []
    for hour in range(args.hours):
        as_of = start + timedelta(hours=hour)
        stamp = f"{as_of:%Y-%m-%dT%H:%M:%SZ}"
        tasks: list[TaskPhases] = []
        for dag_id in DAGS:
            lines = run(airflow("dags", "test", dag_id, "-c", json.dumps({"as_of": stamp})), env,
                        work / "logs" / f"{dag_id}-{as_of:%Y%m%dT%H}.log")
            tasks += task_phases(lines)
        print_hour(as_of, tasks)
        hours.append(tasks)
        results += [{"as_of": stamp, "task_id": task.task_id, "seconds": task.seconds,
                     **(dict(zip(("startup", "work", "exit"), task.split(), strict=True)) if task.is_spark else {})}
                    for task in tasks]

    print(f"\nmedian over {len(hours)} hours     task s  start-up    work    exit")
    for task_id in [task.task_id for task in hours[0]]:
        same = [task for tasks in hours for task in tasks if task.task_id == task_id]
        if all(task.is_spark for task in same):
            splits = [task.split() for task in same]
            print(f"  {task_id:<18}{statistics.median(t.seconds for t in same):7.1f}   "
                  + " ".join(f"{statistics.median(s[i] for s in splits):7.1f}" for i in range(3)))
    totals = [sum(task.seconds for task in tasks) for tasks in hours]
    print(f"  {'hour':<18}{statistics.median(totals):7.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
