"""Tiers 2 and 4 preparation: k nearest neighbours of every known user in the FM's user space (FAISS).

At ``--as-of t``: each user's FM user-only representation is computed from their events up to
``t`` (``udfs/knn`` in ``mapInArrow``) and cached once. One pass over the cache brings the driver
its two samples (hash-chosen, so independent of partitioning): the k-means training sample and
the recall query sample. Spherical k-means centroids (an IVF index's lists) are trained on the
first and ``nprobe`` is the smallest whose recall@k, estimated on it (or, when it is not everyone,
on other sampled users), reaches ``enrichment.knn_target_recall`` (``solaris.enrichment.knn.choose_nprobe``;
or ``knn_nprobe`` when set).
Each user is a member of its nearest cluster and searched in its ``nprobe`` nearest ones, exactly,
inside ``applyInPandas`` groups; a native Spark aggregation merges the global top-k per user
(ties: smaller id), written to ``user_neighbors`` (replaced as a whole: it is current state).
Recall@k of the written neighbours against exact search on the query sample is computed in one
more action, logged and recorded in ``runs`` with the times (``search_seconds``...).

A population of at most ``enrichment.knn_driver_max_users`` users (and whose candidate lists fit
``solaris.enrichment.knn.fits_driver``) is searched on the driver instead (``search_on`` = ``driver``
in ``runs``): one action brings every user's vector, the same
steps run in one process (``solaris.enrichment.knn.ivf_neighbours``: the same FAISS calls per
cluster, so the same lists) and the recall check is exact search over everyone there. Why: an
hourly tick has a few thousand users, where each Spark job of the distributed search (assign,
search per cluster, merge, the recall's exact pass) costs more than the search itself; like a
broadcast join, the threshold bounds what the driver holds, and larger populations keep the
distributed path.

    solaris knn --as-of 2000-12-01T03:00:00Z
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from solaris.enrichment import knn
from solaris.precompute.spark_features import user_vectors
from solaris.runtime import JobInputError
from solaris.storage.audit import RunRecord
from solaris.storage.embedding_codec import decode
from solaris.storage.table import Table
from solaris.tick import StepContext
from solaris.timeutil import parse_utc, utc_stamp
from solaris.udfs.knn import (
    ASSIGNMENT_SCHEMA,
    CANDIDATE_LISTS_SCHEMA,
    CANDIDATE_SCHEMA,
    PARTIAL_SCHEMA,
    make_cluster_assigner,
    make_cluster_searcher,
    make_partition_topk,
    user_representation_step,
)

if TYPE_CHECKING:  # pragma: no cover
    from datetime import datetime
    from pathlib import Path

    import numpy as np
    import pandas as pd
    from pyspark.sql import Column, DataFrame, SparkSession

    from solaris.config import EnrichmentConfig, SolarisConfig

log = logging.getLogger("solaris.enrichment.knn")


@dataclass(frozen=True)
class KnnResult:
    """Users searched, the index used, and recall@k of the written neighbours against exact search.

    ``sample_recall`` is the driver-sample estimate that chose ``nprobe``; ``recall`` is measured on
    ``recall_queries`` users against exact search over everyone. Times are wall-clock seconds:
    ``index_seconds`` (k-means + nprobe choice on the driver), ``search_seconds`` (assign, search,
    merge and write the neighbours), ``recall_seconds`` (the exact check), ``seconds`` (the stage).
    """

    users: int
    clusters: int
    nprobe: int
    k: int
    recall: float
    fm_version: str
    target_recall: float | None = None
    sample_recall: float | None = None
    recall_queries: int = 0
    index_reused: bool = False
    search_on: str = "spark"  # "driver": the population fit knn_driver_max_users (see the module doc)
    index_seconds: float = 0.0
    search_seconds: float = 0.0
    recall_seconds: float = 0.0
    seconds: float = 0.0

    def details(self) -> dict:
        """``runs.details`` layout (recall keyed by its k, as the audit table has always had it)."""
        return {"users": self.users, "clusters": self.clusters, "nprobe": self.nprobe, "k": self.k,
                f"recall_at_{self.k}": self.recall, "fm_version": self.fm_version,
                "target_recall": self.target_recall, "sample_recall": self.sample_recall,
                "recall_queries": self.recall_queries, "index_reused": self.index_reused,
                "search_on": self.search_on,
                "index_seconds": round(self.index_seconds, 3),
                "search_seconds": round(self.search_seconds, 3), "recall_seconds": round(self.recall_seconds, 3),
                "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class KnnOptions:
    """``fm_path``: FM checkpoint under the warehouse (None: ``precompute.fm_checkpoint``)."""

    fm_path: str | None = None


def run(step: StepContext, *, options: KnnOptions) -> KnnResult:
    """Represent every user with the FM, reuse or train the IVF index, search, write, check recall."""
    spark, config, as_of, run_id, tick = step.spark, step.config, step.as_of, step.run_id, step.tick
    fm_path = options.fm_path
    from solaris.models.checkpoint import load_checkpoint, resolve_checkpoint

    started = time.perf_counter()
    enrichment, dim, k = config.enrichment, config.model.embedding_dim, config.enrichment.knn_k
    fm_dir = resolve_checkpoint(config.resolve_under_warehouse(fm_path or config.precompute.fm_checkpoint))
    _, fm_meta = load_checkpoint(fm_dir, "fm", dim)
    record = RunRecord(run_id=run_id, job="knn", as_of=as_of)
    # shared with the retrieval source of candidates inside a tick
    representation = user_representation_step(str(fm_dir), config, as_of)
    vectors, owned = user_vectors(spark, config, as_of, fm_dir=str(fm_dir), represent=representation, tick=tick)
    neighbors = None
    try:
        n_users = vectors.count()
        if n_users < 2:
            raise JobInputError(f"KNN needs at least 2 users with events up to {as_of}; found {n_users}")
        index_start = time.perf_counter()
        index = _cluster_index(config, vectors, n_users, fm_meta["version"], as_of)
        centroids, nprobe = index.centroids, index.nprobe
        query_ids, query_vectors = index.query_ids, index.query_vectors
        index_seconds = time.perf_counter() - index_start

        search_start = time.perf_counter()
        neighbors, local = _search_and_write(spark, config, index, vectors, fm_version=fm_meta["version"],
                                                   as_of=as_of, run_id=run_id)
        path = config.table_path("user_neighbors")
        search_seconds = time.perf_counter() - search_start

        recall_start = time.perf_counter()
        if local is not None:
            recall = _driver_recall(local, query_ids, query_vectors, k)
        else:
            recall = _recall(spark, vectors, neighbors, query_ids=query_ids, query_vectors=query_vectors, k=k, dim=dim)
        recall_seconds = time.perf_counter() - recall_start
        version, rows_out = _written(spark, path)
        record.rows_in, record.rows_out = n_users, rows_out
        record.table_versions = {"user_neighbors": version}
        result = KnnResult(users=n_users, clusters=int(centroids.shape[0]), nprobe=nprobe, k=k, recall=recall,
                           fm_version=fm_meta["version"], target_recall=enrichment.knn_target_recall,
                           sample_recall=index.sample_recall, recall_queries=len(query_ids),
                           index_reused=index.reused, search_on="driver" if index.on_driver else "spark",
                           index_seconds=index_seconds, search_seconds=search_seconds, recall_seconds=recall_seconds,
                           seconds=time.perf_counter() - started)
        record.details = result.details()
        record.write(spark, config, "success", tick)
        log.info("knn at %s: %d users, %d clusters, nprobe %d (sample recall %.3f), recall@%d vs exact = %.3f on %d "
                 "queries; search %.1fs, stage %.1fs", as_of, n_users, centroids.shape[0], nprobe, result.sample_recall,
                 k, recall, len(query_ids), search_seconds, result.seconds)
        if recall < enrichment.knn_target_recall:
            log.warning("knn recall@%d %.3f is below the target %.3f", k, recall, enrichment.knn_target_recall)
        return result
    finally:
        if neighbors is not None and neighbors.is_cached:
            neighbors.unpersist()
        if owned:
            vectors.unpersist()


@dataclass(frozen=True)
class _ClusterIndex:
    """The IVF index a run searches with, where it searches, and the rows the search and the recall
    check read on the driver."""

    centroids: np.ndarray
    nprobe: int
    sample_recall: float  # recall@k of the chosen nprobe on the sample it was chosen on
    reused: bool  # a stored index of the same FM and settings, still fresh enough (knn_index_hours)
    on_driver: bool  # the search runs in this process (few users), else in Spark
    hashed: pd.DataFrame  # _hashed_vectors' rows: every user (driver search) or the samples only
    query_ids: np.ndarray
    query_vectors: np.ndarray


def _cluster_index(config: SolarisConfig, vectors: DataFrame, n_users: int, fm_version: str,
                   as_of: datetime) -> _ClusterIndex:
    """Reuse a stored index or train one (centroids, then the smallest nprobe reaching the target
    recall on held-out users), and decide where the search runs."""
    enrichment, dim, k = config.enrichment, config.model.embedding_dim, config.enrichment.knn_k
    index_dir = _index_dir(config, fm_version)
    stored = _stored_indexes(index_dir)
    reuse = knn.reusable_index([(trained_at, users) for trained_at, users, _ in stored], as_of.timestamp(),
                               n_users, enrichment.knn_index_hours)
    on_driver = n_users <= enrichment.knn_driver_max_users
    # on the driver path every user comes back (their vectors are the search's input); else only the samples
    hashed = _hashed_vectors(vectors, config.seed,
                             None if on_driver else _sample_shares(n_users, enrichment, reuse is None))
    train, held_out, (query_ids, query_vectors) = _driver_samples(hashed, n_users, enrichment, dim,
                                                                  with_training=reuse is None)
    if reuse is not None:
        centroids, nprobe, sample_recall = _load_index(stored[reuse][2])
    else:
        centroids = knn.train_centroids(train, enrichment.knn_clusters or knn.default_clusters(n_users),
                                        config.seed)
        population = train if held_out is None else held_out  # see choose_nprobe: not the training points
        nprobe, curve = knn.choose_nprobe(population, centroids, k=k, target=enrichment.knn_target_recall,
                                          population_fraction=len(population) / n_users, seed=config.seed)
        sample_recall = float(curve[nprobe - 1])
        _save_index(index_dir, as_of, n_users=n_users, centroids=centroids, nprobe=nprobe,
                    sample_recall=sample_recall)
    if enrichment.knn_nprobe:
        nprobe = min(enrichment.knn_nprobe, centroids.shape[0])
    if on_driver and not knn.fits_driver(n_users, nprobe, k, enrichment.knn_driver_max_users):
        log.info("knn: %d users x nprobe %d x k %d candidates exceed the driver's bound: searching in Spark",
                 n_users, nprobe, k)
        on_driver = False
    return _ClusterIndex(centroids, nprobe, sample_recall, reuse is not None, on_driver, hashed, query_ids,
                         query_vectors)


def _search_and_write(spark: SparkSession, config: SolarisConfig, index: _ClusterIndex, vectors: DataFrame,
                      *, fm_version: str, as_of: datetime, run_id: str) -> tuple[DataFrame, _DriverSearch | None]:
    """Every user's k nearest neighbours through ``index`` (on the driver or in Spark), written over
    ``user_neighbors`` -> (the written rows, persisted after a Spark search; the driver search)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    dim, k = config.model.embedding_dim, config.enrichment.knn_k
    local: _DriverSearch | None = None
    if index.on_driver:
        local = _driver_search(index.hashed, index.centroids, index.nprobe, k, dim)
        found = spark.createDataFrame(local.lists, CANDIDATE_LISTS_SCHEMA)
    else:
        centroids_b = spark.sparkContext.broadcast(index.centroids)
        rows = vectors.mapInPandas(make_cluster_assigner(centroids_b, index.nprobe, dim), ASSIGNMENT_SCHEMA)
        candidates = rows.groupBy("cluster_id").applyInPandas(make_cluster_searcher(k, dim), CANDIDATE_SCHEMA)
        found = _merge_candidates(candidates, k)
    neighbors = found.select("user_id", "neighbor_ids", "similarities", "cluster_id",
                             F.lit(as_of).cast("timestamp").alias("computed_at"),
                             F.lit(fm_version).alias("fm_version"), F.lit(run_id).alias("run_id"))
    if local is None:  # the recall check reads the Spark search's lists again
        neighbors = neighbors.persist(StorageLevel.MEMORY_AND_DISK)
    Table.of(spark, config, "user_neighbors").write(neighbors, run_id)
    return neighbors, local


def _index_dir(config: SolarisConfig, fm_version: str) -> Path:
    """Folder of the stored IVF indexes of one FM version and one set of index settings."""
    enrichment = config.enrichment
    settings = {"k": enrichment.knn_k, "clusters": enrichment.knn_clusters, "target": enrichment.knn_target_recall,
                "sample": enrichment.knn_sample, "seed": config.seed, "dim": config.model.embedding_dim}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    return config.warehouse / "models" / "knn_index" / f"{fm_version}-{digest}"


def _stored_indexes(directory: Path) -> list[tuple[float, int, Path]]:
    """``(trained_at epoch s, users, file)`` of each index in ``directory`` (named ``<stamp>-n<users>.npz``)."""
    found = []
    for path in sorted(directory.glob("*-n*.npz")) if directory.is_dir() else []:
        stamp, _, users = path.stem.rpartition("-n")
        try:
            found.append((parse_utc(stamp).timestamp(), int(users), path))
        except ValueError:
            log.warning("ignoring %s: not an index file name", path)
    return found


def _save_index(directory: Path, as_of: datetime, *, n_users: int, centroids: np.ndarray, nprobe: int,
                sample_recall: float) -> None:
    """Store the centroids and nprobe trained at ``as_of`` (temporary file, then an atomic rename)."""
    import numpy as np

    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"{utc_stamp(as_of)}-n{n_users}.npz"
    tmp = directory / f".{final.stem}.tmp-{os.getpid()}.npz"
    np.savez(tmp, centroids=centroids, nprobe=np.int64(nprobe), sample_recall=np.float64(sample_recall))
    os.replace(tmp, final)


def _load_index(path: Path) -> tuple[np.ndarray, int, float]:
    import numpy as np

    with np.load(path) as stored:
        return np.asarray(stored["centroids"], dtype=np.float32), int(stored["nprobe"]), float(stored["sample_recall"])


def _uniform(seed: int) -> Column:
    """A per-user number in [0, 1) from a seeded hash of the id: the same rows whatever the partitioning."""
    from pyspark.sql import functions as F

    return F.pmod(F.xxhash64(F.lit(seed), F.col("user_id")), F.lit(1 << 40)) / float(1 << 40)


def _sample_shares(n_users: int, enrichment: EnrichmentConfig, with_training: bool) -> tuple[float, float, float]:
    """The hash thresholds of :func:`_driver_samples`: (train, held out, query) shares of the users."""
    train_share = min(1.0, enrichment.knn_sample / n_users) if with_training else 0.0
    held_share = min(1.0 - train_share, 0.5 * enrichment.knn_sample / n_users) if with_training else 0.0
    query_share = min(1.0, 3.0 * enrichment.knn_recall_sample / n_users)  # oversampled, cut below
    return train_share, held_share, query_share


def _hashed_vectors(vectors: DataFrame, seed: int, shares: tuple[float, float, float] | None) -> pd.DataFrame:
    """One action: ``user_id``, ``vector`` and the two sample hashes of every user (``shares`` None)
    or of the users some sample of :func:`_driver_samples` may take (its thresholds)."""
    from pyspark.sql import functions as F

    frame = vectors.select("user_id", "vector", _uniform(seed).alias("u_train"), _uniform(seed + 1).alias("u_query"))
    if shares is not None:
        train_share, held_share, query_share = shares
        frame = frame.where((F.col("u_train") < train_share + held_share) | (F.col("u_query") < query_share))
    return frame.toPandas()


def _driver_samples(frame: pd.DataFrame, n_users: int, enrichment: EnrichmentConfig, dim: int,
                    with_training: bool = True) -> tuple[np.ndarray, np.ndarray | None, tuple[np.ndarray, np.ndarray]]:
    """``(train, held_out, (query_ids, query_vectors))`` from :func:`_hashed_vectors`' rows.

    ``train``: <= ``knn_sample`` users for k-means; ``held_out``: when that is not everyone, up to
    ``knn_sample / 2`` other users (never in ``train``) on which nprobe is chosen
    (``solaris.enrichment.knn.choose_nprobe``); the recall query sample: ``knn_recall_sample`` users drawn
    independently. All chosen by seeded hashes of the user id and sorted by id, so the same users
    whatever the partitioning, and whether ``frame`` holds every user or only the sampled ones.
    ``with_training=False`` (a stored index is reused): the query sample only.
    """
    import numpy as np

    train_share, held_share, query_share = _sample_shares(n_users, enrichment, with_training)

    def vectors_of(rows: pd.DataFrame) -> np.ndarray:
        return decode(rows.sort_values("user_id")["vector"].tolist(), dim)

    by_train = frame.sort_values(["u_train", "user_id"])
    train = by_train[by_train["u_train"] < train_share].head(enrichment.knn_sample)
    held_out = by_train[(by_train["u_train"] >= train_share) & (by_train["u_train"] < train_share + held_share)]
    queries = (frame[frame["u_query"] < query_share].sort_values(["u_query", "user_id"])
               .head(enrichment.knn_recall_sample))
    queries = queries.sort_values("user_id")
    return (vectors_of(train), vectors_of(held_out) if len(held_out) >= 2 else None,
            (queries["user_id"].to_numpy(np.int64), decode(queries["vector"].tolist(), dim)))


@dataclass(frozen=True)
class _DriverSearch:
    """Every user's id (ascending) and vector, and their neighbour lists (``CANDIDATE_LISTS_SCHEMA``)."""

    ids: np.ndarray
    vectors: np.ndarray
    lists: pd.DataFrame


def _driver_search(frame: pd.DataFrame, centroids: np.ndarray, nprobe: int, k: int, dim: int) -> _DriverSearch:
    """The distributed search's steps in this process, for every user of ``frame`` (see the module doc)."""
    import numpy as np
    import pandas as pd

    ordered = frame.sort_values("user_id")
    ids = ordered["user_id"].to_numpy(np.int64)
    vectors = decode(ordered["vector"].tolist(), dim)
    found, sims, home = knn.ivf_neighbours(ids, vectors, centroids, nprobe, k)
    valid = found >= 0  # padding of users with fewer than k candidates, dropped as the Spark merge drops it
    lists = pd.DataFrame({"user_id": ids, "neighbor_ids": [row[keep] for row, keep in zip(found, valid, strict=True)],
                          "similarities": [row[keep] for row, keep in zip(sims, valid, strict=True)],
                          "cluster_id": home.astype(np.int64)})
    return _DriverSearch(ids, vectors, lists)


def _driver_recall(local: _DriverSearch, query_ids: np.ndarray, query_vectors: np.ndarray, k: int) -> float:
    """Recall@k of the driver search's lists against exact search over every user, on the query sample."""
    import numpy as np

    truth = knn.exact_topk(local.ids, local.vectors, query_ids, query_vectors, k)
    rows = np.searchsorted(local.ids, query_ids)
    return float(knn.recall_at_k([local.lists["neighbor_ids"].iloc[row] for row in rows], truth))


def _merge_candidates(candidates: DataFrame, k: int) -> DataFrame:
    """Per user: the best k of the candidates from its ``nprobe`` clusters, natively in Spark.

    (similarity desc, id asc) is the sort order of ``(-similarity, id)`` structs; a neighbour is a
    member of one cluster only and a user probes a cluster once, so no candidate repeats.
    """
    from pyspark.sql import functions as F

    pairs = F.zip_with("similarities", "neighbor_ids", lambda sim, nid: F.struct((-sim).alias("neg"), nid.alias("id")))
    merged = candidates.groupBy("user_id").agg(F.max("home_cluster").alias("cluster_id"),
                                               F.flatten(F.collect_list(pairs)).alias("candidates"))
    best = F.slice(F.array_sort(F.filter("candidates", lambda c: c["id"] >= 0)), 1, k)
    return merged.select("user_id", F.transform(best, lambda c: c["id"]).alias("neighbor_ids"),
                         F.transform(best, lambda c: -c["neg"]).alias("similarities"), "cluster_id")


def _recall(spark: SparkSession, vectors: DataFrame, neighbors: DataFrame, *, query_ids: np.ndarray,
            query_vectors: np.ndarray, k: int, dim: int) -> float:
    """Recall@k of the written neighbours against exact search, on the query sample, in one action.

    Exact search is distributed: the queries are broadcast and each partition of the cached
    vectors returns its local top-k (``udfs.knn.make_partition_topk``); the written (cached)
    neighbour lists of the same queries come back in the same ``union``; the driver merges.
    """
    import numpy as np
    from pyspark.sql import functions as F

    queries_b = spark.sparkContext.broadcast((query_ids, query_vectors))
    exact = vectors.mapInPandas(make_partition_topk(queries_b, k, dim), PARTIAL_SCHEMA).withColumn("exact", F.lit(True))
    written = neighbors.where(F.col("user_id").isin([int(q) for q in query_ids])).select(
        F.col("user_id").alias("query"), F.explode("neighbor_ids").alias("neighbor"),
        F.lit(None).cast("float").alias("similarity"), F.lit(False).alias("exact"))
    rows: pd.DataFrame = exact.unionByName(written).toPandas()
    truth = np.full((len(query_ids), k), -1, dtype=np.int64)
    found = []
    for row, query in enumerate(query_ids):
        mine = rows[rows["query"] == query]
        best = knn.merge_topk(mine["neighbor"][mine["exact"]].to_numpy(),
                              mine["similarity"][mine["exact"]].to_numpy(), k)[0]
        truth[row, : best.size] = best
        found.append(mine["neighbor"][~mine["exact"]].to_numpy())
    return float(knn.recall_at_k(found, truth))


def _written(spark: SparkSession, path: str) -> tuple[int, int]:
    """(version, rows) of the table after the overwrite, from the Delta log (no Spark job)."""
    table = Table.at(path, spark=spark)
    version = table.version()
    if version is None:
        raise RuntimeError(f"{path} vanished right after it was written")
    return version, table.row_count()
