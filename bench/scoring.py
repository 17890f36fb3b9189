"""Scoring throughput: pure torch in-process vs the Spark ``mapInArrow`` UDF, side by side.

The same FM + verifier checkpoints score the same N (user, item, history) pairs:

(a) in-process torch, T threads, batches of ``precompute.model_batch_size``;
(b) Spark ``local[T]``: read the features from Parquet, run ``udfs.fm_scoring`` (one torch thread
    per Python worker), and write the real ``pair_embeddings`` column types to a Delta table.

Prints pairs/s for each, peak RSS, and last ``spark/torch throughput ratio: X.XX``. Both runs are
warmed up first (the first Spark job of a session is 30-50% slower).

    .venv/bin/python bench/scoring.py --pairs 200000 --threads 2
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np


def peak_rss_mb() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return own, children


def make_inputs(n: int, history_length: int, seed: int):
    """Synthetic request features: ragged histories (0..N events), realistic id ranges."""
    rng = np.random.default_rng(seed)
    lengths = np.minimum(rng.geometric(1 / (history_length * 0.6), n), history_length)
    offsets = np.r_[0, np.cumsum(lengths)]
    total = int(offsets[-1])
    return {
        "user_id": rng.integers(1, 100_000, n), "item_id": rng.integers(1, 20_000, n), "offsets": offsets,
        "hist_items": rng.integers(1, 20_000, total), "hist_labels": rng.integers(0, 2, total).astype(np.float32),
        "hist_feedback": rng.integers(0, 7, total),
        "hist_ts": 1_700_000_000 - rng.integers(0, 30 * 86400, total), "item_count": rng.integers(0, 5000, n),
        "item_likes": rng.integers(0, 2000, n).astype(np.float64), "user_count": rng.integers(0, 500, n),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=200_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()

    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    from solaris.config import load_config
    from solaris.models.checkpoint import load_checkpoint, save_checkpoint
    from solaris.models.common import seed_everything, to_tensors
    from solaris.models.features import features_from_histories
    from solaris.models.fm import FoundationModel
    from solaris.models.training import fm_spec, vm_spec
    from solaris.models.vm import VerticalModel

    workdir = Path(tempfile.mkdtemp(prefix="solaris-bench-"))
    config = load_config(overrides=[f"warehouse={workdir}", f"spark.master=local[{args.threads}]",
                                    f"spark.shuffle_partitions={args.threads}", *args.overrides])
    seed_everything(config.seed)
    fm_dir = save_checkpoint(FoundationModel(fm_spec(config)), workdir / "models" / "fm", {"bench": True})
    vm_dir = save_checkpoint(VerticalModel(vm_spec(config)), workdir / "models" / "vm", {"bench": True})
    request_ts = 1_700_000_000
    inputs = make_inputs(args.pairs, config.model.history_length, config.seed)
    batch_size = config.precompute.model_batch_size
    dim = config.model.embedding_dim
    flops_note = sum(p.numel() for p in FoundationModel(fm_spec(config)).parameters())
    print(f"FM: {flops_note / 1e6:.1f}M parameters, D={dim}, history {config.model.history_length}; "
          f"{args.pairs} pairs; model batch {batch_size}; Arrow batch {config.spark.arrow_max_records_per_batch}")

    # (a) pure torch in-process
    torch.set_num_threads(args.threads)
    fm, _ = load_checkpoint(fm_dir, "fm")
    verifier, _ = load_checkpoint(vm_dir, "vm")

    def torch_pass(n: int) -> None:
        features = features_from_histories(
            inputs["user_id"][:n], inputs["item_id"][:n], hist_offsets=inputs["offsets"][: n + 1],
            hist_items=inputs["hist_items"], hist_labels=inputs["hist_labels"],
            hist_feedback=inputs["hist_feedback"], hist_ts=inputs["hist_ts"],
            item_count=inputs["item_count"][:n], item_likes=inputs["item_likes"][:n],
            user_count=inputs["user_count"][:n], request_ts=request_ts, history_length=config.model.history_length)
        out = np.empty((n, dim), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, n, batch_size):
                rows = slice(start, min(start + batch_size, n))
                tensors = to_tensors(features, "cpu", rows)
                out[rows] = fm(tensors)[0].numpy()
                torch.sigmoid(verifier(tensors))
        assert np.isfinite(out).all()

    torch_pass(min(args.pairs, 20_000))  # warm-up
    started = time.perf_counter()
    torch_pass(args.pairs)
    torch_seconds = time.perf_counter() - started
    torch_rate = args.pairs / torch_seconds
    print(f"(a) pure torch, {args.threads} threads : {torch_rate:>10,.0f} pairs/s ({torch_seconds:.1f}s)")

    # (b) Spark local[T] through the UDF, writing the real column types to Delta
    from pyspark.sql import functions as F

    from solaris.spark import get_spark
    from solaris.storage.table import Table, WriteRule
    from solaris.udfs.fm_scoring import OUTPUT_SCHEMA, ScoringSpec, make_scorer

    offsets = inputs["offsets"]
    table = pa.table(
        {
            "user_id": pa.array(inputs["user_id"], pa.int64()),
            "item_id": pa.array(inputs["item_id"], pa.int64()),
            "hist_items": pa.ListArray.from_arrays(
                pa.array(offsets, pa.int32()), pa.array(inputs["hist_items"], pa.int64())
            ),
            "hist_labels": pa.ListArray.from_arrays(
                pa.array(offsets, pa.int32()), pa.array(inputs["hist_labels"], pa.float32())
            ),
            "hist_feedback": pa.ListArray.from_arrays(
                pa.array(offsets, pa.int32()), pa.array(inputs["hist_feedback"], pa.int32())
            ),
            "hist_ts": pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(inputs["hist_ts"], pa.int64())),
            "item_count": pa.array(inputs["item_count"], pa.int64()),
            "item_likes": pa.array(inputs["item_likes"], pa.float64()),
            "user_count": pa.array(inputs["user_count"], pa.int64()),
        }
    )
    parquet_dir = workdir / "features"
    parquet_dir.mkdir()
    rows_per_file = -(-args.pairs // (args.threads * 4))
    for index, start in enumerate(range(0, args.pairs, rows_per_file)):
        pq.write_table(table.slice(start, rows_per_file), parquet_dir / f"part-{index:03d}.parquet")
    spark = get_spark(config, "bench-scoring")
    spec = ScoringSpec(
        str(fm_dir), str(vm_dir), dim, config.model.history_length, request_ts, batch_size, torch_threads=1
    )

    def spark_pass(limit: int | None, target: str) -> None:
        frame = spark.read.parquet(str(parquet_dir))
        if limit:
            frame = frame.limit(limit)
        scored = frame.mapInArrow(make_scorer(spec), OUTPUT_SCHEMA).withColumn("computed_at", F.current_timestamp())
        Table.at(str(workdir / target), spark=spark, rule=WriteRule("overwrite")).write(scored, target)

    spark_pass(20_000, "warmup")
    started = time.perf_counter()
    spark_pass(None, "pair_embeddings")
    spark_seconds = time.perf_counter() - started
    written = Table.at(str(workdir / "pair_embeddings"), spark=spark).row_count()
    assert written == args.pairs, written
    spark_rate = args.pairs / spark_seconds
    print(
        f"(b) Spark local[{args.threads}] mapInArrow -> Delta (binary embedding): {spark_rate:>10,.0f} pairs/s "
        f"({spark_seconds:.1f}s)"
    )
    own, children = peak_rss_mb()
    print(f"peak RSS: driver process {own:,.0f} MB, largest child (JVM / Python worker) {children:,.0f} MB")
    spark.stop()
    shutil.rmtree(workdir, ignore_errors=True)
    print(f"spark/torch throughput ratio: {spark_rate / torch_rate:.2f}")


if __name__ == "__main__":
    main()
