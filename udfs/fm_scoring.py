"""FM (+ verifier) scoring as an Arrow ``mapInArrow`` function, the heart of the precompute.

Design, in the spirit of Spark's ``predict_batch_udf``:

* **Model loaded once per Python worker**, not per batch or task: a module-level cache keyed by
  checkpoint path, version and device. Spark reuses Python workers across tasks
  (``spark.python.worker.reuse``), so a worker loads each checkpoint once. Only paths travel in
  the closure, never weights.
* **Model batch size separate from the Arrow batch size**: Arrow hands us record batches of
  ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows; we run the FM on slices of
  ``model_batch_size`` rows within them (cache-friendly on CPU, memory-bounded on GPU).
* **Device from the task's resources**: a GPU when Spark granted this task one
  (``TaskContext.resources()['gpu']``), else CPU with ``torch_threads`` threads per worker.
* **Packed binary output** (:mod:`solaris.storage.embedding_codec`): the measured fastest column layout.
* Every row gets ``quarantine_reason`` (NULL when fine): non-finite embeddings or scores never
  reach the table.

Selected by measurement: in an earlier comparison on 2 cores (no script in this repository repeats
it), ``mapInArrow`` with binary output beat iterator pandas UDFs and ``predict_batch_udf`` by 1.5-2.5x.
``bench/scoring.py`` measures this path against plain torch: BENCHMARKS.md, "Scoring throughput".
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

log = logging.getLogger(__name__)

OUTPUT_SCHEMA = (
    "user_id bigint, item_id bigint, embedding binary, fm_score float, verifier_score float, "
    "fm_version string, verifier_version string, quarantine_reason string"
)
INPUT_COLUMNS = ("user_id", "item_id", "hist_items", "hist_labels", "hist_feedback", "hist_ts", "item_count",
                 "item_likes", "user_count")

# (path, device) -> (model, version); lives as long as the Python worker. Bounded (least recently
# used out first) because a long-lived worker sees a new checkpoint every retraining, and guarded by
# a lock because Spark may run several tasks' Python in one worker process (like pyspark's ModelCache).
MODEL_CACHE_SIZE = 4
_MODEL_CACHE: OrderedDict[tuple[str, str], tuple[nn.Module, str]] = OrderedDict()
_MODEL_CACHE_LOCK = threading.Lock()


@dataclass(frozen=True)
class ScoringSpec:
    """Everything the executors need, small and picklable (no tensors)."""

    fm_checkpoint: str
    verifier_checkpoint: str
    embedding_dim: int
    history_length: int
    request_ts: int  # the run's as-of, epoch seconds
    model_batch_size: int = 4096
    torch_threads: int = 1
    load_log_dir: str | None = None  # when set, each model load appends a line (tests, audits)


def task_device() -> str:
    """``cuda:<address>`` when the running Spark task was granted a GPU, else ``cpu``."""
    try:
        from pyspark import TaskContext

        context = TaskContext.get()
        resources = context.resources() if context is not None else {}
    except Exception:  # noqa: BLE001 - outside a task (driver, tests)
        resources = {}
    gpu = resources.get("gpu")
    if gpu is not None and gpu.addresses:
        import torch

        if torch.cuda.is_available():
            return f"cuda:{gpu.addresses[0]}"
    return "cpu"


def load_cached(
    path: str, arch: str, embedding_dim: int | None, device: str, load_log_dir: str | None = None
) -> tuple[nn.Module, str]:
    """The worker-wide model cache: each (checkpoint, device) is loaded once per Python worker."""
    key = (path, device)
    with _MODEL_CACHE_LOCK:
        if key in _MODEL_CACHE:
            _MODEL_CACHE.move_to_end(key)
            return _MODEL_CACHE[key]
        from solaris.models.checkpoint import load_checkpoint

        started = time.monotonic()
        model, metadata = load_checkpoint(path, arch, embedding_dim, device=device)
        _MODEL_CACHE[key] = (model, metadata["version"])
        while len(_MODEL_CACHE) > MODEL_CACHE_SIZE:
            _MODEL_CACHE.popitem(last=False)
        log.warning("pid %d loaded %s %s on %s in %.2fs", os.getpid(), arch, metadata["version"], device,
                    time.monotonic() - started)
        if load_log_dir:
            os.makedirs(load_log_dir, exist_ok=True)
            with open(os.path.join(load_log_dir, f"loads-{os.getpid()}.log"), "a") as handle:
                handle.write(f"{arch} {metadata['version']} {device}\n")
        return _MODEL_CACHE[key]


def list_parts(column: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    offsets = np.asarray(column.offsets, dtype=np.int64)
    values = column.values.to_numpy(zero_copy_only=False)
    return offsets - offsets[0], values[offsets[0]: offsets[-1]]


def score_batch(batch: pa.RecordBatch, spec: ScoringSpec, device: str) -> pa.RecordBatch:
    """Score one Arrow batch: features -> FM (pair embedding, score) + verifier score."""
    import torch

    from solaris.models.common import to_tensors
    from solaris.models.features import features_from_histories
    from solaris.storage.embedding_codec import encode_arrow

    fm, fm_version = load_cached(spec.fm_checkpoint, "fm", spec.embedding_dim, device, spec.load_log_dir)
    verifier, verifier_version = load_cached(spec.verifier_checkpoint, "vm", None, device, spec.load_log_dir)
    n = batch.num_rows
    columns = {name: batch.column(name) for name in INPUT_COLUMNS}
    offsets, items = list_parts(columns["hist_items"])
    _, labels = list_parts(columns["hist_labels"])
    _, feedback = list_parts(columns["hist_feedback"])
    _, times = list_parts(columns["hist_ts"])
    features = features_from_histories(
        columns["user_id"].to_numpy(), columns["item_id"].to_numpy(), hist_offsets=offsets, hist_items=items,
        hist_labels=labels, hist_feedback=feedback, hist_ts=times, item_count=columns["item_count"].to_numpy(),
        item_likes=columns["item_likes"].to_numpy(), user_count=columns["user_count"].to_numpy(),
        request_ts=spec.request_ts, history_length=spec.history_length,
    )
    embeddings = np.empty((n, spec.embedding_dim), dtype=np.float32)
    fm_scores = np.empty(n, dtype=np.float32)
    verifier_scores = np.empty(n, dtype=np.float32)
    with torch.inference_mode():
        for start in range(0, n, spec.model_batch_size):
            rows = slice(start, min(start + spec.model_batch_size, n))
            tensors = to_tensors(features, device, rows)
            pair, logit = fm(tensors)
            embeddings[rows] = pair.float().cpu().numpy()
            fm_scores[rows] = torch.sigmoid(logit).float().cpu().numpy()
            verifier_scores[rows] = torch.sigmoid(verifier(tensors)).float().cpu().numpy()
    finite_embedding = np.isfinite(embeddings).all(axis=1)
    reasons = np.where(~finite_embedding, "non-finite embedding",
                       np.where(~np.isfinite(fm_scores), "non-finite fm_score", None))  # type: ignore[call-overload]
    return pa.RecordBatch.from_arrays(
        [
            columns["user_id"], columns["item_id"], encode_arrow(embeddings),
            pa.array(fm_scores, pa.float32()), pa.array(verifier_scores, pa.float32()),
            pa.array([fm_version] * n, pa.string()), pa.array([verifier_version] * n, pa.string()),
            pa.array(reasons.tolist(), pa.string()),
        ],
        names=["user_id", "item_id", "embedding", "fm_score", "verifier_score", "fm_version", "verifier_version",
               "quarantine_reason"],
    )


def make_scorer(spec: ScoringSpec) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function handed to ``DataFrame.mapInArrow`` (closes over paths and sizes only)."""

    def score_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import torch

        device = task_device()
        if device == "cpu":
            torch.set_num_threads(spec.torch_threads)
        for batch in batches:
            if batch.num_rows:
                yield score_batch(batch, spec, device)

    return score_partition
