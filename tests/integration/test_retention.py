"""Retention on real Spark + Delta: after the hourly expire the trimmed tables hold nothing older
than their retention, and the stages that read them after the expire (the tick's hit rate, the user
and item aggregates over the log's window) get exactly what they get without any trimming.

Why windows of one hour: the served world holds one tick (T0); with a second tick at T0 + 1h and
retentions equal to the readers' windows, the expire at T0 + 1h deletes the T0 rows at the very
boundary the readers stop at, so a retention off by one row would show.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict
from datetime import timedelta

import pandas as pd
import pytest

from solaris.pipeline import HOURLY_JOBS, run_ids
from solaris.runtime import JobInputError
from solaris.stages import candidates as candidates_stage
from solaris.stages import expire as expire_stage
from solaris.stages import hit_rate as hit_rate_stage
from solaris.stages import item_aggregates as item_aggregates_stage
from solaris.stages import score as score_stage
from solaris.stages import user_aggregates as user_aggregates_stage
from solaris.tick import StepContext
from tests.conftest import table_checksum
from tests.world import T0, copy_world, world_config

T1 = T0 + timedelta(hours=1)
# Readers' windows of one hour (horizon half an hour), so the served world's T0 rows fall out of them at T1.
WINDOWS = ["enrichment.window_hours=1", "enrichment.item_window_hours=1", "precompute.horizon_hours=0.5",
           "evaluation.tail_hours=0.5", "evaluation.eval_hours=0.5", "enrichment.item_neighbors=0"]
# Each retention the least its readers allow (validated), or long enough that nothing is trimmed.
TIGHT = ["retention.pair_embeddings_log_hours=1", "retention.candidates_hours=0.75", "retention.runs_hours=1",
         "retention.quarantine_hours=1"]
LOOSE = ["retention.pair_embeddings_log_hours=1000", "retention.candidates_hours=1000", "retention.runs_hours=1000",
         "retention.quarantine_hours=1000"]
COLUMNS = {"candidates": "as_of", "pair_embeddings_log": "computed_at", "quarantine": "seen_at", "runs": "as_of"}


@pytest.fixture(scope="module")
def scored_at_t1(served_template, tmp_path_factory):
    """The served world (a cycle at T0) plus the precompute of T1 up to its expire: candidates and score."""
    config = copy_world(served_template, tmp_path_factory.mktemp("retention") / "scored", *WINDOWS, *TIGHT)
    return config


def _readers(spark, config):
    """The stages that read the trimmed tables after the tick's expire, and what they wrote."""
    ids = run_ids(T1)
    hits = hit_rate_stage.run(StepContext(spark, config, T1, ids["precompute"]),
                              options=hit_rate_stage.HitRateOptions())
    users = user_aggregates_stage.run(StepContext(spark, config, T1, ids["enrichment"]),
                                      options=user_aggregates_stage.UserAggregatesOptions())
    items = item_aggregates_stage.run(StepContext(spark, config, T1, ids["enrichment"]),
                                      options=item_aggregates_stage.ItemAggregatesOptions())
    tables = {name: table_checksum(config.table_path(name)) for name in ("user_embeddings", "item_embeddings")}
    return asdict(hits), asdict(users), asdict(items), tables


def _oldest(config, name):
    from deltalake import DeltaTable

    rows = DeltaTable(config.table_path(name)).to_pandas()
    if name == "runs":
        rows = rows[rows["job"].isin(HOURLY_JOBS)]
    oldest = rows[COLUMNS[name]].min()
    return (oldest if oldest is pd.NaT or oldest.tzinfo else oldest.tz_localize("UTC")), len(rows)


def test_expire_trims_to_the_retention_and_the_later_readers_see_no_difference(spark, scored_at_t1, tmp_path):
    ids = run_ids(T1)
    candidates_stage.run(StepContext(spark, scored_at_t1, T1, ids["precompute"]),
                         options=candidates_stage.CandidatesOptions())
    score_stage.run(StepContext(spark, scored_at_t1, T1, ids["precompute"]), options=score_stage.ScoreOptions())
    loose_dir = tmp_path / "loose"
    shutil.copytree(scored_at_t1.warehouse, loose_dir)
    tight, loose = scored_at_t1, world_config(loose_dir, *WINDOWS, *LOOSE)

    trimmed = expire_stage.run(StepContext(spark, tight, T1, ids["precompute"]),
                               options=expire_stage.ExpireOptions(hourly_jobs=HOURLY_JOBS, vacuum=True))
    untouched = expire_stage.run(StepContext(spark, loose, T1, ids["precompute"]),
                                 options=expire_stage.ExpireOptions(hourly_jobs=HOURLY_JOBS, vacuum=False))
    # T0's candidates, log rows and hourly audit rows are past the tight retention; nothing is past the loose one
    assert trimmed.candidates.deleted > 0 and trimmed.pair_embeddings_log.deleted > 0 and trimmed.runs.deleted > 0
    assert trimmed.vacuumed and untouched.candidates.deleted == untouched.pair_embeddings_log.deleted == 0
    assert untouched.runs.deleted == 0
    for rule in expire_stage.retention_rules(tight, HOURLY_JOBS):
        if rule.table == "quarantine" and not (tight.warehouse / "quarantine").exists():
            continue
        oldest, rows = _oldest(tight, rule.table)
        assert rows == 0 or oldest > rule.cutoff(T1), rule.table
    from deltalake import DeltaTable

    audit = DeltaTable(tight.table_path("runs")).to_pandas()
    assert "ingest" in set(audit["job"])  # rows of jobs outside the hourly chain are kept

    # what reads the trimmed tables after the expire gets the same as without trimming
    assert _readers(spark, tight) == _readers(spark, loose)

    # a rerun of the hour's expire deletes nothing more and commits nothing to the trimmed tables
    versions = {name: DeltaTable(tight.table_path(name)).version() for name in ("candidates", "pair_embeddings_log")}
    again = expire_stage.run(StepContext(spark, tight, T1, ids["precompute"]),
                             options=expire_stage.ExpireOptions(hourly_jobs=HOURLY_JOBS, vacuum=False))
    assert (again.candidates.deleted, again.pair_embeddings_log.deleted, again.runs.deleted) == (0, 0, 0)
    assert versions == {name: DeltaTable(tight.table_path(name)).version() for name in versions}

    # scoring T0 again now that its candidates are gone is refused, nothing written (not a silent empty hour)
    pairs_version = DeltaTable(tight.table_path("pair_embeddings")).version()
    with pytest.raises(JobInputError, match="retention.candidates_hours=0.75 h"):
        score_stage.run(StepContext(spark, tight, T0, run_ids(T0)["precompute"]), options=score_stage.ScoreOptions())
    assert DeltaTable(tight.table_path("pair_embeddings")).version() == pairs_version
    score_stage.run(StepContext(spark, loose, T0, run_ids(T0)["precompute"]),
                    options=score_stage.ScoreOptions())  # the untrimmed twin still scores its hour
