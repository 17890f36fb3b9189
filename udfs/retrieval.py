"""Executor-side functions of the retrieval source (``solaris.stages.candidates``): a user's items by FAISS.

The FM gives a user-only vector (the one KNN uses, ``udfs/knn.make_user_representer``) but no item
vector in the same space, so an item is represented by the mean user vector of the users who
engaged it recently (:func:`make_item_averager`, grouped by item): an item sits where its audience
sits. :func:`make_retriever` searches every user's vector against the broadcast item matrix with an
exact FAISS inner-product index, skips the items the user already engaged and keeps the top N,
scored in [0, 1] per user (inner product divided by the user's best).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import Broadcast

ITEM_SCHEMA = "item_id bigint, vector binary"
RETRIEVAL_SCHEMA = "user_id bigint, item_id bigint, score double"


def make_item_averager(embedding_dim: int) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """``applyInPandas`` grouped by item: the L2-normalised mean of its engagers' vectors."""

    def average(frame: pd.DataFrame) -> pd.DataFrame:
        from solaris.enrichment.knn import normalize
        from solaris.storage.embedding_codec import decode, encode_arrow

        vectors = decode(frame["vector"].tolist(), embedding_dim)
        mean = normalize(vectors.mean(axis=0, keepdims=True).astype(np.float32))
        packed = encode_arrow(mean).to_pylist()
        return pd.DataFrame({"item_id": [int(frame["item_id"].iloc[0])], "vector": packed})

    return average


def make_retriever(items_broadcast: Broadcast[tuple[np.ndarray, np.ndarray]], embedding_dim: int,
                   top_n: int) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``mapInArrow`` over (user_id, vector, engaged array<bigint>): the top N unengaged items per user."""

    def retrieve(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import faiss

        from solaris.storage.embedding_codec import decode

        faiss.omp_set_num_threads(1)
        item_ids, item_vectors = items_broadcast.value
        index = faiss.IndexFlatIP(embedding_dim)
        index.add(np.ascontiguousarray(item_vectors, dtype=np.float32))
        for batch in batches:
            if not batch.num_rows:
                continue
            users = batch.column("user_id").to_numpy()
            queries = decode(batch.column("vector"), embedding_dim)
            engaged = batch.column("engaged").to_pylist()
            depth = min(len(item_ids), top_n + max((len(e or ()) for e in engaged), default=0))
            sims, rows = index.search(np.ascontiguousarray(queries, dtype=np.float32), depth)
            out_users: list[int] = []
            out_items: list[int] = []
            out_scores: list[float] = []
            for user, user_rows, user_sims, seen in zip(users, rows, sims, engaged, strict=True):
                seen_set = set(seen or ())
                chosen = [(item_ids[r], s) for r, s in zip(user_rows, user_sims, strict=True)
                          if r >= 0 and item_ids[r] not in seen_set][:top_n]
                if not chosen:
                    continue
                best = max(chosen[0][1], 1e-6)
                out_users.extend([user] * len(chosen))
                out_items.extend(int(item) for item, _ in chosen)
                out_scores.extend(max(float(s) / best, 0.0) for _, s in chosen)
            yield pa.RecordBatch.from_arrays(
                [pa.array(out_users, pa.int64()), pa.array(out_items, pa.int64()), pa.array(out_scores, pa.float64())],
                names=["user_id", "item_id", "score"],
            )

    return retrieve
