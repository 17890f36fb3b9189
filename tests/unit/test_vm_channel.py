"""The ``channel`` design of the VM+SOLARIS model (solaris.models.vm, model.adapter.design: channel).

What it promises: the served vector, its FM score, its age and its tier as inputs, a per-tier linear
path from the score to the logit, every new weight starting at zero (an untrained channel is the VM
it was warm-started from) and learning at the pre-training rate while the body keeps the fine-tune's;
and, the reason for all of it, a VM given the exact fresh pair recovers most of the FM's edge.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
from torch import nn

from solaris.config import load_config
from solaris.models.adapter import AdapterSpec, TierAdapter, encode_age, fit_adapter
from solaris.models.checkpoint import load_checkpoint, save_checkpoint
from solaris.models.common import to_tensors
from solaris.models.features import training_features
from solaris.models.training import (
    EventArrays,
    channel_parameter_groups,
    predict,
    train_vm,
    vm_spec,
    warm_start_vm,
)
from solaris.models.vm import VerticalModel, VMSpec
from solaris.tiers import N_TIERS, TIER_NONE, TIER_PAIR, TIER_USER
from tests.tolerance import assert_close, assert_far_apart

DIM = 8
MINUTE = 60.0


def _config(*overrides: str):
    return load_config(overrides=["model.embedding_dim=8", "model.history_length=4", "model.vm.id_buckets=1024",
                                  "model.adapter.design=channel", *overrides])


def _served(n: int, seed: int) -> dict[str, torch.Tensor]:
    """A batch of ``n`` random requests with served values of every kind (tier 0: zero vector, NaN age)."""
    rng = np.random.default_rng(seed)
    users, items = rng.integers(0, 50, n), rng.integers(0, 40, n)
    ts = np.sort(rng.integers(0, 36_000, n))
    features = training_features(users, items, ts, (rng.random(n) < 0.5).astype(np.float32), history_length=4)
    tiers = rng.choice([TIER_NONE, TIER_PAIR, TIER_USER, 5], size=n)
    vectors = np.where(tiers[:, None] > 0, rng.normal(size=(n, DIM)), 0.0).astype(np.float32)
    ages = np.where(tiers > 0, rng.uniform(1, 3600, n), np.nan).astype(np.float32)
    batch = to_tensors(features)
    batch.update(fm_embedding=torch.as_tensor(vectors), fm_tier=torch.as_tensor(tiers), fm_age=torch.as_tensor(ages))
    return batch


def test_the_age_reads_as_log_minutes_and_nothing_served_as_zero():
    ages = torch.tensor([float("nan"), 0.0, 60.0, 3600.0, -5.0, float("inf")])
    codes = encode_age(ages)
    assert_close(codes, [0.0, 0.0, math.log(2.0), math.log(61.0), 0.0, 0.0])
    assert torch.isfinite(codes).all()
    later = encode_age(torch.tensor([30.0, 300.0, 3000.0, 30000.0]))
    assert (later[1:] > later[:-1]).all()  # older reads larger, never saturating into a constant


def test_an_untrained_channel_is_the_vm_it_was_warm_started_from():
    """Every new weight starts at zero: same outputs on any served input, whatever the FM head."""
    config = _config()
    torch.manual_seed(0)
    base = VerticalModel(vm_spec(config)).eval()
    channel = warm_start_vm(base, vm_spec(config, with_fm_embedding=True)).eval()
    assert channel.spec.channel and channel.vector_in is not None and channel.score_path is not None
    channel.set_fm_head(nn.Linear(DIM, 1))  # a real head: the score is not zero, its weights are
    batch = _served(96, seed=1)
    channel.score_path.standardise(batch["fm_embedding"].numpy(), batch["fm_tier"].numpy())
    with torch.no_grad():
        # bit-exact: the same layers on the same tensors in one process, plus terms that are exactly zero
        assert torch.equal(channel(batch), base(batch))
        # a channel weight that moves moves the output (the check above is not vacuous)
        channel.score_path.gain[TIER_PAIR] = 1.0
        moved = channel(batch)
    pair = batch["fm_tier"] == TIER_PAIR
    assert_far_apart(moved[pair], base(batch)[pair])
    assert_close(moved[~pair], base(batch)[~pair])  # only tier 1 has a gain


def test_nothing_served_reaches_nothing_of_the_channel():
    """Tier 0 rows: neither their (zero) vector's FM score, nor their unknown age, nor the score path."""
    config = _config()
    torch.manual_seed(2)
    model = warm_start_vm(VerticalModel(vm_spec(config)), vm_spec(config, with_fm_embedding=True)).eval()
    model.set_fm_head(nn.Linear(DIM, 1))
    assert model.score_path is not None
    with torch.no_grad():
        for parameter in model.channel_parameters():  # the vector's weights stay 0: tier 0's vector is 0 anyway
            parameter.normal_()
    batch = _served(64, seed=3)
    none = batch["fm_tier"] == TIER_NONE
    other = dict(batch, fm_age=torch.where(none, torch.tensor(123.0), batch["fm_age"]))
    with torch.no_grad():
        assert_close(model(other)[none], model(batch)[none])
        model.score_path.head_bias.fill_(5.0)  # the zero vector's "score" is the head's bias: not read
        assert_close(model(batch)[none], model(other)[none])


def test_the_channel_learns_at_its_own_rate_and_the_body_at_the_fine_tunes():
    config = _config()
    model = VerticalModel(vm_spec(config, with_fm_embedding=True))
    body, channel = channel_parameter_groups(model, body_rate=1e-4, channel_rate=2e-3)
    assert body["lr"] == 1e-4 and channel["lr"] == 2e-3
    named = {id(p): name for name, p in model.named_parameters()}
    assert sorted(named[id(p)] for p in channel["params"]) == [
        "score_path.age_gain", "score_path.gain", "score_path.shift", "signal_in.weight"]
    assert len(body["params"]) + len(channel["params"]) == len(named)  # every weight in exactly one group
    assert {"net.0.weight", "vector_in.weight"} <= {named[id(p)] for p in body["params"]}  # as concat's
    assert VerticalModel(vm_spec(_config("model.adapter.design=concat"), True)).channel_parameters() == []


def test_a_channel_vm_checkpoint_round_trips_and_a_plain_vm_writes_no_channel_field(tmp_path):
    config = _config()
    torch.manual_seed(4)
    model = VerticalModel(vm_spec(config, with_fm_embedding=True)).eval()
    model.set_fm_head(nn.Linear(DIM, 1))
    with torch.no_grad():
        for parameter in model.channel_parameters():
            parameter.normal_()
    batch = _served(32, seed=5)
    folder = save_checkpoint(model, tmp_path / "vm", {"test": True})
    loaded, _ = load_checkpoint(folder, "vm")
    with torch.no_grad():
        assert_close(loaded.eval()(batch), model(batch))
    assert "channel" not in VMSpec().to_dict() and VMSpec(fm_embedding_dim=8, channel=True).to_dict()["channel"]
    with pytest.raises(ValueError, match="FM embedding slot"):
        VerticalModel(VMSpec(channel=True))


def test_the_channel_refuses_missing_ages_a_missing_head_and_a_concat_warm_start():
    config = _config()
    model = VerticalModel(vm_spec(config, with_fm_embedding=True))
    batch = _served(16, seed=6)
    del batch["fm_age"]
    with pytest.raises(ValueError, match="fm_age"):
        model(batch)
    concat = VerticalModel(vm_spec(_config("model.adapter.design=concat"), with_fm_embedding=True))
    with pytest.raises(ValueError, match="shape"):
        warm_start_vm(concat, vm_spec(config, with_fm_embedding=True))
    events = _oracle_world(informative=True, seed=0)["tail"]
    vectors = np.zeros((len(events), DIM), dtype=np.float32)
    tiers = np.ones(len(events), dtype=np.int64)
    with pytest.raises(ValueError, match="fm_age"):
        train_vm(events, config, 1, "solaris", fm_embedding=vectors, fm_tier=tiers, fm_head=nn.Linear(DIM, 1))
    with pytest.raises(ValueError, match="fm_head"):
        train_vm(events, config, 1, "solaris", fm_embedding=vectors, fm_tier=tiers, fm_age=np.zeros(len(events)))
    with pytest.raises(ValueError, match="reads no ages"):
        fit_adapter(AdapterSpec(DIM, age=True), nn.Linear(DIM, 1), body_logits=np.zeros(4), labels=np.zeros(4),
                    ts_seconds=np.arange(4), vectors=np.zeros((4, DIM)), tiers=np.ones(4), l2=0.0,
                    validation_fraction=0.5, min_validation_rows=1)


def test_an_adapter_without_the_age_slope_is_unchanged_by_it():
    """The adapter design's module: the age option adds a weight, and only when asked for."""
    assert TierAdapter(AdapterSpec(DIM)).age_gain is None
    adapter = TierAdapter(AdapterSpec(DIM, vector=False, age=True))
    assert adapter.age_gain is not None and adapter.age_gain.shape == (N_TIERS,)
    with pytest.raises(ValueError, match="age"):
        adapter(torch.zeros(2, DIM), torch.ones(2, dtype=torch.long))


# --- the oracle at age 0: the test the channel exists for -------------------------------------------

ORACLE_DIM = 64  # the pipeline's vectors: the score is one direction of many the first layer could fit


def _vectors_scoring(head: nn.Linear, scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Random vectors that ``head`` scores exactly ``scores`` (moved along the head's weight)."""
    weight = head.weight.detach().numpy().reshape(-1).astype(np.float64)
    bias = float(head.bias.detach())
    raw = rng.normal(size=(scores.size, weight.size))
    return (raw + np.outer(scores - (raw @ weight + bias), weight / (weight @ weight))).astype(np.float32)


def _oracle_world(*, informative: bool, seed: int, dim: int = ORACLE_DIM) -> dict:
    """A world where the FM knows each pair's click logit and the VM's own features only part of it.

    Pre-training rows (the VM's history), a tail to fine-tune on, held-out scored rows. A row's label
    is drawn from an item effect (which a VM learns from the item's id and like rate) plus a pair
    term of its own (which only the FM knows); the served vector of every row is the exact fresh pair
    (tier 1, age 0) that the FM's head scores as that logit - or, when not ``informative``, as an
    independent draw of the same spread (noise).
    """
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    head = nn.Linear(dim, 1)
    item_effect = rng.normal(0.0, 0.8, 200)
    world: dict = {"head": head}
    start = 0
    for part, n in (("pre", 6000), ("tail", 6000), ("scored", 4000)):
        users, items = rng.integers(0, 300, n), rng.integers(0, 200, n)
        logits = 0.3 + item_effect[items] + rng.normal(0.0, 0.8, n)
        ts = start + np.sort(rng.integers(0, 20 * 3600, n)).astype(np.int64)
        labels = (rng.random(n) < 1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
        world[part] = EventArrays(users, items, ts, labels)
        start = int(ts.max()) + 60
        scores = logits if informative else rng.normal(logits.mean(), logits.std(), n)
        world[f"{part}_fm"] = {"fm_embedding": _vectors_scoring(head, scores, rng),
                               "fm_tier": np.full(n, TIER_PAIR, dtype=np.int64),
                               "fm_age": np.zeros(n, dtype=np.float32)}  # the exact pair, fresh
        world[f"{part}_true_logit"] = logits
    return world


def _log_loss(labels: np.ndarray, probabilities: np.ndarray) -> float:
    p = np.clip(probabilities.astype(np.float64), 1e-7, 1 - 1e-7)
    return float(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))


@functools.lru_cache(maxsize=None)
def _oracle_log_losses(*, informative: bool, design: str = "channel") -> dict[str, float]:
    """Scored-rows log loss of the FM, the fine-tuned VM and the VM+SOLARIS of ``design`` fed the oracle.

    The evaluation's recipe on a small scale: a VM pre-trained at ``model.training``'s rate, then
    fine-tuned on the tail at ``evaluation.finetune_learning_rate`` (the warm start kept when no epoch
    beats it), batch 64, 10 epochs at most: ~850 optimizer steps, about the evaluation's on a day's tail.
    Cached: pure in its arguments (seeded, one thread), and shared by the tests below.
    """
    world = _oracle_world(informative=informative, seed=7)
    config = _config(f"model.embedding_dim={ORACLE_DIM}", "model.training.batch_size=128",
                     "model.training.max_epochs=10", "model.training.threads=1", f"model.adapter.design={design}")
    finetune = config.model.training.model_copy(update={
        "batch_size": 64, "learning_rate": config.evaluation.finetune_learning_rate})
    base = train_vm(world["pre"], config, 1, "baseline").model
    tuned = train_vm(world["tail"], config, 2, "baseline", init_from=base, training=finetune,
                     keep_initial=True).model
    served = dict(world["tail_fm"], fm_head=world["head"]) if design == "channel" else {
        "fm_embedding": world["tail_fm"]["fm_embedding"], "fm_tier": world["tail_fm"]["fm_tier"]}
    solaris = train_vm(world["tail"], config, 2, "solaris", init_from=base, training=finetune, keep_initial=True,
                       **served).model
    scored = world["scored"]
    features = scored.features(config.model.history_length)
    extras = world["scored_fm"]
    with torch.no_grad():
        fm_logits = world["head"](torch.as_tensor(extras["fm_embedding"])).numpy().reshape(-1)
    return {
        "fm": _log_loss(scored.label, 1.0 / (1.0 + np.exp(-fm_logits))),
        "truth": _log_loss(scored.label, 1.0 / (1.0 + np.exp(-world["scored_true_logit"]))),
        "vm": _log_loss(scored.label, predict(tuned, features)),
        "solaris": _log_loss(scored.label, predict(solaris, features, extras)),
    }


def _recovered(loss: dict[str, float], edge_of: dict[str, float]) -> float:
    """Share of the FM's edge over the VM (in ``edge_of``'s world) that the VM+SOLARIS closed."""
    return (loss["vm"] - loss["solaris"]) / (edge_of["vm"] - edge_of["fm"])


def test_the_oracle_at_age_0_recovers_most_of_the_fms_edge():
    """Given the exact fresh pair, the channel VM closes >= 80 % of the log-loss gap from the VM to the FM."""
    loss = _oracle_log_losses(informative=True)
    assert_close(loss["fm"], loss["truth"])  # the FM's head scores the served vector as the true logit
    assert loss["vm"] - loss["fm"] > 0.05, loss  # the FM knows much more than the VM's own features
    assert _recovered(loss, loss) >= 0.8, loss


def test_a_noise_score_recovers_nothing():
    """The same world and recipe with a score that is noise: no gain, so the gain above is the score's."""
    informative = _oracle_log_losses(informative=True)
    noise = _oracle_log_losses(informative=False)
    assert noise["fm"] > noise["vm"], noise  # the noise "FM" is worse than knowing nothing
    assert _recovered(noise, informative) < 0.1, (noise, informative)
    assert noise["solaris"] < noise["vm"] + 0.01, noise  # ...and the noise does little harm


def test_the_score_path_carries_more_of_the_edge_than_the_vector_in_the_first_layer():
    """Concat (the vector and tier in the first layer, at the fine-tune's rate) closes less of the same gap."""
    channel = _oracle_log_losses(informative=True)
    concat = _oracle_log_losses(informative=True, design="concat")
    assert _recovered(channel, channel) >= _recovered(concat, channel) + 0.05, (channel, concat)


def test_the_channel_learns_to_trust_an_older_value_less():
    """Served values whose share of the pair's signal decays with their age (the rest noise): the
    trained VM's response to the FM score falls with the value's age; without the age it could not."""
    world = _oracle_world(informative=True, seed=7)
    rng = np.random.default_rng(1)
    for part in ("tail", "scored"):
        logits = world[f"{part}_true_logit"]
        ages = rng.uniform(0, 7200, logits.size)
        kept = np.exp(-ages / 900)  # the share of the pair's signal left at this age
        scores = kept * logits + np.sqrt(1 - kept**2) * rng.normal(logits.mean(), logits.std(), logits.size)
        world[f"{part}_fm"] = dict(world[f"{part}_fm"], fm_embedding=_vectors_scoring(world["head"], scores, rng),
                                   fm_age=ages.astype(np.float32))
    config = _config(f"model.embedding_dim={ORACLE_DIM}", "model.training.batch_size=128",
                     "model.training.max_epochs=10", "model.training.threads=1")
    finetune = config.model.training.model_copy(update={
        "batch_size": 64, "learning_rate": config.evaluation.finetune_learning_rate})
    base = train_vm(world["pre"], config, 1, "baseline").model
    model = train_vm(world["tail"], config, 2, "solaris", init_from=base, training=finetune, keep_initial=True,
                     fm_head=world["head"], **world["tail_fm"]).model.eval()
    batch = to_tensors(world["scored"].features(config.model.history_length))
    vectors = torch.as_tensor(world["scored_fm"]["fm_embedding"])
    weight = world["head"].weight.detach().reshape(-1)
    one_up = weight / (weight @ weight)  # moves every vector's FM score up by exactly 1
    tiers = torch.full((vectors.shape[0],), TIER_PAIR)
    response = []
    with torch.no_grad():
        for age in (0.0, 60.0, 900.0, 3600.0, 7200.0):
            ages = torch.full((vectors.shape[0],), age)
            low = model(dict(batch, fm_embedding=vectors, fm_tier=tiers, fm_age=ages))
            high = model(dict(batch, fm_embedding=vectors + one_up, fm_tier=tiers, fm_age=ages))
            response.append(float((high - low).mean()))
    assert all(a > b for a, b in zip(response, response[1:])), response  # older, less
    assert response[-1] > 0 and response[0] >= 2 * response[-1], response
