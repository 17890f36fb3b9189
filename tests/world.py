"""Shared test settings and the one synthetic "world" the Spark tests run the pipeline on.

* ``SMALL``: the small model and precompute settings every Spark test module starts from. A module
  that needs other values passes them explicitly on top (later overrides win).
* ``WORLD``: what the shared world adds to ``SMALL`` (data size, one training epoch, batch sizes,
  enrichment knobs): the world is ingested and trained once per test session (the
  ``world_template`` fixture in ``tests/conftest.py``) and copied by the tests that need one.
* :func:`build_world`: synthetic events ingested, FM and verifier trained on the events up to
  ``T0``, in a fresh warehouse.

A helper module, not a test module: test modules import from here (or from a conftest), never
from one another.
"""

from __future__ import annotations

import io
import logging
import shutil
import subprocess
from collections.abc import Sequence
from contextlib import redirect_stderr, redirect_stdout
from datetime import datetime, timezone
from pathlib import Path

from solaris.config import SolarisConfig, SparkConfig, load_config

_SPARK = SparkConfig()
# The tests' long-lived Spark sessions (each pytest process's, and the `solaris replay` / `evaluate`
# processes tests start) run with the JIT options of a one-stage JVM (C1 only) on the session's
# collector. Why: a test session runs hundreds of different small queries, each a few times, so C2's
# optimised code seldom pays back the CPU it costs to compile, and with two shards side by side the
# suite is CPU-bound (BENCHMARKS.md, "Test suite"). The JIT tier changes no result (Java arithmetic is
# the same in every tier); production sessions keep C2, which pays back over hours of ticks.
TEST_SESSION_JAVA_OPTIONS = f"{_SPARK.session_java_options} {_SPARK.one_stage_java_options}"
# The same reasoning turns off whole-stage code generation and adaptive query execution in the tests'
# sessions: compiling each query stage to Java, and re-planning a query between its shuffle stages
# (each then a Spark job of its own), pay back on an hourly tick's rows, not on a test's few hundred;
# neither changes a result (solaris/spark.py). Production keeps both, and so do the tests that run the
# deployment's own config (tests/e2e, the demo).
TEST_OVERRIDES = ["spark.master=local[2]", "spark.shuffle_partitions=2", "spark.driver_memory=2g",
                  f"spark.session_java_options={TEST_SESSION_JAVA_OPTIONS}",
                  "spark.whole_stage_codegen=false", "spark.adaptive=false"]

SMALL = [
    "synthetic.chunks=2", "model.embedding_dim=16", "model.history_length=8", "model.fm.id_buckets=1024",
    "model.vm.id_buckets=16384", "model.fm.d_model=16", "model.fm.tower=[32]", "model.training.batch_size=512",
    # The FM's training recipe the tests were written for: its defaults (batch 256, a rate annealed to zero)
    # double its steps, and in the tests' one-epoch trainings the annealed rate halves the mean step, too
    # little for the quick evaluation's positive control (tests/integration/test_evaluate.py).
    "model.fm.batch_size=512", "model.fm.lr_schedule=constant",
    "precompute.candidates.lookback_hours=48", "precompute.candidates.per_user=20",
    "precompute.verifier.threshold=0.3", "precompute.ttl_hours=3",
    # The speculation the stage tests were written for: three rule sources, hand weights, the relevance
    # verifier. The default (learned blend + request verifier) needs a speculator checkpoint, which the
    # world does not have; tests/integration/test_default_speculation.py trains one and runs it.
    "precompute.candidates.sources=[cooc,trending,recent]", "precompute.candidates.blend=hand",
    "precompute.verifier.rule=relevance",
]
WORLD = [
    "synthetic.n_events=8000", "synthetic.n_users=120", "synthetic.n_items=150", "synthetic.days=10",
    "model.training.max_epochs=1", "precompute.verifier.budget=null", "precompute.model_batch_size=64",
    "spark.arrow_max_records_per_batch=200",
    "enrichment.knn_k=5", "enrichment.min_neighbors=1", "enrichment.knn_recall_sample=50",
]
# The world's models are trained on the events up to T0; its first hourly cycle runs at T0.
T0 = datetime(2026, 1, 8, 0, 0, tzinfo=timezone.utc)


def small_config(warehouse: Path | str, *extra: str) -> SolarisConfig:
    """Test config on ``warehouse``: the test Spark settings, ``SMALL``, then ``extra``."""
    return load_config(overrides=[*TEST_OVERRIDES, f"warehouse={warehouse}", *SMALL, *extra])


def world_config(warehouse: Path | str, *extra: str) -> SolarisConfig:
    """Config of a copy of the shared world: ``SMALL + WORLD``, then ``extra``."""
    return small_config(warehouse, *WORLD, *extra)


def set_args(overrides) -> list[str]:
    """``--set key=value`` arguments of the ``solaris`` CLI for a list of overrides."""
    return [arg for override in overrides for arg in ("--set", override)]


def world_argv(warehouse: Path | str, *args: str, extra: Sequence[str] = ()) -> list[str]:
    """Arguments of the real ``solaris`` CLI on a copy of the world: ``args``, its warehouse, the
    settings of :func:`world_config` (``SMALL + WORLD``, then ``extra``)."""
    return [*args, "--warehouse", str(warehouse), *set_args([*TEST_OVERRIDES, *SMALL, *WORLD, *extra])]


def run_solaris_main(argv: list[str]) -> subprocess.CompletedProcess:
    """``solaris <argv>`` through the CLI's own ``main``, in this process: its exit code, stdout and stderr.

    The entry point spark-submit and Airflow run, without the interpreter around it: the job's
    ``getOrCreate`` finds the test session, so no JVM starts (a JVM and a session per call made the
    CLI tests several times slower than the work they check). Tests whose premise is the process
    itself (spark-submit, exit status of a process, SIGKILL, concurrent writers) start real ones.
    The job's logging set-up (``basicConfig(force=True)`` onto the redirected stderr) is undone after.
    """
    from solaris import cli

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    out, err = io.StringIO(), io.StringIO()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = cli.main(list(argv))
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
    return subprocess.CompletedProcess(list(argv), code, out.getvalue(), err.getvalue())


def build_world(spark, warehouse: Path) -> SolarisConfig:
    """Synthetic events + FM and verifier checkpoints trained on the events up to ``T0``."""
    from solaris.ingest.sources import resolve_source
    from solaris.models.checkpoint import save_checkpoint
    from solaris.models.training import EventArrays, train_fm, train_vm
    from solaris.stages.ingest import ingest

    config = world_config(warehouse)
    ingest(spark, config, resolve_source("synthetic"), None, "ingest-syn")
    frame = (spark.read.format("delta").load(config.table_path("events"))
             .selectExpr("user_id", "item_id", "unix_seconds(ts) AS ts", "label").toPandas())
    events = EventArrays.from_frame(frame)
    train = events.select(events.ts <= int(T0.timestamp()))
    meta = {"as_of": T0.isoformat()}
    save_checkpoint(train_fm(train, config, 1).model, config.warehouse / "models" / "fm", meta)
    save_checkpoint(train_vm(train, config, 1).model, config.warehouse / "models" / "vm_baseline", meta)
    return config


def run_cycle(spark, config: SolarisConfig, as_of: datetime, stages=None):
    """The hourly cycle in-process: the pipeline's own :func:`solaris.pipeline.run_cycle`."""
    from solaris import pipeline

    # The shared test session was built from another config: use this world's Arrow batch size, as a
    # job process would (batch composition decides the last float bits of the FM's outputs).
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(config.spark.arrow_max_records_per_batch))
    return pipeline.run_cycle(spark, config, as_of, stages=stages)


def copy_world(source: Path, target: Path, *extra: str) -> SolarisConfig:
    """A private copy of a world warehouse (snapshot manifests re-pointed at the copy) and its config."""
    shutil.copytree(source, target)
    for manifest in (target / "snapshots").glob("*.json"):  # manifests name absolute table paths
        manifest.write_text(manifest.read_text().replace(str(source), str(target)))
    return world_config(target, *extra)
