"""The tier adapter of the VM+SOLARIS model (solaris.models.adapter): pure torch, no Spark."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from solaris.models.adapter import OFF, SCORE, SCORE_AND_VECTOR, AdaptedVM, AdapterSpec, TierAdapter, fit_adapter
from solaris.tiers import TIER_NONE, TIER_PAIR, TIER_USER
from tests.tolerance import assert_close, assert_far_apart

DIM = 8


def _head(seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    head = nn.Linear(DIM, 1)
    return head


def _log(n: int, seed: int = 0, flip_user_tier_in_validation: bool = False) -> dict[str, np.ndarray]:
    """A served log: tier-1 rows whose label follows the FM score, tier-3 rows, tier-0 rows.

    Tier 3's vectors carry the label in the first 90 % of the time and the opposite afterwards (the
    validation slice), so an adapter fit on the first part hurts tier 3's validation rows.
    """
    rng = np.random.default_rng(seed)
    head = _head()
    tiers = rng.choice([TIER_NONE, TIER_PAIR, TIER_USER], size=n, p=[0.2, 0.4, 0.4]).astype(np.int64)
    vectors = rng.normal(size=(n, DIM)).astype(np.float32)
    vectors[tiers == TIER_NONE] = 0.0
    score = (torch.as_tensor(vectors) @ head.weight.detach().reshape(-1) + head.bias.detach()).numpy()
    ts = np.arange(n, dtype=np.int64) * 10
    body = rng.normal(scale=0.3, size=n).astype(np.float32)
    signal = np.where(tiers == TIER_PAIR, 2.0 * (score - score[tiers == TIER_PAIR].mean()), 0.0)
    late = ts >= np.quantile(ts, 0.9)
    sign = np.where(late & flip_user_tier_in_validation, -1.0, 1.0)
    signal = signal + np.where(tiers == TIER_USER, 2.0 * sign * vectors[:, 1], 0.0)
    labels = (rng.random(n) < 1 / (1 + np.exp(-(body + signal)))).astype(np.float32)
    return {"body_logits": body, "labels": labels, "ts_seconds": ts, "vectors": vectors, "tiers": tiers}


def _fit(log: dict[str, np.ndarray], **overrides: object) -> tuple[TierAdapter, object]:
    settings = {"l2": 1e-3, "validation_fraction": 0.1, "min_validation_rows": 50, **overrides}
    return fit_adapter(AdapterSpec(DIM), _head(), **log, **settings)  # type: ignore[arg-type]


def test_an_unfit_adapter_is_the_body_exactly() -> None:
    body = nn.Linear(3, 1)
    model = AdaptedVM(lambda batch: body(batch["x"]).squeeze(-1), TierAdapter(AdapterSpec(DIM)))  # type: ignore[arg-type]
    batch = {"x": torch.randn(5, 3), "fm_embedding": torch.randn(5, DIM), "fm_tier": torch.tensor([0, 1, 2, 3, 6])}
    # bit-exact: the same body module on the same tensor, plus a residual of exactly 0
    assert torch.equal(model(batch), body(batch["x"]).squeeze(-1))


def test_the_fm_score_is_the_fm_head_so_an_aggregate_scores_its_mean_logit() -> None:
    adapter = TierAdapter(AdapterSpec(DIM))
    head = _head()
    adapter.set_head(head.weight, head.bias)
    vectors = torch.randn(4, DIM)
    logits = head(vectors).squeeze(-1)
    assert torch.allclose(adapter.fm_score(vectors), logits, atol=1e-6)
    assert torch.allclose(adapter.fm_score(vectors.mean(dim=0, keepdim=True)), logits.mean().reshape(1), atol=1e-6)


def test_the_fit_uses_an_informative_tier_and_keeps_a_tier_that_helps_its_validation_rows() -> None:
    log = _log(20_000)
    adapter, fit = _fit(log)
    assert TIER_PAIR in fit.kept_tiers and TIER_USER in fit.kept_tiers
    assert float(adapter.gain.detach()[TIER_PAIR]) > 0.5  # the label follows the FM score on tier 1
    assert fit.choice[TIER_PAIR] != OFF
    assert min(fit.validation_log_loss[TIER_PAIR][c] for c in (SCORE, SCORE_AND_VECTOR)) < \
        fit.validation_log_loss[TIER_PAIR][OFF]
    # tier 1's label follows the FM score only, tier 3's one coordinate of the vector: the score cannot carry it
    assert fit.choice[TIER_USER] == SCORE_AND_VECTOR


def test_a_tier_that_hurts_its_validation_rows_is_switched_off() -> None:
    log = _log(20_000, flip_user_tier_in_validation=True)
    adapter, fit = _fit(log)
    assert TIER_PAIR in fit.kept_tiers
    assert TIER_USER not in fit.kept_tiers
    assert fit.choice[TIER_USER] == OFF
    assert fit.validation_log_loss[TIER_USER][SCORE_AND_VECTOR] > fit.validation_log_loss[TIER_USER][OFF]
    user_rows = torch.as_tensor(log["tiers"] == TIER_USER)
    residual = adapter(torch.as_tensor(log["vectors"]), torch.as_tensor(log["tiers"]))
    assert torch.count_nonzero(residual[user_rows]) == 0


def test_nothing_served_adds_nothing_and_too_few_validation_rows_keep_a_tier_off() -> None:
    log = _log(20_000)
    adapter, fit = _fit(log, min_validation_rows=10_000)
    assert fit.kept_tiers == ()
    residual = adapter(torch.as_tensor(log["vectors"]), torch.as_tensor(log["tiers"]))
    assert torch.count_nonzero(residual) == 0
    adapter, _ = _fit(log)
    none_rows = torch.as_tensor(log["tiers"] == TIER_NONE)
    assert torch.count_nonzero(adapter(torch.as_tensor(log["vectors"]), torch.as_tensor(log["tiers"]))[none_rows]) == 0


def test_the_fit_is_deterministic() -> None:
    log = _log(5_000, seed=3)
    first, _ = _fit(log)
    second, _ = _fit(log)
    for a, b in zip(first.state_dict().values(), second.state_dict().values(), strict=True):
        assert torch.equal(a, b)  # bit-exact: one-thread L-BFGS (adapter._solve) on the same rows, one process


def test_bad_inputs_are_refused() -> None:
    log = _log(1_000)
    log["vectors"][3, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        _fit(log)
    log = _log(1_000)
    log["tiers"] = log["tiers"][:-1]
    with pytest.raises(ValueError, match="rows"):
        _fit(log)


def test_without_the_vector_only_the_score_is_fit() -> None:
    log = _log(20_000)
    adapter, fit = fit_adapter(AdapterSpec(DIM, vector=False), _head(), l2=1e-3, validation_fraction=0.1,
                               min_validation_rows=50, **log)
    assert adapter.proj is None
    assert set(fit.choice.values()) <= {OFF, SCORE} and fit.choice[TIER_PAIR] == SCORE


def test_adapt_vm_puts_the_fit_on_the_body_and_leaves_the_body_alone() -> None:
    from solaris.config import load_config
    from solaris.models.fm import FoundationModel
    from solaris.models.training import adapt_vm, fm_spec, predict, vm_spec
    from solaris.models.vm import VerticalModel
    from tests.unit.small_models import small_features

    config = load_config(overrides=["model.embedding_dim=16", "model.history_length=6", "model.fm.d_model=16",
                                    "model.adapter.min_validation_rows=5"])
    features, labels = small_features(n=400, seed=2)
    torch.manual_seed(0)
    fm, body, reference = FoundationModel(fm_spec(config)), VerticalModel(vm_spec(config)), VerticalModel(
        vm_spec(config))
    _, fm_logits, vectors = predict(fm, features, with_embeddings=True)
    assert vectors is not None
    tiers = np.where(np.arange(400) % 2 == 0, TIER_PAIR, TIER_NONE).astype(np.int64)
    labels = (fm_logits > np.median(fm_logits)).astype(np.float32)  # the label is the FM's opinion
    ts = np.arange(400, dtype=np.int64)
    before = {k: v.clone() for k, v in body.state_dict().items()}
    model, fit = adapt_vm(config, body, fm, reference=reference, features=features, labels=labels, ts_seconds=ts,
                          fm_embedding=vectors, fm_tier=tiers)
    # bit-exact: the body is copied, not moved: its weights are untouched
    assert all(torch.equal(before[k], v) for k, v in body.state_dict().items())
    assert not any(p.requires_grad for p in model.body.parameters())
    assert fit.choice[TIER_PAIR] != OFF
    extras = {"fm_embedding": vectors, "fm_tier": tiers}
    adapted = predict(model, features, extras)
    plain = predict(body, features)
    none_rows = tiers == TIER_NONE
    with torch.no_grad():  # what is exact: nothing served adds exactly 0 to the body's logit
        residual = model.adapter(torch.as_tensor(vectors), torch.as_tensor(tiers))
    assert torch.count_nonzero(residual[torch.as_tensor(none_rows)]) == 0
    # nothing served: the VM; another module's outputs, compared as model outputs are: within the tolerance
    assert_close(adapted[none_rows], plain[none_rows])
    assert_far_apart(adapted[tiers == TIER_PAIR], plain[tiers == TIER_PAIR])
