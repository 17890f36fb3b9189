"""Knowledge-transfer evaluation on a time split: replay SOLARIS, score every variant, report.

With ``--as-of T0`` (the split), for each seed:

1. train the serving FM and the verifier (baseline VM) on events up to ``T0 - tail``, and a
   distilled VM on the same events with cross-fitted FM soft labels;
2. replay the hourly precompute + enrichment over ``[T0 - tail, T0 + eval)`` exactly as the
   schedule runs it (candidates -> score/verify -> hit rate -> expire -> user aggregates -> KNN
   -> impute -> publish, ``as_of = tick``), in the seed's own warehouse folder;
3. resolve every request of ``(tick, tick + 1h]`` through the snapshot published at ``tick``
   (the resolver: only what serving would have held, TTL and coverage gaps included);
4. fine-tune the VM variants on the tail's requests, warm-started from step 1: baseline,
   distilled (soft labels of the serving FM, which never saw the tail), VM+SOLARIS (served FM
   embedding + tier as input), VM+SOLARIS+distilled;
5. score the requests of ``(T0, T0 + eval]`` with the FM (upper bound), every VM variant, and
   VM+SOLARIS fed tier 1 only / tiers 1-2 / tiers 1-3.

Writes ``<warehouse>/evaluation/<name>/``: ``metrics.json`` (mean ± std over seeds and per
seed), ``report.md`` and PNG plots. A finished seed is kept (``seed-<n>/result.json``) and
skipped on rerun; ``--force`` recomputes. ``--quick`` is the CI-sized preset.

    solaris evaluate --as-of 2000-12-01T00:00:00Z
    solaris evaluate --as-of 1998-03-01T00:00:00Z --quick
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, cast

from solaris.runtime import add_common_args, as_of_arg, config_from_args, job_parser, run_job, setup_logging
from solaris.timeutil import utc_stamp

if TYPE_CHECKING:  # pragma: no cover
    from datetime import datetime

    import pandas as pd
    from pyspark.sql import SparkSession
    from torch import nn

    from solaris.config import SolarisConfig
    from solaris.evaluation.protocol import EvaluationWindow
    from solaris.models.features import Features
    from solaris.models.training import EventArrays
    from solaris.models.vm import VerticalModel

log = logging.getLogger("solaris.evaluate")

# CI-sized evaluation: few ticks, one epoch, two seeds (so mean ± std still means something).
QUICK_OVERRIDES = [
    "evaluation.seeds=2", "evaluation.tail_hours=3", "evaluation.eval_hours=2", "model.training.max_epochs=1",
    "enrichment.knn_recall_sample=50",
]


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("solaris evaluate", __doc__, with_as_of=False)
    parser.add_argument(
        "--as-of", type=as_of_arg, required=True, help="T0: end of training, start of the scored window"
    )
    parser.add_argument("--name", help="output folder under <warehouse>/evaluation (default: t0-<T0>)")
    parser.add_argument("--quick", action="store_true", help="CI preset: " + " ".join(QUICK_OVERRIDES))
    parser.add_argument("--force", action="store_true", help="recompute seeds that already have a result")
    add_common_args(parser)
    return parser


def _arrays(spark: SparkSession, config: SolarisConfig, end: datetime) -> EventArrays:
    from solaris.models.training import EventArrays
    from solaris.storage.tables import training_events

    return EventArrays.from_frame(training_events(spark, config, end))


def _seed_config(config: SolarisConfig, seed_dir: Path, seed: int, n_ticks: int) -> SolarisConfig:
    """The seed's own warehouse: same settings, its own tables, models and every tick's snapshot kept."""
    return config.model_copy(
        update={
            "warehouse": seed_dir,
            "seed": seed,
            "enrichment": config.enrichment.model_copy(update={"snapshots_kept": n_ticks + 1}),
        }
    )


def _copy_events(spark: SparkSession, config: SolarisConfig, seed_config: SolarisConfig) -> None:
    from solaris.storage.tables import table_exists

    target = seed_config.table_path("events")
    if not table_exists(spark, target):
        spark.read.format("delta").load(config.table_path("events")).write.format("delta").save(target)


def _trained(
    root: Path, role: str, dim: int | None, expected: dict, train: Callable[[], tuple[nn.Module, dict[str, Any]]]
) -> nn.Module:
    """Reuse the checkpoint under ``root`` if it was trained with ``expected`` metadata, else train."""
    from solaris.models.checkpoint import load_checkpoint, resolve_checkpoint, save_checkpoint

    if (root / "LATEST").is_file():
        model, meta = load_checkpoint(resolve_checkpoint(root), role, dim)
        if all(meta.get(k) == v for k, v in expected.items()):
            log.info("reusing %s checkpoint %s", role, meta["version"])
            return model
    model, metadata = train()
    save_checkpoint(model, root, {**metadata, **expected})
    return model


def evaluate_seed(
    spark: SparkSession,
    config: SolarisConfig,
    window: EvaluationWindow,
    events: EventArrays,
    features: Features,
    seed: int,
    seed_dir: Path,
) -> dict:
    import numpy as np

    from solaris.evaluation import protocol as evaluation
    from solaris.jobs import replay
    from solaris.models.training import out_of_fold_teacher_logits, predict, train_fm, train_vm, training_metadata
    from solaris.runtime import JobInputError
    from solaris.serving.resolver import load_snapshot
    from solaris.serving.snapshots import SNAPSHOTS_DIR

    ticks = window.ticks()
    cfg = _seed_config(config, seed_dir, seed, len(ticks))
    dim, timings = cfg.model.embedding_dim, {}
    pre = np.flatnonzero(events.ts <= window.fm_cutoff.timestamp())
    tail = np.flatnonzero((events.ts > window.fm_cutoff.timestamp()) & (events.ts <= window.t0.timestamp()))
    scored = np.flatnonzero((events.ts > window.t0.timestamp()) & (events.ts <= window.end.timestamp()))
    for name, rows in (("before the tail", pre), ("in the tail", tail), ("in the evaluation window", scored)):
        if rows.size < 10:
            raise JobInputError(f"only {rows.size} events {name}; choose another --as-of or longer windows")
    log.info(
        "seed %d: %d events up to %s (FM, verifier), %d in the tail, %d scored requests",
        seed,
        pre.size,
        window.fm_cutoff,
        tail.size,
        scored.size,
    )
    events_pre, features_pre = events.select(pre), features.take(pre)
    expected = {"as_of": window.fm_cutoff.isoformat(), "seed": seed}

    started = time.monotonic()
    _copy_events(spark, config, cfg)

    def fit_fm() -> tuple[nn.Module, dict[str, Any]]:
        result = train_fm(events, cfg, seed, features=features, rows=pre)
        return result.model, training_metadata("fm", window.fm_cutoff, seed, events_pre, result)

    def fit_verifier() -> tuple[nn.Module, dict[str, Any]]:
        result = train_vm(events_pre, cfg, seed, "baseline", features=features_pre)
        return result.model, training_metadata("vm_baseline", window.fm_cutoff, seed, events_pre, result)

    fm = _trained(seed_dir / "models" / "fm", "fm", dim, expected, fit_fm)
    verifier = cast("VerticalModel", _trained(seed_dir / "models" / "vm_baseline", "vm", None, expected, fit_verifier))
    timings["train_fm_and_verifier_s"] = time.monotonic() - started

    started = time.monotonic()
    teacher = out_of_fold_teacher_logits(events_pre, cfg, seed, features_pre, cfg.model.distillation.teacher_folds)
    distilled_base = cast(
        "VerticalModel",
        train_vm(events_pre, cfg, seed, "distilled", teacher_logits=teacher, features=features_pre).model,
    )
    timings["train_distilled_s"] = time.monotonic() - started

    started = time.monotonic()
    replay.run(spark, cfg, ticks[0], window.end, window.step_hours)
    timings["replay_s"] = time.monotonic() - started

    # Serve the tail and the scored window through each tick's snapshot.
    started = time.monotonic()
    served_rows = np.concatenate([tail, scored])
    tick_of = window.serving_tick(events.ts[served_rows])
    vectors = np.zeros((served_rows.size, dim), dtype=np.float32)
    tiers = np.zeros(served_rows.size, dtype=np.int64)
    per_tick: list[dict[str, Any]] = []
    for index, tick in enumerate(ticks):
        mine = np.flatnonzero(tick_of == index)
        manifest = seed_dir / SNAPSHOTS_DIR / f"snapshot-{utc_stamp(tick)}.json"
        if mine.size:
            rows = served_rows[mine]
            got, tier, age = load_snapshot(manifest).resolve(
                events.user_id[rows], events.item_id[rows], events.ts[rows].astype(np.float64)
            )
            if np.any((tier > 0) & ~(age > 0)):  # an embedding computed at or after its request = leakage
                raise RuntimeError(f"snapshot {manifest.name} served an embedding not older than its request")
            vectors[mine], tiers[mine] = got, tier
        per_tick.append(
            {
                "tick": tick.isoformat(),
                "scored_window": tick >= window.t0,
                "requests": int(mine.size),
                **(evaluation.coverage_by_tier(tiers[mine]) if mine.size else {}),
            }
        )
    timings["resolve_s"] = time.monotonic() - started
    in_tail = slice(0, tail.size)
    in_scored = slice(tail.size, served_rows.size)

    # Fine-tune the variants on the tail (the only requests with served FM features).
    started = time.monotonic()
    training = cfg.model.training.model_copy(update={"batch_size": cfg.evaluation.finetune_batch_size})
    events_tail, features_tail = events.select(tail), features.take(tail)
    _, tail_teacher, _ = predict(fm, features_tail, with_embeddings=True)
    served_tail: dict[str, np.ndarray] = {"fm_embedding": vectors[in_tail], "fm_tier": tiers[in_tail]}
    common: dict[str, Any] = {"features": features_tail, "training": training}
    models = {
        "vm_baseline": train_vm(events_tail, cfg, seed, "baseline", init_from=verifier, **common).model,
        "vm_distilled": train_vm(
            events_tail, cfg, seed, "distilled", teacher_logits=tail_teacher, init_from=distilled_base, **common
        ).model,
        "solaris": train_vm(
            events_tail,
            cfg,
            seed,
            "solaris",
            fm_embedding=served_tail["fm_embedding"],
            fm_tier=served_tail["fm_tier"],
            init_from=verifier,
            **common,
        ).model,
        "solaris_distilled": train_vm(
            events_tail,
            cfg,
            seed,
            "solaris_distilled",
            teacher_logits=tail_teacher,
            fm_embedding=served_tail["fm_embedding"],
            fm_tier=served_tail["fm_tier"],
            init_from=distilled_base,
            **common,
        ).model,
    }
    timings["finetune_vms_s"] = time.monotonic() - started

    started = time.monotonic()
    features_scored, labels = features.take(scored), events.label[scored]
    vec_scored, tier_scored = vectors[in_scored], tiers[in_scored]
    predictions = {
        "fm": predict(fm, features_scored),
        "vm_baseline": predict(models["vm_baseline"], features_scored),
        "vm_distilled": predict(models["vm_distilled"], features_scored),
    }
    for variant, max_tier in evaluation.SOLARIS_MAX_TIER.items():
        fed_vectors, fed_tiers = evaluation.served_up_to_tier(vec_scored, tier_scored, max_tier)
        model = models["solaris_distilled" if variant == "solaris_distilled" else "solaris"]
        predictions[variant] = predict(model, features_scored, {"fm_embedding": fed_vectors, "fm_tier": fed_tiers})
    timings["score_requests_s"] = time.monotonic() - started

    hit_rates, cost = _replay_figures(spark, cfg, window, per_tick, scored.size)
    return {
        "seed": seed,
        "variants": evaluation.variant_metrics(labels, predictions),
        "coverage": evaluation.coverage_by_tier(tier_scored),
        "tail_coverage": evaluation.coverage_by_tier(tiers[in_tail]),
        "per_tick": [{**row, **hit_rates.get(row["tick"], {})} for row in per_tick],
        "cost": {**cost, **timings},
        "requests": {"tail": int(tail.size), "scored": int(scored.size), "base_rate": float(labels.mean())},
    }


def _replay_figures(
    spark: SparkSession, cfg: SolarisConfig, window: EvaluationWindow, per_tick: list[dict], n_scored: int
) -> tuple[dict[str, dict], dict[str, float]]:
    """Hit rates per tick and FM passes spent in the scored window, from the seed's ``runs`` table."""
    from pyspark.sql import functions as F

    from solaris.evaluation import protocol as evaluation
    runs: pd.DataFrame = (
        spark.read.format("delta")
        .load(cfg.table_path("runs"))
        .where(F.col("status") == "success")
        .where(F.col("job").isin("hit_rate", "score", "knn"))
        .where((F.col("as_of") >= F.lit(window.fm_cutoff)) & (F.col("as_of") < F.lit(window.end)))
        .select("job", F.date_format("as_of", "yyyy-MM-dd'T'HH:mm:ss").alias("as_of"), "rows_in", "details")
        .toPandas()
    )
    hit_rates, pairs, users = {}, 0, 0
    tick_of = {t["tick"][:19]: t["tick"] for t in per_tick}  # runs' as_of (second precision) -> tick key
    scored_ticks = {row["tick"][:19] for row in per_tick if row["scored_window"]}
    for row in runs.itertuples():
        details = json.loads(row.details)
        tick = tick_of.get(row.as_of)
        if row.job == "hit_rate" and tick:
            hit_rates[tick] = {
                "candidates_hit_rate": details.get("candidates_hit_rate"),
                "verified_hit_rate": details.get("verified_hit_rate"),
            }
        elif row.as_of in scored_ticks:
            pairs += int(row.rows_in) if row.job == "score" else 0
            users += int(row.rows_in) if row.job == "knn" else 0
    return hit_rates, {
        "fm_pairs_scored": pairs,
        "fm_users_represented": users,
        "fm_passes_per_request": evaluation.fm_passes_per_request(pairs, users, n_scored),
    }


def run(spark: SparkSession, config: SolarisConfig, t0: datetime, name: str | None = None, force: bool = False) -> dict:
    from solaris.evaluation import protocol as evaluation
    from solaris.evaluation.report import write_report
    from solaris.models.features import training_features

    settings = config.evaluation
    window = evaluation.EvaluationWindow(t0, settings.tail_hours, settings.eval_hours, settings.step_hours)
    out_dir = config.resolve_under_warehouse(Path(settings.output) / (name or f"t0-{utc_stamp(t0)}"))
    out_dir.mkdir(parents=True, exist_ok=True)
    fingerprint = evaluation.seed_fingerprint(t0, config)
    log.info(
        "evaluation %s: FM trained up to %s, replay %d ticks to %s, %d seeds",
        out_dir,
        window.fm_cutoff,
        len(window.ticks()),
        window.end,
        settings.seeds,
    )
    events = _arrays(spark, config, window.end)
    features = training_features(events.user_id, events.item_id, events.ts, events.label, config.model.history_length)
    results, wall = [], time.monotonic()
    for seed in range(config.seed, config.seed + settings.seeds):
        seed_dir = out_dir / f"seed-{seed}"
        result_path = seed_dir / "result.json"
        if result_path.is_file() and not force:
            saved = json.loads(result_path.read_text())
            if evaluation.same_settings(saved.get("fingerprint"), fingerprint):
                log.info("seed %d already evaluated (%s): reused", seed, result_path)
                results.append(saved["result"])
                continue
            log.info("seed %d: settings changed since %s, recomputing", seed, result_path)
        if force and seed_dir.exists():
            import shutil

            shutil.rmtree(seed_dir)
        started = time.monotonic()
        result = evaluate_seed(spark, config, window, events, features, seed, seed_dir)
        result["cost"]["seed_wall_s"] = time.monotonic() - started
        seed_dir.mkdir(parents=True, exist_ok=True)
        tmp = result_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"fingerprint": fingerprint, "result": result}, indent=2, default=str))
        tmp.replace(result_path)
        log.info(
            "seed %d done in %.0fs: NE fm %.4f, vm %.4f, distilled %.4f, solaris tiers1-3 %.4f; coverage "
            "tier1 %.1f%% / 1-2 %.1f%% / 1-3 %.1f%%",
            seed,
            result["cost"]["seed_wall_s"],
            *(result["variants"][v]["ne"] for v in ("fm", "vm_baseline", "vm_distilled", "solaris_tiers123")),
            *(100 * result["coverage"][k] for k in ("tiers1", "tiers1-2", "tiers1-3")),
        )
        results.append(result)
    summary = {
        "output": str(out_dir),
        "t0": t0.isoformat(),
        "fm_cutoff": window.fm_cutoff.isoformat(),
        "end": window.end.isoformat(),
        "settings": settings.model_dump(),
        "warehouse": str(config.warehouse),
        "seeds": [r["seed"] for r in results],
        **evaluation.aggregate_seeds(results),
        "per_seed": results,
        "wall_s": time.monotonic() - wall,
    }
    paths = write_report(out_dir, summary)
    log.info("evaluation written: %s", ", ".join(str(p) for p in paths))
    return summary


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)

    def body() -> None:
        from solaris.spark import get_spark

        if args.quick:
            args.overrides = [*QUICK_OVERRIDES, *args.overrides]
        config = config_from_args(args)
        spark = get_spark(config, "evaluate")
        summary = run(spark, config, args.as_of, args.name, args.force)
        from solaris.evaluation.protocol import TRANSFER_VARIANTS

        for name, row in summary["variants"].items():
            ne, tr, pooled = row["ne"], row["transfer_ratio"], row["transfer_ratio_pooled"]
            ratio = ""
            if name in TRANSFER_VARIANTS:
                ratio = (
                    "  transfer "
                    + ("n/a" if pooled != pooled else f"{pooled:+.3f}")
                    + ("" if tr["mean"] is None else f" (per seed {tr['mean']:+.3f} ± {tr['std']:.3f}, n={tr['n']})")
                )
            print(f"{name:<20} NE {ne['mean']:.4f} ± {ne['std']:.4f}  AUC {row['auc']['mean']:.4f}{ratio}")
        cov = summary["coverage"]
        print(
            "coverage tier1 {:.1%}, tiers1-2 {:.1%}, tiers1-3 {:.1%}".format(
                *(cov[k]["mean"] for k in ("tiers1", "tiers1-2", "tiers1-3"))
            )
        )
        print(f"report: {summary['output']}/report.md (metrics.json, *.png)")

    return run_job("evaluate", body)


if __name__ == "__main__":
    sys.exit(main())
