"""Every trial answer to a notebook's exercises, tried in one run of the notebook (tests/test_checks_strength.py).

Grading a submission runs the whole notebook, and a notebook holds one answer per cell: 39 plausible wrong
answers to 03 made seven submissions, seven full runs. Here the solution notebook runs once, top to bottom, in
one kernel, as nbgrader's autograde runs it (errors allowed, NBGRADER_EXECUTION=autograde, a cluster of its own).
Just before an answer cell, each trial that starts there (a wrong answer, or the released stub) takes its
cells' places and the cells from there through its exercise's last check run, with the names only those answer
cells bind unbound first, as in a fresh run; a graded cell that ends in an
error is one nbgrader scores zero (nbgrader.utils.determine_grade). After each trial the solution's cells run
again, as a learner runs an exercise again after a mistake; a solution check failing there is reported, since
it would mark down a learner who retried, and would leave the next trial a state no fresh run has. The strength test grades the
fixture course both ways and compares, so this shortcut answers to nbgrader's own grading.

    python -m tests.answer_trials SOLUTION.ipynb TRIALS.json OUT.json WORKDIR
"""

from __future__ import annotations

import ast
import copy
import json
import os
import sys
import uuid
from pathlib import Path

import nbformat

from course.run import KERNEL  # the course kernel every notebook names
from tests.grading_support import exercise_checks


CELL_TIMEOUT = 600  # seconds per cell, as generous as grading's


def _grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def _graded(cell) -> bool:
    return bool(cell.metadata.get("nbgrader", {}).get("grade"))


def _failed(cell) -> bool:
    return any(output.get("output_type") == "error" for output in cell.get("outputs", []))


def _error(cell) -> str:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.get('ename')}: {str(output.get('evalue'))[:200]}"
    return ""


def _raised(cell) -> dict:
    """What an answer cell raised, in brief: its errors' names, and whether NotImplementedError is in what it shows
    (on a %%px cell the engines' error is shown, then ipyparallel raises AlreadyDisplayedError)."""
    outputs = cell.get("outputs", [])
    shown = "\n".join(
        str(out.get("text", "")) + "\n".join(out.get("traceback", [])) + str(out.get("data", "")) for out in outputs
    )
    names = [out.get("ename") for out in outputs if out.get("output_type") == "error"]
    return {"enames": names, "shows_not_implemented": "NotImplementedError" in shown}


def spans(source: Path, nb, trials: list[dict[str, str]]) -> list[tuple[int, int]]:
    """(first, last) cell index each trial runs: from its first answer cell through its exercises' last check."""
    index = {_grade_id(c): i for i, c in enumerate(nb.cells) if _grade_id(c)}
    checks = {answer: [index[g] for g in graded] for answer, graded in exercise_checks(source).items()}
    found = []
    for trial in trials:
        missing = sorted(set(trial) - set(index))
        assert not missing, f"the notebook has no cells {missing} (fix tests/fixtures/wrong_answers)"
        cells = [index[g] for g in trial]
        found.append((min(cells), max(cells + [i for g in trial for i in checks.get(g, [])])))
    return found


def run(source: Path, trials: list[dict[str, str]], workdir: Path) -> dict:
    """Run SOURCE once with every trial's detour. Returns, per trial, the graded cells that failed (with their
    errors) and what its own answer cells raised (a released stub must say it is unanswered); the solution's failed
    graded cells; and, per trial, the graded cells the solution failed when run again right after it (the last
    trial at a cell is followed by the solution's own run).

    The solution's own cells, each as it last ran (its line through the notebook, top to bottom), are written to
    WORKDIR/executed.ipynb, and the result also says what a top-to-bottom run must show: the peak memory of the
    kernel and its engines, and whether the notebook left its cluster running (tests/test_notebooks_execute.py
    holds them to Binder and nbgrader's validator)."""
    from nbclient import NotebookClient

    from course import cluster, memory

    nb = nbformat.read(str(source), as_version=4)
    where = spans(source, nb, trials)
    starting: dict[int, list[int]] = {}
    for k, (first, _) in enumerate(where):
        starting.setdefault(first, []).append(k)
    cluster_id = cluster.normalise_id(f"trials-{source.stem}-{uuid.uuid4().hex[:6]}")
    env = dict(os.environ, NBGRADER_EXECUTION="autograde", COURSE_CLUSTER_ID=cluster_id, TF_CPP_MIN_LOG_LEVEL="2")
    client = NotebookClient(
        nb,
        kernel_name=KERNEL,
        timeout=CELL_TIMEOUT,
        startup_timeout=180,
        allow_errors=True,  # as nbgrader's Execute: a failing cell is scored, the run goes on
        interrupt_on_timeout=True,
        resources={"metadata": {"path": str(workdir)}},
    )
    solution_cells = copy.deepcopy(nb.cells)  # the notebook's cells are replaced by what runs: keep the originals
    failed: list[dict[str, str]] = [{} for _ in trials]
    raised: list[dict[str, dict]] = [{} for _ in trials]
    solution: dict[str, str] = {}
    retried: dict[int, dict[str, str]] = {}
    executed = copy.deepcopy(nb)
    left_running, peak = True, memory.PeakMemory()
    try:
        with peak, client.setup_kernel(env=env):
            for index in range(len(solution_cells)):
                here = starting.get(index, [])
                for k in here:
                    failed[k], raised[k] = _detour(client, solution_cells, trials[k], *where[k])
                    if k != here[-1]:  # the solution again, so that the next trial starts where a right answer leaves
                        again, _ = _detour(client, solution_cells, {}, *where[k])
                        if again:
                            retried[k] = again
                cell = _execute(client, copy.deepcopy(solution_cells[index]), index)
                executed.cells[index] = cell
                if _graded(cell) and _failed(cell):
                    solution[_grade_id(cell)] = _error(cell)
            left_running = cluster_id in cluster.running_ids()  # the notebook's own stop cell has run
    finally:
        cluster.stop(cluster_id)  # a detour or the solution may have left engines
    nbformat.write(executed, str(workdir / "executed.ipynb"))
    return {
        "failed": failed,
        "raised": raised,
        "solution": solution,
        "retried": retried,
        "peak": peak.peak,
        "left_running": left_running,
    }


class _Bound(ast.NodeVisitor):
    """The names a cell binds at its top level (not inside the functions or classes it defines)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store):
            self.names.add(node.id)

    def visit_FunctionDef(self, node) -> None:
        self.names.add(node.name)

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Lambda(self, node) -> None:
        pass

    def visit_alias(self, node: ast.alias) -> None:
        self.names.add((node.asname or node.name).split(".")[0])


def bound(source: str) -> set[str]:
    """The names SOURCE binds; IPython's magics are read as the calls they are (a %%writefile cell binds none)."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        tree = ast.parse(TransformerManager().transform_cell(source))
    except SyntaxError:
        return set()
    visitor = _Bound()
    visitor.visit(tree)
    return visitor.names


def _bindings(cells: list) -> tuple[set[str], set[str]]:
    """(names bound in the kernel, names bound on the engines by %%px cells) of code CELLS."""
    kernel: set[str] = set()
    engines: set[str] = set()
    for cell in cells:
        if cell.cell_type != "code":
            continue
        first, _, body = cell.source.lstrip().partition("\n")
        if first.startswith("%%px"):
            engines |= bound(body)
        else:
            kernel |= bound(cell.source)
    return kernel, engines


def _forget(client, cells: list, trial: dict[str, str], first: int) -> None:
    """Unbind what the solution's answer cells of TRIAL bind and no earlier cell does, in the kernel and (for
    %%px cells) on the engines: a fresh run of a notebook holding the trial never had them (the solution's
    values, left by the runs before, would answer for it)."""
    answers = _bindings([c for c in cells[first:] if _grade_id(c) in trial])
    earlier = _bindings(cells[:first])
    for prefix, names, before in zip(("", "%%px\n"), answers, earlier):
        if names - before:
            code = f"{prefix}for _name in {sorted(names - before)!r}:\n    globals().pop(_name, None)\ndel _name"
            _execute(client, nbformat.v4.new_code_cell(code), first)


def _execute(client, cell, index: int):
    """Execute CELL as the notebook's cell INDEX. It goes into the notebook first: nbclient updates a display
    (a progress bar) in the notebook's own cell, and puts the executed cell there afterwards anyway."""
    client.nb.cells[index] = cell
    client.execute_cell(cell, index)
    return cell


def _detour(client, cells: list, trial: dict[str, str], first: int, last: int) -> tuple[dict[str, str], dict]:
    """Run cells FIRST..LAST with the trial's sources in place: the graded cells that failed, with their errors,
    and what the trial's own answer cells raised (_raised)."""
    _forget(client, cells, trial, first)
    failed, raised = {}, {}
    for index in range(first, last + 1):
        cell = copy.deepcopy(cells[index])
        cell.source = trial.get(_grade_id(cell), cell.source)
        _execute(client, cell, index)
        if _grade_id(cell) in trial:
            raised[_grade_id(cell)] = _raised(cell)
        if _graded(cell) and _failed(cell):
            failed[_grade_id(cell)] = _error(cell)
    return failed, raised


def main() -> None:
    source, trials, out, workdir = sys.argv[1:5]
    result = run(Path(source), json.loads(Path(trials).read_text()), Path(workdir))
    Path(out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
