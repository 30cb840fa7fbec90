"""ResNet with MirroredStrategy as a standalone program (Torres's BSC multi-GPU hands-on script): what a Slurm job runs.

    python -m course.programs.mirrored_resnet --replicas 2 --epochs 3            # one process, one replica per GPU
    python -m course job mirrored --gpus-per-node 4 --submit -- --epochs 5

Without GPUs it makes logical CPU devices so the mechanics can be seen. Prints one `SUMMARY {json}` line
(epoch time without the first epoch, images/s); with --results FILE it appends a row to the class results (a bad
results file is refused before training), and with --log-dir DIR it writes TensorBoard logs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any


def main(argv: list[str] | None = None) -> int:
    """Train once with MirroredStrategy and print its SUMMARY line; 1 after a one-line error, 0 when done."""
    parser = _parser()
    args = parser.parse_args(argv)
    if min(args.batch, args.epochs, args.input_size) < 1 or (args.replicas is not None and args.replicas < 1):
        parser.error("--replicas, --batch, --epochs and --input-size must be positive")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from course import UserError, results, training
    from course import from_args

    try:
        if args.results:
            results.check_file(args.results)  # fail now, not after the training
        replicas = args.replicas if args.replicas is not None else _visible_gpus()
        started = time.perf_counter()
        options = from_args(args, "model input_size epochs steps limit dataset log_dir")
        result = training.mirrored_run(replicas, per_replica_batch=args.batch, base_lr=args.lr, **options)
        elapsed = time.perf_counter() - started
        print(f"SUMMARY {json.dumps(_summary(result))}", flush=True)
        if args.results:
            results.append_row(args.results, _results_row(args, result, elapsed))
            print(f"Appended this run to {args.results}", flush=True)
    except UserError as exc:
        print(f"course: error: {exc}", file=sys.stderr)
        return 1
    return 0


def _parser() -> argparse.ArgumentParser:
    """The program's command line."""
    parser = argparse.ArgumentParser(
        prog="python -m course.programs.mirrored_resnet", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--replicas", type=int, default=None, help="default: the GPUs visible, else 1")
    parser.add_argument("--model", default="resnet50v2", help="resnet50v2 or resnet152v2")
    parser.add_argument("--batch", type=int, default=32, help="batch per replica (global = batch x replicas)")
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate of one replica (scaled by replicas)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=None, help="global batches per epoch (default: the whole data)")
    parser.add_argument("--input-size", type=int, default=32, help="image side (the BSC hands-on uses 128)")
    parser.add_argument("--limit", type=int, default=None, help="use at most this many training images")
    parser.add_argument("--dataset", default="cifar10")
    parser.add_argument("--results", default=None, metavar="FILE", help="append a row to this class results CSV")
    parser.add_argument("--log-dir", default=None, metavar="DIR", help="write TensorBoard logs here")
    return parser


def _visible_gpus() -> int:
    """The GPUs TensorFlow sees, at least 1: the default number of replicas."""
    import tensorflow as tf

    return max(1, len(tf.config.list_physical_devices("GPU")))


def _summary(result: Any) -> dict:
    """What the SUMMARY line reports of a training.mirrored_run result."""
    return {
        k: getattr(result, k)
        for k in (
            "model",
            "replicas",
            "per_replica_batch",
            "global_batch",
            "learning_rate",
            "epoch_times",
            "epoch_time",
            "images_per_second",
            "final_loss",
            "devices",
        )
    }


def _results_row(args: argparse.Namespace, result: Any, elapsed: float) -> dict:
    """The class results row of this run (the dataset really used: digits when offline)."""
    from course import results

    return {
        "strategy": "mirrored",
        "dataset": result.dataset,
        "network": "simple-mnist" if args.model == "mnist_cnn" else args.model,
        "workers": result.replicas,
        "epochs": args.epochs,
        "batch_size": result.global_batch,
        "elapsed_s": round(elapsed, 4),
        "accuracy": None,
        "epoch_time_s": round(result.epoch_time, 4),
        "images_per_s": round(result.images_per_second, 2),
        "engines": 1,
        "hardware": results.hardware(),
    }


if __name__ == "__main__":
    sys.exit(main())
