"""Where the learned speculator lives: ``<root>/<version>/speculator.json`` and ``<root>/LATEST``.

Written by ``solaris train-speculator``, read by ``solaris candidates`` at every run (and by the
evaluation and benchmarks). Plain files, no Spark: one writer, atomic renames, and a reader that
refuses a speculator trained after the run's as-of (the point-in-time rule).
"""

from __future__ import annotations

import logging
import os
from datetime import datetime
from pathlib import Path

from solaris.config import SolarisConfig
from solaris.precompute.speculation import Speculator
from solaris.timeutil import parse_utc

log = logging.getLogger("solaris.candidates")

SPECULATOR_FILE = "speculator.json"


def load_speculator(config: SolarisConfig, as_of: datetime) -> Speculator | None:
    """The learned blend / request models usable at ``as_of``: trained at or before it, else None.

    A checkpoint trained after ``as_of`` (a backfill of an older hour) is not used: its weights saw
    events after the run's as-of, which would break the point-in-time rule.
    """
    # here, not at the top: the checkpoint module loads torch, which a speculation run needs only for this
    from solaris.models.checkpoint import resolve_checkpoint

    folder = resolve_checkpoint(config.resolve_under_warehouse(config.precompute.candidates.speculator_checkpoint))
    if not (folder / SPECULATOR_FILE).is_file():
        return None
    speculator = Speculator.from_json((folder / SPECULATOR_FILE).read_text())
    if parse_utc(speculator.as_of) > as_of:
        log.warning("speculator %s was trained as of %s, after %s: not used", speculator.version, speculator.as_of,
                    as_of)
        return None
    return speculator


def save_speculator(config: SolarisConfig, speculator: Speculator) -> Path:
    """Write ``<root>/<version>/speculator.json`` and point ``<root>/LATEST`` at it (atomic renames)."""
    root = Path(config.resolve_under_warehouse(config.precompute.candidates.speculator_checkpoint))
    folder = root / speculator.version
    folder.mkdir(parents=True, exist_ok=True)
    staging = folder / f".{SPECULATOR_FILE}.tmp"
    staging.write_text(speculator.to_json())
    os.replace(staging, folder / SPECULATOR_FILE)
    pointer = root / ".LATEST.tmp"
    pointer.write_text(speculator.version + "\n")
    os.replace(pointer, root / "LATEST")
    return folder
