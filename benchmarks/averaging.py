"""Benchmark: elapsed time of each parameter-averaging strategy with 2 workers against 1 worker, on 2 engines.

Quick-profile sizes (the digits fallback or MNIST, simple-mnist). The machine is shared and noisy, so the
configurations are interleaved (1 worker, 2 workers, for each strategy, round after round) and the median
of the per-round ratios is reported, never one absolute time.

    .venv/bin/python benchmarks/averaging.py [--rounds 3] [--epochs 2] [--limit 600]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# keep this folder off the path: its scripts are named like modules (horovod.py would shadow the horovod
# package; a comm.py, as collectives.py once was, hid the `comm` package ipykernel imports)
sys.path[:] = [str(HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != HERE]

from course import averaging, cluster, data, tasks  # noqa: E402
from course.averaging import STRATEGIES, Network  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--limit", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    (x, y), _ = data.load("mnist", limit=args.limit)
    network = Network("simple-mnist", tuple(x.shape[1:]), 10)
    weights = network.build().get_weights()
    started = time.perf_counter()
    engines = cluster.start(2, cluster_id="course-bench-averaging", threads=1, quiet=True, persist=False)
    print(f"cluster of 2 engines ready in {time.perf_counter() - started:.1f} s")
    try:
        averaging.master_build_workers(engines.view, network)
        times: dict[tuple[str, int], list[float]] = {}
        for r in range(args.rounds):
            for strategy in STRATEGIES:
                for workers in (1, 2):
                    tasks.reset()
                    result = averaging.fit(
                        strategy,
                        network,
                        x,
                        y,
                        workers=workers,
                        epochs=args.epochs,
                        batch_size=args.batch_size,
                        weights=weights,
                    )
                    times.setdefault((strategy, workers), []).append(result.elapsed)
            print(f"round {r + 1}: " + ", ".join(f"{s}/{w}w {t[-1]:.2f}s" for (s, w), t in times.items()))
        print(f"\n{len(x)} images, {args.epochs} epochs, batch {args.batch_size}, 2 engines, {args.rounds} rounds")
        print(f"{'strategy':<11} {'1 worker s':>11} {'2 workers s':>12} {'median 2w/1w':>13}")
        for strategy in STRATEGIES:
            one, two = times[(strategy, 1)], times[(strategy, 2)]
            ratio = statistics.median(b / a for a, b in zip(one, two))
            print(f"{strategy:<11} {statistics.median(one):>11.2f} {statistics.median(two):>12.2f} {ratio:>13.2f}")
    finally:
        engines.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
