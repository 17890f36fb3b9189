"""Where a command's CPU goes: every process and thread it starts, sampled from /proc (Linux).

Why: the test suite and the Airflow tasks start many short-lived processes (spark-submit JVMs, the
``solaris`` CLI, Airflow's task runners, PySpark's Python workers). A wall-clock time says how long
they took, not what the cores did; on a 2-core machine that is the question, because the test suite
is CPU-bound with two shards side by side (scripts/test.sh). This script runs a command, reads the
CPU time of every thread on the machine every ``--interval`` seconds (1 by default) until the command ends, and
prints the CPU the machine spent while it ran, by kind of process (a JVM by the process that
started it, Python by its script), by JVM thread kind (Spark task threads, the driver's py4j
threads, the JIT compiler, the garbage collector) and the busiest processes.

    .venv/bin/python bench/process_cpu.py -- bash scripts/test.sh
    .venv/bin/python bench/process_cpu.py --json cpu.json -- make test

A thread that starts and ends between two samples is not seen (its CPU is in the machine's total,
printed as "not attributed"); threads are keyed by process id, thread id and start time, so an id
the kernel reuses is a new thread. The sampling itself costs a few per cent of a core and is
reported as a process of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

PROC = Path("/proc")
SHELLS = {"bash", "sh"}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# JVM thread names (digits replaced by #, cut to the kernel's 15 characters: "Executor task l") and
# the kind each belongs to; any other JVM thread is "jvm other".
JVM_THREAD_KINDS = (
    ("Executor task", "spark tasks"),
    ("C# Compiler", "jit compiler"),
    ("GC Thread", "garbage collector"),
    ("G# ", "garbage collector"),
    ("VM Thread", "garbage collector"),
    ("Thread-#", "driver (py4j calls)"),
)


@dataclass(frozen=True)
class ThreadSample:
    """One thread's cumulative CPU seconds at a sample, and what it belongs to."""

    key: tuple[int, int, int]  # process id, thread id, start time (ticks since boot)
    process: str
    thread: str
    cpu_seconds: float


@dataclass
class CpuBreakdown:
    """CPU seconds a command's run cost the machine, split three ways."""

    wall_seconds: float
    machine_cpu_seconds: float
    attributed_cpu_seconds: float
    by_process_kind: dict[str, float] = field(default_factory=dict)
    by_jvm_thread_kind: dict[str, float] = field(default_factory=dict)
    by_process: dict[str, float] = field(default_factory=dict)


def stat_fields(text: str) -> list[str]:
    """The fields after the name of a /proc stat line (state first, then the parent's id, ...).

    The name is between the first "(" and the last ")": it may itself hold spaces and parentheses.
    """
    return text[text.rindex(")") + 2:].split()


def parse_stat(text: str) -> tuple[str, float, int]:
    """(thread name, user + system CPU seconds, start time in ticks) of a /proc/<pid>/task/<tid>/stat line."""
    fields = stat_fields(text)
    name = text[text.index("(") + 1:text.rindex(")")]
    return name, (int(fields[11]) + int(fields[12])) / CLOCK_TICKS, int(fields[19])


def process_label(argv: list[str], parent: str | None) -> str:
    """A short name for a process: a JVM by the process that started it, Python and shells by their
    script and first arguments (the options left out), anything else by its executable."""
    if not argv:
        return "?"
    executable = os.path.basename(argv[0])
    if executable == "java":
        return f"java <- {parent or '?'}"
    if executable.startswith("python") or executable in SHELLS | {"solaris", "airflow"}:
        words = [os.path.basename(arg) for arg in argv[1:] if not arg.startswith("-")][:2]
        return " ".join([executable.rstrip("0123456789."), *words])[:60]
    return executable


def thread_kind(process: str, thread: str) -> str:
    """The kind a thread's CPU is counted under in ``by_jvm_thread_kind`` (JVM threads only)."""
    if not process.startswith("java"):
        return ""
    name = re.sub(r"\d+", "#", thread)
    for prefix, kind in JVM_THREAD_KINDS:
        if name.startswith(prefix):
            return kind
    return "jvm other"


def process_kind(process: str) -> str:
    """The kind a process's CPU is counted under in ``by_process_kind``."""
    if process.startswith("java <- "):
        starter = process.removeprefix("java <- ")
        if "pytest" in starter:
            return "JVM of a pytest session"
        if "spark-class" in starter:  # the short JVM that only builds spark-submit's command line
            return "JVM of Spark's launcher"
        if "airflow" in starter or "spark-submit" in starter:
            return "JVM of a spark-submit"
        if "solaris" in starter:
            return "JVM of a solaris CLI process"
        return "JVM of another process"
    if "pyspark.daemon" in process or "pyspark.worker" in process:
        return "PySpark Python workers"
    return " ".join(process.split(" ")[:2])


def breakdown(first: Mapping[tuple[int, int, int], ThreadSample], last: Mapping[tuple[int, int, int], ThreadSample],
              wall_seconds: float, machine_cpu_seconds: float, top: int = 15) -> CpuBreakdown:
    """CPU each thread used between its first sample (0 for a thread born after the first sample) and
    its last, summed per process kind, JVM thread kind and process."""
    kinds: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    processes: Counter[str] = Counter()
    for key, sample in last.items():
        used = sample.cpu_seconds - (first[key].cpu_seconds if key in first else 0.0)
        if used <= 0:
            continue
        kinds[process_kind(sample.process)] += used
        processes[sample.process] += used
        kind = thread_kind(sample.process, sample.thread)
        if kind:
            threads[kind] += used
    rounded = lambda counter, n=None: {k: round(v, 1) for k, v in counter.most_common(n)}  # noqa: E731
    return CpuBreakdown(wall_seconds=round(wall_seconds, 1), machine_cpu_seconds=round(machine_cpu_seconds, 1),
                        attributed_cpu_seconds=round(sum(processes.values()), 1), by_process_kind=rounded(kinds),
                        by_jvm_thread_kind=rounded(threads), by_process=rounded(processes, top))


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has been busy (all but idle and iowait) since boot."""
    fields = (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:  # the process or thread ended between listing and reading
        return None


def sample_threads(labels: dict[tuple[int, int], str]) -> Iterable[ThreadSample]:
    """Every thread on the machine now.

    ``labels``: each process's label by (process id, start time), kept across samples: a JVM keeps
    the label of the process that started it after that process ends (the JVM is then re-parented).
    A shell is labelled again at each sample until it becomes something else (spark-submit's
    launcher script execs the JVM).
    """
    parents: dict[int, str] = {pid: label for (pid, _), label in labels.items()}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        stat = _read(entry / "stat")
        if stat is None:
            continue
        fields = stat_fields(stat)
        process = (pid, int(fields[19]))
        label = labels.get(process)
        if label is None or label.split(" ")[0] in SHELLS:
            cmdline = _read(entry / "cmdline")
            if cmdline is None:
                continue
            label = labels[process] = process_label([arg for arg in cmdline.split("\0") if arg],
                                                    parents.get(int(fields[1])))
            parents[pid] = label
        try:
            tids = os.listdir(entry / "task")
        except OSError:
            continue
        for tid in tids:
            text = _read(entry / "task" / tid / "stat")
            if text is None:
                continue
            name, cpu, started = parse_stat(text)
            yield ThreadSample((pid, int(tid), started), label, name, cpu)


def measure(command: list[str], interval: float, top: int) -> tuple[int, CpuBreakdown]:
    """Run ``command`` to its end, sampling; its exit code and the breakdown."""
    labels: dict[tuple[int, int], str] = {}
    first = {sample.key: sample for sample in sample_threads(labels)}
    last = dict(first)
    busy, started = machine_busy_seconds(), time.monotonic()
    child = subprocess.Popen(command)
    while child.poll() is None:
        last.update((sample.key, sample) for sample in sample_threads(labels))
        time.sleep(interval)
    last.update((sample.key, sample) for sample in sample_threads(labels))
    return child.returncode, breakdown(first, last, time.monotonic() - started, machine_busy_seconds() - busy, top)


def report_lines(result: CpuBreakdown) -> list[str]:
    total = result.machine_cpu_seconds or 1.0
    lines = [f"wall {result.wall_seconds:.0f} s; machine CPU {result.machine_cpu_seconds:.0f} s "
             f"({result.machine_cpu_seconds / max(result.wall_seconds, 1e-9):.2f} cores busy on average); "
             f"attributed to threads {result.attributed_cpu_seconds:.0f} s, not attributed "
             f"{max(result.machine_cpu_seconds - result.attributed_cpu_seconds, 0):.0f} s"]
    for title, table in (("by kind of process", result.by_process_kind),
                         ("JVM threads by kind", result.by_jvm_thread_kind),
                         ("busiest processes", result.by_process)):
        lines.append(f"{title}:")
        lines += [f"  {seconds:8.1f} s {100 * seconds / total:5.1f} %  {name}" for name, seconds in table.items()]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     usage="%(prog)s [--interval S] [--top N] [--json PATH] -- COMMAND ...")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples (default 1)")
    parser.add_argument("--top", type=int, default=15, help="busiest processes listed (default 15)")
    parser.add_argument("--json", type=Path, help="also write the breakdown here")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (put it after --)")
    if not (PROC / "stat").is_file():
        parser.error("needs Linux /proc")
    code, result = measure(command, args.interval, args.top)
    print("\n".join(report_lines(result)), file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps({"command": command, "exit_code": code, **asdict(result)}, indent=1))
    return code


if __name__ == "__main__":
    sys.exit(main())
