"""KNN recall and speed: the KNN stage's IVF method vs exact search, on ML-1M users and 1M synthetic.

For each dataset (one run of this script does both):

* **Index** (as ``solaris.stages.knn`` builds it, with the same functions from ``solaris.enrichment.knn``): spherical
  k-means centroids trained on a seeded sample of at most ``--train-sample`` users
  (``enrichment.knn_sample``), ``nlist = default_clusters(n)`` unless ``--clusters``; ``nprobe`` =
  the smallest whose recall@k estimated on that sample reaches ``--target-recall``
  (``solaris.enrichment.knn.choose_nprobe``; as in the stage, on ``--train-sample / 2`` other users when the
  sample is not everyone); every user stored in its nearest centroid's list
  (``faiss.IndexIVFFlat`` with those centroids: the same candidate set per query as the stage's
  per-cluster exact search, so the same answer up to ties).
* **Queries**: ``--queries`` users drawn (seeded) from the dataset; each asks for its k nearest
  *other* users (searched at depth k+1, self dropped), as the stage does.
* **Recall@k**: share of the exact top-k (``faiss.IndexFlatIP``, brute force over all n users)
  found by the IVF search, over the query sample.
* **What is timed** (wall clock, ``--threads`` FAISS threads, median of ``--repeats``): *exact* =
  ``IndexFlatIP.search`` of the query sample over all n vectors; *approx* = ``IndexIVFFlat.search``
  of the same queries (coarse quantizer + scanning ``nprobe`` lists). Both include only the search
  call (same k+1, same post-processing outside the timer). The index build (k-means on the sample,
  nprobe choice, assigning all n users) is timed once and reported separately; ``approx+build
  share`` adds the build time prorated to the queries (build * queries / n), because in the stage
  every user is a query and the build is paid once for all n of them. The speed-up printed is
  exact / approx; the one including the build share is printed next to it.
* **Stage method** (unless ``--no-stage-method``): ``solaris.enrichment.knn.ivf_search``, the KNN stage's
  algorithm in one process (every one of the n users searched in its nprobe clusters, one exact
  batch per cluster, merged), timed once for all n users with ONE FAISS thread (as a Spark task
  runs it); its *share* for the query sample is that time * queries / n, compared with the same
  exact time (``--threads`` threads); its recall is over the same queries.

Datasets:

* ``ml1m``: the FM user-only representation of every user with events up to ``--as-of`` in the
  warehouse ``--warehouse``, computed with the KNN stage's own code (``udfs.knn`` in a small Spark
  session) from the checkpoint ``precompute.fm_checkpoint`` there; cached as ``.npz`` under
  ``--cache-dir`` (keyed by warehouse, as-of and FM version) so reruns need no Spark.
* ``synthetic``: ``--synthetic-users`` L2-normalised ``--dim``-d vectors from a seeded Gaussian
  mixture: ``--components`` centres on the sphere with Zipf-like weights, each component spread
  mostly along its own random 8-d subspace (spread varying per component) plus isotropic noise -
  clustered like real embeddings but with lists that do not match the components, a hard case
  for IVF.

    .venv/bin/python bench/knn.py --warehouse /work/wh/ml1m --as-of 2000-12-01T00:00:00Z
    .venv/bin/python bench/knn.py --datasets synthetic --synthetic-users 200000
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from pathlib import Path

import numpy as np


def synthetic_users(n: int, dim: int, components: int, seed: int, rank: int = 8) -> np.ndarray:
    """Seeded clustered Gaussian mixture on the unit sphere (see the module docstring)."""
    from solaris.enrichment.knn import normalize

    rng = np.random.default_rng(seed)
    centres = normalize(rng.standard_normal((components, dim)))
    weights = 1.0 / np.arange(1, components + 1) ** 0.7
    labels = rng.choice(components, size=n, p=weights / weights.sum())
    bases = rng.standard_normal((components, rank, dim)).astype(np.float32) / np.sqrt(dim)
    spread = rng.uniform(0.25, 0.6, components).astype(np.float32)
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, 100_000):
        rows = slice(start, min(start + 100_000, n))
        lab = labels[rows]
        z = rng.standard_normal((lab.size, rank)).astype(np.float32)
        local = np.einsum("nr,nrd->nd", z, bases[lab]) * spread[lab, None]
        noise = 0.08 * rng.standard_normal((lab.size, dim)).astype(np.float32)
        out[rows] = centres[lab] + local + noise
    return normalize(out)


def ml1m_users(warehouse: str, as_of_text: str, cache_dir: Path) -> tuple[np.ndarray, np.ndarray, str]:
    """FM user representations of every user with events up to ``as_of`` (the stage's own code)."""
    from solaris.config import load_config
    from solaris.models.checkpoint import load_checkpoint, resolve_checkpoint
    from solaris.runtime import as_of_arg

    config = load_config(overrides=[f"warehouse={warehouse}"])
    as_of = as_of_arg(as_of_text)
    dim = config.model.embedding_dim
    fm_dir = resolve_checkpoint(config.resolve_under_warehouse(config.precompute.fm_checkpoint))
    _, meta = load_checkpoint(fm_dir, "fm", dim)
    key = hashlib.sha1(f"{Path(warehouse).resolve()}|{as_of.isoformat()}|{meta['version']}".encode()).hexdigest()[:12]
    cache = cache_dir / f"knn_ml1m_{key}.npz"
    if cache.exists():
        saved = np.load(cache)
        return saved["ids"], saved["vectors"], f"{meta['version']} (cached {cache})"

    from solaris.precompute.spark_features import user_histories, visible_events
    from solaris.spark import get_spark
    from solaris.storage.embedding_codec import decode
    from solaris.udfs.knn import REPRESENTATION_SCHEMA, make_user_representer

    spark = get_spark(config, "bench-knn")
    events = visible_events(spark, config, as_of)
    histories = user_histories(events, events.select("user_id").distinct(), config.model.history_length)
    representer = make_user_representer(
        str(fm_dir), embedding_dim=dim, history_length=config.model.history_length, request_ts=int(as_of.timestamp()),
        batch_size=config.precompute.model_batch_size, torch_threads=config.precompute.torch_threads)
    frame = histories.mapInArrow(representer, REPRESENTATION_SCHEMA).toPandas().sort_values("user_id")
    ids, vectors = frame["user_id"].to_numpy(np.int64), decode(frame["vector"].tolist(), dim)
    cache_dir.mkdir(parents=True, exist_ok=True)
    np.savez(cache, ids=ids, vectors=vectors)
    return ids, vectors, str(meta["version"])


def timed(fn, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def drop_self(found: np.ndarray, query_ids: np.ndarray, k: int) -> np.ndarray:
    """Rows of k+1 ids -> the first k that are not the query (-1 padded)."""
    out = np.full((found.shape[0], k), -1, dtype=np.int64)
    for row in range(found.shape[0]):
        ids = found[row][(found[row] != query_ids[row]) & (found[row] >= 0)][:k]
        out[row, : ids.size] = ids
    return out


def bench(name: str, vectors: np.ndarray, args) -> dict:
    import faiss

    from solaris.enrichment import knn
    vectors = knn.normalize(vectors)
    n, dim = vectors.shape
    k, rng = args.k, np.random.default_rng(args.seed)
    build_start = time.perf_counter()
    order = rng.permutation(n)
    train_rows = np.sort(order[: args.train_sample])
    held_out = vectors[np.sort(order[len(train_rows): len(train_rows) + args.train_sample // 2])]
    population = vectors[train_rows] if len(held_out) < 2 else held_out  # as the knn stage: not the training points
    nlist = args.clusters or knn.default_clusters(n)
    centroids = knn.train_centroids(vectors[train_rows], nlist, args.seed)
    nprobe, curve = knn.choose_nprobe(population, centroids, k=k, target=args.target_recall,
                                      population_fraction=len(population) / n, seed=args.seed)
    quantizer = faiss.IndexFlatIP(dim)
    ivf = faiss.IndexIVFFlat(quantizer, dim, centroids.shape[0], faiss.METRIC_INNER_PRODUCT)
    ivf.quantizer.add(centroids)
    ivf.is_trained = True
    ivf.add(vectors)
    ivf.nprobe = nprobe
    build_seconds = time.perf_counter() - build_start

    flat = faiss.IndexFlatIP(dim)
    flat.add(vectors)
    queries = np.sort(rng.permutation(n)[: args.queries])
    q_vectors = np.ascontiguousarray(vectors[queries])
    exact_s, (_, exact_ids) = timed(lambda: flat.search(q_vectors, k + 1), args.repeats)
    approx_s, (_, approx_ids) = timed(lambda: ivf.search(q_vectors, k + 1), args.repeats)
    truth, found = drop_self(exact_ids, queries, k), drop_self(approx_ids, queries, k)
    recall = knn.recall_at_k(list(found), truth)
    stage = {}
    if args.stage_method:
        ids = np.arange(n, dtype=np.int64)
        faiss.omp_set_num_threads(1)  # as in a Spark task (udfs.knn pins FAISS to one thread)
        stage_start = time.perf_counter()
        stage_ids, _ = knn.ivf_search(ids, vectors, centroids, nprobe, k)
        stage_total = time.perf_counter() - stage_start
        faiss.omp_set_num_threads(args.threads)
        stage = {"stage_total_s": stage_total, "stage_share_s": stage_total * len(queries) / n,
                 "stage_recall": knn.recall_at_k(list(stage_ids[queries]), truth)}
    share = build_seconds * len(queries) / n
    sizes = np.bincount(knn.nearest_clusters(vectors, centroids, 1)[:, 0], minlength=centroids.shape[0])
    return {"dataset": name, "n": n, "dim": dim, "nlist": int(centroids.shape[0]), "nprobe": nprobe,
            "sample_recall": float(curve[nprobe - 1]), "train_sample": len(train_rows), "queries": len(queries),
            "recall": recall, "exact_s": exact_s, "approx_s": approx_s, "build_s": build_seconds,
            "speedup": exact_s / approx_s, "speedup_with_build": exact_s / (approx_s + share),
            "scanned": float((sizes[knn.nearest_clusters(q_vectors, centroids, nprobe)]).sum() / (len(queries) * n)),
            "largest_list": int(sizes.max()), **stage}


def report(row: dict, k: int, extra: str = "") -> None:
    print(f"== {row['dataset']}{extra}: n={row['n']:,} users, dim={row['dim']}")
    print(f"   method: IVF-Flat (spherical k-means on {row['train_sample']:,} sampled users), nlist={row['nlist']}, "
          f"nprobe={row['nprobe']} (sample-estimated recall {row['sample_recall']:.3f}), largest list "
          f"{row['largest_list']:,}, share of users scanned per query {row['scanned']:.4f}")
    print(f"   recall@{k} vs exact on {row['queries']:,} queries: {row['recall']:.4f}")
    print(f"   exact {row['exact_s']:.4f} s, approx {row['approx_s']:.4f} s "
          f"(search of the query sample, median of repeats), build {row['build_s']:.2f} s once")
    print(f"   speed-up exact/approx: {row['speedup']:.1f}x  (with the build prorated to the queries: "
          f"{row['speedup_with_build']:.1f}x)")
    if "stage_total_s" in row:
        print(f"   stage method (knn.ivf_search: all {row['n']:,} users, batched per cluster, 1 process): "
              f"{row['stage_total_s']:.2f} s, share of the {row['queries']:,} queries {row['stage_share_s']:.4f} s, "
              f"recall@{k} {row['stage_recall']:.4f}, "
              f"speed-up exact/share {row['exact_s'] / row['stage_share_s']:.1f}x")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--datasets", default="ml1m,synthetic", help="comma list of ml1m, synthetic")
    parser.add_argument("--warehouse", default="/work/wh/ml1m", help="warehouse holding ML-1M events + the FM")
    parser.add_argument("--as-of", default="2000-12-01T00:00:00Z", help="ML-1M: events up to this instant")
    parser.add_argument("--cache-dir", default="/tmp/solaris_bench_knn", type=Path)
    parser.add_argument("--synthetic-users", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--components", type=int, default=1000, help="synthetic mixture components")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--target-recall", type=float, default=0.95)
    parser.add_argument("--train-sample", type=int, default=100_000, help="k-means sample (enrichment.knn_sample)")
    parser.add_argument("--clusters", type=int, default=None, help="nlist (default: knn.default_clusters)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-stage-method", dest="stage_method", action="store_false",
                        help="skip timing the stage's batched per-cluster search over all users")
    args = parser.parse_args(argv)

    import faiss

    faiss.omp_set_num_threads(args.threads)
    for name in args.datasets.split(","):
        if name == "ml1m":
            ids, vectors, version = ml1m_users(args.warehouse, args.as_of, args.cache_dir)
            faiss.omp_set_num_threads(args.threads)
            report(bench(name, vectors, args), args.k,
                   f" (FM user representations, events <= {args.as_of}, FM {version})")
        elif name == "synthetic":
            vectors = synthetic_users(args.synthetic_users, args.dim, args.components, args.seed)
            report(bench(name, vectors, args), args.k,
                   f" (Gaussian mixture, {args.components} components, seed {args.seed})")
        else:
            parser.error(f"unknown dataset {name}")


if __name__ == "__main__":
    main()
