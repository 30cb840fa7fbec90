"""`python -m course new-exercise`: run on an archive of the checkout, it writes every piece of an exercise where
the course keeps it, and the pieces work together before anyone fills them in: the released notebook stubs the
answer, the fast test it wrote runs and fails on the unwritten check, and tests/test_check_cells.py's rule
names each TODO left."""

from __future__ import annotations

import io
import re
import json
import subprocess
import sys
import tarfile

import nbformat
import pytest
import yaml

from course import UserError, contents, scaffold
from course.grading.release import student_version
from tests.conftest import ROOT
from tests.test_check_cells import todos
from website import exercises


@pytest.fixture
def checkout(tmp_path):
    """The committed checkout, unpacked (what a contributor clones)."""
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path


def graded(path):
    return {
        c["metadata"]["nbgrader"]["grade_id"]: c
        for c in json.loads(path.read_text())["cells"]
        if "nbgrader" in c["metadata"]
    }


def graded_checks(cells: dict) -> list[str]:
    return [grade_id for grade_id, cell in cells.items() if cell["metadata"]["nbgrader"].get("grade")]


def test_writes_every_piece_and_they_fit_together(checkout):
    before = graded(checkout / "solutions" / "02_sgd.ipynb")
    written = scaffold.scaffold(checkout, "02", "ex-nesterov", module="sgd_steps")
    assert written == [
        "solutions/02_sgd.ipynb",
        "course/checks/sgd_steps.py",
        "tests/test_checks_sgd_steps.py",
        "tests/fixtures/wrong_answers/02_sgd.json",
        "solutions/exercises/02_sgd.yml",
    ]
    cells = json.loads((checkout / "solutions" / "02_sgd.ipynb").read_text())["cells"]
    ids = [c["metadata"].get("nbgrader", {}).get("grade_id") for c in cells]
    at = ids.index("ex-nesterov-text")
    assert ids[at : at + 3] == ["ex-nesterov-text", "ex-nesterov-answer", "ex-nesterov-check"]
    assert "".join(cells[at + 3]["source"]).startswith("## Key points"), "the exercise goes before the key points"
    assert set(graded(checkout / "solutions" / "02_sgd.ipynb")) - set(before) == {
        "ex-nesterov-text",
        "ex-nesterov-answer",
        "ex-nesterov-check",
    }
    notebook = nbformat.read(str(checkout / "solutions" / "02_sgd.ipynb"), as_version=4)
    nbformat.validate(notebook)
    released = {
        c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in student_version(notebook, "02_sgd").cells
    }
    assert (
        "raise NotImplementedError()" in released["ex-nesterov-answer"] and "TODO" not in released["ex-nesterov-answer"]
    )
    assert "HIDDEN" not in released["ex-nesterov-check"]
    wrong = json.loads((checkout / "tests" / "fixtures" / "wrong_answers" / "02_sgd.json").read_text())[-1]
    assert set(wrong) == {"why", "ex-nesterov-answer"}
    entries = yaml.safe_load((checkout / "solutions" / "exercises" / "02_sgd.yml").read_text())["exercises"]
    assert [e["grade_id"] for e in entries][-1] == "ex-nesterov-check" and len(entries) == len(
        graded_checks(before)
    ) + 1
    statements = entries[-1]["statements"]
    assert [s["kind"] for s in statements] == ["result", "process", "leaves"]
    assert all("TODO" in s["must"] and "TODO" in s["measured"] for s in statements), "a person writes what and how"
    held = {item["visible"] for s in statements for item in s["held_by"] if "visible" in item}
    assert held == {"course.checks.sgd_steps.nesterov"} and "def nesterov(" in (checkout / written[1]).read_text()
    page = exercises.page(
        contents.read(checkout / "solutions" / "02_sgd.ipynb"),
        yaml.safe_load((checkout / "solutions" / "exercises" / "02_sgd.yml").read_text()),
        exercises.graded_cells(checkout / "solutions" / "02_sgd.ipynb"),
    )
    assert "## Exercise: TODO a title" in page, "the site's page has the new exercise under the notebook's heading"
    assert any("02_sgd.yml" in todo for todo in todos(checkout)), (
        "the TODOs the scaffold wrote are what test_check_cells names"
    )
    references = subprocess.run(  # the entry names checks that exist, in the cell parts that call them
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_exercise_references.py",
            "-k",
            "02_sgd",
        ],
        cwd=checkout,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(checkout), "HOME": str(checkout)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert references.returncode == 0, references.stdout[-2000:] + references.stderr[-2000:]
    fast = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_checks_sgd_steps.py"],
        cwd=checkout,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(checkout), "HOME": str(checkout)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert fast.returncode == 1, fast.stdout[-2000:] + fast.stderr[-2000:]
    assert "the solution" in fast.stdout and "TODO: one expect() per statement" in fast.stdout, fast.stdout[-2000:]


def test_refuses_a_taken_name_a_bad_name_and_an_unknown_notebook(checkout):
    with pytest.raises(UserError, match="already has an exercise 'ex-momentum'"):
        scaffold.scaffold(checkout, "02_sgd", "ex-momentum")
    with pytest.raises(UserError, match="write ex- and lowercase words"):
        scaffold.scaffold(checkout, "02", "Momentum")
    with pytest.raises(UserError, match=r"no notebook '42' in solutions/ \(one of: 00_environment"):
        scaffold.scaffold(checkout, "42", "ex-nesterov")
    with pytest.raises(UserError, match="is not a Python name"):
        scaffold.scaffold(checkout, "02", "ex-other", function="my-step")


def test_joins_the_check_module_the_notebook_already_uses(checkout):
    written = scaffold.scaffold(checkout, "02", "ex-nesterov")
    assert written[1:3] == ["course/checks/gradient_descent.py", "tests/test_checks_gradient_descent.py"]
    module = (checkout / written[1]).read_text()
    assert "def training_step(" in module and "def nesterov(my_nesterov)" in module, "appended, nothing replaced"
    compile(module, written[1], "exec")
    fast = (checkout / written[2]).read_text()
    assert re.search(r'^COVERED = \{"ex-nesterov-answer"\} \| \{\s*"ex1-answer"', fast, re.M), fast[:800]


def test_a_notebook_in_parts_is_named_and_each_part_keeps_its_fast_test_and_data_file(checkout):
    with pytest.raises(UserError, match="notebook '07' is in parts: name one of 07_horovod, 07_horovod_script"):
        scaffold.scaffold(checkout, "07", "ex-overlap")
    written = scaffold.scaffold(checkout, "07_horovod_script", "ex-overlap")
    # part two's checks live in part one's module; its fast test is its own (NOTEBOOK = "07_horovod_script")
    assert written[1:3] == ["course/checks/horovod.py", "tests/test_checks_horovod_runs.py"]
    assert '{"ex-overlap-answer"} | {' in (checkout / written[2]).read_text()
    assert "ex-overlap" not in (checkout / "tests" / "test_checks_horovod.py").read_text()
    assert written[4] == "solutions/exercises/07_horovod_script.yml"
    assert "ex-overlap-check" not in (checkout / "solutions" / "exercises" / "07_horovod.yml").read_text()


def test_the_stubs_take_what_the_topics_other_answers_and_checks_take(checkout):
    """03's checks run the answer on the notebook's engines: the new check, its cell and its fast test take `view`,
    and the answer the parameters of the answer before it; 02's checks take no engines."""
    written = scaffold.scaffold(checkout, "03", "ex-doubling")
    cells = graded(checkout / written[0])
    assert "".join(cells["ex-doubling-answer"]["source"]).startswith("def my_doubling(comm, tensors):\n")
    assert "_collectives.doubling(my_doubling, view)" in "".join(cells["ex-doubling-check"]["source"])
    module = (checkout / written[1]).read_text()
    assert "def doubling(my_doubling, view) -> None:" in module
    assert "    fusion(fused_allreduce, view)" in module.split('"""')[1], "the index of checks is kept"
    assert "\n    doubling(my_doubling, view)    # ex-doubling: TODO what it checks\n" in module.split('"""')[1]
    fast = (checkout / written[2]).read_text()
    assert "def test_doubling(case, view):" in fast and 'doubling(names["my_doubling"], view)' in fast
    assert fast.count("def view(") == 1, "the module's own engines fixture is used, not a second one"
    written = scaffold.scaffold(checkout, "02", "ex-nesterov")
    answer = "".join(graded(checkout / written[0])["ex-nesterov-answer"]["source"])
    assert answer.startswith("def my_nesterov(params, grads, velocity, learning_rate, beta):\n"), answer
    assert "def nesterov(my_nesterov) -> None:" in (checkout / written[1]).read_text()


# What the new cells come just before, read off each notebook: while its cluster runs, after its other exercises.
BEFORE = {
    "00_environment_and_cluster": "## Exercise 3: Stop cleanly",  # its last exercise stops the cluster
    "01_task_graphs": "Stop the engines when you are done.",
    "02_sgd": "## Key points",  # its last exercise runs after the cluster's stop, in the notebook alone
    "03_parallelism_and_collectives": "## 7. Stop the cluster",
    "09_sharded_data_parallelism": "## 4. Stop the cluster",
    "09_tensor_parallelism": "## 3. The same ideas in the libraries you will use",
    "11_job_scripts": "## Key points",  # it starts no cluster
    "11_running_on_a_cluster": "## Key points",  # its Slurm cluster's section ends long before
    "12_pytorch_ddp": "torch_group.destroy(cluster)",
}


@pytest.mark.parametrize("notebook", sorted(BEFORE))
def test_a_new_exercise_goes_where_the_notebooks_cluster_still_runs(notebook):
    notebook_cells = json.loads((ROOT / "solutions" / f"{notebook}.ipynb").read_text())["cells"]
    at = scaffold.place(notebook_cells)
    assert "".join(notebook_cells[at]["source"]).startswith(BEFORE[notebook])


def _fill(path, *replacements):
    """Replace each (TODO text, what a contributor writes) in the file at `path`, each found exactly once."""
    text = path.read_text()
    for old, new in replacements:
        assert text.count(old) == 1, f"{path.name}: {old!r} found {text.count(old)} times"
        text = text.replace(old, new)
    path.write_text(text)


def test_an_exercise_scaffolded_and_filled_in_a_clone_passes_its_fast_test_the_cell_rules_and_the_release(checkout):
    """The path a contributor follows, end to end on a throwaway exercise: the command writes the pieces, a right
    answer and a wrong one fill them, and the exercise's fast test, the check-cell rules and the release's drift
    test pass on the result (a wrong answer the check lets through would fail the fast test)."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(checkout), "HOME": str(checkout)}

    def run(*args):
        return subprocess.run(
            [sys.executable, *args], cwd=checkout, env=env, capture_output=True, text=True, timeout=600
        )

    made = run("-m", "course", "new-exercise", "02", "ex-double", "--function", "double")
    assert made.returncode == 0, made.stderr
    notebook, check, fast, wrong, entry = (
        checkout / "solutions" / "02_sgd.ipynb",
        *[checkout / line.strip() for line in made.stdout.splitlines()[2:6]],
    )
    _fill(
        notebook,
        ("## Exercise: TODO a title that names what the learner builds", "## Exercise: doubling a list"),
        ("TODO: what to write (`double(...)`)", "Write `double(values)`"),
        ("def double(params, grads, velocity, learning_rate, beta):", "def double(params):"),
        ('raise NotImplementedError(\\"TODO: the solution\\")', "return [2 * v for v in params]"),
        ("Correct: TODO what is right.", "Correct: every value doubled."),
        ("TODO: hidden cases (other sizes, ranks, dtypes)", "wrong on an empty list"),
    )
    _fill(
        check,
        ("TODO what must be true of an answer", "the answer doubles every value"),
        ("# ex-double: TODO what it checks", "# ex-double: doubling a list"),
        (
            'expect(False, "TODO: one expect() per statement, its message saying what is wrong")',
            'expect(list(double([1.0, -2.5, 0.0])) == [2.0, -5.0, 0.0], "each value should be twice what it was")',
        ),
    )
    _fill(fast, ("  # TODO: what the notebook defines before the exercise", ""))
    _fill(
        wrong,
        ("TODO: a mistake a learner makes after reading the notebook, in a few words", "adds two instead"),
        ("def double(params, grads, velocity, learning_rate, beta):", "def double(params):"),
        ('raise NotImplementedError(\\"TODO: the wrong answer\\")', "return [v + 2 for v in params]"),
    )
    entry.write_text(
        re.sub(r'"TODO[^"]*"', '"each value of a list of three, negative and zero among them"', entry.read_text())
    )
    released = run("-m", "course", "release")
    assert released.returncode == 0, released.stderr
    fast = run("-m", "pytest", "-v", "-p", "no:cacheprovider", "tests/test_checks_gradient_descent.py", "-k", "double")
    assert fast.returncode == 0, fast.stdout[-3000:]
    passed = re.findall(r"test_double\[(.*)\] PASSED", fast.stdout)
    assert passed[0] == "the solution" and re.fullmatch(r"wrong answer \d+ \(adds two instead\)", passed[1]), passed
    rules = run(
        "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_check_cells.py",
        "tests/test_release.py::test_notebooks_folder_is_up_to_date_with_solutions",
    )  # fmt: skip
    assert rules.returncode == 0, rules.stdout[-3000:]
