"""What every job entry point shares: common flags, logging, config loading, error reporting.

Keeping this in one place is what makes `spark-submit jobs/<stage>.py`, `solaris <stage>` and the
Airflow tasks behave the same: same flags, same log format, same exit codes.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Callable

from solaris.config import SolarisConfig, load_config
from solaris.errors import RefusedError
from solaris.timeutil import parse_utc

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2

log = logging.getLogger("solaris")


class JobInputError(RefusedError):
    """Input the job refuses before writing anything (message is shown to the user as-is)."""


def setup_logging(level: str = "INFO") -> None:
    logging.Formatter.converter = time.gmtime
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)sZ %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )
    for noisy in ("py4j", "matplotlib", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def add_common_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("common options")
    group.add_argument("--config", help="YAML config (default: $SOLARIS_CONFIG or conf/solaris.yaml)")
    group.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a config value, e.g. --set precompute.ttl_hours=3 (repeatable)",
    )
    group.add_argument("--warehouse", help="root folder of the Delta tables (overrides config 'warehouse')")
    group.add_argument("--master", help="Spark master (default from config: local[*]; ignored under spark-submit)")
    group.add_argument("--run-id", help="id of this run; reruns with the same id replace their own output")
    group.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def config_from_args(args: argparse.Namespace) -> SolarisConfig:
    overrides = list(args.overrides)
    if args.warehouse:
        overrides.append(f"warehouse={args.warehouse}")
    if args.master:
        overrides.append(f"spark.master={args.master}")
    return load_config(args.config, overrides)


def as_of_arg(text: str):
    """argparse type for --as-of (UTC)."""
    try:
        return parse_utc(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def run_job(name: str, body: Callable[[], None]) -> int:
    """Run a job body and map failures to exit codes with a one-line reason in the log."""
    started = time.monotonic()
    try:
        body()
    except RefusedError as error:
        log.error("%s refused: %s", name, error)
        return EXIT_BAD_INPUT
    except Exception:
        log.exception("%s failed", name)
        return EXIT_FAILED
    log.info("%s finished in %.1fs", name, time.monotonic() - started)
    return EXIT_OK
