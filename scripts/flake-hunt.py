"""Flake hunt: the tests that wait on something (a browser, a hub, Slurm, MPI launches, time limits) run again and
again on a machine made slow on purpose, so that a wait that only holds on a fast machine fails here first.

Conditions (each run in one of them):
  quota  the whole test process tree in a cgroup with one core's worth of CPU (both cores still visible):
         cgroup v1's cpu.cfs_quota_us = cpu.cfs_period_us, or cgroup v2's cpu.max
  busy   two busy processes beside the run, one per core of a 2-core machine
  plain  the machine as it is

    .venv/bin/python scripts/flake-hunt.py                           # default tests x 5 x (quota, busy)
    .venv/bin/python scripts/flake-hunt.py --repeat 2 --condition quota -- tests/test_hub.py -k graded
    .venv/bin/python scripts/flake-hunt.py --ci --forget --condition quota   # CI=true bash .ci/run, fresh clone

--ci runs the README's test command on a fresh clone of this checkout's HEAD instead (set-up included); --forget
first removes what the suite leaves outside a clone that a fresh machine would not have (FORGET below; needs root).
Each run's junit XML and log go to OUT (default build/flake-hunt); report.md there lists every run's summary,
its time, the failures by test with their first line, the slowest tests and each test file's time.
Needs root for the quota (it writes /sys/fs/cgroup). Exit status 1 if any run had a failure or an error.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The tests that wait on something outside the test process: a browser, a hub, Slurm, MPI launches, time limits.
WAITING_TESTS = [
    "tests/test_hub.py",
    "tests/test_browser.py",
    "tests/test_lab.py",
    "tests/test_slurm.py",
    "tests/test_jobs.py",
    "tests/test_virtual_cluster.py",
    "tests/test_sbatch_check.py",
    "tests/test_grading_timeout.py",
    "tests/test_nbgrader_isolation.py",
    "tests/test_horovod.py",
    "tests/test_horovod_training.py",
    "tests/test_comm.py",
    "tests/test_cluster.py",
    "tests/test_cluster_concurrency.py",
    "tests/test_processes.py",
    "tests/test_tasks.py",
]
# What `make test` leaves outside the clone that a fresh machine has not (Debian's packages and the pip cache stay):
# the hub's shared environment and exchange, the Slurm daemons' configuration and state, the virtual cluster's, the
# course's cache in this user's home, and any account a killed hub test left.
FORGET = [
    "/opt/ddl-hpc",
    "/srv/nbgrader",
    "/etc/slurm/slurm.conf",
    "/var/spool/slurmd",
    "/var/spool/slurmctld",
    "/run/course-slurm",
    "/var/log/course-slurm",
    "/var/lib/course-vc",
    "/var/log/course-vc",
    str(Path.home() / ".cache" / "course"),  # this user's course cache: the dataset fallback, the loopback library
]
TEST_ACCOUNTS = ("ddlhub-ada", "ddlhub-ben", "ddlhub-cy", "ddlhub-teach", "ddlhub-teach2")
TEST_GROUPS = ("ddlhub-learners", "ddlhub-instructors")
BUSY = "while True: pass"


@contextlib.contextmanager
def one_core() -> Iterator[Callable[[], None]]:
    """A cgroup with one core's worth of CPU time per period; yields what a child runs to join it."""
    name = f"ddl-flake-hunt-{os.getpid()}"
    v1 = Path("/sys/fs/cgroup/cpu")
    if (v1 / "cpu.cfs_quota_us").exists():
        group = v1 / name
        group.mkdir()
        period = (v1 / "cpu.cfs_period_us").read_text().strip()
        (group / "cpu.cfs_quota_us").write_text(period)
    elif "cpu" in Path("/sys/fs/cgroup/cgroup.controllers").read_text().split():
        parent = Path("/sys/fs/cgroup")
        (parent / "cgroup.subtree_control").write_text("+cpu")
        group = parent / name
        group.mkdir()
        (group / "cpu.max").write_text("100000 100000")
    else:
        raise SystemExit("flake-hunt: no cgroup cpu controller here (neither v1's cpu nor v2's cpu.max)")

    def join() -> None:
        (group / "cgroup.procs").write_text(str(os.getpid()))

    try:
        yield join
    finally:
        for pid in (group / "cgroup.procs").read_text().split():  # daemons a test left: back to the root group
            with contextlib.suppress(OSError):
                (group.parent / "cgroup.procs").write_text(pid)
        group.rmdir()


@contextlib.contextmanager
def busy_beside(count: int = 2) -> Iterator[Callable[[], None]]:
    """COUNT processes that keep a core busy each, for as long as the block runs."""
    loops = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(count)]
    try:
        yield lambda: None
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


@contextlib.contextmanager
def plain() -> Iterator[Callable[[], None]]:
    yield lambda: None


CONDITIONS = {"quota": one_core, "busy": busy_beside, "plain": plain}


def forget() -> list[str]:
    """Stop the course's Slurm daemons and remove FORGET and the test accounts; returns what was removed."""
    for script, args in (("virtual-cluster.sh", ["stop"]), ("single-node-slurm.sh", ["stop"])):
        subprocess.run(["bash", str(ROOT / "scripts" / script), *args], capture_output=True, timeout=300)
    removed = []
    for path in map(Path, FORGET):
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        else:
            continue
        removed.append(str(path))
    for user in TEST_ACCOUNTS:
        if subprocess.run(["userdel", "-r", user], capture_output=True).returncode == 0:
            removed.append(f"account {user}")
    for group in TEST_GROUPS:
        if subprocess.run(["groupdel", group], capture_output=True).returncode == 0:
            removed.append(f"group {group}")
    return removed


def run_once(argv: list[str], cwd: Path, env: dict, join: Callable[[], None], log: Path) -> tuple[int, float]:
    """ARGV in CWD, its output in LOG, after JOIN (in the child: the quota holds its whole tree)."""
    started = time.perf_counter()
    with log.open("w") as out:
        code = subprocess.call(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=join)
    return code, time.perf_counter() - started


def results(junit: Path) -> list[dict]:
    """Each test case of a junit XML file: its id, file, time, outcome (with the first line of a failure) and CPU
    time where the run measured it (tests/cpu_time.py)."""
    if not junit.exists():
        return []
    cases = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        file = "/".join(p for p in module if not p[:1].isupper()) + ".py"
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            found = case.find(kind)
            if found is not None:
                outcome = kind
                message = (found.get("message") or found.text or "").strip().splitlines()[:1]
                message = message[0][:200] if message else ""
                break
        cpu = [float(p.get("value")) for p in case.iter("property") if p.get("name") == "cpu_seconds"]
        cases.append(
            {"id": f"{file}::{case.get('name')}", "file": file, "time": float(case.get("time", 0)), "outcome": outcome}
            | {"message": message, "cpu": cpu[0] if cpu else None}
        )
    return cases


def report(runs: list[dict], out: Path) -> str:
    """Markdown: the runs, the failures by test, the ten slowest tests, and each file's time and CPU time (where the
    run counted it: tests/cpu_time.py)."""
    lines = [
        "| condition | run | exit | passed | failed | errors | skipped | time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    failures: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in runs:
        count = defaultdict(int)
        for case in r["cases"]:
            count[case["outcome"]] += 1
            if case["outcome"] in ("failure", "error"):
                failures[(case["id"], r["condition"])].append(f"run {r['k']}: {case['message']}")
        lines.append(
            f"| {r['condition']} | {r['k']} | {r['code']} | {count['passed']} | {count['failure']} | {count['error']}"
            f" | {count['skipped']} | {r['seconds'] / 60:.1f} min |"
        )
    lines += ["", "Failures:" if failures else "Failures: none"]
    for (test, condition), messages in sorted(failures.items()):
        lines.append(f"- {test} ({condition}, {len(messages)} of {sum(r['condition'] == condition for r in runs)}):")
        lines += [f"    - {m}" for m in messages]
    for r in runs:
        slowest = sorted(r["cases"], key=lambda c: -c["time"])[:10]
        lines += ["", f"Ten slowest tests of {r['condition']} run {r['k']}:"]
        lines += [f"- {c['time']:.0f} s {c['id']}" for c in slowest]
        by_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for case in r["cases"]:
            by_file[case["file"]][0] += case["time"]
            by_file[case["file"]][1] += case["cpu"] or 0.0
        measured = any(case["cpu"] is not None for case in r["cases"])
        lines += ["", f"Time by file, {r['condition']} run {r['k']} (set-up and tear-down included):"]
        lines += [
            f"- {t:.0f} s{f', {c:.0f} core-s of CPU' if measured else ''} {f}"
            for f, (t, c) in sorted(by_file.items(), key=lambda x: -x[1][0])
        ]
        if measured:
            total = sum(c for _, c in by_file.values())
            lines += ["", f"CPU time of the tests, {r['condition']} run {r['k']}: {total:.0f} core-s"]
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text)
    return text


# What a shell that works on the checkout may have set and a CI machine has not: inherited by a fresh clone's run, they
# made its kernels and engines import this checkout's course/ instead of the clone's (PYTHONPATH, seen: doctor --hub
# found the checkout as its `course` and failed two hub tests).
NOT_IN_CI = ("PYTHONPATH", "VIRTUAL_ENV", "IPYTHONDIR", "COURSE_CLUSTER_ID", "COURSE_PROFILE")


def run_env(ci: bool) -> dict[str, str]:
    """The environment of a run: this one with CI=true; for a fresh clone's run, without what only a shell here sets."""
    env = {**os.environ, "CI": "true"}
    for name in NOT_IN_CI if ci else ():
        env.pop(name, None)
    return env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, help="runs per condition (default 5; 1 with --ci)")
    parser.add_argument("--condition", action="append", choices=sorted(CONDITIONS), help="default: quota and busy")
    parser.add_argument("--ci", action="store_true", help="CI=true bash .ci/run on a fresh clone, set-up included")
    parser.add_argument("--forget", action="store_true", help="before each --ci run, remove FORGET (needs root)")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "flake-hunt")
    parser.add_argument("pytest_args", nargs="*", help="after --: what pytest runs (default: the waiting tests)")
    args = parser.parse_args()
    conditions = args.condition or ["quota", "busy"]
    if "quota" in conditions and os.geteuid() != 0:
        parser.error("the quota condition writes /sys/fs/cgroup: run as root, or choose --condition busy")
    if args.forget and not args.ci:
        parser.error("--forget goes with --ci (it removes what a fresh machine would not have)")
    repeat = args.repeat or (1 if args.ci else 5)
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    for condition in conditions:
        for k in range(1, repeat + 1):
            junit = (args.out / f"{condition}-{k}.xml").resolve()
            log = args.out / f"{condition}-{k}.log"
            env = run_env(args.ci)
            if args.ci:
                removed = forget() if args.forget else []
                print(f"[flake-hunt] {condition} {k}: removed {', '.join(removed) or 'nothing'}", flush=True)
                cwd = Path(tempfile.mkdtemp(prefix="flake-hunt-clone-"))
                subprocess.run(["git", "clone", "-q", str(ROOT), str(cwd)], check=True)
                env["PYTEST_ARGS"] = f"--junitxml={junit} --durations=0"
                argv = ["bash", ".ci/run"]
            else:
                cwd = ROOT
                argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={junit}"]
                argv += args.pytest_args or WAITING_TESTS
            print(f"[flake-hunt] {condition} {k}/{repeat}: {' '.join(argv)} in {cwd} (log {log})", flush=True)
            with CONDITIONS[condition]() as join:
                code, seconds = run_once(argv, cwd, env, join, log)
            if args.ci:
                shutil.rmtree(cwd, ignore_errors=True)
            runs.append({"condition": condition, "k": k, "code": code, "seconds": seconds, "cases": results(junit)})
            print(f"[flake-hunt] {condition} {k}: exit {code} in {seconds / 60:.1f} min", flush=True)
            report(runs, args.out)
    print(report(runs, args.out))
    return 0 if all(r["code"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
