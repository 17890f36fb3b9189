"""Executor-side functions of the KNN stage: FM user representations and per-cluster search.

* :func:`make_user_representer` (``mapInArrow``): history lists -> the FM's user-only vector
  (L2-normalised, packed float32), the model cached once per Python worker like the scorer.
* :func:`make_cluster_assigner` (``mapInPandas``): each user -> one row per probed cluster (its
  ``nprobe`` nearest centroids, the first being the cluster it is a member of).
* :func:`make_cluster_searcher` (``applyInPandas`` grouped by cluster): exact FAISS inner-product
  search of the cluster's queries among its members. The per-user merge over the ``nprobe``
  clusters is a native Spark aggregation in ``solaris.stages.knn`` (no Python call per user).
* :func:`make_partition_topk` (``mapInPandas``): exact top-k of the recall query sample among one
  partition's users; merged on the driver this is exact search over all users.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator, cast

import numpy as np
import pandas as pd
import pyarrow as pa

if TYPE_CHECKING:  # pragma: no cover
    from datetime import datetime

    from pyspark import Broadcast
    from pyspark.sql import DataFrame

    from solaris.config import SolarisConfig
    from solaris.models.fm import FoundationModel

REPRESENTATION_SCHEMA = "user_id bigint, vector binary"
ASSIGNMENT_SCHEMA = "user_id bigint, vector binary, cluster_id bigint, is_member boolean"
CANDIDATE_SCHEMA = "user_id bigint, home_cluster bigint, neighbor_ids array<bigint>, similarities array<float>"
# one row per user after the merge: its best k (fewer when its clusters hold fewer) and its own cluster
CANDIDATE_LISTS_SCHEMA = "user_id bigint, neighbor_ids array<bigint>, similarities array<float>, cluster_id bigint"
PARTIAL_SCHEMA = "query bigint, neighbor bigint, similarity float"


def user_representation_step(fm_checkpoint: str, config: SolarisConfig,
                             as_of: datetime) -> Callable[[DataFrame], DataFrame]:
    """History rows (``spark_features.user_histories``) -> (``user_id``, ``vector``) rows through
    the FM at ``as_of``, with the pipeline's model settings: the one representation step that the
    KNN stage and the retrieval source share (``spark_features.user_vectors``)."""
    representer = make_user_representer(
        fm_checkpoint, embedding_dim=config.model.embedding_dim, history_length=config.model.history_length,
        request_ts=int(as_of.timestamp()), batch_size=config.precompute.model_batch_size,
        torch_threads=config.precompute.torch_threads)
    return lambda histories: histories.mapInArrow(representer, REPRESENTATION_SCHEMA)


def make_user_representer(fm_checkpoint: str, *, embedding_dim: int, history_length: int, request_ts: int,
                          batch_size: int = 4096,
                          torch_threads: int = 1) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def represent(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import torch

        from solaris.enrichment.knn import normalize
        from solaris.models.common import to_tensors
        from solaris.models.features import features_from_histories
        from solaris.storage.embedding_codec import encode_arrow
        from solaris.udfs.fm_scoring import list_parts, load_cached, task_device

        device = task_device()
        if device == "cpu":
            torch.set_num_threads(torch_threads)
        model, _ = load_cached(fm_checkpoint, "fm", embedding_dim, device)
        fm = cast("FoundationModel", model)  # load_cached(..., "fm", ...) returns the FM
        for batch in batches:
            n = batch.num_rows
            if not n:
                continue
            offsets, items = list_parts(batch.column("hist_items"))
            _, labels = list_parts(batch.column("hist_labels"))
            _, feedback = list_parts(batch.column("hist_feedback"))
            _, times = list_parts(batch.column("hist_ts"))
            zeros = np.zeros(n, dtype=np.int64)
            features = features_from_histories(
                batch.column("user_id").to_numpy(), zeros, hist_offsets=offsets, hist_items=items,
                hist_labels=labels, hist_feedback=feedback, hist_ts=times, item_count=zeros,
                item_likes=zeros.astype(np.float64),
                user_count=batch.column("user_count").to_numpy(), request_ts=request_ts,
                history_length=history_length)
            vectors = np.empty((n, embedding_dim), dtype=np.float32)
            with torch.inference_mode():
                for start in range(0, n, batch_size):
                    rows = slice(start, min(start + batch_size, n))
                    vectors[rows] = fm.user_representation(to_tensors(features, device, rows)).float().cpu().numpy()
            vectors = normalize(vectors)
            yield pa.RecordBatch.from_arrays([batch.column("user_id"), encode_arrow(vectors)],
                                             names=["user_id", "vector"])

    return represent


def _one_faiss_thread() -> None:
    """A Spark task owns one core: FAISS's OpenMP threads on many small searches oversubscribe the
    machine (measured 16x slower per-cluster search with 2 threads on a busy 2-core box)."""
    import faiss

    faiss.omp_set_num_threads(1)


def make_cluster_assigner(centroids_broadcast: Broadcast[np.ndarray], nprobe: int,
                          embedding_dim: int) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    def assign(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        from solaris.enrichment.knn import nearest_clusters
        from solaris.storage.embedding_codec import decode

        _one_faiss_thread()
        for frame in frames:
            if frame.empty:
                continue
            probes = nearest_clusters(decode(frame["vector"].tolist(), embedding_dim), centroids_broadcast.value,
                                      nprobe)
            for rank in range(probes.shape[1]):
                yield pd.DataFrame({"user_id": frame["user_id"], "vector": frame["vector"],
                                    "cluster_id": probes[:, rank], "is_member": rank == 0})

    return assign


def make_cluster_searcher(k: int, embedding_dim: int) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """One cluster's group -> per query (every row): top-k among the members, self excluded.

    Queries are processed in user-id order and ``home_cluster`` is the cluster id on the query's
    member row (-1 elsewhere), so the merge can keep it without a join.
    """
    def search_cluster(frame: pd.DataFrame) -> pd.DataFrame:
        from solaris.enrichment.knn import search
        from solaris.storage.embedding_codec import decode

        _one_faiss_thread()
        frame = frame.sort_values(["user_id", "is_member"], kind="stable")
        members = frame[frame["is_member"].to_numpy()]
        found, sims = search(members["user_id"].to_numpy(), decode(members["vector"].tolist(), embedding_dim),
                             frame["user_id"].to_numpy(), decode(frame["vector"].tolist(), embedding_dim), k)
        home_cluster = np.where(frame["is_member"].to_numpy(), frame["cluster_id"].to_numpy(), -1)
        return pd.DataFrame({"user_id": frame["user_id"].to_numpy(), "home_cluster": home_cluster,
                             "neighbor_ids": list(found), "similarities": list(sims)})

    return search_cluster


def make_partition_topk(queries_broadcast: Broadcast[tuple[np.ndarray, np.ndarray]], k: int,
                        embedding_dim: int) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """Exact top-k of the broadcast ``(query_ids, query_vectors)`` among one partition's users."""
    def local_topk(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        from solaris.enrichment.knn import search
        from solaris.storage.embedding_codec import decode

        _one_faiss_thread()
        ids, vectors = [], []
        for frame in frames:
            ids.append(frame["user_id"].to_numpy())
            vectors.append(decode(frame["vector"].tolist(), embedding_dim))
        if not ids:
            return
        query_ids, query_vectors = queries_broadcast.value
        found, sims = search(np.concatenate(ids), np.concatenate(vectors), query_ids, query_vectors, k)
        keep = found.ravel() >= 0
        yield pd.DataFrame({"query": np.repeat(query_ids, k)[keep], "neighbor": found.ravel()[keep],
                            "similarity": sims.ravel()[keep]})

    return local_topk
