"""ResNet with MirroredStrategy as a standalone program (Torres's BSC multi-GPU hands-on script): what a Slurm job runs.

    python -m course.mirrored_resnet --replicas 2 --epochs 3            # one process, one replica per GPU
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.mirrored_resnet", description=__doc__.splitlines()[0])
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
    args = parser.parse_args(argv)
    if min(args.batch, args.epochs, args.input_size) < 1 or (args.replicas is not None and args.replicas < 1):
        parser.error("--replicas, --batch, --epochs and --input-size must be positive")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from course import UserError, training

    if args.results:
        from course import results

        try:
            results.check_file(args.results)   # fail now, not after the training
        except UserError as exc:
            print(f"course: error: {exc}", file=sys.stderr)
            return 1
    replicas = args.replicas
    if replicas is None:
        import tensorflow as tf

        replicas = max(1, len(tf.config.list_physical_devices("GPU")))
    started = time.perf_counter()
    try:
        result = training.mirrored_run(replicas, model=args.model, per_replica_batch=args.batch, base_lr=args.lr,
                                       input_size=args.input_size, epochs=args.epochs, steps=args.steps,
                                       limit=args.limit, dataset=args.dataset, log_dir=args.log_dir)
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

        try:
            results.append_row(args.results, {"strategy": "mirrored", "dataset": result.dataset,
                                              "network": "simple-mnist" if args.model == "mnist_cnn" else args.model,
                                              "workers": result.replicas,
                                              "epochs": args.epochs, "batch_size": result.global_batch,
                                              "elapsed_s": round(elapsed, 4), "accuracy": None,
                                              "epoch_time_s": round(result.epoch_time, 4),
                                              "images_per_s": round(result.images_per_second, 2), "engines": 1,
                                              "hardware": results.hardware()})
        except UserError as exc:
            print(f"course: error: {exc}", file=sys.stderr)
            return 1
        print(f"Appended this run to {args.results}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
