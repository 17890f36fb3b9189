import math

import numpy as np
import pytest
from sklearn.metrics import log_loss as sk_log_loss
from sklearn.metrics import roc_auc_score

from solaris.models.metrics import auc, calibration, log_loss, normalized_entropy, transfer_ratio


def test_log_loss_hand_computed():
    assert log_loss([1, 0], [0.8, 0.4]) == pytest.approx(-(math.log(0.8) + math.log(0.6)) / 2)


def test_ne_of_base_rate_predictor_is_one():
    labels = np.array([1, 0, 0, 1, 1])
    assert normalized_entropy(labels, np.full(5, 0.6)) == pytest.approx(1.0)
    assert normalized_entropy(labels, np.where(labels == 1, 0.9, 0.1)) < 0.5


def test_auc_hand_computed_and_ties():
    assert auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == pytest.approx(0.75)
    assert auc([0, 1], [0.5, 0.5]) == pytest.approx(0.5)
    assert math.isnan(auc([1, 1], [0.2, 0.3]))


def test_against_sklearn_on_random_data():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 5000)
    predictions = np.clip(rng.random(5000) * 0.5 + labels * 0.3, 0.01, 0.99)
    predictions[:200] = 0.5  # ties
    assert auc(labels, predictions) == pytest.approx(roc_auc_score(labels, predictions), abs=1e-12)
    assert log_loss(labels, predictions) == pytest.approx(sk_log_loss(labels, predictions), rel=1e-9)


def test_calibration_and_transfer_ratio():
    assert calibration([1, 0, 0, 1], [0.5, 0.5, 0.5, 0.5]) == pytest.approx(1.0)
    assert transfer_ratio(0.90, 0.86, 0.80) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="undefined"):
        transfer_ratio(0.8, 0.7, 0.8)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="length"):
        log_loss([1, 0], [0.5])
    with pytest.raises(ValueError, match="NaN"):
        auc([1, 0], [float("nan"), 0.2])
