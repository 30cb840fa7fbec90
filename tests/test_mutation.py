"""The mutation report (course/mutation): its operators on small sources (pure ast, fast), and one run of the
report on the fixture course (tests/fixtures/course/99_fixture.ipynb)."""

from __future__ import annotations

import json

import nbformat
import pytest

from course import UserError
from course.mutation import operators, semantic
from course.mutation.report import check_segments
from tests.conftest import run_course
from tests.grading_support import FIXTURE_COURSE


def cell(code: str, given: str = "def f(comm, x, rank):\n") -> str:
    """An answer cell: GIVEN, then CODE (indented) as its solution."""
    body = "\n".join("    " + line if line else line for line in code.strip("\n").split("\n"))
    return f"{given}    ### BEGIN SOLUTION\n{body}\n    ### END SOLUTION\n    return x\n"


def mutants(code: str, given: str = "def f(comm, x, rank):\n") -> dict[tuple[str, str], operators.Mutant]:
    """(operator, what without its line) -> mutant, for the solution CODE."""
    found, skipped = operators.cell_mutants("ex", cell(code, given))
    assert skipped == []
    return {(m.operator, m.what.partition(": ")[2]): m for m in found}


def region(mutant: operators.Mutant) -> str:
    """The mutated solution code, dedented."""
    return operators.region_code(mutant.source, operators.regions(mutant.source)[0])


@pytest.mark.parametrize(
    "code, operator, what, expected",
    [
        ("y = x + 1", "operator", "+ -> -", "y = x - 1"),
        ("y = x < 1", "operator", "< -> <=", "y = x <= 1"),
        ("y = x and rank", "operator", "and -> or", "y = x or rank"),
        ("y = x + 1", "constant", "1 -> 2", "y = x + 2"),
        ("y = f(x, flag=True)", "constant", "True -> False", "y = f(x, flag=False)"),
        ("y = x\nz = y * 2", "statement", "`y = x` removed", "z = y * 2"),
        ("y = sum(x, start=0)", "keyword", "keyword `start=` dropped", "y = sum(x)"),
        ("if rank == 0:\n    y = x", "rank", "`rank == 0` made always true", "if True:\n    y = x"),
        ("y = view.apply_sync(g, x, k=1)", "local", "`view.apply_sync(g, ...)` -> `g(...)`", "y = g(x, k=1)"),
        ("y = view.map_sync(g, x)", "local", "`view.map_sync(g, ...)` -> `list(map(g, ...))`", "y = list(map(g, x))"),
        ("comm.Allreduce(a, b)", "local", "`comm.Allreduce(...)` -> `b[...] = a`", "b[...] = a"),
        ("y = comm.allreduce(x)", "local", "`comm.allreduce(...)` -> `x`", "y = x"),
        ("y = hvd.DistributedOptimizer(opt)", "local", "`hvd.DistributedOptimizer(...)` -> `opt`", "y = opt"),
        ("y = strategy.run(g, args=(x, 1))", "local", "`strategy.run(g, ...)` -> `g(...)`", "y = g(*(x, 1))"),
        ("@task(returns=1)\ndef g(v):\n    return v", "local", "@task(returns=1) removed: g runs in the "
         "notebook's process", "def g(v):\n    return v"),
        (
            "comm.Sendrecv(s, dest=1, recvbuf=r, source=left)",
            "gather",
            "`comm.Sendrecv` -> every rank gathers every buffer",
            "if 0 <= left:\n    r[...] = comm.allgather(s)[left]\nelse:\n    comm.allgather(s)",
        ),
        ("comm.Allreduce(a, b)", "gather", "`comm.Allreduce` -> the sum of an all-gather", "b[...] = sum(comm.allgather(a))"),
        ("row = {'epochs': 3, 'size': n}", "record", "fields 'epochs' and 'size' swapped", "row = {'epochs': n, 'size': 3}"),
    ],
)  # fmt: skip
def test_each_operator_makes_its_mutant(code, operator, what, expected):
    found = mutants(code)
    assert (operator, what) in found, sorted(found)
    mutant = found[(operator, what)]
    assert region(mutant) == expected
    assert mutant.equivalent == ""
    assert mutant.source.startswith("def f(comm, x, rank):\n    ### BEGIN SOLUTION\n    ")
    assert mutant.source.endswith("    ### END SOLUTION\n    return x\n"), "only the solution region changes"
    assert mutant.diff.startswith("-"), "the diff shows the line changed"


def test_only_the_solution_region_is_mutated():
    source = cell("y = x + 1", given="def f(comm, x, rank):\n    z = x * 3\n")
    assert {m.what.partition(": ")[2] for m in operators.cell_mutants("ex", source)[0]} == {
        "+ -> -",
        "1 -> 2",
        "`y = x + 1` removed",
    }


_DEFAULT = "drops a keyword whose value is the default: "


@pytest.mark.parametrize(
    "code, what, reason",
    [
        ('def g():\n    """Doc."""\n    return 1', "'Doc.' -> 'Doc.?'", "in a docstring"),
        ('print(f"got {x + 1}")', "+ -> -", "changes only what a print shows"),
        ('print("done", x)', "'done' -> 'done?'", "changes only what a print shows"),
        ('print("done", x)', "`print('done', x)` removed", "removes a print"),
        ("y = not not x", "not removed", "the same code as another mutant (line 1: not removed)"),
        ("y = 1e400", "inf -> inf", "the same code as the solution, once normalised"),  # twice infinity
        ("@task(returns=1, v=IN)\ndef g(v):\n    return v", "keyword `returns=` dropped", _DEFAULT + "task(returns=1)"),
        ("@task(returns=1, v=IN)\ndef g(v):\n    return v", "keyword `v=` dropped", _DEFAULT + "task(v=IN)"),
        ("y = np.array(x, copy=True)", "keyword `copy=` dropped", _DEFAULT + "array(copy=True)"),
        ("comm.Allreduce(a, b, op=MPI.SUM)", "keyword `op=` dropped", _DEFAULT + "Allreduce(op=MPI.SUM)"),
        ("model.evaluate(x, y, verbose=0)", "keyword `verbose=` dropped", "changes only what is printed (verbose=)"),
        ("model.evaluate(x, y, verbose=0)", "0 -> 1", "changes only what is printed (verbose=)"),
        (
            "def g(v):\n    if v:\n        return 1\n    return None",
            "`return None` removed",
            "removes a function's last statement, `return None`: it returns None without it",
        ),
        (
            "if x < 1:\n    raise ValueError(f'{x} too small')",
            "' too small' -> ' too small?'",
            "changes only an error's message",
        ),
        ("model.fit(x, verbose=2 if rank == 0 else 0)", "== -> !=", "changes only what is printed (verbose=)"),
    ],
)
def test_equivalent_mutants_are_set_aside_with_the_reason(code, what, reason):
    found = operators.cell_mutants("ex", cell(code))[0]
    reasons = [m.equivalent for m in found if m.what.partition(": ")[2] == what]
    assert reason in reasons, [(m.what, m.equivalent) for m in found]


def test_a_keyword_that_is_not_the_default_is_kept():
    found = mutants("@task(returns=2, v=INOUT)\ndef g(v):\n    return v, v\ny = np.array(x, copy=False)")
    assert found[("keyword", "keyword `returns=` dropped")].equivalent == ""
    assert found[("keyword", "keyword `v=` dropped")].equivalent == ""
    assert found[("keyword", "keyword `copy=` dropped")].equivalent == ""


def test_a_region_that_is_not_python_is_skipped():
    source = "%%writefile job.sbatch\n### BEGIN SOLUTION\n#SBATCH --nodes=2\nsrun python train.py\n### END SOLUTION\n"
    found, skipped = operators.cell_mutants("ex-sbatch", source)
    assert found == [] and skipped == ["ex-sbatch: solution region 1 is not Python (not mutated)"]


def test_the_probe_records_what_a_run_reaches(tmp_path):
    """The solution with probes runs as before and names the statements it reached; a mutant at a statement the
    run never reaches is set aside by the report."""
    code = "y = x + 1\nif y > 100:\n    y = 0\nfor k in range(2):\n    y += k"
    source = cell(code)
    hits = tmp_path / "hits.txt"
    namespace: dict = {}
    exec(operators.probed(source, "ex", str(hits)), namespace)
    assert namespace["f"](None, 1, 0) == 1
    reached = set(hits.read_text().split())
    by_what = {m.what: m for m in operators.cell_mutants("ex", source)[0]}
    assert "ex:0:" + str(by_what["line 3: `y = 0` removed"].site) not in reached
    assert "ex:0:" + str(by_what["line 5: `y += k` removed"].site) in reached
    assert "ex:0:" + str(by_what["line 1: + -> -"].site) in reached
    script = '"""A script."""\nfrom __future__ import annotations\nprint(1)'
    probed = operators.probed(cell(script, given=""), "ex", str(hits))
    assert "A script" in probed and operators.unprobed_sites(cell(script, given=""), "ex")
    compile(operators.region_code(probed, operators.regions(probed)[0]), "script", "exec")  # __future__ still first


def test_selection_is_deterministic_spread_over_operators_and_limited():
    code = "comm.Allreduce(a, b)\ny = x + 1\nz = f(y, k=2)\nif rank == 0:\n    w = [y, z]\nrow = {'a': y, 'b': z}"
    found = [m for m in operators.cell_mutants("ex", cell(code))[0] if not m.equivalent]
    chosen = operators.select(found, 8)
    assert [m.operator for m in chosen] == list(operators.OPERATORS)
    assert [m.what for m in operators.select(list(reversed(found)), 8)] == [m.what for m in chosen]
    assert len(operators.select(found, 3)) == 3 and len(operators.select(found, 500)) == len(found)


def test_check_cells_run_as_the_learner_has_them_then_their_hidden_tests():
    source = FIXTURE_COURSE / "99_fixture.ipynb"
    segments = check_segments(source, nbformat.read(str(source), as_version=4))
    visible, hidden = segments["ex1-check"]
    assert "BEGIN HIDDEN TESTS" not in visible and "mean_of([1, 2, 3])" in visible
    assert hidden.startswith("### BEGIN HIDDEN TESTS") and "mean_of([0.5])" in hidden


HEADER = "notebook exercise mutants equivalent visible hidden hung semantic s-visible s-hidden time".split()


@pytest.mark.slow
def test_the_report_on_the_fixture_course(tmp_path):
    """The command on the fixture (a few seconds: it starts a kernel): a table row per exercise, survivors shown as diffs, the
    mutant that only the hidden tests catch named."""
    table = tmp_path / "report.json"
    done = run_course(
        "mutation-report", "--solutions", str(FIXTURE_COURSE), "--limit", "5", "--json", str(table), timeout=600
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == HEADER
    rows = {line.split()[1]: line.split() for line in lines[1:3]}
    # the table as data (--json), the same counts, with the record's header (course.records)
    record = json.loads(table.read_text())
    assert (record["kind"], record["options"]) == (
        "mutation report",
        {"limit": 5, "exercise": None, "semantic_only": False},
    )
    assert record["machine"]["cores"] >= 1 and len(record["commit"]) == 40
    data = {row["exercise"]: row for row in record["exercises"]}
    assert list(data) == list(rows) and {row["notebook"] for row in data.values()} == {"99_fixture"}
    for name, row in data.items():
        shown = [str(row[k]) for k in ("mutants", "equivalent")] + [f"{row['visible']}/{row['mutants']}"]
        shown += [f"{row['hidden']}/{row['mutants']}", str(row["hung"]), str(row["semantic"])]
        assert shown == [rows[name][k] for k in (2, 3, 4, 6, 8, 9)], (row, rows[name])
    survivors = [f"survived ({m['kind']}): {m['what']}" for row in data.values() for m in row["survivors"]]
    assert "survived (statement): line 1: `values = list(values)` removed" in survivors
    assert all(line in done.stdout for line in survivors) and len(survivors) == done.stdout.count("  survived ("), (
        survivors
    )
    assert rows["ex2-answer"][2:4] == ["5", "0"] and rows["ex2-answer"][6] == "3/5"
    assert rows["ex2-answer"][9] == "1", "the fixture's one wrong answer to ex2 is its semantic mutant"
    assert "caught only by the hidden tests (operator): line 2: / -> *" in done.stdout
    assert "survived (statement): line 1: `values = list(values)` removed\n      -values = list(values)" in done.stdout
    assert "99_fixture ex2-answer: 5 mutants, the visible check caught 2, with hidden tests 3" in done.stderr
    bad = run_course("mutation-report", "--solutions", str(FIXTURE_COURSE), "--exercise", "nope", timeout=60)
    assert bad.returncode != 0 and "has no answer cell 'nope'" in bad.stderr and "Traceback" not in bad.stderr
    folder = run_course("mutation-report", "--solutions", str(FIXTURE_COURSE), "--json", str(tmp_path), timeout=60)
    assert folder.returncode == 1 and "--json takes a file name" in folder.stderr, folder.stderr


def notebook_with(answer: str, check: str):
    """A one-exercise instructor notebook: ANSWER (its solution between the markers) and CHECK (graded)."""
    meta = {"schema_version": 3, "locked": False, "solution": True, "grade": False, "grade_id": "ex-answer"}
    graded = {
        "schema_version": 3,
        "locked": True,
        "solution": False,
        "grade": True,
        "grade_id": "ex-check",
        "points": 1,
    }
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}})
    nb.cells = [
        nbformat.v4.new_code_cell("import tempfile\nfrom pathlib import Path\n\nOUT = Path(tempfile.mkdtemp())"),
        nbformat.v4.new_code_cell(answer, metadata={"nbgrader": meta}),
        nbformat.v4.new_code_cell(check, metadata={"nbgrader": graded}),
    ]
    return nb


@pytest.mark.slow
def test_a_file_the_solution_left_does_not_answer_for_a_mutant(tmp_path):
    """The solution's run writes the file the check looks for; a mutant that writes none must fail the check, as it
    would in a fresh run (the report removes what the solution's cells made before each mutant)."""
    from course.run import KERNEL

    answer = '### BEGIN SOLUTION\n(OUT / "model.txt").write_text("saved")\n### END SOLUTION'
    check = 'assert (OUT / "model.txt").is_file(), "save the model"'
    nb = notebook_with(answer, check)
    nb.metadata.kernelspec = {"name": KERNEL, "display_name": KERNEL}
    (tmp_path / "solutions").mkdir()
    nbformat.write(nb, str(tmp_path / "solutions" / "10_files.ipynb"))
    done = run_course("mutation-report", "--solutions", str(tmp_path / "solutions"), timeout=600)
    assert done.returncode == 0, done.stderr
    removed = [line for line in done.stderr.splitlines() if "write_text('saved')` removed" in line]
    assert len(removed) == 1 and "caught by the visible check" in removed[0], done.stderr


def solution_cells() -> dict[str, str]:
    """The fixture course's answer cells, in the notebook's order: grade_id -> the solution's source."""
    nb = nbformat.read(str(FIXTURE_COURSE / "99_fixture.ipynb"), as_version=4)
    return {c.metadata.nbgrader.grade_id: c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")}


def test_semantic_mutants_are_the_listed_wrong_answers_by_first_exercise(tmp_path):
    """Each entry of the list is one semantic mutant of the first exercise (in the notebook's order) it writes, with
    its `why`, the list's `hidden_only`, and a diff against the solution; an entry naming no answer cell is refused."""
    solution = solution_cells()
    listed = semantic.mutants("99_fixture", solution)  # the strength test's own list
    assert [m.what for m in listed["ex1-answer"]] == ["divides by one too many"]
    assert [m.hidden_only for m in listed["ex2-answer"]] == ["the standard deviation of 1"]
    both = {"why": "both", "hidden_only": "a case", "ex2-answer": "def standardise(x):\n    return x\n"}
    both["ex1-answer"] = "def mean_of(values):\n    return 0\n"
    (tmp_path / "99_fixture.json").write_text(json.dumps([both]))
    (mutant,) = semantic.mutants("99_fixture", solution, tmp_path)["ex1-answer"]
    assert mutant.trial == semantic.answer_cells(both) and mutant.hidden_only == "a case"
    assert (
        mutant.diff.startswith("ex1-answer:\n-") and "\nex2-answer:\n" in mutant.diff and "+    return 0" in mutant.diff
    )
    (tmp_path / "99_fixture.json").write_text(json.dumps([{"why": "?", "ex9-answer": "x = 1"}]))
    with pytest.raises(UserError, match="entry 0 names cell 'ex9-answer', which is not one of its answer cells"):
        semantic.mutants("99_fixture", solution, tmp_path)
    assert semantic.mutants("98_none", solution, tmp_path) == {}


@pytest.mark.slow
def test_the_report_counts_semantic_mutants(tmp_path):
    """--semantic-only on the fixture course with a list holding one wrong answer the visible check catches, one only
    the hidden tests catch, one that survives them both, and one that writes both exercises: the table counts them
    per exercise, and the details name the survivor by its `why`."""
    entries = json.loads((semantic.FOLDER / "99_fixture.json").read_text())  # ex1: visible; ex2: hidden only
    median = "def mean_of(values):\n    return float(np.median(list(values)))\n"
    entries.append({"why": "the median: the same on evenly spaced values", "ex1-answer": median})
    wrong_mean = "def mean_of(values):\n    return sum(values) / 2\n"
    both = {"why": "a mean over two", "hidden_only": "?", "ex2-answer": solution_cells()["ex2-answer"]}
    entries.append({**both, "ex1-answer": wrong_mean})
    (tmp_path / "99_fixture.json").write_text(json.dumps(entries))
    done = run_course(
        "mutation-report", "--solutions", str(FIXTURE_COURSE), "--semantic-only", "--wrong-answers", str(tmp_path),
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == HEADER
    rows = {line.split()[1]: line.split()[2:] for line in lines[1:3]}
    assert rows["ex1-answer"][:10] == ["-", "-", "-", "-", "0", "3", "2/3", "(66%)", "2/3", "(66%)"]
    assert rows["ex2-answer"][:10] == ["-", "-", "-", "-", "0", "1", "0/1", "(0%)", "1/1", "(100%)"]
    assert "survived (semantic, entry 2): the median: the same on evenly spaced values\n      -" in done.stdout
    assert "caught only by the hidden tests (semantic, entry 1): centres but does not scale" in done.stdout
    assert "entry 1: only the hidden tests caught" not in done.stdout, "the list says hidden_only: no disagreement"
    assert "entry 3: the list says only the hidden tests catch it, but the visible check did" in done.stdout
    assert "99_fixture ex1-answer: 3 semantic, the visible check caught 2, with hidden tests 2" in done.stderr
    assert "mutants, the visible check" not in done.stderr, "--semantic-only makes no operator mutants"


def test_keep_ranks_switches_the_kernels_rank_pool_and_ends_it(tmp_path):
    """The trials' kernel keeps its on_ranks ranks up only while keep_ranks says so; turned off, its pools end."""
    from course.mutation import trials

    source = FIXTURE_COURSE / "99_fixture.ipynb"
    nb = nbformat.read(str(source), as_version=4)
    probe = (
        "from course import rank_pool, comm\n"
        "import os\n"
        "print(rank_pool.KEEP, comm.on_ranks(os.getpid, 2) != comm.on_ranks(os.getpid, 2), sorted(rank_pool._POOLS))"
    )

    def said(client) -> str:
        cell = trials.execute(client, nbformat.v4.new_code_cell(probe), 0)
        return "".join(out.get("text", "") for out in cell.outputs).strip()

    with trials.notebook_kernel(source, nb, tmp_path) as client:
        assert said(client) == "False True []"  # a fresh mpiexec job per call: new processes each time
        trials.keep_ranks(client, 0, True)
        assert said(client) == "True False [2]"  # the same ranks answer both calls
        trials.keep_ranks(client, 0, False)
        assert said(client) == "False True []"


@pytest.mark.parametrize(
    "answer, leaves",
    [
        ("answer = np.mean(data) + len(local := [1])", False),  # names of its own: the next detour binds them anew
        ("mine = []\nmine.append(1)\nanswer = mine", False),
        ("data.append(1)\nanswer = data", True),  # an object made before the exercise, edited in place
        ("data[0] = 2\nanswer = data", True),
        ("settings.rate += 1\nanswer = 1", True),
        ("%%px\nanswer = 1", True),  # the engines keep it
        ("%%writefile train.py\nprint(1)", True),  # a file
        ("with open('out.txt', 'w') as f:\n    f.write('1')\nanswer = 1", True),
        ("import os\nos.environ['RANKS'] = '2'\nanswer = 1", True),
        ("answer = view.apply_sync(len, [1])", True),
        ("model.fit(data)\nanswer = model", True),
    ],
)
def test_a_trial_leaves_state_for_the_next_one_only_beyond_its_own_names(answer, leaves):
    """The solution runs again between two trials at one exercise only where the first may leave state behind
    (tests/answer_trials.py); what the trial's own cells bind, the next detour binds afresh."""
    from course.mutation import trials

    before = nbformat.v4.new_code_cell(
        "import numpy as np\ndata, local, settings, model, view = [1], [], None, None, None"
    )
    answer_cell = nbformat.v4.new_code_cell("answer = np.mean(data)")
    answer_cell.metadata["nbgrader"] = {"grade_id": "ex1-answer", "solution": True, "grade": False}
    check = nbformat.v4.new_code_cell("assert answer is not None")
    cells = [before, answer_cell, check]
    assert not trials.leaves_state(cells, {}, 1, 2), "the solution's own cells keep nothing"
    assert trials.leaves_state(cells, {"ex1-answer": answer}, 1, 2) is leaves
