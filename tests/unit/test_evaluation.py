"""Pure rules of the knowledge-transfer evaluation (no Spark)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timezone
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from solaris.config import load_config
from solaris.drivers import evaluate as evaluate_job
from solaris.drivers.evaluate import results as evaluate_results
from solaris.drivers.evaluate import training as evaluate_training
from solaris.evaluation import freshness
from solaris.evaluation import protocol as evaluation
from solaris.evaluation.bootstrap import ScoredRequests, bootstrap_intervals
from solaris.evaluation.report import write_report
from solaris.models.features import training_features
from solaris.models.training import predict, vm_spec, warm_start_vm
from solaris.models.vm import VerticalModel
from solaris.provenance import events_digest
from tests.tolerance import assert_close, assert_far_apart

T0 = datetime(2026, 1, 3, 12, tzinfo=timezone.utc)
HOUR = 3600


def test_window_ticks_and_cutoff():
    window = evaluation.EvaluationWindow(T0, tail_hours=2, eval_hours=3)
    assert window.fm_cutoff == datetime(2026, 1, 3, 10, tzinfo=timezone.utc)
    assert [t.hour for t in window.ticks()] == [10, 11, 12, 13, 14]
    with pytest.raises(ValueError):
        evaluation.EvaluationWindow(T0, tail_hours=0, eval_hours=3)


def test_request_is_served_by_the_last_tick_strictly_before_it():
    window = evaluation.EvaluationWindow(T0, tail_hours=2, eval_hours=3)
    cutoff = window.fm_cutoff.timestamp()
    ts = np.array([cutoff, cutoff + 1, cutoff + HOUR, cutoff + HOUR + 1, T0.timestamp() + 3 * HOUR,
                   T0.timestamp() + 3 * HOUR + 1])
    # at the cutoff itself: before the first snapshot (the FM trained on it); a request at exactly
    # tick + 1h is still served by tick (computed strictly before it); after the end: none
    assert window.serving_tick(ts).tolist() == [-1, 0, 0, 1, 4, -1]


def test_tier_ablation_hides_higher_tiers_as_nothing_served():
    vectors = np.arange(8, dtype=np.float32).reshape(4, 2) + 1
    tiers = np.array([0, 1, 2, 3])
    fed, fed_tiers = evaluation.served_up_to_tier(vectors, tiers, 2)
    assert fed_tiers.tolist() == [0, 1, 2, 0]
    # bit-exact: served vectors are copied, no arithmetic
    assert np.array_equal(fed[[1, 2]], vectors[[1, 2]]) and not fed[[0, 3]].any()
    assert evaluation.served_up_to_tier(vectors, tiers, 3)[1].tolist() == [0, 1, 2, 3]


def test_coverage_by_tier_is_cumulative():
    shares = evaluation.coverage_by_tier(np.array([1, 1, 2, 3, 5, 6, 0, 0]))
    assert shares["tier1"] == 0.25 and shares["tiers1"] == 0.25 and shares["tier4"] == 0
    assert shares["tiers1-2"] == 0.375 and shares["tiers1-3"] == 0.5 and shares["tiers1-4"] == 0.5
    assert shares["tiers1-5"] == 0.625 and shares["tiers1-6"] == 0.75 and shares["none"] == 0.25


def test_every_tier_has_its_ablation_variant():
    assert evaluation.ABLATION == ("solaris_tier1", "solaris_tiers1-2", "solaris_tiers1-3", "solaris_tiers1-4",
                                   "solaris_tiers1-5", "solaris_tiers1-6")
    assert evaluation.SOLARIS_ALL == "solaris_tiers1-6" == evaluation.ABLATION[-1]
    assert evaluation.SOLARIS_MAX_TIER["solaris_distilled"] == 6


def test_the_control_variant_is_fed_nothing():
    """VM+SOLARIS fed nothing: every request gets the zero vector and tier 0, whatever was served."""
    vectors = np.arange(12, dtype=np.float32).reshape(4, 3) + 1
    tiers = np.array([0, 1, 3, 6])
    assert evaluation.SOLARIS_MAX_TIER[evaluation.SOLARIS_NONE] == 0
    assert evaluation.SOLARIS_NONE in evaluation.VARIANTS and evaluation.SOLARIS_NONE not in evaluation.ABLATION
    fed, fed_tiers = evaluation.served_up_to_tier(vectors, tiers, 0)
    assert not fed.any() and fed_tiers.tolist() == [0, 0, 0, 0]


def test_variant_metrics_transfer_ratio_and_seed_aggregate():
    rng = np.random.default_rng(0)
    labels = (rng.random(4000) < 0.4).astype(np.float32)
    signal = labels + rng.normal(0, 1.0, labels.size)

    def probs(strength):
        return 1 / (1 + np.exp(-(strength * signal - 0.5)))

    predictions = {name: probs(0.3) for name in evaluation.VARIANTS}
    predictions["fm"] = probs(1.2)
    predictions["vm_baseline"] = probs(0.3)
    result = evaluation.variant_metrics(labels, predictions)
    assert result["fm"].transfer_ratio == pytest.approx(1.0)
    assert result["vm_baseline"].transfer_ratio == pytest.approx(0.0)
    assert result["fm"].ne < result["vm_baseline"].ne
    seeds = [_seed_result(result, coverage={"tiers1": c}) for c in (0.2, 0.4)]
    summary = evaluation.aggregate_seeds(seeds)
    assert summary.coverage["tiers1"].mean == pytest.approx(0.3)
    assert summary.coverage["tiers1"].std == pytest.approx(0.1)
    assert summary.cost.replay_s == evaluation.MeanStd(1.0, 0.0, 2)
    with pytest.raises(ValueError):
        evaluation.variant_metrics(labels, {"fm": predictions["fm"]})


def test_mean_std_skips_missing_values():
    assert evaluation.mean_std([1.0, float("nan"), None, 3.0]) == evaluation.MeanStd(2.0, 1.0, 2)
    assert evaluation.mean_std([None]).mean is None


def test_fm_passes_per_request():
    assert evaluation.fm_passes_per_request(900, 100, 500) == 2.0
    assert np.isnan(evaluation.fm_passes_per_request(1, 1, 0))


def test_warm_start_predicts_like_its_base_until_trained():
    config = load_config(overrides=["model.embedding_dim=8"])
    rng = np.random.default_rng(1)
    n = 64
    users, items = rng.integers(0, 50, n), rng.integers(0, 40, n)
    ts = np.sort(rng.integers(0, 10 * HOUR, n))
    labels = (rng.random(n) < 0.5).astype(np.float32)
    features = training_features(users, items, ts, labels, history_length=4)
    torch.manual_seed(0)
    base = VerticalModel(vm_spec(config))
    widened = warm_start_vm(base, vm_spec(config, with_fm_embedding=True))
    extras = {"fm_embedding": rng.normal(size=(n, 8)).astype(np.float32), "fm_tier": rng.integers(0, 4, n)}
    assert np.allclose(predict(base, features), predict(widened, features, extras), atol=1e-6)
    with pytest.raises(ValueError):
        warm_start_vm(widened, vm_spec(load_config(overrides=["model.embedding_dim=4"]), with_fm_embedding=True))


def _seed_result(variants, seed=1, coverage=None, t0=T0):
    """A seed result around ``variants`` (the other fields as a tiny evaluation fills them)."""
    per_tick = tuple(
        evaluation.TickRow(f"{t0.date()}T{h:02d}:00:00+00:00", h >= 12, 10,
                           {"tiers1": 0.5, "tiers1-2": 0.6, "tiers1-3": 0.8, "tiers1-4": 0.85, "tiers1-5": 0.9,
                            "tiers1-6": 0.95},
                           evaluation.HitRates(0.3, 0.2))
        for h in range(10, 15)
    )
    shares = evaluation.coverage_by_tier(np.array([0, 1, 3, 3, 5, 6])) if coverage is None else coverage
    return evaluation.SeedResult(
        seed=seed, t0=t0.isoformat(), variants=variants, coverage=shares, tail_coverage=shares, per_tick=per_tick,
        cost=evaluation.Cost(fm_pairs_scored=900.0, fm_users_represented=100.0, fm_passes_per_request=2.0,
                             train_models_s=1.0, replay_s=1.0, resolve_s=1.0, finetune_vms_s=1.0,
                             score_requests_s=1.0, seed_wall_s=float("nan")),
        models={"versions": {"fm": "abc"}, "reused": ["fm"]}, replay={"seed": 42, "ticks": 5, "ticks_run": 5,
                                                                        "cleared": False},
        requests={"tail": 20, "scored": 400, "scored_users": 40, "base_rate": 0.5},
    )


def _summary(tmp_path, t0s=(T0,)):
    """An evaluation summary of synthetic predictions: the FM strong, every VM variant the same."""
    from solaris.evaluation.report import EvaluationSummary, WindowSummary

    rng = np.random.default_rng(0)
    users, labels = rng.integers(0, 40, 400), (rng.random(400) < 0.5).astype(np.float32)
    weak, strong = labels - 0.5 + rng.normal(0, 1, 400), labels - 0.5 + rng.normal(0, 0.3, 400)
    predictions = {name: 1 / (1 + np.exp(-weak)) for name in evaluation.VARIANTS}
    predictions["fm"] = 1 / (1 + np.exp(-4 * strong))
    curve = load_config().evaluation.freshness
    for name in freshness.extra_variants(curve.fm_ages_minutes, curve.oracle_ages_minutes):  # between FM and VM
        predictions[name] = 1 / (1 + np.exp(-2 * (strong + weak) / 2))
    variants = evaluation.variant_metrics(labels, predictions)
    results = tuple(_seed_result(variants, seed, t0=t0) for t0 in t0s for seed in (1, 2))
    requests = ScoredRequests(users, labels, (predictions, predictions), np.arange(400) % 4)  # tiers 0-3
    intervals = bootstrap_intervals(requests, resamples=50)
    if len(t0s) > 1:
        intervals = replace(intervals, per_window={t0.isoformat(): intervals.pooled for t0 in t0s})
    curve_report = freshness.FreshnessReport.of(curve.fm_ages_minutes, curve.oracle_ages_minutes, intervals,
                                                {t.isoformat(): np.full(400, 1800.0) for t in t0s})
    return EvaluationSummary.of(
        evaluation.aggregate_seeds(list(results)), output=str(tmp_path), t0=tuple(t.isoformat() for t in t0s),
        windows=tuple(WindowSummary(t.isoformat(), "x", "y", 400, 40) for t in t0s), scored_requests=400,
        scored_users=40,
        settings=load_config(overrides=["evaluation.tail_hours=2", "evaluation.eval_hours=3"]).evaluation,
        warehouse=str(tmp_path), seeds=(1, 2), intervals=intervals, per_seed=results, wall_s=float("nan"),
        adapter=load_config().model.adapter, freshness=curve_report,
    )


def test_report_files_from_a_summary(tmp_path):
    summary = _summary(tmp_path)
    paths = write_report(tmp_path, summary)
    names = {p.name for p in paths}
    assert {"metrics.json", "report.md", "transfer_ratio.png", "coverage_over_time.png", "hit_rate.png",
            "ne_vs_coverage.png"} <= names
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["wall_s"] is None  # strict JSON, no NaN
    assert saved["intervals"]["pooled"]["fm_vm_gap"]["low"] > 0  # the FM is clearly better here
    assert "per_window" not in saved["intervals"]  # one window: no per-window intervals
    report = (tmp_path / "report.md").read_text()
    assert "VM+SOLARIS tiers 1-3" in report and "![transfer_ratio](transfer_ratio.png)" in report
    assert "learning rate 0.0001" in report and "warm start is kept" in report
    verdict = report.split("## Set-up")[0]  # the report opens with the verdict lines
    assert "FM vs VM baseline: \u0394NE" in verdict and "the FM is better" in verdict
    # every VM variant predicts the same here: their differences are exactly 0, and said to be no difference;
    # the comparisons with distillation state the NE difference with its interval, then the TR difference
    assert ("VM+SOLARIS tiers 1-6 vs VM distilled: \u0394NE = +0.0000 [+0.0000, +0.0000], "
            "\u0394TR = +0.000 [+0.000, +0.000]") in verdict
    for line in ("VM+SOLARIS oracle (exact pair for every request) vs VM distilled: \u0394NE",
                 "VM+SOLARIS tiers 1-6 vs VM+SOLARIS placebo (served values permuted within tier): \u0394NE",
                 "VM+SOLARIS tiers 1-6 vs VM+SOLARIS control (nothing served): \u0394NE",
                 "VM baseline vs VM baseline, not fine-tuned: \u0394NE"):
        assert line in verdict, line
    assert "includes 0: no difference shown" in verdict
    assert all((tmp_path / n).stat().st_size > 5000 for n in names if n.endswith(".png"))
    # per serving tier: the requests it answered and the differences on them (tier 0 is no tier)
    tiers = report.split("## Per serving tier")[1].split("##")[0]
    assert "| 1 (pair) | 100 (25.0 %)" in tiers and "| 3 (user aggregate) |" in tiers and "| 0 " not in tiers
    assert set(saved["intervals"]["per_tier"]) == {"1", "2", "3"}
    assert "model.adapter.design: concat" in report


def test_every_report_carries_the_freshness_curve_pooled_and_per_window(tmp_path):
    """metrics.json's ``freshness``, the report's section (one table pooled, one per window) and its plot."""
    later = T0.replace(day=5)
    summary = _summary(tmp_path, t0s=(T0, later))
    paths = write_report(tmp_path, summary)
    assert "freshness.png" in {p.name for p in paths} and (tmp_path / "freshness.png").stat().st_size > 5000
    saved = json.loads((tmp_path / "metrics.json").read_text())["freshness"]
    assert saved["fm_ages_minutes"] == [0, 1, 5, 15, 60] and saved["oracle_ages_minutes"] == [0, 1, 5]
    assert set(saved["per_window"]) == {T0.isoformat(), later.isoformat()}
    points = {point["variant"]: point for point in saved["pooled"]["points"]}
    assert points["fm_age5m"]["age_minutes"] == 5 and points["fm_age5m"]["transfer_ratio"]["estimate"] is not None
    assert points[evaluation.FM_AT_TICK]["at_tick"] and points[evaluation.FM_AT_TICK]["age_minutes"] == 30
    assert points["fm"]["transfer_ratio"] is None and points["solaris_oracle_age0m"]["series"] == "oracle"
    assert saved["pooled"]["vm_distilled"]["estimate"] is not None
    report = (tmp_path / "report.md").read_text()
    section = report.split("## The freshness curve")[1].split("## Set-up")[0]
    assert section.count("| value computed at |") == 3 and f"Window T0 = {T0.isoformat()}" in section
    rows = [line for line in section.splitlines() if line.startswith("| ")][:7]
    assert [row.split(" | ")[0] for row in rows[1:]] == [
        "| the request", "| request \u2212 1 min", "| request \u2212 5 min", "| request \u2212 15 min",
        "| request \u2212 60 min", "| the serving tick (median 30 min)"]
    assert "1 (the reference)" in rows[1] and rows[4].endswith("| - | - |")  # no oracle at 15 min
    assert "VM baseline NE" in section and "VM distilled NE" in section
    assert "FM (upper bound) vs VM baseline" in report and "fm_age5m" not in report  # the curve: its own section


def test_the_ceiling_section_follows_the_oracle_vs_distillation_interval(tmp_path):
    """The report states what the ceiling allows, from the interval of oracle - distilled: worse than
    distillation (SOLARIS cannot beat it here), better, or no difference; with both transfer ratios."""
    from solaris.evaluation.bootstrap import Interval
    from solaris.evaluation.report import ceiling_lines

    summary = _summary(tmp_path)
    report_text = "\n".join(ceiling_lines(summary.intervals))
    assert "the ceiling and distillation do not differ" in report_text  # every VM variant predicts the same here
    assert "Transfer ratio of the ceiling (VM+SOLARIS oracle)" in report_text and "of distillation:" in report_text
    key = f"{evaluation.SOLARIS_ORACLE}-vs-vm_distilled"
    pooled = summary.intervals.pooled

    def with_oracle_gap(low: float, high: float) -> str:
        comparison = replace(pooled.comparisons[key], ne_difference=Interval((low + high) / 2, low, high))
        changed = replace(pooled, comparisons={**pooled.comparisons, key: comparison})
        return "\n".join(ceiling_lines(replace(summary.intervals, pooled=changed)))

    worse = with_oracle_gap(0.008, 0.018)
    assert "SOLARIS cannot beat distillation on these data" in worse and "+0.0130 [+0.0080, +0.0180]" in worse
    assert "SOLARIS could beat distillation" in with_oracle_gap(-0.02, -0.01)
    assert "do not differ" in with_oracle_gap(-0.01, 0.01)
    write_report(tmp_path, summary)
    report = (tmp_path / "report.md").read_text()
    assert report.index("## The ceiling") < report.index("## Set-up")


def test_the_report_shows_each_window_and_pooled(tmp_path):
    later = T0.replace(day=5)
    summary = _summary(tmp_path, t0s=(T0, later))
    write_report(tmp_path, summary)
    report = (tmp_path / "report.md").read_text()
    assert "2 window(s), 2 seed(s)" in report
    assert f"Window T0 = {T0.isoformat()}" in report and f"Window T0 = {later.isoformat()}" in report
    assert f"Per window (pooled over seeds): T0 {T0.isoformat()}" in report and f"T0 {later.isoformat()}" in report
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert set(saved["intervals"]["per_window"]) == {T0.isoformat(), later.isoformat()}
    assert [r["t0"] for r in saved["per_seed"]] == [T0.isoformat()] * 2 + [later.isoformat()] * 2


def test_metrics_json_keeps_its_form_and_the_typed_results_round_trip(tmp_path):
    """metrics.json: the same keys as before the results were typed; a seed's result.json reads back
    to the same JSON; the intervals read back to the same objects."""
    from solaris.evaluation.bootstrap import BootstrapIntervals
    from solaris.evaluation.report import metrics_json

    summary = _summary(tmp_path)
    saved = json.loads(metrics_json(summary))
    assert list(saved) == ["output", "t0", "windows", "requests", "settings", "warehouse", "seeds", "variants",
                           "coverage", "cost", "intervals", "freshness", "per_seed", "wall_s", "adapter"]
    curve = load_config().evaluation.freshness
    extra = set(freshness.extra_variants(curve.fm_ages_minutes, curve.oracle_ages_minutes))
    assert set(saved["variants"]) == set(evaluation.VARIANTS) | extra
    assert set(saved["variants"]["fm"]) == {*evaluation.METRIC_KEYS, "transfer_ratio_pooled"}
    assert saved["variants"]["fm"]["ne"].keys() == {"mean", "std", "n"}
    assert saved["settings"]["finetune_learning_rate"] == 1e-4 and saved["requests"] == {"scored": 400, "users": 40}
    comparison = saved["intervals"]["pooled"]["comparisons"][f"{evaluation.SOLARIS_ALL}-vs-vm_distilled"]
    assert comparison["variant"] == evaluation.SOLARIS_ALL and comparison["reference"] == "vm_distilled"
    assert comparison["ne_difference"].keys() == {"estimate", "low", "high", "undefined_share"}
    first = saved["per_seed"][0]
    assert set(first) == {"seed", "t0", "variants", "coverage", "tail_coverage", "per_tick", "cost", "models",
                          "replay", "requests"}
    assert set(first["variants"]) == set(evaluation.VARIANTS) | extra
    assert set(first["variants"]["fm"]) == {"log_loss", "ne", "auc", "calibration", "n", "transfer_ratio"}
    result = summary.per_seed[0]
    text = json.dumps(result.to_dict(), default=str)  # as result.json stores it (NaN kept)
    assert json.dumps(evaluation.SeedResult.from_dict(json.loads(text)).to_dict(), default=str) == text
    assert evaluation.SeedResult.from_dict(json.loads(text)).variants == result.variants
    assert BootstrapIntervals.from_dict(summary.intervals.to_dict()) == summary.intervals


def test_a_seed_result_of_another_format_is_recomputed(tmp_path):
    """result.json caches of the protocol before this one are not read: the fingerprint differs."""
    config = load_config()
    now = evaluation.step_fingerprint(config, "seed", seed=42, variants=evaluation.VARIANTS,
                                      result_version=evaluation.SEED_RESULT_VERSION)
    old = evaluation.step_fingerprint(config, "seed", seed=42, variants=evaluation.VARIANTS[:4])
    assert now != old
    seed_dir = tmp_path / "seed-42"
    seed_dir.mkdir()
    (seed_dir / "result.json").write_text(json.dumps({"fingerprint": old, "result": {}}))
    np.savez(seed_dir / evaluate_job.SCORED_FILE, fm=np.zeros(3))
    assert evaluate_results.saved_seed(seed_dir, now) is None


def test_transfer_ratio_undefined_when_the_fm_is_not_better():
    rng = np.random.default_rng(3)
    labels = (rng.random(2000) < 0.5).astype(np.float32)
    good = np.where(labels == 1, 0.7, 0.3)
    weak = np.full(labels.size, 0.5)
    predictions = {name: good for name in evaluation.VARIANTS}
    predictions["fm"] = weak  # FM worse than the VM: nothing to transfer
    result = evaluation.variant_metrics(labels, predictions)
    assert np.isnan(result["vm_distilled"].transfer_ratio)
    summary = evaluation.aggregate_seeds([_seed_result(result)])
    assert summary.variants["vm_distilled"].transfer_ratio.n == 0
    assert np.isnan(summary.variants["vm_distilled"].transfer_ratio_pooled)


def test_a_step_is_recomputed_exactly_when_a_setting_it_depends_on_changes():
    base = load_config()
    inputs = {"as_of": T0.isoformat(), "seed": 42, "data": "abc"}
    fm = evaluation.step_fingerprint(base, "fm", **inputs)
    assert fm == evaluation.step_fingerprint(load_config(), "fm", **inputs)  # unchanged rerun: reused
    # a setting the FM depends on, its as-of, its seed or its data: recomputed
    assert fm != evaluation.step_fingerprint(load_config(overrides=["model.fm.d_model=32"]), "fm", **inputs)
    assert fm != evaluation.step_fingerprint(load_config(overrides=["model.training.max_epochs=2"]), "fm", **inputs)
    assert fm != evaluation.step_fingerprint(base, "fm", **{**inputs, "seed": 43})
    assert fm != evaluation.step_fingerprint(base, "fm", **{**inputs, "as_of": "2026-01-03T13:00:00+00:00"})
    assert fm != evaluation.step_fingerprint(base, "fm", **{**inputs, "data": "abd"})
    # settings it does not depend on: reused (a TTL change replays, it does not retrain the FM)
    ttl = load_config(overrides=["precompute.ttl_hours=3"])
    assert fm == evaluation.step_fingerprint(ttl, "fm", **inputs)
    assert evaluation.step_fingerprint(ttl, "replay", **inputs) != evaluation.step_fingerprint(base, "replay", **inputs)
    teacher = load_config(overrides=["model.distillation.teacher=in-sample"])
    assert evaluation.step_fingerprint(teacher, "vm_baseline", **inputs) == evaluation.step_fingerprint(
        base, "vm_baseline", **inputs)
    assert evaluation.step_fingerprint(teacher, "vm_distilled", **inputs) != evaluation.step_fingerprint(
        base, "vm_distilled", **inputs)
    # a seed's result: anything in the model, precompute or enrichment counts, the number of seeds does not
    seed = evaluation.step_fingerprint(base, "seed", **inputs)
    assert seed == evaluation.step_fingerprint(load_config(overrides=["evaluation.seeds=5"]), "seed", **inputs)
    for override in ("evaluation.tail_hours=48", "enrichment.knn_k=5", "model.distillation.weight=0.2",
                     "evaluation.finetune_learning_rate=0.001", "evaluation.finetune_batch_size=128"):
        assert seed != evaluation.step_fingerprint(load_config(overrides=[override]), "seed", **inputs), override
    with pytest.raises(ValueError):
        evaluation.step_fingerprint(base, "nope")


def test_events_digest_sees_any_change_in_the_data():
    rng = np.random.default_rng(5)
    users, items, ts = rng.integers(0, 9, 50), rng.integers(0, 9, 50), np.arange(50)
    labels = (rng.random(50) < 0.5).astype(np.float32)
    digest = events_digest(users, items, ts, labels)
    assert digest == events_digest(users.copy(), items.copy(), ts.copy(), labels.copy())
    flipped = labels.copy()
    flipped[3] = 1 - flipped[3]
    assert digest != events_digest(users, items, ts, flipped)
    assert digest != events_digest(users[:-1], items[:-1], ts[:-1], labels[:-1])


def test_checkpoints_are_reused_only_for_their_own_fingerprint(tmp_path):
    config = load_config(overrides=["model.embedding_dim=8"])
    trained: list[int] = []

    def train():
        trained.append(1)
        torch.manual_seed(len(trained))
        return VerticalModel(vm_spec(config)), {"role": "vm_baseline"}

    root = tmp_path / "vm_baseline"
    _, first, reused = evaluate_training._trained(root, "vm", None, "fingerprint-a", train)
    assert not reused and len(trained) == 1
    _, again, reused = evaluate_training._trained(root, "vm", None, "fingerprint-a", train)  # unchanged: reused
    assert reused and again == first and len(trained) == 1
    _, other, reused = evaluate_training._trained(root, "vm", None, "fingerprint-b", train)  # a setting changed
    assert not reused and other != first and len(trained) == 2
    assert (root / "LATEST").read_text().strip() == other
    _, back, reused = evaluate_training._trained(root, "vm", None, "fingerprint-a", train)  # switched back
    assert reused and back == first and len(trained) == 2
    assert (root / "LATEST").read_text().strip() == first  # what the replayed jobs load


def test_window_densities_match_a_brute_force_count():
    rng = np.random.default_rng(8)
    start = T0.timestamp()
    ts = np.sort(start + rng.integers(1, 40 * HOUR, 600)).astype(np.int64)
    users = rng.integers(0, 25, 600)
    t0s, requests, distinct, training = evaluation.window_densities(ts, users, tail_hours=2, eval_hours=5)
    for index in range(0, t0s.size, 3):
        inside = (ts > t0s[index]) & (ts <= t0s[index] + 5 * HOUR)
        assert requests[index] == inside.sum()
        assert distinct[index] == np.unique(users[inside]).size
        assert training[index] == (ts <= t0s[index] - 2 * HOUR).sum()


def test_densest_windows_pick_the_bursts_without_overlap_and_respect_the_minimums():
    rng = np.random.default_rng(9)
    start = T0.timestamp()
    background = start + rng.integers(1, 200 * HOUR, 2000)
    burst_a = start + 50 * HOUR + rng.integers(1, 3 * HOUR, 900)  # 300 users within 3 h
    burst_b = start + 150 * HOUR + rng.integers(1, 3 * HOUR, 600)  # 150 users
    ts = np.concatenate([background, burst_a, burst_b]).astype(np.int64)
    users = np.concatenate([rng.integers(0, 40, 2000), rng.integers(100, 400, 900), rng.integers(500, 650, 600)])
    order = np.argsort(ts, kind="stable")
    ts, users = ts[order], users[order]
    pick = lambda count, **kw: evaluation.densest_windows(  # noqa: E731
        ts, users, tail_hours=4, eval_hours=6, step_hours=1, count=count,
        **{"min_requests": 100, "min_users": 50, "min_training_events": 100, **kw})
    (best,) = pick(1)
    assert start + 44 * HOUR <= best.t0.timestamp() <= start + 50 * HOUR and best.users >= 250
    both = pick(3)
    assert len(both) == 2  # only the two bursts reach 50 users; windows do not overlap (tail included)
    assert both[1].t0.timestamp() - both[0].t0.timestamp() >= 10 * HOUR
    assert pick(1, min_users=1000) == []
    assert pick(1, min_training_events=10**6) == []
    thin = evaluation.density_at(ts, users, T0, 4, 6)
    reason = thin.refusal(5000, 200, 100)
    assert reason is not None and "\n" not in reason and "evaluation.min_requests" in reason
    assert best.refusal(100, 50, 100) is None


def test_evaluate_refuses_a_thin_window_and_picks_the_dense_one():
    from solaris.models.training import EventArrays
    from solaris.runtime import JobInputError

    rng = np.random.default_rng(10)
    start = T0.timestamp()
    ts = np.concatenate([start + rng.integers(1, 100 * HOUR, 3000), start + 60 * HOUR + rng.integers(1, HOUR, 900)])
    users = np.concatenate([rng.integers(0, 30, 3000), rng.integers(100, 400, 900)])
    order = np.argsort(ts, kind="stable")
    events = EventArrays(users[order], users[order] % 7, ts[order].astype(np.int64), np.ones(ts.size, np.float32))
    config = load_config(overrides=["evaluation.tail_hours=4", "evaluation.eval_hours=6", "evaluation.min_requests=500",
                                    "evaluation.min_users=100", "evaluation.min_training_events=100"])
    with pytest.raises(JobInputError, match="distinct requesting users") as refused:
        evaluate_job.choose_windows(config, events, [T0.replace(hour=T0.hour + 10)])
    assert "\n" not in str(refused.value)
    (picked,) = evaluate_job.choose_windows(config, events, None)
    assert start + 55 * HOUR <= picked.timestamp() <= start + 60 * HOUR  # its scored part holds the burst


def test_the_placebo_permutes_vectors_within_each_tier_only():
    """Each tier keeps its multiset of vectors and every row its tier; seeded; rows actually move."""
    rng = np.random.default_rng(12)
    tiers = rng.choice([0, 1, 3, 5, 6], size=300)
    vectors = rng.normal(size=(300, 4)).astype(np.float32)
    vectors[tiers == 0] = 0.0  # nothing served: the zero vector
    permuted = evaluation.permuted_within_tier(vectors, tiers, np.random.default_rng(7))
    assert permuted.shape == vectors.shape and permuted.dtype == np.float32
    for tier in np.unique(tiers):
        mine = tiers == tier
        # the same rows, reordered: sorting the rows of the tier gives the same matrix
        # bit-exact: a permutation copies rows
        assert np.array_equal(np.unique(permuted[mine], axis=0), np.unique(vectors[mine], axis=0))
        assert sorted(map(tuple, permuted[mine])) == sorted(map(tuple, vectors[mine]))
    assert not permuted[tiers == 0].any()
    moved = np.any(permuted != vectors, axis=1)
    assert moved[tiers > 0].mean() > 0.9  # a row keeps its own vector only by chance
    again = evaluation.permuted_within_tier(vectors, tiers, np.random.default_rng(7))
    # bit-exact: one seed, one permutation
    assert np.array_equal(again, permuted)  # seeded
    # bit-exact: another seed permutes the copied rows elsewhere
    assert not np.array_equal(evaluation.permuted_within_tier(vectors, tiers, np.random.default_rng(8)), permuted)
    # bit-exact: a copy
    assert np.array_equal(vectors[tiers == 1][0], vectors[tiers == 1][0].copy())  # the input is not modified


def test_oracle_query_times_are_the_serving_tick_strictly_before_each_request():
    window = evaluation.EvaluationWindow(T0, tail_hours=2, eval_hours=3)
    cutoff = window.fm_cutoff.timestamp()
    ts = np.array([cutoff + 1, cutoff + HOUR, cutoff + HOUR + 1, T0.timestamp() + 30, T0.timestamp() + 3 * HOUR],
                  dtype=np.int64)
    at = window.serving_tick_times(ts)
    ticks = [t.timestamp() for t in window.ticks()]
    assert at.tolist() == [ticks[i] for i in window.serving_tick(ts)]
    assert at.tolist() == [cutoff, cutoff, cutoff + HOUR, T0.timestamp(), T0.timestamp() + 2 * HOUR]
    assert np.all(at < ts)
    with pytest.raises(ValueError, match="outside the window"):
        window.serving_tick_times(np.array([cutoff]))  # at the cutoff: no snapshot serves it


def test_every_solaris_model_gets_its_own_input_for_training_and_scoring():
    rng = np.random.default_rng(13)
    n_tail, n = 40, 100
    tiers = rng.choice([0, 1, 2, 3, 5], size=n)
    vectors = np.where(tiers[:, None] > 0, rng.normal(size=(n, 3)), 0.0).astype(np.float32)
    ages = np.where(tiers > 0, rng.uniform(1, 7200, n), np.nan)
    served = evaluate_job.ServedFeatures(vectors, tiers, n_tail, (), 0.0, ages)
    oracle = rng.normal(size=(n, 3)).astype(np.float32)
    oracle_ages = rng.uniform(1, 3600, n)
    inputs = evaluate_job.fed_inputs(served, oracle, seed=42, oracle_ages=oracle_ages)
    for part, rows in (("tail", slice(0, n_tail)), ("scored", slice(n_tail, n))):
        fed = getattr(inputs, part)
        # bit-exact: served vectors and ages are copied, no arithmetic
        assert np.array_equal(fed[evaluation.SOLARIS_ALL][0], vectors[rows])
        # bit-exact: copied ages, NaN where nothing was served
        assert np.array_equal(fed[evaluation.SOLARIS_ALL][2], ages[rows], equal_nan=True)
        none_vectors, none_tiers, none_ages = fed[evaluation.SOLARIS_NONE]
        assert not none_vectors.any() and not none_tiers.any() and np.isnan(none_ages).all()
        placebo_vectors, placebo_tiers, placebo_ages = fed[evaluation.SOLARIS_PLACEBO]
        # bit-exact: integer tiers
        assert np.array_equal(placebo_tiers, tiers[rows])  # permuted within the part's own rows and tiers
        for tier in np.unique(tiers[rows]):
            mine = tiers[rows] == tier
            assert sorted(map(tuple, placebo_vectors[mine])) == sorted(map(tuple, vectors[rows][mine]))
        assert not np.array_equal(placebo_vectors, vectors[rows])  # bit-exact: a permutation moves whole copied rows
        # each placebo row carries one served row's vector together with that value's own age
        # bit-exact: rows and ages copied together by one permutation
        assert {tuple(v) + (a,) for v, a in zip(placebo_vectors, np.nan_to_num(placebo_ages, nan=-1))} == {
            tuple(v) + (a,) for v, a in zip(vectors[rows], np.nan_to_num(ages[rows], nan=-1))}
        oracle_vectors, oracle_tiers, fed_oracle_ages = fed[evaluation.SOLARIS_ORACLE]
        # bit-exact: oracle vectors are copied, no arithmetic
        assert np.array_equal(oracle_vectors, oracle[rows]) and (oracle_tiers == 1).all()  # the pair tier everywhere
        assert np.array_equal(fed_oracle_ages, oracle_ages[rows])  # bit-exact: copied
    same = evaluate_job.fed_inputs(served, oracle, seed=42, oracle_ages=oracle_ages)
    # bit-exact: one seed, one permutation of copied rows
    assert np.array_equal(same.scored[evaluation.SOLARIS_PLACEBO][0], inputs.scored[evaluation.SOLARIS_PLACEBO][0])
    other = evaluate_job.fed_inputs(served, oracle, seed=43, oracle_ages=oracle_ages)  # another seed, permutation
    # bit-exact: another seed permutes the copied rows elsewhere
    assert not np.array_equal(other.tail[evaluation.SOLARIS_PLACEBO][0], inputs.tail[evaluation.SOLARIS_PLACEBO][0])
    with pytest.raises(ValueError, match="not aligned"):
        evaluate_job.fed_inputs(served, oracle[:-1], seed=42, oracle_ages=oracle_ages)
    with pytest.raises(ValueError, match="not aligned"):
        evaluate_job.fed_inputs(served, oracle, seed=42, oracle_ages=oracle_ages[:-1])


def test_the_placebo_keeps_the_permutation_it_had_before_ages_followed_it():
    """permuted_within_tier is the vectors indexed by permutation_within_tier: the same draws, the same rows."""
    rng = np.random.default_rng(5)
    tiers = rng.choice([0, 1, 3], size=50)
    vectors = rng.normal(size=(50, 2))
    order = evaluation.permutation_within_tier(tiers, np.random.default_rng(9))
    # bit-exact: integer tiers, and rows copied by the same index
    assert np.array_equal(tiers[order], tiers)
    # bit-exact: rows copied by the same index (as float32)
    assert np.array_equal(evaluation.permuted_within_tier(vectors, tiers, np.random.default_rng(9)),
                          vectors[order].astype(np.float32))


def test_ages_follow_the_ablation_and_the_oracle_is_aged_from_its_tick():
    ages = np.array([np.nan, 30.0, 600.0, 4000.0])
    tiers = np.array([0, 1, 2, 3])
    _, kept = evaluation.served_up_to_tier(np.ones((4, 2), dtype=np.float32), tiers, 2)
    # bit-exact: copied ages, NaN where the ablation serves nothing
    assert np.array_equal(evaluation.ages_where_served(ages, kept), [np.nan, 30.0, 600.0, np.nan], equal_nan=True)
    window = evaluation.EvaluationWindow(T0, tail_hours=2, eval_hours=3)
    cutoff = window.fm_cutoff.timestamp()
    ts = np.array([cutoff + 1, cutoff + HOUR + 90, T0.timestamp() + 30, T0.timestamp() + 3 * HOUR], dtype=np.int64)
    rows = evaluate_job.WindowRows(window, np.arange(0), np.arange(2), np.arange(2, 4), "", "")
    events = SimpleNamespace(ts=ts)
    # bit-exact: integer seconds
    assert evaluate_job.oracle_ages(rows, events).tolist() == [1.0, 90.0, 30.0, HOUR]  # type: ignore[arg-type]


def test_the_variants_include_the_pretrained_vms_the_controls_and_the_ceiling():
    for name in ("vm_baseline_pretrained", "vm_distilled_pretrained", "solaris_none", "solaris_placebo",
                 "solaris_oracle"):
        assert name in evaluation.VARIANTS and name in evaluation.TRANSFER_VARIANTS
    assert "placebo" in evaluation.SOLARIS_PLACEBO and "oracle" in evaluation.SOLARIS_ORACLE
    assert len(set(evaluation.VARIANTS)) == len(evaluation.VARIANTS)


def _learnable_events(n: int, seed: int):
    """Time-sorted events whose label follows the item (a VM learns it from the item id and counters)."""
    from solaris.models.training import EventArrays

    rng = np.random.default_rng(seed)
    users, items = rng.integers(1, 60, n), rng.integers(1, 40, n)
    ts = np.sort(rng.integers(0, 200 * HOUR, n))
    labels = ((items % 2 == 0) ^ (rng.random(n) < 0.1)).astype(np.float32)
    order = np.argsort(ts, kind="stable")
    return EventArrays(users[order], items[order], ts[order].astype(np.int64), labels[order])


def test_keep_initial_keeps_the_warm_start_only_when_no_epoch_beats_it():
    from solaris.models.training import fit

    config = load_config(overrides=["model.embedding_dim=8", "model.history_length=4", "model.training.threads=1",
                                    "model.training.batch_size=128", "model.training.max_epochs=3"])
    events = _learnable_events(1500, seed=3)
    features = training_features(events.user_id, events.item_id, events.ts, events.label, history_length=4)
    training = config.model.training

    def fitted(model, keep_initial, **update):
        return fit(model, features, events.label, events.ts, training.model_copy(update=update), seed=5,
                   keep_initial=keep_initial)

    torch.manual_seed(0)
    trained = fitted(VerticalModel(vm_spec(config)), False, learning_rate=1e-2).model
    start = {k: v.clone() for k, v in trained.state_dict().items()}
    # a learning rate that wrecks the weights: no epoch beats the warm start, which is kept as it was
    kept = fitted(trained, True, learning_rate=50.0)
    assert kept.best_epoch == 0 and kept.epochs[0]["epoch"] == 0
    # bit-exact: the kept warm start is the start's weights, copied
    assert all(torch.equal(kept.model.state_dict()[k], start[k]) for k in start)
    # without the option the best epoch wins even when it is worse than the start
    trained.load_state_dict(start)
    wrecked = fitted(trained, False, learning_rate=50.0)
    assert wrecked.best_epoch >= 1 and wrecked.validation["ne"] > kept.validation["ne"]
    # bit-exact: a kept start would be an exact copy; trained weights are not
    assert not all(torch.equal(wrecked.model.state_dict()[k], start[k]) for k in start)
    # an untrained model that training improves: an epoch is kept, not the initial weights
    torch.manual_seed(1)
    fresh = VerticalModel(vm_spec(config))
    initial = {k: v.clone() for k, v in fresh.state_dict().items()}
    improved = fitted(fresh, True, learning_rate=1e-2)
    assert improved.best_epoch >= 1 and improved.validation["ne"] < improved.epochs[0]["ne"]
    # bit-exact: a kept start would be an exact copy; trained weights are not
    assert not all(torch.equal(improved.model.state_dict()[k], initial[k]) for k in initial)


def test_the_evaluation_fine_tune_gives_the_same_vm_for_the_same_seed():
    """One thread, the seed's draws only: two fine-tunes of the same warm start are bit-identical."""
    from solaris.models.training import train_vm

    config = load_config(overrides=["model.embedding_dim=8", "model.history_length=4", "model.training.max_epochs=2",
                                    "model.training.batch_size=128"])
    events = _learnable_events(1200, seed=4)
    training = evaluate_training._vm_training(config, batch_size=64,
                                              learning_rate=config.evaluation.finetune_learning_rate)
    assert training.threads == 1 and training.learning_rate == 1e-4
    base = train_vm(events, config, 3, training=evaluate_training._vm_training(config)).model
    rng = np.random.default_rng(0)
    extras = {"fm_embedding": rng.normal(size=(len(events), 8)).astype(np.float32),
              "fm_tier": rng.integers(0, 4, len(events))}
    tuned = [train_vm(events, config, 11, "solaris", init_from=base, training=training, keep_initial=True,
                      **extras).model.state_dict() for _ in range(2)]
    # bit-exact: one seed, one thread, the same shapes in one process
    assert all(torch.equal(tuned[0][k], tuned[1][k]) for k in tuned[0])


def test_the_fm_at_the_serving_tick_is_the_fm_head_on_the_oracle_vectors():
    from solaris.models.fm import FoundationModel
    from solaris.models.training import fm_spec

    config = load_config(overrides=["model.embedding_dim=8", "model.fm.d_model=8", "model.history_length=4"])
    rng = np.random.default_rng(2)
    n = 50
    ts = np.sort(rng.integers(0, 10 * HOUR, n))
    features = training_features(rng.integers(0, 9, n), rng.integers(0, 12, n), ts,
                                 (rng.random(n) < 0.5).astype(np.float32), history_length=4)
    torch.manual_seed(0)
    fm = FoundationModel(fm_spec(config))
    probabilities, _, vectors = predict(fm, features, with_embeddings=True)
    assert vectors is not None
    np.testing.assert_allclose(evaluate_job.fm_head_probabilities(fm, vectors), probabilities, rtol=1e-5, atol=1e-6)


def test_a_comparison_that_prints_as_zero_is_not_called_better_or_worse():
    """A ΔNE interval excluding 0 whose ends round to 0 at the printed 4 decimals says so; a larger one
    keeps its direction; one that includes 0 shows no difference."""
    from solaris.evaluation.bootstrap import Comparison, Interval
    from solaris.evaluation.report import comparison_line

    def line(low: float, high: float) -> str:
        ne = Interval((low + high) / 2, low, high)
        return comparison_line(Comparison("solaris_tiers1-6", "solaris_none", ne, Interval(0.0, -0.1, 0.1)), "(95 %)")

    tiny = line(-4e-5, -1e-5)
    assert "\u22120.0000 [\u22120.0000, \u22120.0000]" in tiny and "below the precision shown" in tiny
    assert "better" not in tiny and "worse" not in tiny
    assert line(-3e-4, -1e-4).endswith("is better (lower NE).")
    assert line(1e-4, 3e-4).endswith("is worse (higher NE).")
    assert "includes 0" in line(-1e-5, 1e-5)


@pytest.mark.parametrize("design", ["concat", "channel"])
def test_the_fine_tune_and_the_scoring_feed_each_design_what_it_reads(design):
    """Steps 4-5 on small arrays: every variant scored, and the channel design's models read the
    served values' ages and the serving FM's head (a VM+SOLARIS scored without its ages would differ)."""
    from solaris.models.fm import FoundationModel
    from solaris.models.training import EventArrays, fm_spec

    config = load_config(overrides=["model.embedding_dim=8", "model.fm.d_model=8", "model.history_length=4",
                                    "model.vm.id_buckets=1024", "model.training.max_epochs=1",
                                    f"model.adapter.design={design}"])
    window = evaluation.EvaluationWindow(T0, tail_hours=2, eval_hours=2)
    rng = np.random.default_rng(21)
    n = 1500
    ts = np.sort(rng.integers(int(T0.timestamp()) - 10 * HOUR, int(window.end.timestamp()), n)).astype(np.int64)
    events = EventArrays(rng.integers(0, 40, n), rng.integers(0, 30, n), ts, (rng.random(n) < 0.5).astype(np.float32))
    rows = evaluate_job.WindowRows.of(events, window)
    data = evaluate_job.EvaluationData.of(events, config.model.history_length)
    torch.manual_seed(0)
    fm = FoundationModel(fm_spec(config))
    base = VerticalModel(vm_spec(config))
    models = evaluate_job.TrainedModels(fm, base, base, base, {}, (), 0.0)
    m = rows.tail.size + rows.scored.size
    tiers = rng.choice([0, 1, 3, 5], size=m)
    served = evaluate_job.ServedFeatures(np.where(tiers[:, None] > 0, rng.normal(size=(m, 8)), 0.0).astype(np.float32),
                                         tiers, int(rows.tail.size), (), 0.0,
                                         np.where(tiers > 0, rng.uniform(1, HOUR, m), np.nan))
    inputs = evaluate_job.fed_inputs(served, rng.normal(size=(m, 8)).astype(np.float32), seed=1,
                                     oracle_ages=evaluate_job.oracle_ages(rows, events))
    tuned = evaluate_job.fine_tune(config, rows, data, seed=1, models=models, inputs=inputs)
    for model in (tuned.solaris, tuned.solaris_distilled, tuned.control, tuned.placebo, tuned.oracle):
        assert isinstance(model, VerticalModel) and model.spec.channel == (design == "channel")
    aged = evaluate_job.aged_requests(config, rows, data, fm)
    predictions = evaluate_job.predict_scored(config, rows, data, models=models, tuned=tuned, inputs=inputs,
                                              aged=aged)
    curve = config.evaluation.freshness
    assert set(predictions.by_variant) == set(evaluation.VARIANTS) | set(
        freshness.extra_variants(curve.fm_ages_minutes, curve.oracle_ages_minutes))
    assert all(np.isfinite(p).all() and p.shape == (rows.scored.size,) for p in predictions.by_variant.values())
    # the upper bound is the FM at the request, whichever pass computed it
    assert_close(predictions.by_variant["fm"], predict(fm, data.features.take(rows.scored)))
    pair = np.full(rows.scored.size, 1)
    oracle_fresh = predict(tuned.oracle, data.features.take(rows.scored),
                           {"fm_embedding": aged.vectors[5], "fm_tier": pair, "fm_age": np.full(rows.scored.size,
                                                                                               300.0, np.float32)})
    assert_close(predictions.by_variant[freshness.oracle_variant(5)], oracle_fresh)
    if design == "channel":
        assert tuned.oracle.score_path is not None  # type: ignore[union-attr]
        # bit-exact: the head copied from the serving FM, no arithmetic
        assert torch.equal(tuned.oracle.score_path.head_weight, fm.head.weight.reshape(-1))  # type: ignore[union-attr]
        with torch.no_grad():  # a channel whose path has moved reads the age: another age, another output
            tuned.solaris.score_path.age_gain.fill_(0.5)  # type: ignore[union-attr]
        vectors, served_tiers, ages = inputs.scored[evaluation.SOLARIS_ALL]
        features = data.features.take(rows.scored)
        as_served = predict(tuned.solaris, features, {"fm_embedding": vectors, "fm_tier": served_tiers,
                                                       "fm_age": ages.astype(np.float32)})
        older = predict(tuned.solaris, features, {"fm_embedding": vectors, "fm_tier": served_tiers,
                                                  "fm_age": (ages * 10).astype(np.float32)})
        assert_far_apart(older[served_tiers > 0], as_served[served_tiers > 0])


def test_a_tick_row_is_typed_and_keeps_the_flat_json_row():
    """The replay's per-tick rows are typed end to end; result.json / metrics.json keep the flat row, and an
    hour without requests (no coverage) or without a hit-rate run (no hit rates) keeps those keys out."""
    served = evaluation.TickRow("2026-01-03T12:00:00+00:00", True, 4, {"tier1": 0.5, "tiers1": 0.5},
                                evaluation.HitRates(0.3, None))
    assert served.to_dict() == {"tick": "2026-01-03T12:00:00+00:00", "scored_window": True, "requests": 4,
                                "tier1": 0.5, "tiers1": 0.5, "candidates_hit_rate": 0.3, "verified_hit_rate": None}
    empty = evaluation.TickRow("2026-01-03T13:00:00+00:00", True, 0, {})
    assert empty.to_dict() == {"tick": "2026-01-03T13:00:00+00:00", "scored_window": True, "requests": 0}
    for row in (served, empty):
        assert evaluation.TickRow.from_dict(json.loads(json.dumps(row.to_dict()))) == row
