"""Tier 3 preparation: k nearest neighbours of every known user in the FM's user space (FAISS).

At ``--as-of t``: each user's FM user-only representation is computed from their events up to
``t`` (``udfs/knn`` in ``mapInArrow``); k-means centroids are trained on a sample on the driver
(``faiss.Kmeans``) and broadcast; each user is assigned to its nearest cluster and searched in its
``knn_nprobe`` nearest ones, exactly, inside ``applyInPandas`` groups; results are merged into a
global top-k and written to ``user_neighbors`` (replaced as a whole: it is current state).
Recall@k against exact search on a sample of users is logged and recorded in ``runs``.

    solaris knn --as-of 2000-12-01T03:00:00Z
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass

from solaris.runtime import job_parser, run_stage

log = logging.getLogger("solaris.knn")


@dataclass(frozen=True)
class KnnResult:
    """Users searched, the index used, and recall@k of the written neighbours against exact search."""

    users: int
    clusters: int
    nprobe: int
    k: int
    recall: float
    fm_version: str

    def details(self) -> dict:
        """``runs.details`` layout (recall keyed by its k, as the audit table has always had it)."""
        return {"users": self.users, "clusters": self.clusters, "nprobe": self.nprobe, "k": self.k,
                f"recall_at_{self.k}": self.recall, "fm_version": self.fm_version}


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("solaris knn", __doc__)
    parser.add_argument("--fm", help="FM checkpoint under the warehouse (default: precompute.fm_checkpoint)")
    return parser


def run(spark, config, as_of, run_id: str, fm_path: str | None = None) -> KnnResult:
    import numpy as np
    import pandas as pd
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from solaris import knn
    from solaris.embedding_codec import decode
    from solaris.models.checkpoint import load_checkpoint, resolve_checkpoint
    from solaris.runtime import JobInputError
    from solaris.spark_features import user_histories, visible_events
    from solaris.tables import RunRecord, table_version, with_commit_retry
    from solaris.udfs.knn import (
        CANDIDATE_SCHEMA,
        NEIGHBOR_SCHEMA,
        REPRESENTATION_SCHEMA,
        make_cluster_searcher,
        make_user_representer,
        merge_user_candidates,
    )

    enrichment, dim = config.enrichment, config.model.embedding_dim
    fm_dir = resolve_checkpoint(config.resolve_under_warehouse(fm_path or config.precompute.fm_checkpoint))
    _, fm_meta = load_checkpoint(fm_dir, "fm", dim)
    record = RunRecord(run_id=run_id, job="knn", as_of=as_of)
    events = visible_events(spark, config, as_of)
    histories = user_histories(events, events.select("user_id").distinct(), config.model.history_length)
    representer = make_user_representer(str(fm_dir), dim, config.model.history_length, int(as_of.timestamp()),
                                        config.precompute.model_batch_size, config.precompute.torch_threads)
    vectors = histories.mapInArrow(representer, REPRESENTATION_SCHEMA).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        n_users = vectors.count()
        if n_users < 2:
            raise JobInputError(f"KNN needs at least 2 users with events up to {as_of}; found {n_users}")
        fraction = min(1.0, enrichment.knn_sample / n_users)
        sample = vectors.sample(fraction=fraction, seed=config.seed).limit(enrichment.knn_sample).toPandas()
        n_clusters = enrichment.knn_clusters or knn.default_clusters(n_users)
        centroids = knn.train_centroids(decode(sample["vector"].tolist(), dim), n_clusters, config.seed)
        nprobe = min(enrichment.knn_nprobe, centroids.shape[0])
        centroids_b = spark.sparkContext.broadcast(centroids)

        def assign(frames):
            for frame in frames:
                probes = knn.nearest_clusters(decode(frame["vector"].tolist(), dim), centroids_b.value, nprobe)
                for rank in range(probes.shape[1]):
                    yield pd.DataFrame({"user_id": frame["user_id"], "vector": frame["vector"],
                                        "cluster_id": probes[:, rank], "is_member": rank == 0, "is_query": True})

        rows = vectors.mapInPandas(assign, "user_id long, vector binary, cluster_id long, is_member boolean, is_query boolean")
        membership = rows.where("is_member").select("user_id", "cluster_id")
        candidates = rows.groupBy("cluster_id").applyInPandas(make_cluster_searcher(enrichment.knn_k, dim), CANDIDATE_SCHEMA)
        neighbors = (
            candidates.groupBy("user_id").applyInPandas(merge_user_candidates(enrichment.knn_k), NEIGHBOR_SCHEMA)
            .join(membership, "user_id")
            .select("user_id", "neighbor_ids", "similarities", "cluster_id",
                    F.lit(as_of).cast("timestamp").alias("computed_at"), F.lit(fm_meta["version"]).alias("fm_version"),
                    F.lit(run_id).alias("run_id"))
        )
        path = config.table_path("user_neighbors")
        with_commit_retry(lambda: neighbors.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
                          .save(path), f"overwrite {path}")

        recall = _recall(spark, vectors, path, enrichment, dim, config.seed, n_users)
        record.rows_in, record.rows_out = n_users, spark.read.format("delta").load(path).count()
        record.table_versions = {"user_neighbors": table_version(spark, path)}
        result = KnnResult(users=n_users, clusters=int(centroids.shape[0]), nprobe=nprobe, k=enrichment.knn_k,
                           recall=recall, fm_version=fm_meta["version"])
        record.details = result.details()
        record.write(spark, config, "success")
        log.info("knn at %s: %d users, %d clusters, nprobe %d, recall@%d vs exact = %.3f", as_of, n_users,
                 centroids.shape[0], nprobe, enrichment.knn_k, recall)
        return result
    finally:
        vectors.unpersist()


def _recall(spark, vectors, neighbors_path, enrichment, dim, seed, n_users) -> float:
    """Recall@k of the written neighbours against exact search, on a sample of query users.

    The exact search is distributed too: the query sample is broadcast, each partition returns
    its local top-k, the driver merges them.
    """
    import numpy as np
    import pandas as pd

    from solaris import knn
    from solaris.embedding_codec import decode

    k = enrichment.knn_k
    fraction = min(1.0, 2.0 * enrichment.knn_recall_sample / n_users)
    queries = vectors.sample(fraction=fraction, seed=seed + 1).limit(enrichment.knn_recall_sample).toPandas()
    query_ids = queries["user_id"].to_numpy()
    query_vectors = decode(queries["vector"].tolist(), dim)
    queries_b = spark.sparkContext.broadcast((query_ids, query_vectors))

    def local_topk(frames):
        ids_all, vecs_all = [], []
        for frame in frames:
            ids_all.append(frame["user_id"].to_numpy())
            vecs_all.append(decode(frame["vector"].tolist(), dim))
        if not ids_all:
            return
        q_ids, q_vecs = queries_b.value
        found, sims = knn.search(np.concatenate(ids_all), np.concatenate(vecs_all), q_ids, q_vecs, k)
        yield pd.DataFrame({"query": np.repeat(q_ids, k), "neighbor": found.ravel(), "sim": sims.ravel()})

    local = vectors.mapInPandas(local_topk, "query long, neighbor long, sim float").toPandas()
    exact = []
    for query in query_ids:
        part = local[local["query"] == query]
        exact.append(knn.merge_topk(part["neighbor"].to_numpy(), part["sim"].to_numpy(), k)[0])
    wanted = spark.createDataFrame(pd.DataFrame({"user_id": query_ids.astype(np.int64)}))
    found = spark.read.format("delta").load(neighbors_path).join(wanted, "user_id").select(
        "user_id", "neighbor_ids").toPandas()
    by_user = {int(row.user_id): np.asarray(row.neighbor_ids) for row in found.itertuples()}
    approximate = [by_user.get(int(query), np.empty(0, np.int64)) for query in query_ids]
    padded = np.full((len(exact), k), -1, dtype=np.int64)
    for row, ids in enumerate(exact):
        padded[row, : len(ids)] = ids
    return float(knn.recall_at_k(approximate, padded))


def main(argv: list[str] | None = None) -> int:
    return run_stage(
        build_parser(), argv, "knn", "enrichment",
        run=lambda spark, config, args, run_id: run(spark, config, args.as_of, run_id, args.fm),
        report=lambda config, result: (f"user_neighbors: {config.table_path('user_neighbors')} users={result.users} "
                                       f"recall@{result.k}={result.recall:.3f}"),
    )


if __name__ == "__main__":
    sys.exit(main())
