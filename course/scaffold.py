"""`python -m course new-exercise NOTEBOOK NAME`: the pieces of a new graded exercise, each in the place the course
keeps it (CONTRIBUTING.md walks through filling them in), so that adding an exercise follows the code's path:

- three cells in solutions/NOTEBOOK, before the cells that stop its cluster, or else its key points (`place`): the
  exercise's text, the answer cell (`NAME-answer`, a function to write between the solution markers) and the check
  cell (`NAME-check`: it calls the check, with a hidden block);
- the check function's stub in course/checks/MODULE.py (`@check`, raising until it is written);
- its fast test in tests/test_checks_MODULE.py, which tries the solution and every fixture answer against it;
- a wrong answer to fill in tests/fixtures/wrong_answers/NOTEBOOK.json;
- the exercise's entry to fill in solutions/exercises/NOTEBOOK.yml: what must be true of an answer, which check
  holds each statement and how it is measured (the site's reference page of the notebook is made from it).

Every piece it writes says TODO where a person must write; tests/test_check_cells.py fails while one is left.
"""

from __future__ import annotations

import ast
import json
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from course import UserError

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"^ex-[a-z0-9]+(-[a-z0-9]+)*$")
KEY_POINTS = "## Key points"
TODO = "TODO"


@dataclass(frozen=True)
class Exercise:
    """What the scaffold is asked for: the notebook, the exercise's grade-id stem, the function a learner writes,
    and the check module and function that hold its check."""

    notebook: Path
    name: str
    function: str
    module: str
    check: str
    params: str = ""  # the answer's parameters, as the notebook's previous answer takes them
    view: bool = False  # the notebook's checks take its engines (`view`), so this one does too

    @property
    def answer_id(self) -> str:
        return f"{self.name}-answer"

    @property
    def check_id(self) -> str:
        return f"{self.name}-check"


def find_notebook(root: Path, wanted: str) -> Path:
    """solutions/ notebook named by its number ("03"), its stem or its file name."""
    folder = root / "solutions"
    if not folder.is_dir():
        raise UserError(f"no solutions/ in {root}: new-exercise works in the instructor's checkout of the course")
    stem = Path(wanted).name.removesuffix(".ipynb")
    found = [p for p in sorted(folder.glob("*.ipynb")) if p.stem == stem or p.stem.split("_", 1)[0] == stem]
    if len(found) > 1 and stem not in [p.stem for p in found]:
        raise UserError(f"notebook {wanted!r} is in parts: name one of {', '.join(p.stem for p in found)}")
    found = [p for p in found if p.stem == stem] or found
    if len(found) != 1:
        names = ", ".join(p.stem for p in sorted(folder.glob("*.ipynb")))
        raise UserError(f"no notebook {wanted!r} in solutions/ (one of: {names})")
    return found[0]


def checks_module(notebook: Path) -> str:
    """The course/checks/ module the notebook's check cells import most, else one named for its topic."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    imported = [
        name
        for c in cells
        if c["metadata"].get("nbgrader", {}).get("grade")
        for name in re.findall(r"^from course\.checks import (\w+)", "".join(c["source"]), re.M)
    ]
    return max(set(imported), key=imported.count) if imported else notebook.stem.split("_", 1)[1]


SOLUTION_MARKERS = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[^\n]*\n?", re.M)
TAKES_VIEW = re.compile(
    r"^_\w+ = _\w+\.\w+\(.*\bview\)$", re.M
)  # _problem = _collectives.ring(my_ring_allreduce, view)


def answer_params(notebook_cells: list[dict], before: int) -> str:
    """The parameters of the last answer function before cell `before` ("comm, x"): a new answer is called as the
    topic's others are."""
    for cell in reversed(notebook_cells[:before]):
        if not (cell["cell_type"] == "code" and cell["metadata"].get("nbgrader", {}).get("solution")):
            continue
        try:
            tree = ast.parse(SOLUTION_MARKERS.sub("", "".join(cell["source"])))
        except SyntaxError:  # IPython magics: a cell learners write with %%writefile
            continue
        defined = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
        if defined:
            return ast.unparse(defined[0].args)
    return ""


def takes_view(notebook_cells: list[dict]) -> bool:
    """Whether the notebook's check cells give their check its engines (`view`)."""
    return any(
        TAKES_VIEW.search("".join(c["source"]))
        for c in notebook_cells
        if c["metadata"].get("nbgrader", {}).get("grade")
    )


def exercise(root: Path, notebook: str, name: str, function: str | None = None, module: str | None = None) -> Exercise:
    """The exercise asked for, its names checked: NAME is `ex-` and lowercase words (it becomes the grade ids)."""
    if not NAME.match(name):
        raise UserError(
            f"exercise name {name!r}: write ex- and lowercase words joined by -, e.g. ex-recursive-doubling"
        )
    path = find_notebook(root, notebook)
    words = name.removeprefix("ex-").replace("-", "_")
    function = function or f"my_{words}"
    module = module or checks_module(path)
    for what, value in (("function", function), ("module", module)):
        if not value.isidentifier():
            raise UserError(f"--{what} {value!r} is not a Python name")
    notebook_cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    params = answer_params(notebook_cells, place(notebook_cells))
    return Exercise(path, name, function, module, words, params, takes_view(notebook_cells))


def _cell(cell_type: str, source: str, nbgrader: dict) -> dict:
    cell = {
        "cell_type": cell_type,
        "id": secrets.token_hex(4),
        "metadata": {"nbgrader": {**nbgrader, "schema_version": 3}},
    }
    if cell_type == "code":
        cell.update(execution_count=None, outputs=[])
    cell["source"] = source.splitlines(keepends=True)
    return cell


def cells(ex: Exercise) -> list[dict]:
    """The exercise's text, answer and check cells, as nbgrader's metadata marks them."""
    text = (
        f"## Exercise: {TODO} a title that names what the learner builds\n\n"
        f"{TODO}: what to write (`{ex.function}(...)`), what it returns, and what it must not use. Say before the\n"
        "exercise everything it needs; the check below says what is wrong without giving the answer away."
    )
    answer = (
        f"def {ex.function}({ex.params}):\n"
        f'    ### BEGIN SOLUTION\n    raise NotImplementedError("{TODO}: the solution")\n    ### END SOLUTION\n'
    )
    args = f"{ex.function}, view" if ex.view else ex.function
    check = (
        f"from course.checks import {ex.module} as _{ex.module}\n\n"
        f"_problem = _{ex.module}.{ex.check}({args})\n"
        "assert not _problem, _problem\n"
        f'print("Correct: {TODO} what is right.")\n'
        "### BEGIN HIDDEN TESTS\n"
        f'assert not _{ex.module}.{ex.check}({args}), "{TODO}: hidden cases (other sizes, ranks, dtypes)"\n'
        "### END HIDDEN TESTS"
    )
    return [
        _cell("markdown", text, {"grade": False, "grade_id": f"{ex.name}-text", "locked": True, "solution": False}),
        _cell("code", answer, {"grade": False, "grade_id": ex.answer_id, "locked": False, "solution": True}),
        _cell("code", check, {"grade": True, "grade_id": ex.check_id, "locked": True, "points": 1, "solution": False}),
    ]


STOPS = re.compile(r"^\s*\w+\.stop\(\)", re.M)  # a cell that stops the notebook's cluster: cluster.stop()


def place(notebook_cells: list[dict]) -> int:
    """Where a new exercise goes: before the key points (at the end if there are none), but before the cells that
    stop the notebook's cluster where they come last (with the exercise that stops it, or the paragraph before)."""
    sources = ["".join(c["source"]) for c in notebook_cells]
    grading = [c["metadata"].get("nbgrader", {}) for c in notebook_cells]
    at = next((i for i, s in enumerate(sources) if s.startswith(KEY_POINTS)), len(sources))
    for stop in range(at - 1, -1, -1):
        if notebook_cells[stop]["cell_type"] != "code":
            continue
        if not STOPS.search(sources[stop]):
            if grading[stop].get("grade"):
                continue  # a check cell: the stop may be the answer it checks
            return at
        if grading[stop]:  # the stop is an exercise's answer: before that exercise's text
            return next(i for i in range(stop, -1, -1) if notebook_cells[i]["cell_type"] == "markdown")
        before = stop - 1
        plain = before >= 0 and notebook_cells[before]["cell_type"] == "markdown" and not grading[before]
        return before if plain else stop
    return at


def add_cells(ex: Exercise) -> None:
    """Put the cells where `place` says: while the notebook's cluster still runs."""
    notebook = json.loads(ex.notebook.read_text(encoding="utf-8"))
    taken = {c["metadata"].get("nbgrader", {}).get("grade_id") for c in notebook["cells"]}
    if {ex.answer_id, ex.check_id} & taken:
        raise UserError(f"{ex.notebook.name} already has an exercise {ex.name!r}: choose another name")
    at = place(notebook["cells"])
    notebook["cells"][at:at] = cells(ex)
    ex.notebook.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


INDEX_LINE = re.compile(
    r"^    (\w+ = )?\w+\(.*$", re.M
)  # a line of a check module's index: `    ring(my_ring, view)  # ex2`


def indexed(module: str, line: str) -> str:
    """The module's text with `line` added to its docstring's index of checks (after its last line, else at its end)."""
    end = module.index('"""', 3)
    last = [m.end() for m in INDEX_LINE.finditer(module, 0, end)]
    at = last[-1] if last else end
    return module[:at] + ("\n" if last else "\n\n") + line + ("" if last else "\n") + module[at:]


def add_check(root: Path, ex: Exercise) -> Path:
    """The check's stub in course/checks/MODULE.py (the module made if new)."""
    path = root / "course" / "checks" / f"{ex.module}.py"
    if not path.exists():
        path.write_text(
            f'"""{TODO}: what these checks hold of notebook {ex.notebook.stem[:2]}\'s answers, and how they measure it."""\n\n'
            "from __future__ import annotations\n\n"
            "from course.checks import check, expect\n"
        )
    text = path.read_text()
    if re.search(rf"^def {ex.check}\(", text, re.M):
        raise UserError(f"{path.relative_to(root)} already has a check {ex.check}(): choose another name")
    text = indexed(
        text, f"    {ex.check}({ex.function}{', view' if ex.view else ''})    # {ex.name}: {TODO} what it checks"
    )
    path.write_text(
        text.rstrip("\n") + "\n\n\n@check\n"
        f"def {ex.check}({ex.function}{', view' if ex.view else ''}) -> None:\n"
        f'    """Exercise `{ex.name}`: {TODO} what must be true of an answer (its statements in\n'
        f'    solutions/exercises/{ex.notebook.stem}.yml), each point measured from outside the answer."""\n'
        + (
            f"    # {TODO}: run the answer on the engines with course.checks.deadline.apply(view, ...), never view.apply_sync\n"
            if ex.view
            else ""
        )
        + f'    expect(False, "{TODO}: one expect() per statement, its message saying what is wrong")\n'
    )
    return path


def fast_test_path(root: Path, ex: Exercise) -> Path:
    """tests/test_checks_MODULE.py, unless it tries another notebook's answers: then the test module that tries this
    notebook's answers with MODULE's checks (a notebook in parts shares its check module, not its fast test)."""
    path = root / "tests" / f"test_checks_{ex.module}.py"
    mine = f'NOTEBOOK = "{ex.notebook.stem}"'
    if not path.exists() or mine in path.read_text():
        return path
    others = sorted((root / "tests").glob(f"test_checks_{ex.module}_*.py"))
    return next((p for p in others if mine in p.read_text()), root / "tests" / f"test_checks_{ex.notebook.stem[3:]}.py")


VIEW_FIXTURE = """


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    \"\"\"The engines the notebook starts, shared with the other fast tests that ask for the same.\"\"\"
    from tests.check_cases import shared_cluster

    with shared_cluster(tmp_path_factory, 2, engines="mpi") as engines:  # TODO: the notebook's engines
        yield engines.view
"""


def add_fast_test(root: Path, ex: Exercise) -> Path:
    """The fast test of the check in tests/test_checks_MODULE.py (the module made if new; see fast_test_path)."""
    path = fast_test_path(root, ex)
    if not path.exists():
        path.write_text(
            f'"""course.checks.{ex.module}, tried directly on every answer the fixtures hold for its exercises '
            '(tests/check_cases.py)."""\n\n'
            "from __future__ import annotations\n\n"
            "import pytest\n\n"
            f"from course.checks import {ex.module}\n"
            "from tests.check_cases import cases, define, judge\n\n"
            f'NOTEBOOK = "{ex.notebook.stem}"\n'
            "COVERED: set[str] = set()  # the answer cells whose fixture answers this module tries\n"
        )
    text = path.read_text()
    text = re.sub(r"^COVERED\b[^=]*= ", lambda m: m.group(0) + f'{{"{ex.answer_id}"}} | ', text, count=1, flags=re.M)
    if ex.view and not re.search(r"^def view\(", text, re.M):
        text = text.rstrip("\n") + VIEW_FIXTURE
    view = ", view" if ex.view else ""
    path.write_text(
        text.rstrip("\n") + "\n\n\n"
        f'@pytest.mark.parametrize("case", cases(NOTEBOOK, {{"{ex.answer_id}"}}), ids=str)\n'
        f"def test_{ex.check}(case{view}):\n"
        f"    names = define(case, {{}})  # {TODO}: what the notebook defines before the exercise\n"
        f'    judge(case, lambda: {ex.module}.{ex.check}(names["{ex.function}"]{view}))\n'
    )
    return path


def add_wrong_answer(root: Path, ex: Exercise) -> Path:
    """A wrong answer to fill in: the fixtures' list for the notebook (made if new)."""
    path = root / "tests" / "fixtures" / "wrong_answers" / f"{ex.notebook.stem}.json"
    entries = json.loads(path.read_text()) if path.exists() else []
    entries.append(
        {
            "why": f"{TODO}: a mistake a learner makes after reading the notebook, in a few words",
            ex.answer_id: f'def {ex.function}({ex.params}):\n    raise NotImplementedError("{TODO}: the wrong answer")\n',
        }
    )
    path.write_text(json.dumps(entries, indent=1, ensure_ascii=False) + "\n")
    return path


def add_entry(root: Path, ex: Exercise) -> Path:
    """The exercise's entry in solutions/exercises/NOTEBOOK.yml (the file made if new): a result, a process and a
    leaves statement to fill in, each held by the new check."""
    path = root / "solutions" / "exercises" / f"{ex.notebook.stem}.yml"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"# What each graded exercise of notebook {ex.notebook.stem[:2]} must do, the check that holds each statement "
            "and how it is measured\n# (website/exercises.py renders it; its format: any other notebook's file).\n"
            "exercises:\n"
        )
    text = path.read_text()
    if not re.search(r"^exercises:", text, re.M):
        raise UserError(f"{path.relative_to(root)} has no `exercises:` list to add the exercise to")
    held = f"course.checks.{ex.module}.{ex.check}"
    statements = "".join(
        f"      - kind: {kind}\n"
        f'        must: "{TODO}: what must be true of the {kind}"\n'
        f"        held_by:\n          - visible: {held}\n          - hidden: {held}\n"
        f"        measured: \"{TODO}: how the check measures it, from outside the answer (or say it reads the answer's own report); "
        'name its constant of cases, `NAME_CASES`, and their rank counts"\n'
        for kind in ("result", "process", "leaves")
    )
    path.write_text(text.rstrip("\n") + f"\n  - grade_id: {ex.check_id}\n    statements:\n{statements}")
    return path


def scaffold(root: Path, notebook: str, name: str, function: str | None = None, module: str | None = None) -> list[str]:
    """Write every piece of a new exercise; returns the files written, relative to ROOT."""
    ex = exercise(root, notebook, name, function, module)
    add_cells(ex)
    written = [
        ex.notebook,
        add_check(root, ex),
        add_fast_test(root, ex),
        add_wrong_answer(root, ex),
        add_entry(root, ex),
    ]
    return [str(p.relative_to(root)) for p in written]


def main(notebook: str, name: str, function: str | None = None, module: str | None = None) -> int:
    """The command: scaffold, then say what is left to write and what to run."""
    written = scaffold(ROOT, notebook, name, function, module)
    print(f"new exercise {name}: wrote")
    for path in written:
        print(f"  {path}")
    print(f"Fill in every {TODO} (CONTRIBUTING.md, 'Adding an exercise'), then run:")
    print("  python -m course release")
    print(
        f"  python -m pytest tests/test_checks_{Path(written[2]).stem.removeprefix('test_checks_')}.py tests/test_check_cells.py"
    )
    print(f"  python -m pytest tests/test_strength.py -k {Path(written[0]).stem}")
    return 0
