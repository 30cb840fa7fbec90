"""The answers a check's fast test (tests/test_checks_*.py) tries against the check function directly: the
solution's, and every right and wrong answer in tests/fixtures/ that writes a cell of the exercise. Each is defined
in a real IPython shell, as a learner's cells are, so magics and `%%writefile` work; what the notebook defines
before the exercise is the test's to give (`context`). The strength test stays the proof that the notebook's
cells and these functions agree (tests/test_strength.py).

A wrong answer that only the hidden tests catch says so in its fixture entry: `"hidden_only": "<which hidden
case catches it>"`; the fast test then holds that the visible check lets it through (so that the count of what
immediate feedback catches stays true).

    @pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex3-answer"}), ids=str)
    def test_parameter_server(case, view):
        names = define(case, {"np": np})
        judge(case, lambda: collectives.parameter_server(names["my_parameter_server_allreduce"], view))
"""

from __future__ import annotations

import builtins
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tests.conftest import ROOT
from tests.grading_support import answer_cells, right_answers, wrong_answers

SOLUTION = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[^\n]*\n", re.MULTILINE)


@dataclass
class Case:
    """One answer to try: which one, its cells (grade_id -> source), and what the visible check must say."""

    label: str
    answers: dict[str, str]
    right: bool
    hidden_only: str = ""

    def __str__(self) -> str:
        return self.label


def solution_answers(notebook: str, answer_ids: set[str]) -> dict[str, str]:
    """The solution notebook's answer cells (grade_id -> source), the solution markers taken out."""
    cells = json.loads((ROOT / "solutions" / f"{notebook}.ipynb").read_text())["cells"]
    found = {
        c["metadata"]["nbgrader"]["grade_id"]: SOLUTION.sub("", "".join(c["source"]))
        for c in cells
        if c["metadata"].get("nbgrader", {}).get("grade_id") in answer_ids
    }
    missing = answer_ids - set(found)
    assert not missing, f"solutions/{notebook}.ipynb has no answer cells {sorted(missing)}"
    return found


def cases(notebook: str, answer_ids: set[str]) -> list[Case]:
    """The solution, then every fixture answer (wrong, then right) that writes one of `answer_ids`; the cells of
    `answer_ids` an entry leaves alone keep the solution's."""
    solution = solution_answers(notebook, answer_ids)
    found = [Case("the solution", solution, right=True)]
    for kind, entries in (("wrong", wrong_answers(notebook)), ("right", right_answers(notebook))):
        for k, entry in enumerate(entries):
            cells = answer_cells(entry)
            if not set(cells) & answer_ids:
                continue
            label = f"{kind} answer {k} ({entry.get('why', '')})"
            found.append(Case(label, {**solution, **cells}, kind == "right", entry.get("hidden_only", "")))
    return found


def code_cell(notebook: str, marker: str) -> str:
    """The source of the solution notebook's one code cell holding `marker`."""
    cells = json.loads((ROOT / "solutions" / f"{notebook}.ipynb").read_text())["cells"]
    (source,) = ["".join(c["source"]) for c in cells if c["cell_type"] == "code" and marker in "".join(c["source"])]
    return source


def visible_check(notebook: str, grade_id: str) -> str:
    """The visible part of a check cell (its hidden tests left out), as the learner's notebook runs it."""
    cells = json.loads((ROOT / "solutions" / f"{notebook}.ipynb").read_text())["cells"]
    (source,) = ["".join(c["source"]) for c in cells if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id]
    return source.split("### BEGIN HIDDEN TESTS")[0]


def run_in_shell(source: str, names: dict) -> str | None:
    """Run `source` in the IPython shell holding `names` (what `define` left there); its error in words, or None."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.user_ns.clear()
    shell.user_ns.update(names)
    result = shell.run_cell(source, store_history=False, silent=True)
    if result.success:
        return None
    error = result.error_in_exec or result.error_before_exec
    return f"{type(error).__name__}: {error}"


@contextmanager
def cells_run(tmp_path_factory: Any, notebook: str, markers: tuple[str, ...], names: dict) -> Iterator[dict]:
    """The namespace after the solution's code cells holding MARKERS ran in turn on NAMES (WORK added: a temporary
    folder, also tempfile's while the block runs, so that the cells' temporary folders land there)."""
    import tempfile

    import pytest
    from IPython.core.interactiveshell import InteractiveShell

    work = tmp_path_factory.mktemp("cells")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(work))
        names = {**names, "WORK": work}
        for marker in markers:
            problem = run_in_shell(code_cell(notebook, marker), names)
            assert problem is None, f"the notebook's cell with {marker!r}: {problem}"
            names = dict(InteractiveShell.instance().user_ns)
        yield names


def covered(notebook: str) -> set[str]:
    """Every answer cell some fixture entry of `notebook` writes."""
    return {g for e in wrong_answers(notebook) + right_answers(notebook) for g in answer_cells(e)}


def define(case: Case, context: dict[str, Any]) -> dict[str, Any]:
    """Run the case's answer cells in a fresh IPython namespace holding `context`; returns the namespace."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.user_ns.clear()
    # The namespace is the module IPython put in sys.modules["__main__"], as a kernel's is; a `__spec__` of None
    # there lets multiprocessing's spawn start processes later in the run (it reads __main__.__spec__).
    shell.user_ns.update({"__name__": "__main__", "__spec__": None, "__builtins__": builtins}, **context)
    for grade_id, source in case.answers.items():
        result = shell.run_cell(source, store_history=False, silent=True)
        if not result.success:
            raise AssertionError(f"{case}: its cell {grade_id} failed: {result.error_in_exec!r}") from (
                result.error_in_exec or result.error_before_exec
            )
    return dict(shell.user_ns)


@contextmanager
def own_cluster(tmp_path_factory: Any, *args: Any, **options: Any) -> Iterator[Any]:
    """`course.cluster.start(*args, **options)` in an IPython profile of the test's own, so that stopping it touches
    no one else's cluster; stopped at the end. For engines no other module may have touched (else shared_cluster)."""
    import pytest

    from course import cluster

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("IPYTHONDIR", str(tmp_path_factory.mktemp("ipython")))
        started = cluster.start(*args, **options)
        try:
            yield started
        finally:
            started.stop()


# The engine clusters the fast tests share, by what they run ("mpi-2": two MPI engines), in one IPython profile of
# the session's own: each starts once per session (tests/conftest.py stops them at its end), not once per module.
_SHARED: dict[str, Any] = {}
_SHARED_PROFILE: list[str] = []


@contextmanager
def shared_cluster(tmp_path_factory: Any, n: int, engines: str = "local") -> Iterator[Any]:
    """`course.cluster.start(n, engines=engines)` shared by every fast test module that asks for the same: started
    the first time, then this process's current cluster again (as the task runtime needs), its engines' namespaces
    cleared before and after, so that a module finds them as the notebook's freshly started engines."""
    import pytest

    from course import cluster

    if not _SHARED_PROFILE:
        _SHARED_PROFILE.append(str(tmp_path_factory.mktemp("ipython-shared")))
    cluster_id = f"t-checks-{engines}-{n}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("IPYTHONDIR", _SHARED_PROFILE[0])
        known = _SHARED.get(cluster_id)
        if known is None or cluster.current() is not known:
            known = _SHARED[cluster_id] = cluster.start(n, engines=engines, cluster_id=cluster_id, quiet=True)
        known.view.clear(block=True)
        try:
            yield known
        finally:
            known.view.clear(block=True)


@contextmanager
def torch_engines(tmp_path_factory: Any, n: int = 2) -> Iterator[Any]:
    """shared_cluster's `n` local engines as one gloo group, as a PyTorch notebook forms them."""
    from course import torch_group

    with shared_cluster(tmp_path_factory, n, engines="local") as engines:
        torch_group.destroy(engines)  # a module before this one may have left one formed
        torch_group.form(engines)
        try:
            yield engines
        finally:
            torch_group.destroy(engines)


def uses_shared(module: Any) -> bool:
    """Whether a test module asks for the shared clusters (through shared_cluster or torch_engines)."""
    return (
        getattr(module, "shared_cluster", None) is shared_cluster
        or getattr(module, "torch_engines", None) is torch_engines
    )


def stop_shared() -> None:
    """Stop the clusters shared_cluster started (the session's end)."""
    import pytest

    with pytest.MonkeyPatch.context() as patch:
        if _SHARED_PROFILE:
            patch.setenv("IPYTHONDIR", _SHARED_PROFILE[0])
        while _SHARED:
            _SHARED.popitem()[1].stop()


def defined(case: Case, context: dict) -> dict:
    """define(case, context); a wrong answer's cell that fails leaves what it bound before failing, as in the
    notebook, where its check runs next all the same."""
    from IPython.core.interactiveshell import InteractiveShell

    try:
        return define(case, context)
    except AssertionError:
        if case.right:
            raise
        return dict(InteractiveShell.instance().user_ns)


def outcome(check: Callable[[], str | None]) -> str | None:
    """What the notebook's check cell would show: the check's words, or the exception the answer raised in it."""
    try:
        return check()
    except Exception as error:  # the learner's code failing inside the check: the cell fails too
        return f"{type(error).__name__}: {error}"


def judge(case: Case, check: Callable[[], str | None]) -> None:
    """The fast test's verdict: a right answer passes the visible check, a wrong one is told what is wrong (or,
    marked hidden_only, is left to the hidden tests)."""
    said = outcome(check)
    if case.right:
        assert said is None, f"{case} is refused by the visible check: {said}"
    elif case.hidden_only:
        assert said is None, f"{case} is now caught by the visible check ({said}): remove its hidden_only note"
    else:
        assert said, f"{case} passes the visible check: the learner gets no feedback"
