"""Benchmark: how much faster two processes are than one on this machine at all, the ceiling for every
other 2-worker goal (tasks.py's matmul speedup, horovod.py's weak-scaling efficiency, grading.py's speed-up).

A fixed amount of single-threaded work (NumPy matrix products with one BLAS thread, or a pure-Python loop) is
done by 1 process, then split over 2 processes running at once; interleaved (1, 2, 1, 2, ...) and the median
per-pair speed-up is reported. On 2 free physical cores it is close to 2; on 2 virtual CPUs that share a
physical core, or a host that is busy, it is lower, and the other benchmarks cannot beat it.
    .venv/bin/python benchmarks/machine.py [--pairs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

WORK = {
    "numpy matmul": "import numpy as np\nx = np.random.default_rng(0).random((512, 512))\n"
    "for _ in range({n}):\n    x @ x\n",
    "python loop": "s = 0\nfor i in range({n} * 400_000):\n    s += i * i\n",
}
UNITS = 64  # matrix products (or loop chunks) in all; 2 processes do half each


def timed(code: str, processes: int) -> float:
    """Seconds for `processes` processes, started together, to do UNITS units of `code` between them."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    script = code.format(n=UNITS // processes)
    started = time.perf_counter()
    running = [subprocess.Popen([sys.executable, "-c", script], env=env) for _ in range(processes)]
    if any(p.wait() != 0 for p in running):
        raise SystemExit("a worker process failed")
    return time.perf_counter() - started


def pair(name: str = "numpy matmul") -> float:
    """One interleaved pair: the speed-up of 2 processes over 1 on `name`'s work, now (for other benchmarks'
    ceilings, measured in their own run beside their own pairs)."""
    one = timed(WORK[name], 1)
    return one / timed(WORK[name], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at start")
    for name, code in WORK.items():
        ratios = []
        for pair in range(args.pairs):
            one, two = timed(code, 1), timed(code, 2)
            ratios.append(one / two)
            print(f"{name} pair {pair + 1}: 1 process {one:.2f} s, 2 processes {two:.2f} s, speed-up {one / two:.2f}")
        print(f"{name}: median speed-up of 2 processes over 1 = {statistics.median(ratios):.2f} (ideal 2.00)")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
