import dataclasses
import logging

import numpy as np
import pytest
import torch
from torch import nn

from solaris.models.common import numeric_features, pick_device, to_tensors
from solaris.models.fm import FoundationModel
from solaris.models.vm import VerticalModel, VMSpec, distillation_loss, verifier_scores
from tests.tolerance import assert_close, assert_far_apart
from tests.unit.small_models import SMALL_FM, small_features


def test_fm_outputs_pair_embedding_logit_and_user_representation():
    torch.manual_seed(0)
    model = FoundationModel(SMALL_FM).eval()
    features, _ = small_features()
    batch = to_tensors(features)
    with torch.inference_mode():
        pair, logit = model(batch)
        user = model.user_representation(batch)
    assert pair.shape == (64, 16) and logit.shape == (64,) and user.shape == (64, 16)
    assert torch.isfinite(pair).all() and torch.isfinite(logit).all()
    assert not features.hist_mask[0].any()  # the first request has no history and still works


def test_fm_is_deterministic_given_seed():
    """The seed draws the weights: bit-for-bit the same in one process (not across CPUs: torch's
    ``ATEN_CPU_CAPABILITY=default`` and ``avx2`` kernels draw different normals). The two models'
    outputs are compared as model outputs are, within the tolerance."""
    features, _ = small_features()
    weights, outputs = [], []
    for _ in range(2):
        torch.manual_seed(123)
        model = FoundationModel(SMALL_FM).eval()
        weights.append(model.state_dict())
        with torch.inference_mode():
            outputs.append(model(to_tensors(features))[0])
    for name in weights[0]:
        assert torch.equal(weights[0][name], weights[1][name]), name  # bit-exact: the seed's draws, no arithmetic
    assert_close(outputs[0], outputs[1])


def test_fm_pair_embedding_depends_on_item():
    torch.manual_seed(0)
    model = FoundationModel(SMALL_FM).eval()
    features, _ = small_features()
    batch = to_tensors(features)
    other = dict(batch, item_id=batch["item_id"] + 1000)
    with torch.inference_mode():
        assert not torch.allclose(model(batch)[0], model(other)[0])
        assert torch.allclose(model.user_representation(batch), model.user_representation(other))


@pytest.mark.parametrize("self_attention", [True, False])
def test_fm_without_self_attention_or_with_user_id_dropout_stays_finite(self_attention):
    spec = dataclasses.replace(SMALL_FM, self_attention=self_attention, user_id_dropout=0.5)
    torch.manual_seed(0)
    model = FoundationModel(spec)
    assert (model.encoder is None) is (not self_attention)
    features, labels = small_features()
    batch = to_tensors(features)
    pair, logit = model.train()(batch)
    nn.functional.binary_cross_entropy_with_logits(logit, torch.as_tensor(labels)).backward()
    assert torch.isfinite(pair).all() and torch.isfinite(logit).all()
    with torch.inference_mode():
        first, second = model.eval()(batch)[1], model(batch)[1]
    # bit-exact: no random draw when scoring, so the same computation twice on the same batch
    assert torch.equal(first, second)  # the id dropout acts in training only


def test_fm_user_id_table_starts_at_zero_with_id_dropout_and_never_moves_at_full_dropout():
    """An untrained bucket must mean "unknown user", the zero vector the dropout trained on."""
    assert FoundationModel(SMALL_FM).user_emb.table.weight.abs().sum() > 0  # no dropout: random start
    torch.manual_seed(0)
    model = FoundationModel(dataclasses.replace(SMALL_FM, user_id_dropout=1.0))
    assert model.user_emb.table.weight.abs().sum() == 0
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    features, labels = small_features()
    for _ in range(3):
        loss = nn.functional.binary_cross_entropy_with_logits(model.train()(to_tensors(features))[1],
                                                              torch.as_tensor(labels))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert model.user_emb.table.weight.abs().sum() == 0
    assert model.item_emb.table.weight.abs().sum() > 0


def test_vm_with_and_without_fm_slot():
    features, _ = small_features()
    batch = to_tensors(features)
    baseline = VerticalModel(VMSpec(id_buckets=64, id_dim=4, hidden=(8,)))
    assert baseline(batch).shape == (64,)
    solaris = VerticalModel(VMSpec(id_buckets=64, id_dim=4, hidden=(8,), fm_embedding_dim=16))
    batch = dict(batch, fm_embedding=torch.zeros(64, 16), fm_tier=torch.zeros(64, dtype=torch.long))
    assert solaris(batch).shape == (64,)
    with pytest.raises(ValueError, match="dim"):
        solaris(dict(batch, fm_embedding=torch.zeros(64, 8)))


def test_vm_user_id_dropout_makes_every_untrained_user_the_same_learned_unknown_user():
    """With the FM's rule, users the VM never trained on share one prediction whatever the seed drew;
    without it, each reads its own random bucket vector.

    What is exact is the input: both unseen users look up the zero vector, so the two probe rows
    reach the network bit-for-bit the same. Their outputs agree only within the tolerance: which
    kernel computes which row of a batch (row blocking, SIMD tails) depends on the CPU, and two
    identical rows scored -0.16816831 and -0.16816829 on an AMD EPYC.
    """
    features, labels = small_features()
    batch = to_tensors(features)
    seen = set(features.user_id.tolist())
    unseen = torch.tensor([id_ for id_ in range(1000, 1100) if id_ not in seen][:2])
    probe = {name: value[:1].repeat(2, *[1] * (value.dim() - 1)) for name, value in batch.items()}
    probe["user_id"] = unseen

    def trained(share: float, seed: int) -> VerticalModel:
        torch.manual_seed(seed)
        model = VerticalModel(VMSpec(id_buckets=4096, id_dim=4, hidden=(8,), user_id_dropout=share))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        for _ in range(5):
            loss = nn.functional.binary_cross_entropy_with_logits(model.train()(batch), torch.as_tensor(labels))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return model.eval()

    model, without_rule = trained(0.5, seed=1), trained(0.0, seed=1)
    with torch.inference_mode():
        looked_up = model.user_emb(unseen)
        assert not looked_up.any()  # bit-exact: an embedding lookup copies the untouched zero rows
        inputs = torch.cat([looked_up, model.item_emb(probe["item_id"]), numeric_features(probe)], dim=-1)
        assert torch.equal(inputs[0], inputs[1])  # bit-exact: lookups and copies of the same probe row
        first, second = model(probe)
        assert_close(first, second)  # unseen users: the zero vector, one "unknown user"
        assert model.user_emb.table.weight.abs().sum() > 0  # trained users moved off zero
        # bit-exact: no random draw when scoring, so the same computation twice on the same batch
        assert torch.equal(model(batch), model(batch))  # no dropout when scoring
        first, second = without_rule(probe)
        assert_far_apart(first, second)  # without the rule: two random untrained vectors
    assert VMSpec(id_buckets=64, id_dim=4).user_id_dropout == 0.0  # checkpoints from before the field


def test_kd_loss_reduces_to_bce_at_weight_zero_and_uses_teacher_otherwise():
    logit = torch.tensor([0.3, -1.2, 2.0])
    labels = torch.tensor([1.0, 0.0, 1.0])
    teacher = torch.tensor([-2.0, 3.0, 0.0])
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logit, labels)
    assert torch.allclose(distillation_loss(logit, labels, teacher, weight=0.0, temperature=2.0), bce)
    mixed = distillation_loss(logit, labels, teacher, weight=0.5, temperature=2.0)
    assert not torch.allclose(mixed, bce)
    # pure KD at T=1 equals BCE against the teacher's probabilities
    pure = distillation_loss(logit, labels, teacher, weight=1.0, temperature=1.0)
    assert torch.allclose(pure, torch.nn.functional.binary_cross_entropy_with_logits(logit, torch.sigmoid(teacher)))


def test_verifier_scores_are_probabilities_and_refuse_fm_inputs():
    features, _ = small_features(n=100)
    model = VerticalModel(VMSpec(id_buckets=64, id_dim=4, hidden=(8,)))
    scores = verifier_scores(model, features, batch_size=32)
    assert scores.shape == (100,) and scores.dtype == np.float32
    assert ((scores > 0) & (scores < 1)).all()
    with pytest.raises(ValueError):
        verifier_scores(VerticalModel(VMSpec(id_buckets=64, id_dim=4, hidden=(8,), fm_embedding_dim=4)), features)


def test_device_choice_falls_back_to_cpu():
    device = pick_device()
    assert device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert pick_device(prefer_gpu=False).type == "cpu"


def _tiny_training_set(n: int, seed: int, extra: tuple[str, ...] = ()):
    """``n`` random time-sorted events and a config of tiny models that train in a second."""
    import pandas as pd

    from solaris.config import load_config
    from solaris.models.training import EventArrays

    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"user_id": rng.integers(1, 30, n), "item_id": rng.integers(1, 40, n),
                          "ts": np.sort(rng.integers(0, 100_000, n)), "label": rng.integers(0, 2, n).astype(float)})
    config = load_config(overrides=["model.embedding_dim=8", "model.history_length=4", "model.fm.id_buckets=64",
                                    "model.fm.d_model=8", "model.fm.tower=[16]", "model.training.max_epochs=1",
                                    "model.training.batch_size=128", "model.fm.batch_size=128", *extra])
    return EventArrays.from_frame(frame), config


def test_out_of_fold_teacher_logits_never_come_from_an_fm_trained_on_the_example(monkeypatch):
    from solaris.models import training

    n = 600
    events, config = _tiny_training_set(n, seed=3)
    features = training.training_features(events.user_id, events.item_id, events.ts, events.label, history_length=4)
    trained_on, real_train_fm = [], training.train_fm

    def spy(events_, config_, seed, *, rows=None, **kwargs):
        trained_on.append(np.asarray(rows))
        return real_train_fm(events_, config_, seed, rows=rows, **kwargs)

    monkeypatch.setattr(training, "train_fm", spy)
    logits = training.out_of_fold_teacher_logits(events, config, 7, features=features, folds=3)
    assert logits.shape == (n,) and np.isfinite(logits).all()
    assert len(trained_on) == 3
    held_out = [np.setdiff1d(np.arange(n), rows) for rows in trained_on]
    assert sorted(np.concatenate(held_out).tolist()) == list(range(n))  # every example predicted exactly once
    for rows, held in zip(trained_on, held_out):
        assert np.intersect1d(rows, held).size == 0
        assert held.max() - held.min() + 1 == held.size  # events are time-sorted: a fold is one time interval
    with pytest.raises(ValueError, match="at least 2 folds"):
        training.out_of_fold_teacher_logits(events, config, 7, features=features, folds=1)


def test_training_gives_the_same_model_for_the_same_seed_whatever_ran_before():
    """The initial weights are drawn from the seed too (not from whatever global RNG state is left)."""
    from solaris.models import training

    events, config = _tiny_training_set(400, seed=5, extra=("model.training.threads=1",))
    for train in (training.train_fm, training.train_vm):
        first = train(events, config, 11).model.state_dict()
        torch.rand(1000)  # other work consuming the global RNG in between
        second = train(events, config, 11).model.state_dict()
        # bit-exact: one seed, one thread, the same shapes in one process: the same sums in the same order
        assert all(torch.equal(first[k], second[k]) for k in first), train.__name__


def test_fm_training_stops_at_the_fm_epoch_cap_below_the_shared_one():
    """The FM's epochs are bounded by model.fm.max_epochs even when model.training allows more."""
    from solaris.config import load_config
    from solaris.models.training import EventArrays, train_fm

    rng = np.random.default_rng(0)
    n = 400
    events = EventArrays(rng.integers(1, 30, n), rng.integers(1, 40, n), np.sort(rng.integers(0, 10**6, n)),
                         rng.integers(0, 2, n).astype(np.float32))
    small = ["model.embedding_dim=8", "model.history_length=4", "model.fm.id_buckets=64", "model.fm.d_model=8",
             "model.fm.tower=[16]", "model.training.patience=10", "model.training.threads=1"]
    capped = train_fm(events, load_config(overrides=[*small, "model.training.max_epochs=5", "model.fm.max_epochs=2"]),
                      seed=1)
    assert [row["epoch"] for row in capped.epochs] == [1, 2]
    free = train_fm(events, load_config(overrides=[*small, "model.training.max_epochs=3", "model.fm.max_epochs=9"]),
                    seed=1)
    assert [row["epoch"] for row in free.epochs] == [1, 2, 3]


def test_fm_training_uses_the_fm_batch_and_schedule_and_the_vm_the_shared_ones(monkeypatch):
    """model.fm.batch_size / lr_schedule reach the FM's (and its teachers') fit; the VM keeps model.training's."""
    from solaris.models import training

    seen = {}
    real_fit = training.fit

    def spy(model, *args, **kwargs):
        seen[kwargs["name"]] = args[3]
        return real_fit(model, *args, **kwargs)

    monkeypatch.setattr(training, "fit", spy)
    events, config = _tiny_training_set(300, seed=2, extra=("model.training.threads=1", "model.fm.batch_size=64",
                                                            "model.fm.lr_schedule=linear"))
    training.train_fm(events, config, 1)
    training.train_vm(events, config, 1)
    assert (seen["FM"].batch_size, seen["FM"].lr_schedule) == (64, "linear")
    assert (seen["VM[baseline]"].batch_size, seen["VM[baseline]"].lr_schedule) == (128, "constant")


def test_early_stopping_waits_for_min_steps_from_fresh_weights_but_not_from_a_warm_start():
    """Epochs without improvement count against patience only after model.training.min_steps steps.

    A learning rate of 1e-9 leaves validation NE unchanged, so every epoch after the first is "no
    improvement": with patience 0 a training stops at epoch 2 unless the step floor holds it, and a
    warm start (epoch 0 a candidate) stops at epoch 1 whatever the floor.
    """
    from solaris.models import training

    # 400 events, 10 % validation, batch 128: 3 optimizer steps an epoch
    base = ("model.training.threads=1", "model.training.patience=0", "model.training.learning_rate=1e-9",
            "model.training.max_epochs=6")
    events, no_floor = _tiny_training_set(400, seed=5, extra=(*base, "model.training.min_steps=0"))
    _, floor = _tiny_training_set(400, seed=5, extra=(*base, "model.training.min_steps=10"))

    def epochs(config, **kwargs):
        return [row["epoch"] for row in training.train_vm(events, config, 3, **kwargs).epochs]

    assert epochs(no_floor) == [1, 2]
    assert epochs(floor) == [1, 2, 3, 4]  # 3, 6, 9 steps: not counted; 12: counted, stops
    warm = training.train_vm(events, no_floor, 3).model
    assert epochs(floor, init_from=warm, keep_initial=True) == [0, 1]


def test_a_linear_schedule_anneals_the_rate_to_zero_over_the_epoch_budget():
    """model.training.lr_schedule=linear: full rate at the first step, half at mid-budget, none at the end.

    And through fit: a linear training's weights differ from a constant-rate training of the same
    seed (the schedule is applied) and repeat exactly (it is deterministic).
    """
    from solaris.models import training

    constant, linear = training._rate_factor("constant", 10), training._rate_factor("linear", 10)
    assert [constant(step) for step in (0, 5, 10)] == [1.0, 1.0, 1.0]
    assert [linear(step) for step in (0, 5, 10, 12)] == [1.0, 0.5, 0.0, 0.0]
    base = ("model.training.threads=1", "model.training.max_epochs=2", "model.training.patience=5")
    events, flat = _tiny_training_set(400, seed=5, extra=base)
    _, decayed = _tiny_training_set(400, seed=5, extra=(*base, "model.training.lr_schedule=linear"))

    def weights(config):
        model = training.train_vm(events, config, 3).model
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    assert torch.equal(weights(decayed), weights(decayed))  # bit-exact: one seed and thread, same shapes, one process
    assert not torch.allclose(weights(decayed), weights(flat))


def test_training_reports_each_epoch_as_progress_and_nothing_at_warning(caplog):
    """The FM's and VMs' trainings say which epoch of how many, its validation NE and the time left
    (solaris.progress); under --log-level WARNING they say nothing."""
    from solaris.models import training

    events, config = _tiny_training_set(300, seed=3, extra=("model.training.threads=1",
                                                            "model.training.max_epochs=2", "model.fm.max_epochs=2"))
    caplog.set_level(logging.INFO, logger="solaris.models.training")
    training.train_fm(events, config, 1)
    lines = [r.getMessage() for r in caplog.records if r.name == "solaris.models.training"]
    assert any(line.startswith("training FM: epoch ") and "valid NE " in line and "elapsed " in line for line in lines)
    assert lines[-1].startswith("training FM: epoch ") and "/2 (" in lines[-1]  # the last epoch run, always
    caplog.clear()
    caplog.set_level(logging.WARNING, logger="solaris.models.training")
    training.train_vm(events, config, 1)
    assert not [r for r in caplog.records if r.name == "solaris.models.training"]
