"""Step 5 of the evaluation: every variant's probability on the scored requests.

Why a module of its own: this is where the variants of :mod:`solaris.evaluation.protocol` meet the
models of steps 1 and 4 and the inputs of step 3; a variant that is not predicted here is not in
the report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np
import torch
from torch import nn

from solaris.drivers.evaluate.finetune import FineTunedVMs
from solaris.drivers.evaluate.serving import AgedRequests, FedInputs, fm_threads
from solaris.drivers.evaluate.training import TrainedModels
from solaris.drivers.evaluate.windows import EvaluationData, WindowRows
from solaris.evaluation import freshness
from solaris.evaluation import protocol as evaluation
from solaris.models.training import predict
from solaris.tiers import TIER_PAIR

if TYPE_CHECKING:  # pragma: no cover
    from solaris.config import SolarisConfig
    from solaris.models.fm import FoundationModel


@dataclass(frozen=True)
class ScoredPredictions:
    """Step 5: every variant's probability on each scored request, and the tier that served it."""

    by_variant: dict[str, np.ndarray]
    served_tier: np.ndarray
    seconds: float


def fm_head_probabilities(fm: nn.Module, embeddings: np.ndarray) -> np.ndarray:
    """The FM's click probability from its pair embeddings (its linear head), e.g. the oracle's vectors."""
    head = cast("FoundationModel", fm).head
    with torch.inference_mode():
        logits = head(torch.as_tensor(np.ascontiguousarray(embeddings, dtype=np.float32))).squeeze(-1)
    return torch.sigmoid(logits).numpy()


def predict_scored(
    config: SolarisConfig, rows: WindowRows, data: EvaluationData, *, models: TrainedModels, tuned: FineTunedVMs,
    inputs: FedInputs, aged: AgedRequests,
) -> ScoredPredictions:
    """Step 5: every variant on the scored requests; the SOLARIS model fed tiers up to 1, 2, ... too.

    The freshness curve's variants too (:mod:`solaris.evaluation.freshness`): the FM at each age from
    ``aged``, and the oracle model fed the FM's exact pair at each of its ages (tier 1, that age).
    """
    started = time.monotonic()
    features_scored = data.features.take(rows.scored)

    def fed(model: nn.Module, vectors: np.ndarray, tiers: np.ndarray, ages: np.ndarray) -> np.ndarray:
        return predict(model, features_scored, {"fm_embedding": vectors, "fm_tier": tiers,
                                                "fm_age": ages.astype(np.float32)})

    fm_threads(config)
    by_variant = {"fm": aged.probabilities[0],
                  evaluation.FM_AT_TICK: fm_head_probabilities(models.fm, inputs.scored[evaluation.SOLARIS_ORACLE][0])}
    for name, model in ((evaluation.PRETRAINED["vm_baseline"], models.baseline), ("vm_baseline", tuned.baseline),
                        (evaluation.PRETRAINED["vm_distilled"], models.distilled), ("vm_distilled", tuned.distilled)):
        by_variant[name] = predict(model, features_scored)
    served_vectors, served_tiers, served_ages = inputs.scored[evaluation.SOLARIS_ALL]
    for name in evaluation.ABLATION:
        vectors, tiers = evaluation.served_up_to_tier(served_vectors, served_tiers, evaluation.SOLARIS_MAX_TIER[name])
        by_variant[name] = fed(tuned.solaris, vectors, tiers, evaluation.ages_where_served(served_ages, tiers))
    by_variant["solaris_distilled"] = fed(tuned.solaris_distilled, served_vectors, served_tiers, served_ages)
    for name, fed_model in ((evaluation.SOLARIS_NONE, tuned.control), (evaluation.SOLARIS_PLACEBO, tuned.placebo),
                            (evaluation.SOLARIS_ORACLE, tuned.oracle)):
        by_variant[name] = fed(fed_model, *inputs.scored[name])
    curve = config.evaluation.freshness
    for age in curve.fm_ages_minutes:
        by_variant[freshness.fm_variant(age)] = aged.probabilities[age]
    pair = np.full(rows.scored.size, TIER_PAIR, dtype=np.int64)
    for age in curve.oracle_ages_minutes:
        by_variant[freshness.oracle_variant(age)] = fed(tuned.oracle, aged.vectors[age], pair,
                                                        np.full(rows.scored.size, 60.0 * age))
    return ScoredPredictions(by_variant, served_tiers, time.monotonic() - started)
