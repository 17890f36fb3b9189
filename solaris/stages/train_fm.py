"""Train the foundation model on events up to ``--as-of`` and save a versioned checkpoint.

Training examples are point-in-time: each event's features come from the user's events strictly
before it; the validation slice (early stopping) is the latest part of the window by time.

    solaris train-fm --as-of 2000-12-01T00:00:00Z
    spark-submit --jars "$(ls jars/*.jar | paste -sd,)" jobs/train_fm.py --as-of 2000-12-01T00:00:00Z
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from solaris.models.checkpoint import save_checkpoint
from solaris.models.training import EventArrays, train_fm, training_metadata
from solaris.storage.audit import RunRecord
from solaris.storage.events import Events

if TYPE_CHECKING:  # pragma: no cover
    from datetime import datetime
    from pathlib import Path

    import torch
    from pyspark.sql import SparkSession

    from solaris.config import SolarisConfig

log = logging.getLogger("solaris.train_fm")


def run(spark: SparkSession, config: SolarisConfig, as_of: datetime, run_id: str, *, seed: int, output: Path,
        device: str | torch.device) -> tuple[Path, dict[str, float]]:
    """Train on the events up to ``as_of``, save the checkpoint under ``output``; its folder and validation."""
    record = RunRecord(run_id=run_id, job="train_fm", as_of=as_of)
    events = EventArrays.from_frame(Events.of(spark, config).training(as_of))
    log.info("training FM on %d events (%d users) up to %s on %s", len(events), len(set(events.user_id)), as_of,
             device)
    result = train_fm(events, config, seed, device=device)
    folder = save_checkpoint(result.model, output, training_metadata("fm", as_of, seed, events, result, config=config))
    record.rows_in, record.rows_out = len(events), 1
    record.details = {"checkpoint": str(folder), "version": folder.name, **result.validation}
    record.write(spark, config, "success")
    return folder, result.validation
