"""Executor-side functions of the KNN stage: FM user representations and per-cluster search.

* :func:`make_user_representer` (``mapInArrow``): history lists -> the FM's user-only vector
  (L2-normalised, packed float32), the model cached once per Python worker like the scorer.
* :func:`make_cluster_searcher` (``applyInPandas`` grouped by cluster): exact FAISS inner-product
  search of the cluster's queries among its members.
* :func:`merge_user_candidates` (``applyInPandas`` grouped by user): global top-k over the
  ``nprobe`` clusters a user was searched in.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

REPRESENTATION_SCHEMA = "user_id bigint, vector binary"
CANDIDATE_SCHEMA = "user_id bigint, neighbor_ids array<bigint>, similarities array<float>"
NEIGHBOR_SCHEMA = "user_id bigint, neighbor_ids array<bigint>, similarities array<float>"


def make_user_representer(fm_checkpoint: str, embedding_dim: int, history_length: int, request_ts: int,
                          batch_size: int = 4096, torch_threads: int = 1):
    def represent(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import torch

        from solaris.embedding_codec import encode_arrow
        from solaris.features import features_from_histories
        from solaris.knn import normalize
        from solaris.models.common import to_tensors
        from solaris.udfs.fm_scoring import list_parts, load_cached, task_device

        device = task_device()
        if device == "cpu":
            torch.set_num_threads(torch_threads)
        fm, _ = load_cached(fm_checkpoint, "fm", embedding_dim, device)
        for batch in batches:
            n = batch.num_rows
            if not n:
                continue
            offsets, items = list_parts(batch.column("hist_items"))
            _, labels = list_parts(batch.column("hist_labels"))
            _, times = list_parts(batch.column("hist_ts"))
            zeros = np.zeros(n, dtype=np.int64)
            features = features_from_histories(batch.column("user_id").to_numpy(), zeros, offsets, items, labels, times,
                                               zeros, zeros.astype(np.float64), batch.column("user_count").to_numpy(),
                                               request_ts, history_length)
            vectors = np.empty((n, embedding_dim), dtype=np.float32)
            with torch.inference_mode():
                for start in range(0, n, batch_size):
                    rows = slice(start, min(start + batch_size, n))
                    vectors[rows] = fm.user_representation(to_tensors(features, device, rows)).float().cpu().numpy()
            vectors = normalize(vectors)
            yield pa.RecordBatch.from_arrays([batch.column("user_id"), encode_arrow(vectors)], names=["user_id", "vector"])

    return represent


def make_cluster_searcher(k: int, embedding_dim: int):
    def search_cluster(frame: pd.DataFrame) -> pd.DataFrame:
        from solaris.embedding_codec import decode
        from solaris.knn import search

        members = frame[frame["is_member"]]
        queries = frame[frame["is_query"]]
        found, sims = search(members["user_id"].to_numpy(), decode(members["vector"].tolist(), embedding_dim),
                             queries["user_id"].to_numpy(), decode(queries["vector"].tolist(), embedding_dim), k)
        return pd.DataFrame({"user_id": queries["user_id"].to_numpy(), "neighbor_ids": list(found),
                             "similarities": list(sims)})

    return search_cluster


def merge_user_candidates(k: int):
    def merge(frame: pd.DataFrame) -> pd.DataFrame:
        from solaris.knn import merge_topk

        ids, sims = merge_topk(np.concatenate(frame["neighbor_ids"].to_numpy()),
                               np.concatenate(frame["similarities"].to_numpy()), k)
        return pd.DataFrame({"user_id": [int(frame["user_id"].iloc[0])], "neighbor_ids": [ids], "similarities": [sims]})

    return merge
