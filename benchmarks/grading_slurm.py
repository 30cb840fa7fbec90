"""Benchmark: grading a class as a Slurm job array (`course grade --slurm`) against grading it on one machine.

Both grade the same class with --regrade, alternately (local, Slurm, local, ...), on the same cores: locally
with one worker per core, on Slurm with one array task per node. It reports the median of the per-pair ratios
Slurm time / local time (the overhead of submitting, queueing and collecting; goal at most 1.2x where the nodes
share this machine's cores, as the virtual cluster's do), which nodes the tasks ran on, whether both wrote the
same rows, and this machine's own 2-process ceiling (benchmarks/machine.py) measured in the same run.

Needs a Slurm with nodes to grade on; on one machine, the two-node virtual cluster, as root:

    eval "$(bash scripts/virtual-cluster.sh start)"
    .venv/bin/python benchmarks/grading_slurm.py [--submissions 40] [--pairs 2]
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])  # not benchmarks/: its scripts would shadow packages

from benchmarks import machine  # noqa: E402
from benchmarks.grading import FIXTURE, make_class  # noqa: E402
from course import slurm  # noqa: E402
from course.grading import on_slurm  # noqa: E402
from course.grading.grade import check_options, grade  # noqa: E402


def _rows(out: Path) -> list[tuple]:
    with open(out / "grades.csv", newline="") as f:
        return sorted((r["student"], r["notebook"], r["cell"], r["points"], r["status"]) for r in csv.DictReader(f))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=40)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--notebook", type=Path, default=FIXTURE, help="an instructor notebook (default: the fixture)")
    args = parser.parse_args()
    nodes = slurm.partitions()
    if not nodes:
        print("no Slurm answers here: start one first (see --help)", file=sys.stderr)
        return 1
    tasks, cores = nodes[0].nodes, os.cpu_count() or 1
    shared = Path.home() / ".cache" / "course" / "bench-grading-slurm"  # compute nodes must see it: not /tmp
    shutil.rmtree(shared, ignore_errors=True)
    ratios, ceilings, spread = [], [], set()
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        make_class(args.notebook, args.submissions, Path(tmp) / "class")
        for pair in range(args.pairs):
            ceilings.append(machine.pair())
            started = time.perf_counter()
            options = check_options(Path(tmp) / "class", shared / "local", args.notebook.parent, workers=cores)
            grade(options, regrade=True, progress=False)
            local = time.perf_counter() - started
            started = time.perf_counter()
            on_slurm.submit(
                Path(tmp) / "class",
                shared / "slurm",
                args.notebook.parent,
                regrade=True,
                tasks=tasks,
                time_limit="00:30:00",
                progress=False,
            )
            on = time.perf_counter() - started
            for log in (shared / "slurm").glob("slurm-logs/*/task-*.out"):
                spread |= set(re.findall(r"on (\S+) with", log.read_text()))
            ratios.append(on / local)
            print(
                f"pair {pair + 1}: local ({cores} workers) {local:6.1f} s, Slurm ({tasks} tasks) {on:6.1f} s, "
                f"ratio {on / local:.2f}",
                flush=True,
            )
    same = _rows(shared / "local") == _rows(shared / "slurm")
    ratio = statistics.median(ratios)
    print(
        f"{args.submissions} submissions of {args.notebook.name}: Slurm over local, median {ratio:.2f}x (per pair: "
        f"{', '.join(f'{r:.2f}' for r in ratios)}); goal <= 1.2x: {'met' if ratio <= 1.2 else 'NOT met'}; tasks ran "
        f"on {', '.join(sorted(spread))}; identical rows: {same}; this machine's 2-process ceiling "
        f"{statistics.median(ceilings):.2f}x (machine.py)"
    )
    shutil.rmtree(shared, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
