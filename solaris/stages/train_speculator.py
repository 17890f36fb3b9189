"""Learn the speculation blend and the request verifier from past ticks (events <= --as-of only).

At ``--as-of T``: the busiest hours (most distinct requesters) of the ``precompute.speculator.days``
days before ``T`` whose TTL window ends by ``T`` become training ticks. At each tick ``t`` the
candidate sources of ``sql/candidates.sql`` run exactly as the hourly stage would (events <= t),
and every proposed pair is labelled from events in ``(t, t + horizon]`` (blend) and
``(t, t + ttl]`` (request verifier), all <= T. Unrequested pairs are hash-sampled at
``negative_rate`` and reweighted. Two weighted logistic regressions over the source scores and the
user's activity (``solaris.precompute.speculation.fit_logistic``, deterministic) are saved as
``models/speculator/<version>/speculator.json`` and ``LATEST``; ``candidates`` loads them.

    solaris train-speculator --as-of 2000-11-01T00:00:00Z
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, cast

from solaris.precompute.speculation import FEATURES, Speculator, busiest_ticks, fit_logistic
from solaris.precompute.speculator_store import load_speculator, save_speculator
from solaris.runtime import JobInputError
from solaris.stages.candidates import prepare_views
from solaris.storage.audit import RunRecord
from solaris.storage.events import Events

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    import pandas as pd
    from pyspark.sql import SparkSession

    from solaris.config import SolarisConfig

log = logging.getLogger("solaris.train_speculator")


def requesters_per_hour(spark: SparkSession, config: SolarisConfig, start: datetime, end: datetime) -> dict:
    """Distinct users with an event in ``(t, t + 1h]`` for every hourly ``t`` in ``[start, end)``."""
    from pyspark.sql import functions as F

    events = Events.of(spark, config).window(since=start, until=end + timedelta(hours=1))
    rows = (events
            .select("user_id", F.date_trunc("hour", F.col("ts") - F.expr("INTERVAL 1 MICROSECOND")).alias("tick"))
            .where(F.col("tick") < F.lit(end))
            .groupBy("tick").agg(F.countDistinct("user_id").alias("n")).collect())
    return {row["tick"].replace(tzinfo=start.tzinfo): int(row["n"]) for row in rows}


def labelled_features(spark: SparkSession, config: SolarisConfig, tick: datetime, negative_rate: float,
                      tick_number: int) -> pd.DataFrame:
    """The tick's candidate features with labels ``in_horizon`` / ``in_ttl`` and a sample ``weight``."""
    from pyspark.sql import functions as F

    pre = config.precompute
    prepared = prepare_views(spark, config, tick, speculator=None)
    later = Events.of(spark, config).window(since=tick, until=tick + timedelta(hours=pre.ttl_hours))
    labels = later.groupBy("user_id", "item_id").agg(
        F.max(F.col("ts") <= F.lit(tick + timedelta(hours=pre.horizon_hours))).alias("in_horizon"))
    rows = (spark.table("features").join(labels, ["user_id", "item_id"], "left")
            .select("user_id", "item_id", *FEATURES, F.coalesce("in_horizon", F.lit(False)).alias("in_horizon"),
                    F.col("in_horizon").isNotNull().alias("in_ttl")))
    # Sample on the executors: positives all, negatives by a hash of the pair (same pairs -> same sample).
    rate = float(negative_rate)
    sampled = rows.where(F.col("in_ttl") | (F.abs(F.xxhash64("user_id", "item_id", F.lit(tick_number))) % 1_000_000
                                           < F.lit(int(rate * 1_000_000))))
    try:
        frame = cast("pd.DataFrame", sampled.toPandas())
    finally:
        prepared.release()
    frame["weight"] = 1.0
    frame.loc[~frame["in_ttl"], "weight"] = 1.0 / rate
    return frame.sort_values(["user_id", "item_id"], kind="stable").reset_index(drop=True)


def fit(spark: SparkSession, config: SolarisConfig, as_of: datetime) -> Speculator:
    import numpy as np
    import pandas as pd

    pre, training = config.precompute, config.precompute.speculator
    # a tick's TTL window (and the hour its requesters are counted over) must end by as_of
    latest = as_of - timedelta(hours=max(pre.ttl_hours, pre.horizon_hours, 1.0))
    start = latest - timedelta(days=training.days)
    counts = requesters_per_hour(spark, config, start, latest + timedelta(microseconds=1))
    counts = {tick: n for tick, n in counts.items() if tick <= latest}
    ticks = busiest_ticks(counts, training.ticks)
    if not ticks:
        raise JobInputError(f"no requests between {start} and {latest}: nothing to learn the speculator from")
    frames = [labelled_features(spark, config, tick, training.negative_rate, number) for number, tick in
              enumerate(ticks)]
    data = pd.concat(frames, ignore_index=True)
    x = data[list(FEATURES)].to_numpy(np.float64)
    blend = fit_logistic(x, data["in_horizon"].to_numpy(), data["weight"].to_numpy(), training.l2)
    request = fit_logistic(x, data["in_ttl"].to_numpy(), data["weight"].to_numpy(), training.l2)
    speculator = Speculator(as_of=as_of.isoformat(), blend=blend, request=request,
                            ticks=[tick.isoformat() for tick in ticks], rows=len(data),
                            positives=int(data["in_ttl"].sum()))
    log.info("speculator %s from %d ticks, %d rows (%d requested within the TTL): blend %s", speculator.version,
             len(ticks), len(data), speculator.positives, blend.weights)
    return speculator


def run(spark: SparkSession, config: SolarisConfig, as_of: datetime, run_id: str) -> tuple[Path, Speculator]:
    """Fit at ``as_of``, save under the speculator checkpoint and record the run; the folder and the speculator."""
    speculator = fit(spark, config, as_of)
    folder = save_speculator(config, speculator)
    RunRecord(run_id=run_id, job="train_speculator", as_of=as_of, rows_in=speculator.rows, rows_out=1,
              details={"version": speculator.version, "ticks": speculator.ticks, "positives": speculator.positives,
                       "blend": speculator.blend.weights, "request": speculator.request.weights}
              ).write(spark, config, "success")
    return folder, speculator


def uses_speculator(config: SolarisConfig) -> bool:
    """True when candidates or score would load a speculator: the learned blend or the request rule."""
    return config.precompute.candidates.blend == "learned" or config.precompute.verifier.rule == "request"


FINGERPRINT_FILE = "fingerprint"


def speculator_for(spark: SparkSession, config: SolarisConfig, target: SolarisConfig, as_of: datetime,
                   fingerprint: str) -> str | None:
    """Version of the speculator that ``target``'s replay from ``as_of`` uses; None when it uses none.

    Fit on ``config``'s events (<= ``as_of``) and saved under ``target``'s speculator checkpoint,
    unless the checkpoint's LATEST already carries ``fingerprint`` (same settings, as-of and data).
    Why this exists: ``solaris evaluate`` replays each window in its own warehouse and must give it
    the speculator the schedule would have had at the window's start, trained before it. A window
    with no requests in the week before it gets none (the stages then fall back to the hand blend
    and the relevance rule, and say so in their logs).
    """
    if not uses_speculator(target):
        return None
    root = Path(target.resolve_under_warehouse(target.precompute.candidates.speculator_checkpoint))
    if "retrieval" in target.precompute.candidates.sources:
        # the retrieval source represents users with the FM: the target's (trained before as_of), never
        # whatever the source warehouse's LATEST is
        fm_root = str(target.resolve_under_warehouse(target.precompute.fm_checkpoint))
        config = config.model_copy(update={"precompute": config.precompute.model_copy(
            update={"fm_checkpoint": fm_root})})
    existing = load_speculator(target, as_of)
    if existing is not None:
        marker = root / existing.version / FINGERPRINT_FILE
        if marker.is_file() and marker.read_text().strip() == fingerprint:
            log.info("speculator %s reused (fingerprint %s)", existing.version, fingerprint)
            return existing.version
    try:
        speculator = fit(spark, config, as_of)
    except JobInputError as error:
        # the stages must then fall back as the caller's fingerprint says: no older speculator may stay LATEST
        (root / "LATEST").unlink(missing_ok=True)
        log.warning("no speculator for the replay from %s: %s", as_of, error)
        return None
    folder = save_speculator(target, speculator)
    staging = folder / f".{FINGERPRINT_FILE}.tmp"
    staging.write_text(fingerprint + "\n")
    staging.replace(folder / FINGERPRINT_FILE)
    return speculator.version
