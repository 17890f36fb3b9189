"""TTL properties over random schedules of writes, expiries and reads on a real Delta table.

A seeded random schedule interleaves: writes of random (user, item) batches with random TTLs at a
moving clock (sometimes a *late* write stamped earlier than what is stored, like a backfill or the
slower of two concurrent runs) through the same MERGE the score job uses; expiries through the
expire job; reads through the resolver (``deltalake``, no Spark) and Spark. A plain-Python model
of the table is the oracle. Properties: no read ever returns an expired value; every read returns
the newest value written for its key; expiry deletes exactly the expired rows, never a live one;
VACUUM runs with Delta's retention check on.
"""

from __future__ import annotations

import random
import subprocess
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from solaris.pipeline import HOURLY_JOBS
from solaris.serving.resolver import TIER_PAIR, load_tier
from solaris.stages import expire as expire_job
from solaris.storage.table import WRITE_RULES, Table
from solaris.tick import StepContext
from solaris.timeutil import default_run_id
from tests.reliability.conftest import T0

DIM = 4
USERS, ITEMS = 5, 6


def _write(spark, path, rows):
    from pyspark.sql import functions as F

    frame = spark.createDataFrame(
        [(u, i, np.full(DIM, v, "<f4").tobytes(), 0.5, 0.5, "fm", "vm", run, "cooc", 1.0, c, e)
         for u, i, v, run, c, e in rows],
        "user_id long, item_id long, embedding binary, fm_score float, verifier_score float, fm_version string, "
        "verifier_version string, run_id string, source string, spec_score double, computed_at timestamp, "
        "expires_at timestamp",
    ).withColumn("expiry_bucket", F.date_trunc("hour", "expires_at"))
    # rows=None: Spark's MERGE
    Table.at(path, spark=spark, rule=WRITE_RULES["pair_embeddings"]).write(frame, "", rows=None)


def _naive(moment):
    return moment.replace(tzinfo=None)


@pytest.mark.parametrize("seed", [1, 2])
def test_random_schedules_never_serve_expired_and_never_delete_live(spark, make_config, seed):
    config = make_config("model.embedding_dim=4")
    path = config.table_path("pair_embeddings")
    rng = random.Random(seed)
    model: dict[tuple[int, int], tuple] = {}  # key -> (computed_at, expires_at, value, run_id)
    clock, value, deleted_live = T0, 0.0, 0
    for step in range(9):
        action = rng.choice(["write", "write", "write", "expire", "read"]) if step else "write"
        if action == "write":
            late = model and rng.random() < 0.25
            stamp = clock - timedelta(hours=rng.randint(1, 3)) if late else clock
            run_id = default_run_id("precompute", stamp)
            ttl = timedelta(hours=rng.choice([1, 2, 3, 6]))
            keys = rng.sample([(u, i) for u in range(1, USERS + 1) for i in range(1, ITEMS + 1)], rng.randint(3, 12))
            rows = []
            for key in keys:
                value += 1.0
                rows.append((*key, value, run_id, _naive(stamp), _naive(stamp + ttl)))
                stored = model.get(key)
                if stored is None or stamp > stored[0] or (stamp == stored[0] and run_id != stored[3]):
                    model[key] = (stamp, stamp + ttl, value, run_id)
            _write(spark, path, rows)
            clock += timedelta(hours=rng.choice([0, 1, 1, 2]))
        elif action == "expire":
            cutoff = clock + timedelta(minutes=rng.choice([0, 30, 90]))
            live_before = {k for k, v in model.items() if v[1] > cutoff}
            expire_job.run(StepContext(spark, config, cutoff, f"expire-{step}"),
                           options=expire_job.ExpireOptions(hourly_jobs=HOURLY_JOBS, vacuum=False))
            model = {k: v for k, v in model.items() if v[1] > cutoff}
            stored = {(r["user_id"], r["item_id"]) for r in spark.read.format("delta").load(path).collect()}
            deleted_live += len(live_before - stored)
            assert stored == set(model), f"step {step}: table keys differ from the model after expiry at {cutoff}"
        else:
            now = clock + timedelta(minutes=rng.randint(0, 400))
            tier = load_tier(path, None, DIM, ["user_id", "item_id"])
            users = np.array([u for u in range(1, USERS + 1) for _ in range(ITEMS)], dtype=np.int64)
            items = np.array([i for _ in range(USERS) for i in range(1, ITEMS + 1)], dtype=np.int64)
            from solaris.serving.resolver import Tier, TierTables

            tables = TierTables(DIM, tier, Tier.empty(DIM, False), Tier.empty(DIM, False))
            vectors, tiers, _ = tables.resolve(users, items, now.timestamp())
            for u, i, vector, code in zip(users, items, vectors, tiers):
                expected = model.get((int(u), int(i)))
                if expected is not None and expected[1] > now:
                    assert code == TIER_PAIR and vector[0] == expected[2], (
                        f"step {step}: ({u},{i}) not the newest value"
                    )
                else:
                    assert code == 0 and not vector.any(), f"step {step}: ({u},{i}) served although expired/absent"
            live = spark.read.format("delta").load(path).where(f"expires_at > TIMESTAMP '{now:%Y-%m-%d %H:%M:%S}'")
            assert {(r["user_id"], r["item_id"]) for r in live.collect()} == {k for k, v in model.items() if v[1] > now}
    assert deleted_live == 0

    # VACUUM runs with the retention check on (the 7-day guard), never with it disabled.
    expire_job.run(StepContext(spark, config, clock, "expire-vacuum"),
                   options=expire_job.ExpireOptions(hourly_jobs=HOURLY_JOBS, vacuum=True))
    assert spark.conf.get("spark.databricks.delta.retentionDurationCheck.enabled", "true") == "true"
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where("operation = 'VACUUM START'").collect()
    assert history and all(row["operationParameters"]["retentionCheckEnabled"] == "true" for row in history)


def test_no_code_disables_the_vacuum_retention_check():
    root = Path(__file__).resolve().parents[2]
    tracked = subprocess.run(["git", "ls-files", "*.py", "*.sh", "*.yaml", "*.sql"], cwd=root, capture_output=True,
                             text=True, check=True).stdout.split()
    offenders = [name for name in tracked if not name.startswith("tests/") and (
        "retentionDurationCheck" in (root / name).read_text() or "RETAIN 0" in (root / name).read_text().upper())]
    assert offenders == []
