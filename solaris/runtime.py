"""What every job entry point shares: common flags, logging, config loading, error reporting.

Keeping this in one place is what makes `spark-submit jobs/<stage>.py`, `solaris <stage>` and the
Airflow tasks behave the same: same flags, same log format, same exit codes.
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
import time
from datetime import datetime
from typing import Callable, TypeVar

from solaris.config import SolarisConfig, load_config
from solaris.errors import RefusedError
from solaris.spark import get_spark
from solaris.tick import StepContext
from solaris.timeutil import default_run_id, parse_utc

R = TypeVar("R")  # what a stage's run returns, handed to its report

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
# A check-only run found rows a real run would quarantine (``solaris ingest --validate-only``): not a
# failure of the job, but distinct from 0 so a script or CI step can stop before the real ingest.
EXIT_WOULD_QUARANTINE = 3

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


def as_of_arg(text: str) -> datetime:
    """argparse type for --as-of (UTC)."""
    try:
        return parse_utc(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def run_job(name: str, body: Callable[[], int | None]) -> int:
    """Run a job body and map failures to exit codes with a one-line reason in the log.

    A body that finishes returns nothing (exit code 0) or its own exit code (e.g.
    :data:`EXIT_WOULD_QUARANTINE` of a check-only run).
    """
    started = time.monotonic()
    try:
        code = body()
    except RefusedError as error:
        log.error("%s refused: %s", name, error)
        return EXIT_BAD_INPUT
    except Exception:
        log.exception("%s failed", name)
        return EXIT_FAILED
    finally:
        # Free the body's Arrow objects (deltalake/pyarrow readers) while Arrow is still alive: left to
        # the interpreter's final teardown, a native reader thread can outlive Arrow's pools and abort
        # the process ("terminate called without an active exception", exit -6) after the job succeeded.
        gc.collect()
    log.info("%s finished in %.1fs%s", name, time.monotonic() - started, f" (exit code {code})" if code else "")
    return EXIT_OK if code is None else int(code)


def job_parser(prog: str, doc: str, with_as_of: bool = True) -> argparse.ArgumentParser:
    """The parser every job starts from: its docstring as help, ``--as-of`` for hourly stages."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=doc.split("\n\n")[0],
        epilog=doc.split("\n\n", 2)[-1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if with_as_of:
        parser.add_argument("--as-of", type=as_of_arg, required=True, help="the run's logical time (UTC)")
    return parser


def run_stage(parser: argparse.ArgumentParser, argv: list[str] | None, name: str, run_prefix: str, *,
              run: Callable[[StepContext, argparse.Namespace], R], report: Callable[[SolarisConfig, R], str]) -> int:
    """Main of an hourly stage: parse, log, load config, start Spark, ``run``, print ``report``.

    ``run(step, args)`` does the work, the stage's typed entry ``stage.run(step, options=...)`` with
    options from ``args``; the step has no tick (the stage runs alone) and its run id defaults to
    ``<run_prefix>-<as-of>`` so every stage of one hour shares it and reruns replace their output.
    """
    add_common_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.log_level)

    def body() -> None:
        config = config_from_args(args)
        spark = get_spark(config, name, one_stage=True)
        step = StepContext(spark, config, args.as_of, args.run_id or default_run_id(run_prefix, args.as_of))
        result = run(step, args)
        print(report(config, result))

    return run_job(name, body)
