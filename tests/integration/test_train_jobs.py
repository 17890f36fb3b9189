"""Training jobs end to end on real Spark + Delta: events -> checkpoints -> runs audit."""

from __future__ import annotations

from datetime import timedelta

import pytest

from solaris.ingest.sources import resolve_source
from solaris.jobs import train_fm, train_speculator, train_vm
from solaris.models.checkpoint import load_checkpoint
from solaris.stages.ingest import ingest
from tests.world import SMALL, set_args, small_config

# On top of tests.world.SMALL (whose precompute settings the training jobs do not read): 20 days of
# events, two epochs.
TRAIN = ["synthetic.n_events=6000", "synthetic.n_users=150", "synthetic.n_items=120", "synthetic.days=20",
         "model.training.max_epochs=2"]
AS_OF = "2026-01-15T00:00:00Z"


@pytest.fixture(scope="module")
def trained(spark, tmp_path_factory):
    config = small_config(tmp_path_factory.mktemp("train"), *TRAIN)
    ingest(spark, config, resolve_source("synthetic"), None, "ingest-syn")
    common = ["--warehouse", str(config.warehouse), "--master", "local[2]", *set_args([*SMALL, *TRAIN])]
    assert train_fm.main(["--as-of", AS_OF, *common]) == 0
    return config, common


def test_train_fm_and_vm_variants_write_loadable_checkpoints(spark, trained):
    config, common = trained
    fm, fm_meta = load_checkpoint(config.warehouse / "models" / "fm", "fm", 16)
    assert fm_meta["as_of"].startswith("2026-01-15") and fm_meta["data_range"][1] <= 1768435200
    assert 0 < fm_meta["validation"]["ne"] < 1.5 and len(fm_meta["epochs"]) >= 1
    assert train_vm.main(["--as-of", AS_OF, *common]) == 0
    assert train_vm.main(["--as-of", AS_OF, "--variant", "distilled", *common]) == 0
    _, vm_meta = load_checkpoint(config.warehouse / "models" / "vm_distilled", "vm")
    assert vm_meta["teacher_fm_version"] == fm_meta["version"]
    assert vm_meta["teacher"] == "cross-fit" and vm_meta["teacher_folds"] == 2  # the default soft labels
    assert train_vm.main(["--as-of", AS_OF, "--variant", "distilled", "--teacher", "in-sample",
                          "--output", "models/vm_distilled_in_sample", *common]) == 0
    _, in_sample_meta = load_checkpoint(config.warehouse / "models" / "vm_distilled_in_sample", "vm")
    assert in_sample_meta["teacher"] == "in-sample"
    runs = {row["job"]: row for row in spark.read.format("delta").load(config.table_path("runs")).collect()}
    assert {"train_fm", "train_vm_baseline", "train_vm_distilled"} <= set(runs)
    assert runs["train_fm"]["status"] == "success" and fm_meta["version"] in runs["train_fm"]["details"]


def test_distilled_refuses_an_fm_of_another_dimension(trained):
    config, common = trained
    models = config.warehouse / "models"
    before = sorted(p.name for p in models.rglob("*"))
    code = train_vm.main(["--as-of", AS_OF, "--variant", "distilled", "--output", "models/vm_d32", *common,
                          "--set", "model.embedding_dim=32"])
    assert code == 2
    assert sorted(p.name for p in models.rglob("*")) == before


def test_training_before_any_event_is_refused(trained):
    _, common = trained
    assert train_fm.main(["--as-of", "2020-01-01T00:00:00Z", *common]) == 2


def test_train_speculator_cli_writes_a_speculator_the_candidates_stage_loads(trained):
    """`solaris train-speculator` (the models and replay DAGs' task): a checkpoint + LATEST, usable from
    its as-of on, its run in `runs`; refused with nothing to learn from."""
    from solaris.precompute.speculator_store import load_speculator
    from solaris.timeutil import parse_utc

    config, common = trained
    assert train_speculator.main(["--as-of", AS_OF, *common, "--set", "precompute.speculator.ticks=2"]) == 0
    speculator = load_speculator(config, parse_utc(AS_OF))
    assert speculator is not None and len(speculator.ticks) == 2 and speculator.positives > 0
    ttl = timedelta(hours=config.precompute.ttl_hours)  # every label (requests within the TTL) is <= the as-of
    assert all(parse_utc(tick) + ttl <= parse_utc(AS_OF) for tick in speculator.ticks)
    assert load_speculator(config, parse_utc("2026-01-14T23:00:00Z")) is None  # not before its as-of
    assert train_speculator.main(["--as-of", "2020-01-01T00:00:00Z", *common]) == 2
