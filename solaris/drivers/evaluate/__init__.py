"""Knowledge-transfer evaluation on time splits: replay SOLARIS, score every variant, decide with intervals.

Windows: the T0s given (``--as-of T0 [T0 ...]`` or ``evaluation.t0s``), each refused with a one-line
reason below ``evaluation.min_requests`` / ``min_users`` / ``min_training_events``; with none given,
the ``evaluation.windows`` densest non-overlapping windows of the data (most distinct requesting
users first). For each window and seed (docs/evaluation.md):

1. ``train_models``: the serving FM, the verifier (baseline VM) and a distilled VM
   (``model.distillation.teacher``) on events up to ``T0 - tail``;
2. ``replay_window``: the hourly precompute + enrichment over ``[T0 - tail, T0 + eval)`` exactly as
   the schedule runs it, in the seed's own warehouse folder;
3. ``serve_requests``: every request of ``(tick, tick + 1h]`` resolved through the snapshot
   published at ``tick`` (only what serving would have held); ``oracle_requests``: the serving FM's
   exact pair embedding for every request, from the history as of its tick (the ceiling's input);
   ``aged_requests``: the serving FM fed the history up to request - age for the freshness curve's
   ages (``evaluation.freshness``), one pass per age over the scored requests;
4. ``fine_tune``: the VM variants fine-tuned on the tail's requests, warm-started from step 1, with
   the same rows, budget and learning rate (``evaluation.finetune_learning_rate``), one thread, the
   warm start kept when no epoch beats it; every VM+SOLARIS model on the input it is scored with:
   what serving returned, nothing (the control), the served values permuted within each tier (the
   placebo), the exact pair (the oracle);
5. ``predict_scored``: the requests of ``(T0, T0 + eval]`` scored by the FM (upper bound), the VMs
   of step 1 (not fine-tuned) and every fine-tuned variant, the SOLARIS model fed tier 1 only /
   tiers 1-2 / ... / every tier, and the freshness curve (the FM by age, the oracle model fed the
   FM's pair of each oracle age);
6. ``score_seed``: metrics, coverage, hit rates and costs (a :class:`SeedResult`, its per-tick rows
   typed :class:`TickRow`).

Then 95 % intervals by bootstrap over users, paired across variants, pooled over seeds and windows
(``solaris.evaluation.bootstrap``). Writes ``<warehouse>/evaluation/<name>/``: ``metrics.json``,
``report.md`` (opening with verdict lines) and PNG plots.

Reuse: a checkpoint, a replay or a seed's result is reused only when its fingerprint matches (the
config sections it depends on, as-of, seed, a digest of the events, upstream model versions);
anything else is recomputed. ``--force`` recomputes everything; ``--quick`` is the CI preset.

    solaris evaluate                                    # the densest window(s) of the data
    solaris evaluate --as-of 2000-11-20T03:00:00Z 2000-08-03T04:00:00Z
    solaris evaluate --as-of 2026-01-03T12:00:00Z --quick
"""

# The package, by step (the data flows down this list): windows (events, windows, each window's rows),
# training (step 1), serving (steps 2-3: the replay, the served, oracle and aged values, each model's input),
# finetune (step 4), prediction (step 5), results (step 6: a seed's result, saved and reused), seed (steps
# 1-6 for one seed), summary (every window and seed pooled, the report: ``run``).
from solaris.drivers.evaluate.finetune import FINE_TUNED, FineTunedVMs, fine_tune
from solaris.drivers.evaluate.prediction import ScoredPredictions, fm_head_probabilities, predict_scored
from solaris.drivers.evaluate.results import COVERAGE_KEYS, SCORED_FILE, SERVED_TIER, coverage_text, score_seed
from solaris.drivers.evaluate.seed import evaluate_seed, replay_of
from solaris.drivers.evaluate.serving import (
    AgedRequests,
    FedInputs,
    ReplayOutcome,
    ServedFeatures,
    aged_requests,
    fed_inputs,
    oracle_ages,
    oracle_requests,
    replay_window,
    serve_requests,
)
from solaris.drivers.evaluate.summary import QUICK_OVERRIDES, WindowOutcome, run, summary_lines
from solaris.drivers.evaluate.training import TrainedModels, finetune_training, train_models
from solaris.drivers.evaluate.windows import END_OF_TIME, EvaluationData, WindowRows, choose_windows

__all__ = [
    "COVERAGE_KEYS", "END_OF_TIME", "FINE_TUNED", "QUICK_OVERRIDES", "SCORED_FILE", "SERVED_TIER", "AgedRequests",
    "EvaluationData", "FedInputs", "FineTunedVMs", "ReplayOutcome", "ScoredPredictions", "ServedFeatures",
    "TrainedModels", "WindowOutcome", "WindowRows", "aged_requests", "choose_windows", "coverage_text",
    "evaluate_seed", "fed_inputs", "fine_tune", "finetune_training", "fm_head_probabilities", "oracle_ages",
    "oracle_requests", "predict_scored", "replay_of", "replay_window", "run", "score_seed", "serve_requests",
    "summary_lines", "train_models",
]
