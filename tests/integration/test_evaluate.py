"""``solaris evaluate`` on a small synthetic warehouse: the quick mode through the CLI, and leakage.

The leakage test shuffles the labels of the scored window before anything runs: a model can then
only beat chance (AUC 0.5) if a request's own label reaches its features (history, counters or
the served FM embedding). The quick-mode run on the real labels is the positive control: the
same pipeline does find signal when there is some.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from solaris.drivers.evaluate import QUICK_OVERRIDES
from solaris.drivers.evaluate import run as evaluate
from solaris.evaluation.freshness import extra_variants
from solaris.evaluation.protocol import VARIANTS
from solaris.ingest.sources import resolve_source
from solaris.stages.ingest import ingest
from tests.world import SMALL, TEST_OVERRIDES, set_args, small_config

ROOT = Path(__file__).resolve().parents[2]
# On top of tests.world.SMALL: 3 dense days (the evaluation trains its own models on them).
EVALUATE = ["synthetic.n_events=30000", "synthetic.n_users=300", "synthetic.n_items=200", "synthetic.days=3",
            "precompute.model_batch_size=256"]
T0 = datetime(2026, 1, 3, 12, tzinfo=timezone.utc)
# On top of the quick preset, in both the CLI run and the in-process one (their checkpoints must match)
TAIL = "evaluation.tail_hours=1"
# the freshness curve's variants at the default ages (FM at 1, 5, 15, 60 min; the oracle at 0, 1, 5 min)
CURVE = set(extra_variants((0, 1, 5, 15, 60), (0, 1, 5)))


def _config(warehouse: Path, *extra: str):
    return small_config(warehouse, *EVALUATE, *extra)


@pytest.fixture(scope="module")
def template(spark, tmp_path_factory) -> Path:
    warehouse = tmp_path_factory.mktemp("evaluate") / "template"
    ingest(spark, _config(warehouse), resolve_source("synthetic"), None, "ingest-syn")
    return warehouse


def _variants(metrics_path: Path) -> dict:
    return json.loads(metrics_path.read_text())["variants"]


def _cli(warehouse: Path) -> list[str]:
    """The quick evaluation through the CLI on ``warehouse``, the tests' settings on top of the preset."""
    return [sys.executable, "-m", "solaris.cli", "evaluate", "--as-of", "2026-01-03T12:00:00Z", "--quick",
            "--set", TAIL, "--warehouse", str(warehouse),
            *set_args([*TEST_OVERRIDES, *SMALL, *EVALUATE])]


@pytest.fixture(scope="module")
def first_run(template, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One quick evaluation on the real labels (the CLI, a process of its own), shared by the tests below:
    each copies the warehouse it leaves (events, checkpoints, replay, results) before changing anything."""
    warehouse = tmp_path_factory.mktemp("evaluate") / "first-run"
    shutil.copytree(template, warehouse)
    done = subprocess.run(_cli(warehouse), cwd=ROOT, capture_output=True, text=True, timeout=1200, env={**os.environ})
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return warehouse, done


def test_quick_mode_through_the_cli_reports_every_variant_and_resumes(first_run, tmp_path):
    first, done = first_run
    warehouse = tmp_path / "warehouse"
    shutil.copytree(first, warehouse)
    command = _cli(warehouse)
    out = warehouse / "evaluation" / "t0-20260103T120000Z"
    for name in ("metrics.json", "report.md", "transfer_ratio.png", "coverage_over_time.png", "hit_rate.png",
                 "ne_vs_coverage.png", "freshness.png"):
        assert (out / name).is_file(), name
    summary = json.loads((out / "metrics.json").read_text())
    new = {"vm_baseline_pretrained", "vm_distilled_pretrained", "solaris_placebo", "solaris_oracle", "fm_at_tick"}
    assert set(VARIANTS) == {
        "fm", "vm_baseline", "vm_distilled", "solaris_none", "solaris_tier1", "solaris_tiers1-2", "solaris_tiers1-3",
        "solaris_tiers1-4", "solaris_tiers1-5", "solaris_tiers1-6", "solaris_distilled", *new}
    assert set(summary["variants"]) == set(VARIANTS) | CURVE
    assert CURVE == {"fm_age1m", "fm_age5m", "fm_age15m", "fm_age60m", "solaris_oracle_age0m", "solaris_oracle_age1m",
                     "solaris_oracle_age5m"}
    assert all(set(result["variants"]) == set(VARIANTS) | CURVE for result in summary["per_seed"])
    # the freshness curve: the FM by age and at the tick, the oracle by age and at the tick, each with NE and TR
    curve = summary["freshness"]["pooled"]
    points = {point["variant"]: point for point in curve["points"]}
    assert set(points) == CURVE | {"fm", "fm_at_tick", "solaris_oracle"}
    assert [points[f"fm_age{age}m"]["age_minutes"] for age in (1, 5, 15, 60)] == [1, 5, 15, 60]
    assert 0 < points["fm_at_tick"]["age_minutes"] <= 60 and points["solaris_oracle"]["at_tick"]
    for name, point in points.items():
        assert point["ne"]["low"] <= point["ne"]["estimate"] <= point["ne"]["high"], name
        assert name == "fm" or point["transfer_ratio"]["estimate"] is not None, name
    assert curve["vm_baseline"]["estimate"] and curve["vm_distilled"]["estimate"]
    assert points["fm"]["ne"] == summary["intervals"]["pooled"]["ne"]["fm"]  # the upper bound placed, not recomputed
    comparisons = summary["intervals"]["pooled"]["comparisons"]
    for key in ("solaris_tiers1-6-vs-solaris_placebo", "solaris_tiers1-6-vs-solaris_none",
                "solaris_oracle-vs-vm_distilled", "solaris_oracle-vs-solaris_placebo",
                "vm_baseline-vs-vm_baseline_pretrained", "solaris_tiers1-6-vs-vm_distilled"):
        variant, reference = key.split("-vs-")
        assert comparisons[key]["variant"] == variant and comparisons[key]["reference"] == reference, key
        assert comparisons[key]["ne_difference"]["estimate"] is not None, key
    assert summary["variants"]["fm"]["auc"]["mean"] > 0.55  # positive control: real labels carry signal
    provenance = summary["provenance"]  # where these figures came from
    assert provenance["code"].startswith("git:") and len(provenance["config_digest"]) == 16
    assert provenance["events_digest"] and provenance["packages"]["torch"]
    assert {key.split()[-1] for key in provenance["models"]} >= {"fm", "verifier", "vm_baseline", "vm_distilled"}
    # per serving tier: the requests it answered, shares summing to the served share (tier 0 is no tier)
    strata = summary["intervals"]["per_tier"]
    assert strata and sum(cell["share"] for cell in strata.values()) <= 1 + 1e-9
    assert all("solaris_tiers1-6-vs-solaris_placebo" in cell["ne_difference"] for cell in strata.values())
    coverage = summary["coverage"]
    cumulative = [coverage[key]["mean"] for key in ("tiers1", "tiers1-2", "tiers1-3", "tiers1-4", "tiers1-5",
                                                       "tiers1-6")]
    assert 0 < cumulative[0] and cumulative == sorted(cumulative) and cumulative[-1] <= 1
    # two seeds (the quick preset) share one FM, verifier and replay; each trains its own VMs
    seed, other = summary["per_seed"]
    assert other["replay"]["seed"] == seed["replay"]["seed"] == 42 and other["replay"]["ticks_run"] == 0
    assert other["models"]["versions"]["fm"] == seed["models"]["versions"]["fm"]
    assert other["models"]["versions"]["vm_baseline"] != seed["models"]["versions"]["vm_baseline"]
    assert sorted(p.name for p in (out / "20260103T120000Z").iterdir()) == ["replay", "seed-42", "seed-43"]
    assert len(seed["per_tick"]) == 3 and seed["requests"]["scored"] > 300  # 1 h tail + 2 h scored, hourly
    assert seed["cost"]["fm_passes_per_request"] > 0
    assert "FM vs VM baseline" in done.stdout and "users resampled" in done.stdout and "coverage tier1" in done.stdout

    assert summary["requests"]["scored"] == seed["requests"]["scored"] and summary["requests"]["users"] > 20
    pooled = summary["intervals"]["pooled"]
    assert pooled["ne"]["fm"]["low"] <= pooled["ne"]["fm"]["estimate"] <= pooled["ne"]["fm"]["high"]
    verdict = (out / "report.md").read_text().split("## Set-up")[0]
    assert "## Verdict" in verdict and "VM+SOLARIS tiers 1-6 vs VM distilled: \u0394NE = " in verdict
    assert "## The freshness curve" in verdict and "| request \u2212 60 min |" in verdict
    assert "VM+SOLARIS oracle (exact pair for every request) vs VM distilled: \u0394NE = " in verdict
    with np.load(out / "20260103T120000Z" / "seed-42" / "scored.npz") as scored:
        assert scored["served_tier"].shape == scored["fm"].shape

    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ})
    assert again.returncode == 0 and "already evaluated" in again.stderr  # a finished seed is kept, not redone
    assert "spark session" not in again.stderr  # every seed reused: the events read without Spark, no JVM started
    assert "spark session" in done.stderr  # (the line it would log, as the first run did)
    assert _variants(out / "metrics.json") == summary["variants"]


def test_the_evaluation_reads_the_events_without_spark_as_spark_would(spark, template, tmp_path):
    """The evaluation's driver read of the events (deltalake) gives the frame Spark's read gives, row
    for row once sorted as the evaluation sorts them: same point-in-time cut, ts in whole seconds."""
    from solaris.models.training import EventArrays
    from solaris.storage.events import Events

    def same(config, as_of) -> EventArrays:
        on_driver = Events.of(None, config).pandas(as_of)  # no session: the driver
        with_spark = EventArrays.from_frame(Events.of(spark, config)._with_spark(as_of, None))
        without = EventArrays.from_frame(on_driver)
        for name in ("user_id", "item_id", "ts", "label", "feedback"):
            # bit-exact: the same stored values read two ways, no arithmetic
            np.testing.assert_array_equal(getattr(without, name), getattr(with_spark, name), err_msg=name)
        return without

    config = _config(template)
    for as_of in (T0, datetime(9999, 12, 31, tzinfo=timezone.utc)):
        assert len(same(config, as_of)) > 0
    # the edges, by hand: an event at the as-of is in, a microsecond later is out; stamps floor to seconds
    edges = _config(tmp_path / "edges")
    moments = {1: T0, 2: T0 - timedelta(microseconds=1), 3: T0 - timedelta(seconds=0.5),
               4: T0 + timedelta(microseconds=1), 5: T0 + timedelta(seconds=0.5)}
    spark.createDataFrame([(user, 10 + user, moment, 1.0, None if user == 1 else 4.0)
                           for user, moment in moments.items()],
                          "user_id long, item_id long, ts timestamp, label float, rating double") \
        .write.format("delta").save(edges.table_path("events"))
    cut = same(edges, T0)
    seconds = int(T0.timestamp())
    assert sorted(zip(cut.user_id.tolist(), cut.ts.tolist())) == [(1, seconds), (2, seconds - 1), (3, seconds - 1)]
    assert cut.feedback is not None and sorted(zip(cut.user_id.tolist(), cut.feedback.tolist())) == [(1, 1), (2, 5),
                                                                                                     (3, 5)]
    assert Events.of(None, _config(tmp_path / "no-such-warehouse"))._on_driver(T0, None) is None


def test_shuffled_labels_in_the_scored_window_give_chance_auc_for_every_variant(spark, first_run, tmp_path, caplog):
    """Leakage: the scored window's labels shuffled, every variant must fall to chance.

    Run on a copy of the real-labels run: the events up to T0 are unchanged, so the checkpoints (FM,
    verifier, speculator, VMs, teacher) are reused by fingerprint, which is also the check that an edit
    of the scored window alone is recomputed (replay and results), never served from the old result,
    and that a run with fewer seeds reports only its own. (A changed setting recomputes the same way:
    the settings are part of each step's fingerprint, tests/unit/test_evaluation.py; the baseline's
    fine-tune repeats bit for bit on the same warm start and seed, same file.)
    """
    first, _ = first_run
    warehouse = tmp_path / "warehouse"
    shutil.copytree(first, warehouse)
    config = _config(warehouse, *QUICK_OVERRIDES, "evaluation.seeds=1", TAIL)
    events_path = config.table_path("events")
    events = spark.read.format("delta").load(events_path)
    frame = events.toPandas()
    end = T0 + timedelta(hours=config.evaluation.eval_hours)
    naive = lambda t: t.replace(tzinfo=None)  # noqa: E731  (toPandas gives session-time (UTC) naive stamps)
    window = ((frame["ts"] > naive(T0)) & (frame["ts"] <= naive(end))).to_numpy()
    assert window.sum() > 300
    labels = frame["label"].to_numpy().copy()
    labels[window] = np.random.default_rng(7).permutation(labels[window])
    frame["label"] = labels
    spark.createDataFrame(frame, schema=events.schema).write.format("delta").mode("overwrite").save(events_path)

    with caplog.at_level(logging.INFO, logger="solaris.evaluate"):
        summary = evaluate(spark, config, T0)
    logged = caplog.text
    assert "already evaluated" not in logged and "recomputing" in logged
    assert "reusing fm checkpoint" in logged and "tables dropped, replaying" in logged
    out = warehouse / "evaluation" / "t0-20260103T120000Z"
    assert json.loads((out / "metrics.json").read_text())["seeds"] == [42] == list(summary.seeds)
    seed = summary.per_seed[0]
    assert set(seed.models["reused"]) == {"fm", "verifier", "vm_baseline", "vm_distilled"}
    assert seed.replay["ticks_run"] == len(seed.per_tick) == 3  # replayed on the edited events
    n = seed.requests["scored"]
    assert n > 300
    assert set(summary.variants) == set(VARIANTS) | CURVE  # the oracle, the placebo and the curve included
    for name, row in summary.variants.items():
        assert row.auc.mean is not None and abs(row.auc.mean - 0.5) < 0.08, (name, row.auc.mean, n)
