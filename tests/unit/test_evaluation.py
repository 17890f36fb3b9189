"""Pure rules of the knowledge-transfer evaluation (no Spark)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import numpy as np
import pytest
import torch

from solaris.config import load_config
from solaris.evaluation import protocol as evaluation
from solaris.evaluation.bootstrap import ScoredRequests, bootstrap_intervals
from solaris.evaluation.report import write_report
from solaris.jobs import evaluate as evaluate_job
from solaris.models.features import training_features
from solaris.models.training import predict, vm_spec, warm_start_vm
from solaris.models.vm import VerticalModel

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
    assert result["fm"]["transfer_ratio"] == pytest.approx(1.0)
    assert result["vm_baseline"]["transfer_ratio"] == pytest.approx(0.0)
    assert result["fm"]["ne"] < result["vm_baseline"]["ne"]
    seeds = [{"variants": result, "coverage": {"tiers1": c}, "cost": {"x": 1.0}} for c in (0.2, 0.4)]
    summary = evaluation.aggregate_seeds(seeds)
    assert summary["coverage"]["tiers1"]["mean"] == pytest.approx(0.3)
    assert summary["coverage"]["tiers1"]["std"] == pytest.approx(0.1)
    with pytest.raises(ValueError):
        evaluation.variant_metrics(labels, {"fm": predictions["fm"]})


def test_mean_std_skips_missing_values():
    assert evaluation.mean_std([1.0, float("nan"), None, 3.0]) == {"mean": 2.0, "std": 1.0, "n": 2}
    assert evaluation.mean_std([None])["mean"] is None


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
    features = training_features(users, items, ts, labels, 4)
    torch.manual_seed(0)
    base = VerticalModel(vm_spec(config))
    widened = warm_start_vm(base, vm_spec(config, with_fm_embedding=True))
    extras = {"fm_embedding": rng.normal(size=(n, 8)).astype(np.float32), "fm_tier": rng.integers(0, 4, n)}
    assert np.allclose(predict(base, features), predict(widened, features, extras), atol=1e-6)
    with pytest.raises(ValueError):
        warm_start_vm(widened, vm_spec(load_config(overrides=["model.embedding_dim=4"]), with_fm_embedding=True))


def test_report_files_from_a_summary(tmp_path):
    cell = lambda m: {"mean": m, "std": 0.01, "n": 2}  # noqa: E731
    variants = {name: {k: cell(0.9) for k in evaluation.METRIC_KEYS} for name in evaluation.VARIANTS}
    variants["vm_baseline"]["transfer_ratio"] = {"mean": None, "std": None, "n": 0}
    for name in variants:
        variants[name]["transfer_ratio_pooled"] = 0.4
    per_tick = [{"tick": f"2026-01-03T{h:02d}:00:00+00:00", "scored_window": h >= 12, "requests": 10,
                 "tiers1": 0.5, "tiers1-2": 0.6, "tiers1-3": 0.8, "tiers1-4": 0.85, "tiers1-5": 0.9, "tiers1-6": 0.95,
                 "candidates_hit_rate": 0.3,
                 "verified_hit_rate": 0.2} for h in range(10, 15)]
    coverage = {k: cell(0.5) for k in evaluation.coverage_by_tier(np.array([1]))}
    cost = {k: cell(1.0) for k in ("fm_passes_per_request", "seed_wall_s", "replay_s", "train_models_s",
                                    "finetune_vms_s")}
    rng = np.random.default_rng(0)
    users, labels = rng.integers(0, 40, 400), (rng.random(400) < 0.5).astype(np.float32)
    weak, strong = labels - 0.5 + rng.normal(0, 1, 400), labels - 0.5 + rng.normal(0, 0.3, 400)
    predictions = {name: 1 / (1 + np.exp(-weak)) for name in evaluation.VARIANTS}
    predictions["fm"] = 1 / (1 + np.exp(-4 * strong))
    intervals = bootstrap_intervals(ScoredRequests(users, labels, (predictions, predictions)), resamples=50)
    intervals["per_window"] = {T0.isoformat(): intervals["pooled"]}
    summary = {"output": str(tmp_path), "t0": [T0.isoformat()], "seeds": [1, 2],
               "windows": [{"t0": T0.isoformat(), "fm_cutoff": "x", "end": "y", "requests": 400, "users": 40}],
               "settings": {"step_hours": 1, "tail_hours": 2, "eval_hours": 3}, "variants": variants,
               "coverage": coverage, "cost": cost, "nan": float("nan"), "intervals": intervals,
               "per_seed": [{"per_tick": per_tick, "requests": {"scored": 30, "tail": 20, "base_rate": 0.5}}] * 2}
    paths = write_report(tmp_path, summary)
    names = {p.name for p in paths}
    assert {"metrics.json", "report.md", "transfer_ratio.png", "coverage_over_time.png", "hit_rate.png",
            "ne_vs_coverage.png"} <= names
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["nan"] is None  # strict JSON, no NaN
    assert saved["intervals"]["pooled"]["fm_vm_gap"]["low"] > 0  # the FM is clearly better here
    report = (tmp_path / "report.md").read_text()
    assert "VM+SOLARIS tiers 1-3" in report and "![transfer_ratio](transfer_ratio.png)" in report
    verdict = report.split("## Set-up")[0]  # the report opens with the verdict lines
    assert "FM vs VM baseline: \u0394NE" in verdict and "the FM is better" in verdict
    # every VM variant predicts the same here: their differences are exactly 0, and said to be no difference
    assert "VM+SOLARIS tiers 1-6 vs VM distilled: \u0394TR = +0.000 [+0.000, +0.000]" in verdict
    assert "includes 0: no difference shown" in verdict
    assert f"Per window (pooled over seeds): T0 {T0.isoformat()}" in report
    assert all((tmp_path / n).stat().st_size > 5000 for n in names if n.endswith(".png"))


def test_transfer_ratio_undefined_when_the_fm_is_not_better():
    rng = np.random.default_rng(3)
    labels = (rng.random(2000) < 0.5).astype(np.float32)
    good = np.where(labels == 1, 0.7, 0.3)
    weak = np.full(labels.size, 0.5)
    predictions = {name: good for name in evaluation.VARIANTS}
    predictions["fm"] = weak  # FM worse than the VM: nothing to transfer
    result = evaluation.variant_metrics(labels, predictions)
    assert np.isnan(result["vm_distilled"]["transfer_ratio"])
    summary = evaluation.aggregate_seeds([{"variants": result, "coverage": {}, "cost": {}}])
    assert summary["variants"]["vm_distilled"]["transfer_ratio"]["n"] == 0
    assert np.isnan(summary["variants"]["vm_distilled"]["transfer_ratio_pooled"])


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
    for override in ("evaluation.tail_hours=48", "enrichment.knn_k=5", "model.distillation.weight=0.2"):
        assert seed != evaluation.step_fingerprint(load_config(overrides=[override]), "seed", **inputs), override
    with pytest.raises(ValueError):
        evaluation.step_fingerprint(base, "nope")


def test_events_digest_sees_any_change_in_the_data():
    rng = np.random.default_rng(5)
    users, items, ts = rng.integers(0, 9, 50), rng.integers(0, 9, 50), np.arange(50)
    labels = (rng.random(50) < 0.5).astype(np.float32)
    digest = evaluation.events_digest(users, items, ts, labels)
    assert digest == evaluation.events_digest(users.copy(), items.copy(), ts.copy(), labels.copy())
    flipped = labels.copy()
    flipped[3] = 1 - flipped[3]
    assert digest != evaluation.events_digest(users, items, ts, flipped)
    assert digest != evaluation.events_digest(users[:-1], items[:-1], ts[:-1], labels[:-1])


def test_checkpoints_are_reused_only_for_their_own_fingerprint(tmp_path):
    config = load_config(overrides=["model.embedding_dim=8"])
    trained: list[int] = []

    def train():
        trained.append(1)
        torch.manual_seed(len(trained))
        return VerticalModel(vm_spec(config)), {"role": "vm_baseline"}

    root = tmp_path / "vm_baseline"
    _, first, reused = evaluate_job._trained(root, "vm", None, "fingerprint-a", train)
    assert not reused and len(trained) == 1
    _, again, reused = evaluate_job._trained(root, "vm", None, "fingerprint-a", train)  # unchanged: reused
    assert reused and again == first and len(trained) == 1
    _, other, reused = evaluate_job._trained(root, "vm", None, "fingerprint-b", train)  # a setting changed
    assert not reused and other != first and len(trained) == 2
    assert (root / "LATEST").read_text().strip() == other
    _, back, reused = evaluate_job._trained(root, "vm", None, "fingerprint-a", train)  # switched back
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
        ts, users, 4, 6, 1, count, **{"min_requests": 100, "min_users": 50, "min_training_events": 100, **kw})
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
