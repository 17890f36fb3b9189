"""The one SparkSession factory used by every job, test and benchmark.

Why a single factory: Delta needs its SQL extension and catalog set before the session exists, the
pipeline's time rules need a UTC session time zone, and Arrow must be on for the pandas UDFs. Doing
that in one place keeps `spark-submit`, the CLI, Airflow tasks and pytest behaving identically.

Delta's JARs are never downloaded at session start: `make setup` copies them from Maven Central into
``spark.jars_dir`` and this factory passes the local files with ``spark.jars``. Under
`spark-submit` the driver JVM already exists, so the JARs must come from the command line
(``--jars``); the factory checks that and says so instead of failing later with a class error.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from solaris.config import SolarisConfig
from solaris.errors import RefusedError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DELTA_JAR_PATTERNS = ("delta-spark_*.jar", "delta-storage-*.jar")
# Shuffle partitions on a cluster master when the config leaves them to the factory (the value this
# project used for every master before the local rule below).
CLUSTER_SHUFFLE_PARTITIONS = 8
_LOCAL_MASTER = re.compile(r"^local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")


class SparkSetupError(RefusedError):
    """The Spark environment is not usable (missing JARs, wrong launch)."""


def delta_jars(jars_dir: str | os.PathLike) -> list[str]:
    """Local Delta JAR files resolved at set-up; fails clearly when set-up was not run."""
    found: list[str] = []
    for pattern in DELTA_JAR_PATTERNS:
        matches = sorted(glob.glob(str(Path(jars_dir) / pattern)))
        if not matches:
            raise SparkSetupError(
                f"no {pattern} in {jars_dir}: run `make setup` (it copies Delta's JARs from Maven Central)"
            )
        found.append(matches[-1])
    return found


def local_threads(master: str) -> int | None:
    """Worker threads of a local master (``local`` 1, ``local[N]`` / ``local[N,F]`` N, ``local[*]``
    the machine's cores); None for any other master (a cluster, ``local-cluster[...]``)."""
    match = _LOCAL_MASTER.match(master.strip())
    if match is None:
        return None
    threads = match.group(1)
    if threads is None:
        return 1
    return (os.cpu_count() or 1) if threads == "*" else max(1, int(threads))


def shuffle_partitions(config: SolarisConfig, master: str) -> int:
    """``spark.sql.shuffle.partitions`` for a session on ``master``: the config's value when set, else
    one partition per thread of a local master and :data:`CLUSTER_SHUFFLE_PARTITIONS` on a cluster.

    Why one per local thread: an hourly tick shuffles tables of thousands to a few hundred thousand
    rows, where every partition costs a task's fixed overhead (scheduling, a Python worker's batch
    for the pandas UDFs, a file per Delta write) and more partitions than threads only run in extra
    waves. A local session on inputs far larger than a tick (``bench/pipeline.py`` at tens of
    millions of events) sets more partitions explicitly, so each task's share fits in memory.
    """
    if config.spark.shuffle_partitions is not None:
        return config.spark.shuffle_partitions
    threads = local_threads(master)
    return CLUSTER_SHUFFLE_PARTITIONS if threads is None else threads


def partition_conf(config: SolarisConfig, master: str) -> dict[str, str]:
    """The Spark settings that follow :func:`shuffle_partitions` for ``master``: the shuffles, the
    tasks Delta rebuilds a table's state with (its default of 50 is pure overhead on small tables),
    and the tasks a parallel file listing runs (Spark's default of 10,000: VACUUM lists a table's
    directories with it, so on a local master it scheduled ten thousand near-empty tasks and a
    VACUUM of a tick table took minutes instead of seconds; ``bench/vacuum.py`` measures both)."""
    partitions = shuffle_partitions(config, master)
    return {"spark.sql.shuffle.partitions": str(partitions),
            "spark.databricks.delta.snapshotPartitions": str(max(2, partitions)),
            "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(partitions)}


def driver_java_options(config: SolarisConfig, one_stage: bool = False) -> str:
    """``spark.driver.extraJavaOptions`` of a driver JVM this package starts or has spark-submit start.

    Why these options. A driver that runs one hourly stage and exits (an Airflow task's spark-submit,
    ``solaris <stage>``) lives a minute and spends most of it cold: its CPU goes to loading and
    verifying Spark's and Delta's ~20,000 classes and to the JIT compiling Spark's planner and the
    generated query code, work a long-lived session amortises and a one-stage JVM never gets back.

    * ``spark.class_data_archive`` (any driver, when the file exists): a class-data-sharing archive
      of those classes, written once by ``make setup``, is mapped instead of parsing and verifying the
      JARs. A JVM that finds the archive unusable (another JDK build or class path) logs one warning
      and loads the classes as usual, so a stale file costs time, never a failure.
    * ``spark.one_stage_java_options`` (``one_stage`` only; default ``-XX:TieredStopAtLevel=1
      -XX:ReservedCodeCacheSize=240m``): only the JIT's quick C1 compiler. C2's optimised code pays
      back over hours, not one stage; replay, evaluation and the tests' session run many ticks in
      one JVM and keep C2 (BENCHMARKS.md measures both ways). Why the code cache size: a C1-only JVM
      reserves 48 MB for compiled code instead of 240 MB, and a stage with many generated query
      classes (the candidates SQL on ML-1M) filled it, which kills the JVM ("Out of space in
      CodeCache"); the reservation is virtual memory, used only as code is compiled.
    * ``spark.session_java_options`` (any other driver: replay, evaluate, the tests' session;
      default ``-XX:+UseParallelGC``): the throughput collector instead of G1. In a local session the
      driver JVM is also the executor, and an hourly tick allocates and drops cached frames and
      shuffle buffers by the gigabyte; G1's concurrent marking threads then compete with the task
      threads for a small machine's cores, where the parallel collector only pauses (BENCHMARKS.md).
    """
    options = ["-Duser.timezone=UTC"]
    archive = config.spark.class_data_archive
    if archive and Path(archive).is_file():
        options.append(f"-XX:SharedArchiveFile={archive}")
    extra = config.spark.one_stage_java_options if one_stage else config.spark.session_java_options
    if extra.strip():
        options.append(extra.strip())
    return " ".join(options)


def page_size_bytes(size: str) -> int:
    """``spark.buffer_page_size`` ("2m", "512k", "1g") in bytes, less the 16-byte header of the
    ``long[]`` that holds an on-heap page.

    Why less: under G1 (the collector of one-stage drivers and of executors) an array of half a heap
    region or more is allocated in whole regions of its own, so a page of exactly 2 MB plus its header
    would take two 2 MB regions; Spark's own default subtracts the header for the same reason.
    """
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    return int(size[:-1]) * units[size[-1].lower()] - 16


def session_conf(config: SolarisConfig, master: str | None = None, one_stage: bool = False) -> dict[str, str]:
    """All Spark settings the pipeline relies on, as a plain dict (unit-testable, no JVM).

    ``one_stage``: the process runs one hourly stage and exits (:func:`driver_java_options`).
    """
    master = master or config.spark.master
    conf = {
        "spark.master": master,
        "spark.jars": ",".join(delta_jars(config.spark.jars_dir)),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": driver_java_options(config, one_stage),
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(config.spark.arrow_max_records_per_batch),
        **partition_conf(config, master),
        "spark.ui.enabled": str(config.spark.ui_enabled).lower(),
        "spark.driver.memory": config.spark.driver_memory,
        "spark.sql.warehouse.dir": str(Path(config.warehouse) / "_spark_sql"),
        "spark.ui.showConsoleProgress": "false",
        "spark.databricks.delta.schema.autoMerge.enabled": "false",
        # Adaptive query execution re-plans a query between its shuffle stages, each of which then
        # runs as its own Spark job. On small tables that means more jobs but not a slower tick
        # (measured in BENCHMARKS.md), and large inputs need its run-time partition, skew and join
        # decisions, so it stays on by default.
        "spark.sql.adaptive.enabled": str(config.spark.adaptive).lower(),
        # Whole-stage code generation compiles each query stage into one Java class: it pays back on
        # the rows of an hourly tick, so it stays on by default. A run of many different queries over
        # a few hundred rows each (the test suite) spends more CPU compiling than it saves, and may
        # turn it off: the operators then run interpreted, with the same results.
        "spark.sql.codegen.wholeStage": str(config.spark.whole_stage_codegen).lower(),
        # Spark compiles each query's generated Java code with Janino and keeps the compiled classes
        # in a cache keyed by the source text, 100 entries by default. One hourly tick asks for
        # several hundred distinct classes, so with 100 the cache is evicted within a tick and every
        # tick compiles (and the JIT re-optimises) the same code again. Sized to hold a tick's
        # classes several times over; bounded, because literals that change every tick (the as-of
        # time) make some classes new each tick (BENCHMARKS.md: compilations per tick).
        "spark.sql.codegen.cache.maxEntries": str(config.spark.codegen_cache_entries),
        # ORDER BY ... LIMIT n (the candidate budget) keeps an n-slot top-k buffer in one task up to
        # this n; above it Spark sorts globally instead, so a large budget cannot OOM an executor.
        "spark.sql.execution.topKSortFallbackThreshold": "500000",
        # Spark sizes a Tungsten memory page from its execution memory (about 0.3 x (heap - 300 MB)
        # / cores / 16, rounded up to a power of two: 16-64 MB on our drivers), and a broadcast hash
        # join's relation takes at least one page however few rows it holds. A tick broadcasts dozens
        # of small tables, and the views and cached frames kept for the next run keep their relations
        # alive, so mostly empty pages filled the heap and the collector ran full collections every
        # few seconds (BENCHMARKS.md). Small pages cost a large sort only more page-table entries
        # (8,192 pages per task: 16 GB at 2 MB). :func:`page_size_bytes`: why 16 bytes less.
        "spark.buffer.pageSize": str(page_size_bytes(config.spark.buffer_page_size)),
    }
    return conf


def _launched_by_spark_submit() -> bool:
    # pyspark sets this when the Python driver was started by an existing JVM (spark-submit).
    return "PYSPARK_GATEWAY_PORT" in os.environ


def get_spark(config: SolarisConfig, app_name: str, master: str | None = None,
              one_stage: bool = False) -> "SparkSession":
    """Return the (possibly already running) SparkSession configured for the pipeline.

    ``one_stage``: this process runs one hourly stage and exits (:func:`driver_java_options`). The
    driver JVM options apply only when this call starts the JVM; under spark-submit they come from
    its command line (:func:`solaris.orchestration.spark_submit_kwargs`).
    """
    from pyspark.sql import SparkSession

    conf = session_conf(config, master, one_stage)
    # PySpark turns timestamps into Python datetimes in the *process* time zone; pin it to UTC so
    # collected values match the session time zone (docs/architecture.md §2: all timestamps are UTC).
    os.environ["TZ"] = "UTC"
    time.tzset()
    os.environ.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON") or _python())
    builder = SparkSession.builder.appName(f"{config.spark.app_name_prefix}-{app_name}")
    for key, value in conf.items():
        if _launched_by_spark_submit() and key in ("spark.master", "spark.driver.memory"):
            continue  # spark-submit's --master / --driver-memory win, as users expect
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    _check_delta_loaded(spark)
    actual = spark.sparkContext.master or conf["spark.master"]
    if actual != conf["spark.master"]:  # spark-submit's --master: partitions follow the master that runs
        for key, value in partition_conf(config, actual).items():
            spark.conf.set(key, value)
    spark.sparkContext.setLogLevel("WARN")
    log.info("spark session %s master=%s", spark.sparkContext.applicationId, spark.sparkContext.master)
    return spark


def codegen_compilations(spark: "SparkSession") -> int:
    """Generated-code classes Janino has compiled in this JVM so far (Spark's CodegenMetrics).

    A class found in the codegen cache (``spark.codegen_cache_entries``) is not compiled again and
    not counted, so the difference around a piece of work says how much of its code was new.
    """
    jvm: Any = spark.sparkContext._jvm  # noqa: SLF001 - Spark's metrics have no Python API
    return int(jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount())


def _python() -> str:
    return sys.executable


def _check_delta_loaded(spark: "SparkSession") -> None:
    jvm: Any = spark.sparkContext._jvm  # noqa: SLF001 - the only way to probe the driver class path
    try:
        jvm.java.lang.Class.forName(
            "io.delta.sql.DeltaSparkSessionExtension", True, jvm.Thread.currentThread().getContextClassLoader()
        )
    except Exception as error:  # py4j wraps ClassNotFoundException
        raise SparkSetupError(
            "Delta Lake classes are not on the driver class path. Under spark-submit pass the JARs from "
            "set-up, e.g. `spark-submit --jars $(ls jars/*.jar | paste -sd,) jobs/ingest.py ...` "
            "(see README: Running under spark-submit)."
        ) from error
