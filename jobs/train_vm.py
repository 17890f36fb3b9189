"""Train a vertical model (VM) variant on events up to ``--as-of``; the baseline is the verifier.

Variants: ``baseline`` (cheap real-time features only; used as the verifier by precompute) and
``distilled`` (labels mixed with the FM's soft labels, weight/temperature from
``model.distillation``). The soft labels are cross-fitted by default (``model.distillation.teacher``):
every example is labelled by an FM of the configured architecture trained on the other time folds, so
the student learns from what the FM predicts on unseen traffic rather than from its partly
memorised in-sample logits; ``--teacher in-sample`` uses the ``--fm`` checkpoint's own logits.
The SOLARIS variants, which take served FM embeddings as
features, are trained by the evaluation, which replays the serving path to produce them.

    solaris train-vm --as-of 2000-12-01T00:00:00Z
    solaris train-vm --as-of 2000-12-01T00:00:00Z --variant distilled --fm models/fm
"""

from __future__ import annotations

import argparse
import logging
import sys

from solaris.runtime import add_common_args, as_of_arg, config_from_args, job_parser, run_job, setup_logging
from solaris.timeutil import utc_stamp

log = logging.getLogger("solaris.train_vm")


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("solaris train-vm", __doc__, with_as_of=False)
    parser.add_argument("--as-of", type=as_of_arg, required=True, help="train on events with ts <= this UTC time")
    parser.add_argument("--variant", choices=["baseline", "distilled"], default="baseline")
    parser.add_argument("--fm", default="models/fm", help="FM checkpoint (teacher for 'distilled')")
    parser.add_argument("--teacher", choices=["cross-fit", "in-sample"],
                        help="soft labels for 'distilled' (default: model.distillation.teacher)")
    parser.add_argument("--seed", type=int, help="training seed (default: config seed)")
    parser.add_argument("--output", help="checkpoint root under the warehouse (default models/vm_<variant>)")
    add_common_args(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)

    def body() -> None:
        from solaris.models.checkpoint import load_checkpoint, save_checkpoint
        from solaris.models.features import training_features
        from solaris.models.training import EventArrays, distillation_teacher_logits, train_vm, training_metadata
        from solaris.spark import get_spark
        from solaris.storage.tables import RunRecord, training_events

        if args.teacher:  # a new list: argparse shares the default one between parses
            args.overrides = [*args.overrides, f"model.distillation.teacher={args.teacher}"]
        config = config_from_args(args)
        output = config.resolve_under_warehouse(args.output or f"models/vm_{args.variant}")
        seed = config.seed if args.seed is None else args.seed
        teacher, teacher_version = None, None
        if args.variant == "distilled":  # refuse a bad teacher before any Spark work
            teacher, meta = load_checkpoint(config.resolve_under_warehouse(args.fm), "fm", config.model.embedding_dim)
            teacher_version = meta["version"]
        spark = get_spark(config, f"train-vm-{args.variant}")
        run_id = args.run_id or f"train_vm_{args.variant}-{utc_stamp(args.as_of)}-s{seed}"
        record = RunRecord(run_id=run_id, job=f"train_vm_{args.variant}", as_of=args.as_of)
        events = EventArrays.from_frame(training_events(spark, config, args.as_of))
        features = training_features(
            events.user_id, events.item_id, events.ts, events.label, config.model.history_length
        )
        teacher_logits, teacher_info = None, dict[str, object]()
        if teacher is not None:
            teacher_logits, teacher_info = distillation_teacher_logits(events, config, seed, features, teacher)
        log.info("training VM[%s] on %d events up to %s", args.variant, len(events), args.as_of)
        result = train_vm(events, config, seed, args.variant, teacher_logits=teacher_logits, features=features)
        metadata = training_metadata(
            f"vm_{args.variant}", args.as_of, seed, events, result, teacher_fm_version=teacher_version, **teacher_info
        )
        folder = save_checkpoint(result.model, output, metadata)
        record.rows_in, record.rows_out = len(events), 1
        record.details = {"checkpoint": str(folder), "version": folder.name, **result.validation}
        record.write(spark, config, "success")
        print(f"vm checkpoint: {folder} (version {folder.name}, valid NE {result.validation['ne']:.4f})")

    return run_job("train-vm", body)


if __name__ == "__main__":
    sys.exit(main())
