"""Train a vertical model (VM) variant on events up to ``--as-of``; the baseline is the verifier.

Variants: ``baseline`` (cheap real-time features only; used as the verifier by precompute) and
``distilled`` (labels mixed with the FM's soft labels, weight/temperature from
``model.distillation``). The soft labels are cross-fitted by default (``model.distillation.teacher``):
every example is labelled by an FM of the configured architecture trained on the other time folds, so
the student learns from what the FM predicts on unseen traffic rather than from its partly
memorised in-sample logits; ``--teacher in-sample`` uses the ``--fm`` checkpoint's own logits.
The SOLARIS variants, which take served FM embeddings as
features, are trained by the evaluation, which replays the serving path to produce them.

    solaris train-vm --as-of 2000-12-01T00:00:00Z
    solaris train-vm --as-of 2000-12-01T00:00:00Z --variant distilled --fm models/fm
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, cast

from solaris.models.checkpoint import load_checkpoint, save_checkpoint
from solaris.models.training import EventArrays, distillation_teacher_logits, train_vm, training_metadata
from solaris.storage.audit import RunRecord
from solaris.storage.events import Events

if TYPE_CHECKING:  # pragma: no cover
    from datetime import datetime
    from pathlib import Path

    from pyspark.sql import SparkSession

    from solaris.config import SolarisConfig
    from solaris.models.fm import FoundationModel

log = logging.getLogger("solaris.train_vm")


def load_teacher(config: SolarisConfig, fm: str) -> tuple[FoundationModel, str]:
    """The distilled variant's FM teacher and its version (called before any Spark work: a bad checkpoint is
    refused first)."""
    teacher, meta = load_checkpoint(config.resolve_under_warehouse(fm), "fm", config.model.embedding_dim)
    return cast("FoundationModel", teacher), str(meta["version"])


def run(spark: SparkSession, config: SolarisConfig, as_of: datetime, run_id: str, *, seed: int, variant: str,
        output: Path, teacher: tuple[FoundationModel, str] | None = None) -> tuple[Path, dict[str, float]]:
    """Train ``variant`` on the events up to ``as_of`` (with ``teacher``'s soft labels when given), save the
    checkpoint under ``output``; its folder and validation."""
    record = RunRecord(run_id=run_id, job=f"train_vm_{variant}", as_of=as_of)
    events = EventArrays.from_frame(Events.of(spark, config).training(as_of))
    features = events.features(config.model.history_length)
    teacher_logits, teacher_info = None, dict[str, object]()
    if teacher is not None:
        teacher_logits, teacher_info = distillation_teacher_logits(events, config, seed, features=features,
                                                                   served_fm=teacher[0])
    log.info("training VM[%s] on %d events up to %s", variant, len(events), as_of)
    result = train_vm(events, config, seed, variant, teacher_logits=teacher_logits, features=features)
    metadata = training_metadata(f"vm_{variant}", as_of, seed, events, result, config=config,
                                 models={} if teacher is None else {"teacher_fm": teacher[1]},
                                 teacher_fm_version=None if teacher is None else teacher[1], **teacher_info)
    folder = save_checkpoint(result.model, output, metadata)
    record.rows_in, record.rows_out = len(events), 1
    record.details = {"checkpoint": str(folder), "version": folder.name, **result.validation}
    record.write(spark, config, "success")
    return folder, result.validation
