"""Benchmark: grading 40 submissions of one notebook sequentially (1 worker) against in parallel (2 workers).

Both are the real `course.grading.grade.grade` (plan, nbgrader gradebook, kernels, grades.csv) with
--regrade, run alternately (sequential, parallel, sequential, ...) so both see the same machine load;
it reports each run's time, the median sequential and parallel times and the median of the per-pair
speed-ups (goal: at least 1.7x on 2 workers). The class is a mix of correct, unanswered and wrong
submissions of the fixture course notebook (seconds each), or of --notebook.

    .venv/bin/python benchmarks/grading.py [--submissions 40] [--pairs 2] [--workers 2] [--notebook PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])  # not benchmarks/: its scripts would shadow packages

import nbformat  # noqa: E402

from course.grading.grade import check_options, grade  # noqa: E402
from course.grading.release import render, student_version  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "course" / "99_fixture.ipynb"


def make_class(source: Path, count: int, folder: Path) -> None:
    """COUNT students: a third correct, a third unanswered, a third with a wrong answer (if known)."""
    solution = source.read_text()
    released = render(student_version(nbformat.read(str(source), as_version=4), source.stem))
    wrong_file = ROOT / "tests" / "fixtures" / "wrong_answers" / f"{source.stem}.json"
    variants = [solution, released]
    if wrong_file.exists():
        nb = nbformat.read(str(source), as_version=4)
        answer = json.loads(wrong_file.read_text())[0]
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id in answer:
                cell.source = answer[grade_id]
        variants.append(nbformat.writes(nb))
    for i in range(count):
        student = folder / f"student{i:02d}"
        student.mkdir(parents=True)
        (student / source.name).write_text(variants[i % len(variants)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=40)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--notebook", type=Path, default=FIXTURE, help="an instructor notebook (default: the fixture)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        tmp = Path(tmp)
        make_class(args.notebook, args.submissions, tmp / "class")
        times: dict[int, list[float]] = {1: [], args.workers: []}
        ratios = []
        for pair in range(args.pairs):
            run = {}
            for workers in (1, args.workers):
                started = time.perf_counter()
                options = check_options(tmp / "class", tmp / f"out{workers}", args.notebook.parent, workers=workers)
                summary = grade(options, regrade=True, progress=False)
                run[workers] = time.perf_counter() - started
                times[workers].append(run[workers])
                print(
                    f"pair {pair + 1}: {workers} worker(s): {run[workers]:6.1f} s  ({summary.split(';')[0]})",
                    flush=True,
                )
            ratios.append(run[1] / run[args.workers])
        same = (tmp / "out1" / "grades.csv").read_text() == (tmp / f"out{args.workers}" / "grades.csv").read_text()
    seq, par = statistics.median(times[1]), statistics.median(times[args.workers])
    speedup = statistics.median(ratios)
    print(
        f"{args.submissions} submissions of {args.notebook.name}: sequential {seq:.1f} s, "
        f"{args.workers} workers {par:.1f} s (medians of {args.pairs}); speed-up median {speedup:.2f}x "
        f"(per pair: {', '.join(f'{r:.2f}' for r in ratios)}); goal >= 1.7x: {'met' if speedup >= 1.7 else 'NOT met'}; "
        f"identical grades.csv: {same}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
