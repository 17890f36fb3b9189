"""``solaris train-vm`` and ``spark-submit jobs/train_vm.py``: parse the arguments, then run
:mod:`solaris.stages.train_vm` (its docstring is the ``--help`` text)."""

from __future__ import annotations

import argparse
import sys

from solaris.runtime import add_common_args, as_of_arg, config_from_args, job_parser, run_job, setup_logging
from solaris.spark import get_spark
from solaris.stages import train_vm as stage
from solaris.timeutil import utc_stamp


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("solaris train-vm", stage.__doc__, with_as_of=False)
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
        if args.teacher:  # a new list: argparse shares the default one between parses
            args.overrides = [*args.overrides, f"model.distillation.teacher={args.teacher}"]
        config = config_from_args(args)
        seed = config.seed if args.seed is None else args.seed
        teacher = stage.load_teacher(config, args.fm) if args.variant == "distilled" else None
        folder, validation = stage.run(
            get_spark(config, f"train-vm-{args.variant}"), config, args.as_of,
            args.run_id or f"train_vm_{args.variant}-{utc_stamp(args.as_of)}-s{seed}", seed=seed,
            variant=args.variant, output=config.resolve_under_warehouse(args.output or f"models/vm_{args.variant}"),
            teacher=teacher)
        print(f"vm checkpoint: {folder} (version {folder.name}, valid NE {validation['ne']:.4f})")

    return run_job("train-vm", body)


if __name__ == "__main__":
    sys.exit(main())
