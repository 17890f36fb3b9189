"""The longest silences of a solaris log: the largest gaps between consecutive log-line timestamps.

Why: the acceptance rule of progress reporting (issue #72) is that a long run such as ``solaris
evaluate`` at INFO never goes more than about a minute without a line; this measures it on a log
file. Only lines in the solaris log format (``2026-12-07 11:41:18,498Z INFO name: message``) count;
Spark's own stderr lines do not, since they say nothing a user can read as progress.

    solaris evaluate --quick ... 2> evaluate.log
    python scripts/log_gaps.py evaluate.log            # the largest gap, then the 5 largest with their lines
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime

LINE = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3})Z [A-Z]+ ")


def stamped(lines: list[str]) -> list[tuple[datetime, str]]:
    """Each solaris-format line with its time, in file order."""
    out = []
    for line in lines:
        match = LINE.match(line)
        if match:
            out.append((datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f"), line.rstrip("\n")))
    return out


def largest_gaps(lines: list[str], count: int = 5) -> list[tuple[float, str, str]]:
    """The ``count`` largest gaps: (seconds, the line before, the line after), largest first."""
    rows = stamped(lines)
    gaps = [((after[0] - before[0]).total_seconds(), before[1], after[1]) for before, after in zip(rows, rows[1:])]
    return sorted(gaps, key=lambda gap: gap[0], reverse=True)[:count]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", help="a log file written at --log-level INFO")
    parser.add_argument("--top", type=int, default=5, help="how many of the largest gaps to show")
    args = parser.parse_args(argv)
    with open(args.log, encoding="utf-8", errors="replace") as handle:
        lines = handle.readlines()
    rows = stamped(lines)
    if len(rows) < 2:
        print(f"{args.log}: fewer than 2 solaris log lines", file=sys.stderr)
        return 1
    gaps = largest_gaps(lines, args.top)
    span = (rows[-1][0] - rows[0][0]).total_seconds()
    print(f"largest gap {gaps[0][0]:.1f}s over {len(rows)} lines in {span:.0f}s")
    for seconds, before, after in gaps:
        print(f"\n{seconds:.1f}s between\n  {before[:200]}\n  {after[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
