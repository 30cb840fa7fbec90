"""Load check: clusters beside each other, as in a class. Four processes each start, use, query and stop a
cluster of their own (their own ids) for N cycles, while `course grade` grades a small class whose notebook
starts its own cluster, and `course cluster status` is polled every second from a terminal.

Afterwards: every cycle of every process worked (nothing was stopped that was not asked to stop), every
grade is right (a correct and a wrong answer), and nothing is left behind (no cluster on record, no process
of this run). Exit status 0 when all three hold. All clusters live in a throwaway IPYTHONDIR, so your own
clusters are never touched. The test suite runs a short version (tests/test_cluster_concurrency.py).

    .venv/bin/python benchmarks/cluster_load.py [--cycles 20] [--processes 4]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)  # not benchmarks/: its scripts would shadow packages

FIXTURE = ROOT / "tests" / "fixtures" / "cluster_course"  # 98_cluster.ipynb: one check run on 2 engines
WRONG = "    return x + x"  # a plausible wrong answer for square(x)

WORKER = """
import json, os, sys
from course import cluster
k, cycles = sys.argv[1], int(sys.argv[2])
for i in range(cycles):
    cid = f"course-load-{k}"
    try:
        c = cluster.start(1, cluster_id=cid, quiet=True, persist=False)
        pids = {e["pid"] for e in c.engines}
        used = set(c.view.apply_sync(os.getpid))
        status = c.status()
        c.stop()
        problem = "" if used == pids else f"engines answered from {used}, expected {pids}"
        problem = problem or ("" if status.ok else f"status not ok: {status}")
        problem = problem or ("" if cid not in cluster.running_ids() else "still on record after stop")
    except Exception as exc:
        problem = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"process": k, "cycle": i, "problem": problem}), flush=True)
"""


def make_class(folder: Path) -> dict[str, tuple[str, str]]:
    """Two students: alice answers right, bob wrong. Returns the expected (status, points) of each."""
    source = (FIXTURE / "98_cluster.ipynb").read_text()
    for student, text in (("alice", source), ("bob", source.replace("    return x * x", WRONG))):
        (folder / student).mkdir(parents=True)
        (folder / student / "98_cluster.ipynb").write_text(text)
    return {"alice": ("passed", "2"), "bob": ("failed", "0")}


def leftovers(ipython_dir: str) -> list[str]:
    """Processes of this run (they carry its IPYTHONDIR) still running."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "name"]):
        try:
            if (
                proc.pid != os.getpid()
                and proc.environ().get("IPYTHONDIR") == ipython_dir
                and proc.status() != psutil.STATUS_ZOMBIE
            ):
                found.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}")
        except psutil.Error:
            pass
    return found


def run(cycles: int, processes: int = 4, home: Path | None = None) -> dict:
    """Run the load once; returns what happened (see `problems`)."""
    home = Path(home or tempfile.mkdtemp(prefix="course-load-"))
    ipython_dir = str(home / "ipython")
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_CLUSTER_ID", "JPY_SESSION_NAME")}
    env.update(IPYTHONDIR=ipython_dir, PYTHONPATH=str(ROOT))
    expected = make_class(home / "class")
    started = time.monotonic()
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(k), str(cycles)],
            cwd=ROOT,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for k in range(processes)
    ]
    grading = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "course",
            "grade",
            str(home / "class"),
            "--out",
            str(home / "out"),
            "--solutions",
            str(FIXTURE),
            "--workers",
            "1",
            "--timeout",
            "300",
        ],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    polls: list[str] = []
    done = threading.Event()

    def poll() -> None:  # an instructor's terminal: `course cluster status` every second
        while not done.is_set():
            out = subprocess.run(
                [sys.executable, "-m", "course", "cluster", "status"], cwd=ROOT, env=env, capture_output=True, text=True
            )
            polls.append(out.stderr if "Traceback" in out.stderr else "")
            done.wait(1)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    outputs = [w.communicate() for w in workers]
    graded = grading.communicate()
    done.set()
    poller.join()
    problems = []
    for k, (worker, (out, err)) in enumerate(zip(workers, outputs)):
        cycles_seen = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        if worker.returncode != 0 or len(cycles_seen) != cycles:
            problems.append(
                f"process {k} ended with {worker.returncode} after {len(cycles_seen)} cycle(s): {err[-500:]}"
            )
        problems += [f"process {k} cycle {c['cycle']}: {c['problem']}" for c in cycles_seen if c["problem"]]
    if grading.returncode != 0:
        problems.append(f"course grade failed ({grading.returncode}): {graded[1][-500:]}")
    else:
        with open(home / "out" / "grades.csv", newline="") as handle:
            rows = {r["student"]: (r["status"], r["points"]) for r in csv.DictReader(handle) if r["cell"]}
        problems += [
            f"grade of {s}: {rows.get(s)} instead of {want}" for s, want in expected.items() if rows.get(s) != want
        ]
    problems += [f"`cluster status` failed: {p[-300:]}" for p in polls if p]
    from course import cluster

    os.environ["IPYTHONDIR"] = ipython_dir
    left_ids = cluster.running_ids()
    deadline = time.monotonic() + 120  # stopped engines exit within seconds; a loaded machine may need more
    while leftovers(ipython_dir) and time.monotonic() < deadline:
        time.sleep(1)
    problems += [f"cluster left on record: {cid}" for cid in left_ids]
    problems += [f"process left running: {p}" for p in leftovers(ipython_dir)]
    seconds = time.monotonic() - started
    shutil.rmtree(home, ignore_errors=True)
    return {"cycles": cycles, "processes": processes, "polls": len(polls), "seconds": seconds, "problems": problems}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=20, help="start-use-query-stop cycles per process (default 20)")
    parser.add_argument("--processes", type=int, default=4, help="processes with a cluster each (default 4)")
    args = parser.parse_args()
    report = run(args.cycles, args.processes)
    print(
        f"{args.processes} processes x {args.cycles} cycles beside `course grade` and {report['polls']} "
        f"`cluster status` polls in {report['seconds']:.0f} s"
    )
    for problem in report["problems"]:
        print(f"PROBLEM {problem}")
    print(
        "ok: nothing stopped that was not asked to, every grade right, nothing left behind"
        if not report["problems"]
        else f"{len(report['problems'])} problem(s)"
    )
    return 0 if not report["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
