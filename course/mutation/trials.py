"""Answers tried in place in one run of a notebook: the machinery tests/answer_trials.py and the mutation report share.

The notebook runs once, top to bottom, in one kernel, as nbgrader's autograde runs it (errors allowed,
NBGRADER_EXECUTION=autograde, a cluster of its own). A trial (answer grade_id -> source) takes its answer cells'
places just before its exercise, and the cells from there through its exercise's last check run (a `detour`), with
the names only those answer cells bind unbound first, as in a fresh run. The solution's cells run again after it.
"""

from __future__ import annotations

import ast
import copy
import os
import re
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import nbformat

from course.grading import KERNEL_START_TIMEOUT

CELL_TIMEOUT = 600  # seconds per cell, as generous as grading's


def grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def graded(cell) -> bool:
    return bool(cell.metadata.get("nbgrader", {}).get("grade"))


def failed(cell) -> bool:
    return any(output.get("output_type") == "error" for output in cell.get("outputs", []))


def error(cell) -> str:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.get('ename')}: {str(output.get('evalue'))[:200]}"
    return ""


def raised(cell) -> dict:
    """What an answer cell raised, in brief: its errors' names, and whether NotImplementedError is in what it shows
    (on a %%px cell the engines' error is shown, then ipyparallel raises AlreadyDisplayedError)."""
    outputs = cell.get("outputs", [])
    shown = "\n".join(
        str(out.get("text", "")) + "\n".join(out.get("traceback", [])) + str(out.get("data", "")) for out in outputs
    )
    names = [out.get("ename") for out in outputs if out.get("output_type") == "error"]
    return {"enames": names, "shows_not_implemented": "NotImplementedError" in shown}


def exercise_checks(nb_path: Path) -> dict[str, set[str]]:
    """answer grade_id -> the graded cells of its exercise: those after it, up to the next answer cell."""
    nb = nbformat.read(str(nb_path), as_version=4)
    result: dict[str, set[str]] = {}
    answer = None
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and not meta.get("grade"):
            answer = meta["grade_id"]
            result[answer] = set()
        if meta.get("grade") and answer is not None:
            result[answer].add(meta["grade_id"])
    return result


def spans(source: Path, nb, trials: list[dict[str, str]]) -> list[tuple[int, int]]:
    """(first, last) cell index each trial runs: from its first answer cell through its exercises' last check."""
    index = {grade_id(c): i for i, c in enumerate(nb.cells) if grade_id(c)}
    checks = {answer: [index[g] for g in cells] for answer, cells in exercise_checks(source).items()}
    found = []
    for trial in trials:
        missing = sorted(set(trial) - set(index))
        assert not missing, f"{source.name} has no cells {missing} (fix the trial answers)"
        cells = [index[g] for g in trial]
        found.append((min(cells), max(cells + [i for g in trial for i in checks.get(g, [])])))
    return found


@contextmanager
def notebook_kernel(source: Path, nb, workdir: Path, timeout: int = CELL_TIMEOUT, **env_vars: str) -> Iterator:
    """An nbclient client of NB (read from SOURCE) with its kernel started, run as nbgrader's autograde runs it, in
    WORKDIR, with a cluster id of its own (stopped on the way out, whatever the notebook or a trial left), and
    ENV_VARS in its environment."""
    from nbclient import NotebookClient

    from course import cluster
    from course.run import KERNEL  # the course kernel every notebook names

    cluster_id = cluster.normalise_id(f"trials-{source.stem}-{uuid.uuid4().hex[:6]}")
    env = dict(os.environ, NBGRADER_EXECUTION="autograde", COURSE_CLUSTER_ID=cluster_id, TF_CPP_MIN_LOG_LEVEL="2")
    env.update(env_vars)
    client = NotebookClient(
        nb,
        kernel_name=KERNEL,
        timeout=timeout,
        startup_timeout=KERNEL_START_TIMEOUT,
        allow_errors=True,  # as nbgrader's Execute: a failing cell is scored, the run goes on
        interrupt_on_timeout=True,
        resources={"metadata": {"path": str(workdir)}},
    )
    client.cluster_id = cluster_id
    try:
        with client.setup_kernel(env=env):
            yield client
    finally:
        cluster.stop(cluster_id)  # a detour or the solution may have left engines


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


def forget(client, cells: list, trial: dict[str, str], first: int) -> None:
    """Unbind what the solution's answer cells of TRIAL bind and no earlier cell does, in the kernel and (for
    %%px cells) on the engines: a fresh run of a notebook holding the trial never had them (the solution's
    values, left by the runs before, would answer for it)."""
    answers = _bindings([c for c in cells[first:] if grade_id(c) in trial])
    earlier = _bindings(cells[:first])
    for prefix, names, before in zip(("", "%%px\n"), answers, earlier):
        if names - before:
            code = f"{prefix}for _name in {sorted(names - before)!r}:\n    globals().pop(_name, None)\ndel _name"
            execute(client, nbformat.v4.new_code_cell(code), first)


def execute(client, cell, index: int):
    """Execute CELL as the notebook's cell INDEX. It goes into the notebook first: nbclient updates a display
    (a progress bar) in the notebook's own cell, and puts the executed cell there afterwards anyway. The displays
    an earlier run of that cell registered are forgotten: an update to one (an engine's late output) would index
    the outputs of a cell that is no longer there (nbclient's IndexError, seen on 07 ex3)."""
    client.clear_display_id_mapping(index)
    client.nb.cells[index] = cell
    client.execute_cell(cell, index)
    return cell


def keep_ranks(client, index: int, keep: bool) -> None:
    """Have the kernel keep its `course.comm.on_ranks` ranks up between calls (course.rank_pool), or end them. The
    detours at one cell try the same checks again and again (03's dozens of answers, each checked on 1 to 4 ranks,
    twice): a fresh `mpiexec` job for each call cost most of their time. The solution's own line runs with
    fresh jobs, as a learner's and a grader's kernel do."""
    code = f"from course import rank_pool as _rank_pool\n_rank_pool.KEEP = {keep}\n"
    code += "" if keep else "_rank_pool.close_all()\n"
    execute(client, nbformat.v4.new_code_cell(code + "del _rank_pool"), index)


def detour(client, cells: list, trial: dict[str, str], first: int, last: int) -> tuple[dict[str, str], dict]:
    """Run cells FIRST..LAST with the trial's sources in place: the graded cells that failed, with their errors,
    and what the trial's own answer cells raised (`raised`)."""
    forget(client, cells, trial, first)
    failures, answers = {}, {}
    for index in range(first, last + 1):
        cell = copy.deepcopy(cells[index])
        cell.source = trial.get(grade_id(cell), cell.source)
        execute(client, cell, index)
        if grade_id(cell) in trial:
            answers[grade_id(cell)] = raised(cell)
        if graded(cell) and failed(cell):
            failures[grade_id(cell)] = error(cell)
    return failures, answers


# What a cell can change that the next detour at its exercise does not set again by running its cells afresh: the
# engines, files, the environment, and objects made before the exercise (trained, edited in place).
_OUTSIDE = re.compile(
    r"^\s*%%?(px|autopx|writefile|file)\b"  # cells or lines run on the engines; files written
    r"|\b(view|rc|client|engines|cluster)\b"  # the notebook's engines and clusters
    r"|\bos\.(environ|chdir|putenv)|\bopen\(|\.(write_text|write_bytes|save|savez|to_csv|mkdir|unlink)\(|rmtree"
    r"|\.(fit|compile|set_weights|assign|assign_add|load_weights)\(",  # a model trained, or its weights set
    re.MULTILINE,
)
_EDITS = {"append", "extend", "insert", "update", "pop", "popitem", "clear", "remove", "sort", "setdefault", "add"}


def _edits_earlier(source: str, earlier: set[str]) -> bool:
    """Whether SOURCE edits in place an object bound to one of EARLIER (names bound before its exercise)."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        tree = ast.parse(TransformerManager().transform_cell(source))
    except SyntaxError:
        return True  # unread: assume it might
    for node in ast.walk(tree):
        target = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _EDITS:
            target = node.func.value
        elif isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            target = node.value
        elif isinstance(node, ast.AugAssign):
            target = node.target
        while isinstance(target, (ast.Subscript, ast.Attribute)):
            target = target.value
        if isinstance(target, ast.Name) and target.id in earlier:
            return True
    return False


def leaves_state(cells: list, trial: dict[str, str], first: int, last: int) -> bool:
    """Whether a trial's detour (cells FIRST..LAST, TRIAL's answers in place) may leave state the next detour at
    the same cell would inherit: the solution's cells must then run between them (tests/answer_trials.py)."""
    earlier, _ = _bindings(cells[:first])
    sources = [trial.get(grade_id(c), c.source) for c in cells[first : last + 1] if c.cell_type == "code"]
    sources += [s for g, s in trial.items() if g not in {grade_id(c) for c in cells[first : last + 1]}]
    return any(_OUTSIDE.search(s) or _edits_earlier(s, earlier) for s in sources)
