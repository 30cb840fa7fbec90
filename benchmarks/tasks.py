"""Benchmark: the cost of course.tasks over bare ipyparallel, and the blocked matrix multiply's speedup.

In one run, on one 2-engine cluster, measured interleaved (A B A B ...) so both sides see the same load:
1. per-task overhead: N empty tasks through course.tasks (submit all, then compss_barrier) against N bare
   `LoadBalancedView.apply` calls (submit all, then wait); the median per-pair ratio (goal: at most 1.5);
2. blocked matrix multiply (MSIZE x MSIZE blocks of BSIZE x BSIZE, one BLAS thread per engine; the blocks of
   A and B are made by tasks on the engines, as a COMPSs program would) on 2 engines against 1 engine
   (course.tasks.reset(engines=1)); the median per-pair speedup, beside the machine's ceiling measured in the
   same pairs (two single-thread BLAS processes against one, benchmarks/machine.py; goal: at least 0.9 x it);
3. a short PyCOMPSs program run as a script (`python program.py`, 4 tiny tasks, its own cluster): where its wall
   time goes, median of --scripts runs: the cluster's start, the program, and its end (pending work, engines
   ended, cluster stopped; goal: the end within about 1 s).

    .venv/bin/python benchmarks/tasks.py [--pairs 5] [--tasks 200] [--msize 4] [--bsize 512] [--scripts 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])  # not benchmarks/: its scripts would shadow packages

import numpy as np  # noqa: E402

from course import cluster  # noqa: E402
from course import tasks  # noqa: E402
from course.tasks import INOUT, compss_barrier, compss_wait_on, task  # noqa: E402

_spec = importlib.util.spec_from_file_location("machine", Path(__file__).resolve().parent / "machine.py")
machine = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(machine)


def empty():
    return None


@task(returns=1)
def empty_task():
    return None


@task(returns=1)
def block(n: int, seed: int):
    import numpy as np

    return np.random.default_rng(seed).random((n, n))


@task(c=INOUT)
def multiply(a, b, c):
    c += a @ b


@task(returns=1)
def zeros(n: int):
    import numpy as np

    return np.zeros((n, n))


def tasks_overhead(n: int) -> float:
    tasks.reset()
    started = time.perf_counter()
    for _ in range(n):
        empty_task()
    compss_barrier()
    return (time.perf_counter() - started) / n


def bare_overhead(lview, n: int) -> float:
    started = time.perf_counter()
    results = [lview.apply_async(empty) for _ in range(n)]
    for r in results:
        r.get()
    return (time.perf_counter() - started) / n


def matmul(engines: int | None, msize: int, bsize: int, check: bool = False) -> float:
    """Seconds for the blocked product on `engines` engines (None: all); blocks made on the engines first."""
    tasks.reset(engines=engines)
    A = [[block(bsize, 100 * i + k) for k in range(msize)] for i in range(msize)]
    B = [[block(bsize, 10_000 + 100 * k + j) for j in range(msize)] for k in range(msize)]
    C = [[zeros(bsize) for _ in range(msize)] for _ in range(msize)]
    compss_barrier()
    started = time.perf_counter()
    for i in range(msize):
        for j in range(msize):
            for k in range(msize):
                multiply(A[i][k], B[k][j], C[i][j])
    compss_barrier()
    elapsed = time.perf_counter() - started
    if check:
        a, b, c = np.block(compss_wait_on(A)), np.block(compss_wait_on(B)), np.block(compss_wait_on(C))
        assert np.allclose(c, a @ b), "blocked product differs from A @ B"
    return elapsed


SCRIPT = """
import sys, time
print("import", time.time(), flush=True)
from course.tasks.api.task import task
from course.tasks.api.api import compss_wait_on

@task(returns=1)
def inc(x):
    return x + 1

first = inc(0)
print("started", time.time(), flush=True)
print("value", compss_wait_on([inc(i) for i in range(3)]), compss_wait_on(first), flush=True)
print("main-done", time.time(), flush=True)
"""


def script_wall() -> tuple[float, float, float, float]:
    """One run of a short program as a script: (total, cluster start, program, end) in seconds."""
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "program.py").write_text(SCRIPT)
        env = dict(
            os.environ,
            IPYTHONDIR=str(Path(folder) / "ipython"),
            COURSE_CLUSTER_ID="bench-tasks-script",
            PYTHONPATH=str(Path(__file__).resolve().parents[1]),
        )
        began = time.time()
        done = subprocess.run(
            [sys.executable, "program.py"], cwd=folder, env=env, capture_output=True, text=True, timeout=300
        )
        ended = time.time()
    if done.returncode != 0:
        raise SystemExit(f"the benchmark script failed: {done.stderr.strip().splitlines()[-1:]}")
    marks = {
        line.split()[0]: float(line.split()[1])
        for line in done.stdout.splitlines()
        if line.split() and line.split()[0] in ("import", "started", "main-done")
    }
    return (
        ended - began,
        marks["started"] - marks["import"],
        marks["main-done"] - marks["started"],
        ended - marks["main-done"],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=200, help="empty tasks per overhead measurement")
    parser.add_argument("--msize", type=int, default=4, help="blocks per side")
    parser.add_argument("--bsize", type=int, default=512, help="block side")
    parser.add_argument("--scripts", type=int, default=3, help="runs of the short program as a script (0: skip)")
    args = parser.parse_args()

    runs = [script_wall() for _ in range(args.scripts)]
    if runs:
        total, start, program, end = (statistics.median(r[i] for r in runs) for i in range(4))
        print(
            f"short program as a script: {total:.2f} s wall (median of {len(runs)}): importing course and the "
            f"cluster's start {start:.2f} s, "
            f"program {program:.2f} s, end {end:.2f} s (goal <= 1.5: {'met' if end <= 1.5 else 'NOT met'}); "
            f"the rest ({total - start - program - end:.2f} s) is the interpreter starting",
            flush=True,
        )

    c = cluster.start(2, cluster_id="bench-tasks", threads=1, quiet=True)
    try:
        lview = c.client.load_balanced_view()
        tasks_overhead(20), bare_overhead(lview, 20)  # warm up both paths
        matmul(None, args.msize, args.bsize, check=True)
        overhead = []
        speedup, ceiling = [], []
        for pair in range(args.pairs):
            t_tasks, t_bare = tasks_overhead(args.tasks), bare_overhead(lview, args.tasks)
            t2, t1 = matmul(None, args.msize, args.bsize), matmul(1, args.msize, args.bsize)
            ceiling.append(machine.pair())
            overhead.append((t_tasks, t_bare))
            speedup.append((t1, t2))
            print(
                f"pair {pair + 1}: empty task {t_tasks * 1e3:.2f} ms vs bare apply {t_bare * 1e3:.2f} ms "
                f"(x{t_tasks / t_bare:.2f}); matmul 1 engine {t1:.2f} s, 2 engines {t2:.2f} s (x{t1 / t2:.2f}); "
                f"ceiling x{ceiling[-1]:.2f}",
                flush=True,
            )
        ratio = statistics.median(a / b for a, b in overhead)
        gain = statistics.median(a / b for a, b in speedup)
        top = statistics.median(ceiling)
        print(
            f"\nper-task overhead: course.tasks {statistics.median(a for a, _ in overhead) * 1e3:.2f} ms, bare "
            f"LoadBalancedView.apply {statistics.median(b for _, b in overhead) * 1e3:.2f} ms (medians); "
            f"median ratio {ratio:.2f} (goal <= 1.5: {'met' if ratio <= 1.5 else 'NOT met'})"
        )
        print(
            f"blocked matmul {args.msize}x{args.msize} blocks of {args.bsize}x{args.bsize}: 1 engine "
            f"{statistics.median(a for a, _ in speedup):.2f} s, 2 engines {statistics.median(b for _, b in speedup):.2f} s "
            f"(medians); median speedup {gain:.2f}, {gain / top:.2f} of the machine's ceiling {top:.2f} measured "
            f"in the same pairs (goal >= 0.9 x ceiling = {0.9 * top:.2f}: {'met' if gain >= 0.9 * top else 'NOT met'})"
        )
    finally:
        tasks.reset()
        c.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
