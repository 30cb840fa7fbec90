"""ResNet with MirroredStrategy as a standalone program (seed 004's multi-GPU script): what a Slurm job runs.

    python -m course.mirrored_resnet --replicas 2 --epochs 3            # one process, one replica per GPU
    python -m course job mirrored --gpus-per-node 4 --submit -- --epochs 5

Without GPUs it makes logical CPU devices so the mechanics can be seen. Prints one `SUMMARY {json}` line
(epoch time without the first epoch, images/s) and, with --results FILE, appends a row to the class results.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.mirrored_resnet", description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=None, help="default: the GPUs visible, else 1")
    parser.add_argument("--model", default="resnet50v2", help="resnet50v2 or resnet152v2")
    parser.add_argument("--batch", type=int, default=32, help="batch per replica (global = batch x replicas)")
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate of one replica (scaled by replicas)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=None, help="global batches per epoch (default: the whole data)")
    parser.add_argument("--input-size", type=int, default=32, help="image side (seed 004 uses 128)")
    parser.add_argument("--limit", type=int, default=None, help="use at most this many training images")
    parser.add_argument("--dataset", default="cifar10")
    parser.add_argument("--results", default=None, help="append a row to this class results CSV")
    args = parser.parse_args(argv)
    if min(args.batch, args.epochs, args.input_size) < 1 or (args.replicas is not None and args.replicas < 1):
        parser.error("--replicas, --batch, --epochs and --input-size must be positive")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from course import UserError, training

    replicas = args.replicas
    if replicas is None:
        import tensorflow as tf

        replicas = max(1, len(tf.config.list_physical_devices("GPU")))
    started = time.perf_counter()
    try:
        result = training.mirrored_run(replicas, model=args.model, per_replica_batch=args.batch, base_lr=args.lr,
                                       input_size=args.input_size, epochs=args.epochs, steps=args.steps,
                                       limit=args.limit, dataset=args.dataset)
    except UserError as exc:
        print(f"course: error: {exc}", file=sys.stderr)
        return 1
    elapsed = time.perf_counter() - started
    summary = {k: getattr(result, k) for k in ("model", "replicas", "per_replica_batch", "global_batch",
                                                 "learning_rate", "epoch_times", "epoch_time", "images_per_second",
                                                 "final_loss", "devices")}
    print(f"SUMMARY {json.dumps(summary)}", flush=True)
    if args.results:
        from course import results

        results.append_row(args.results, {"strategy": "mirrored", "dataset": args.dataset, "network": args.model,
                                          "workers": result.replicas, "epochs": args.epochs,
                                          "batch_size": result.global_batch, "elapsed_s": elapsed,
                                          "accuracy": None, "epoch_time_s": result.epoch_time,
                                          "images_per_s": result.images_per_second, "engines": 1})
    return 0


if __name__ == "__main__":
    sys.exit(main())
