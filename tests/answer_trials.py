"""Every trial answer to a notebook's exercises, tried in one run of the notebook (tests/test_strength.py).

Grading a submission runs the whole notebook, and a notebook holds one answer per cell: 39 plausible wrong
answers to 03 made seven submissions, seven full runs. Here the solution notebook runs once, top to bottom, in
one kernel, as nbgrader's autograde runs it (errors allowed, NBGRADER_EXECUTION=autograde, a cluster of its own).
Just before an answer cell, each trial that starts there (a wrong answer, or the released stub) takes its
cells' places and the cells from there through its exercise's last check run, with the names only those answer
cells bind unbound first, as in a fresh run; a graded cell that ends in an
error is one nbgrader scores zero (nbgrader.utils.determine_grade). After an exercise's first trial the solution's
cells run again, as a learner runs an exercise again after a mistake; a solution check failing there is reported,
since it would mark down a learner who retried. After its other trials they run again only where the trial may
have left state the next one would inherit (course.mutation.trials.leaves_state: the engines, files, objects
made before the exercise); elsewhere the next detour sets everything its cells bind afresh anyway. The strength
test grades the fixture course both ways and compares, so this shortcut answers to nbgrader's own grading. The
machinery (the kernel, the detours) is course/mutation/trials.py, shared with `python -m course mutation-report`.

    python -m tests.answer_trials SOLUTION.ipynb TRIALS.json OUT.json WORKDIR
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from pathlib import Path

import nbformat

from course.mutation import trials as one_run  # the machinery this shares with the mutation report
from course.mutation.trials import CELL_TIMEOUT, bound, raised, spans
from tests import script_runs

_SCRIPT_RUNS = "import tests.script_runs as _runs\n_runs.install()\ndel _runs"

__all__ = ["CELL_TIMEOUT", "bound", "raised", "run", "spans"]


def run(source: Path, trials: list[dict[str, str]], workdir: Path) -> dict:
    """Run SOURCE once with every trial's detour. Returns, per trial, the graded cells that failed (with their
    errors) and what its own answer cells raised (a released stub must say it is unanswered); the solution's failed
    graded cells; and, per trial after which the solution ran again, the graded cells it failed then (the last
    trial at a cell is followed by the solution's own run).

    The solution's own cells, each as it last ran (its line through the notebook, top to bottom), are written to
    WORKDIR/executed.ipynb, and the result also says what a top-to-bottom run must show: the peak memory of the
    kernel and its engines on the solution's own line (not in the detours, whose ranks are kept up), and whether
    the notebook left its cluster running (tests/test_notebooks_execute.py holds them to Binder and nbgrader's
    validator)."""
    from course import cluster, memory

    nb = nbformat.read(str(source), as_version=4)
    where = spans(source, nb, trials)
    starting: dict[int, list[int]] = {}
    for k, (first, _) in enumerate(where):
        starting.setdefault(first, []).append(k)
    solution_cells = copy.deepcopy(nb.cells)  # the notebook's cells are replaced by what runs: keep the originals
    failed: list[dict[str, str]] = [{} for _ in trials]
    answered: list[dict[str, dict]] = [{} for _ in trials]
    solution: dict[str, str] = {}
    retried: dict[int, dict[str, str]] = {}
    seconds: list[float] = [0.0 for _ in trials]  # each trial's detour with the solution's run after it: the cost
    executed = copy.deepcopy(nb)
    left_running, peak = True, memory.PeakMemory()
    with peak, one_run.notebook_kernel(source, nb, workdir, CELL_TIMEOUT) as client:
        if os.environ.get(script_runs.VARIABLE):  # the session's one run of each script answer
            one_run.execute(client, nbformat.v4.new_code_cell(_SCRIPT_RUNS), 0)
        for index in range(len(solution_cells)):
            here = starting.get(index, [])
            before = peak.peak
            if here:
                one_run.keep_ranks(client, index, True)
            for k in here:
                started = time.monotonic()
                failed[k], answered[k] = one_run.detour(client, solution_cells, trials[k], *where[k])
                if k != here[-1] and (k == here[0] or one_run.leaves_state(solution_cells, trials[k], *where[k])):
                    again, _ = one_run.detour(client, solution_cells, {}, *where[k])
                    retried[k] = again
                seconds[k] = round(time.monotonic() - started, 1)
            if here:
                one_run.keep_ranks(client, index, False)
                peak.peak = before  # the detours' kept ranks are this harness's: the solution's own line is a learner's
            cell = one_run.execute(client, copy.deepcopy(solution_cells[index]), index)
            executed.cells[index] = cell
            if one_run.graded(cell) and one_run.failed(cell):
                solution[one_run.grade_id(cell)] = one_run.error(cell)
        left_running = client.cluster_id in cluster.running_ids()  # the notebook's own stop cell has run
    nbformat.write(executed, str(workdir / "executed.ipynb"))
    return {
        "failed": failed,
        "raised": answered,
        "solution": solution,
        "retried": retried,
        "peak": peak.peak,
        "left_running": left_running,
        "seconds": seconds,
    }


def main() -> None:
    source, trials, out, workdir = sys.argv[1:5]
    result = run(Path(source), json.loads(Path(trials).read_text()), Path(workdir))
    Path(out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
