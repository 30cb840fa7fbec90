"""Benchmark: the instructor's dry run (`python -m course run`, quick profile) of every notebook, timed.

Goal: all notebooks in under 6 minutes (360 s) of notebook time. An absolute time moves with the host, so
the machine is measured beside it, before and after the notebooks: one process's fixed single-thread work
(benchmarks/machine.py's python loop; a slower figure means a slower or busier host) and the speed-up two
processes get over one (the ceiling every 2-worker figure in the notebooks lives under). Also printed: whether
a Slurm answered (notebook 11 submits real jobs only then, and waits about a minute for one to reach its time
limit), each notebook's time and peak memory, and its slowest cells (from nbclient's timing metadata), which
is where to look when the total grows.

    .venv/bin/python benchmarks/dry_run.py [--runs 1] [NOTEBOOK ...]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
from datetime import datetime
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])  # not benchmarks/: its scripts would shadow packages

from course import jobs, memory, run  # noqa: E402

_spec = importlib.util.spec_from_file_location("machine", Path(__file__).resolve().parent / "machine.py")
machine = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(machine)
GOAL = 360.0  # seconds for all notebooks, quick profile
SLOWEST = 3  # cells shown per notebook


def cell_seconds(notebook) -> list[tuple[float, int, str]]:
    """(seconds, cell number, first line) of each executed code cell, from nbclient's timing metadata."""
    found = []
    for number, cell in enumerate(notebook.cells):
        timing = cell.get("metadata", {}).get("execution", {})
        began, ended = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
        if cell.cell_type == "code" and began and ended:
            seconds = (datetime.fromisoformat(ended) - datetime.fromisoformat(began)).total_seconds()
            found.append((seconds, number, cell.source.strip().splitlines()[0][:60] if cell.source.strip() else ""))
    return found


def machine_now() -> tuple[float, float]:
    """(seconds one process takes for machine.py's python loop work, speed-up of 2 processes over 1), now."""
    one = machine.timed(machine.WORK["python loop"], 1)
    return one, one / machine.timed(machine.WORK["python loop"], 2)


def dry_run(paths: list[Path]) -> float:
    """Run the notebooks as `course run` does; print each one's time, memory and slowest cells; the total."""
    total = 0.0
    for path in paths:
        result, executed = run.execute(path, "quick")
        total += result.seconds
        status = "ok" if result.ok else f"FAILED ({result.error})"
        print(f"  {path.stem:32} {result.seconds:6.1f} s  {memory.megabytes(result.peak_memory):>8}  {status}")
        for seconds, number, line in sorted(cell_seconds(executed), reverse=True)[:SLOWEST]:
            print(f"      cell {number:2}: {seconds:5.1f} s  {line}")
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="names or numbers (default: all)")
    parser.add_argument("--runs", type=int, default=1, help="dry runs, each between two machine measurements")
    args = parser.parse_args()
    paths = run.find(args.notebooks)
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}; Slurm answers: {jobs.slurm_available()}")
    totals, loops, ceilings = [], [], []
    for number in range(args.runs):
        before = machine_now()
        print(f"run {number + 1}: machine before: python loop {before[0]:.2f} s, 2 processes x{before[1]:.2f}")
        totals.append(dry_run(paths))
        after = machine_now()
        print(f"run {number + 1}: machine after: python loop {after[0]:.2f} s, 2 processes x{after[1]:.2f}")
        loops += [before[0], after[0]]
        ceilings += [before[1], after[1]]
        print(f"run {number + 1}: {len(paths)} notebooks in {totals[-1]:.0f} s")
    total = statistics.median(totals)
    print(
        f"dry run: median {total:.0f} s over {len(totals)} run(s), goal < {GOAL:.0f} s: "
        f"{'met' if total < GOAL else 'NOT met'} ({total / GOAL:.2f} of it); machine: python loop "
        f"{statistics.median(loops):.2f} s for one process, ceiling x{statistics.median(ceilings):.2f} for two "
        f"(ideal 2.00); load average {os.getloadavg()[0]:.1f} at the end"
    )


if __name__ == "__main__":
    main()
