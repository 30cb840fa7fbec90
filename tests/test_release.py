"""`python -m course release`: notebooks/ is generated from solutions/ by nbgrader's preprocessors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import nbformat
import pytest

from course.grading.release import release, render, student_version
from tests.conftest import ROOT, run_course
from tests.grading_support import FIXTURE_COURSE, course_notebooks, tree_digest
from tests.nbgrader_support import config_copy, nbgrader


def test_notebooks_folder_is_up_to_date_with_solutions():
    result = run_course("release", "--check")
    assert result.returncode == 0, f"{result.stderr.strip()} (regenerate with: python -m course release)"


def test_check_names_what_drifted_and_release_repairs_it(tmp_path):
    notebooks = tmp_path / "notebooks"
    args = ["--solutions", str(FIXTURE_COURSE), "--notebooks", str(notebooks)]
    assert release(FIXTURE_COURSE, notebooks) == ["99_fixture.ipynb (new)"]
    assert release(FIXTURE_COURSE, notebooks, check=True) == []
    released = notebooks / "99_fixture.ipynb"
    released.write_text(released.read_text().replace("mean_of", "average_of"))
    (notebooks / "98_old.ipynb").write_text("{}")
    result = run_course("release", "--check", *args)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "course: error: notebooks/ is out of date: 99_fixture.ipynb (changed), "
        "98_old.ipynb (no longer in course/, removed); run: python -m course release"
    )
    repaired = run_course("release", *args)
    assert (
        repaired.stdout.strip() == "released: 99_fixture.ipynb (changed), 98_old.ipynb (no longer in course/, removed)"
    )
    assert release(FIXTURE_COURSE, notebooks, check=True) == []
    assert not (notebooks / "98_old.ipynb").exists()


@pytest.mark.parametrize("source", course_notebooks(), ids=lambda p: p.stem)
def test_student_version_has_stubs_no_hidden_tests_no_outputs(source):
    original = nbformat.read(str(source), as_version=4)
    released = student_version(original, source.stem)
    assert render(released) == render(student_version(original, source.stem)), "release is not deterministic"
    assert len(released.cells) == len(original.cells)
    answers = 0
    for before, after in zip(original.cells, released.cells):
        meta = after.metadata.get("nbgrader", {})
        assert "BEGIN SOLUTION" not in after.source and "HIDDEN TESTS" not in after.source
        if after.cell_type == "code":
            assert after.outputs == [] and after.execution_count is None
        if meta.get("solution") and after.cell_type == "code":
            answers += 1
            first = after.source.split("\n", 1)[0]
            script = first.startswith("%%writefile") and not first.rstrip().endswith(".py")  # a batch script
            assert ("# YOUR SCRIPT HERE" if script else "raise NotImplementedError()") in after.source
        if meta.get("locked"):
            assert after.metadata.get("editable") is False and after.metadata.get("deletable") is False
        if "### BEGIN HIDDEN TESTS" in before.source:
            assert before.source.split("### BEGIN HIDDEN TESTS")[0].strip() in after.source
    assert answers > 0, f"{source.name} has no answer cells"


@pytest.mark.slow
def test_nbgraders_own_generate_assignment_agrees_with_release(tmp_path):
    """nbgrader_config.py maps the course onto nbgrader's layout, one assignment per notebook, in a folder the
    instructor chooses: loading it and running nbgrader writes nothing in the checkout (so it may be read only).
    A first run without the environment's tools on PATH leaves a gradebook without its schema version;
    `course nbgrader-setup` repairs it, and nbgrader's own commands then work on it."""
    checkout = config_copy(tmp_path / "checkout")
    shutil.copytree(FIXTURE_COURSE, checkout / "solutions")
    grading = tmp_path / "grading"
    grading.mkdir()
    env = {**os.environ, "COURSE_NBGRADER_ROOT": str(grading)}
    before = tree_digest(checkout)
    no_tools = {**env, "PATH": "/usr/bin:/bin"}  # as from a shell that has not activated the environment
    failed = subprocess.run(
        [sys.executable, "-m", "nbgrader", "db", "student", "add", "alice"],
        cwd=checkout,
        env=no_tools,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert failed.returncode != 0 and (grading / "gradebook.db").is_file()
    setup = run_course("nbgrader-setup", "--solutions", str(checkout / "solutions"), env=env)
    assert setup.returncode == 0, setup.stderr
    assert "repaired" in setup.stdout and "99-fixture, and ddl-hpc (the whole course)" in setup.stdout, setup.stdout
    assert (
        grading / "source" / "ddl-hpc" / "99_fixture.ipynb"
    ).resolve() == checkout / "solutions" / "99_fixture.ipynb"
    nbgrader("generate_assignment", "99-fixture", cwd=checkout, env=env)
    nbgrader("db", "upgrade", cwd=checkout, env=env)  # fails on a gradebook without its schema version
    theirs = nbformat.read(str(grading / "release" / "99-fixture" / "99_fixture.ipynb"), as_version=4)
    ours = student_version(nbformat.read(str(FIXTURE_COURSE / "99_fixture.ipynb"), as_version=4), "99_fixture")
    assert [(c.source, c.metadata.get("nbgrader")) for c in theirs.cells] == [
        (c.source, c.metadata.get("nbgrader")) for c in ours.cells
    ]
    assert tree_digest(checkout) == before, "nbgrader or its configuration wrote into the checkout"


def test_nbgraders_own_generate_assignment_stubs_a_batch_script_as_release_does(tmp_path):
    """Notebook 11's answers (part 1, 11_job_scripts) include a #SBATCH file written by %%writefile: nbgrader's own generate_assignment, with
    the course's nbgrader_config.py, leaves a comment there as `course release` does, not Python's
    `raise NotImplementedError()`, and gives learners the same cells."""
    source = ROOT / "solutions" / "11_job_scripts.ipynb"
    checkout = config_copy(tmp_path / "checkout")
    (checkout / "solutions").mkdir()
    shutil.copy(source, checkout / "solutions" / source.name)
    env = {**os.environ, "COURSE_NBGRADER_ROOT": str(tmp_path / "grading")}
    assert run_course("nbgrader-setup", "--solutions", str(checkout / "solutions"), env=env).returncode == 0
    nbgrader("generate_assignment", "11-job-scripts", cwd=checkout, env=env)
    theirs = nbformat.read(str(tmp_path / "grading" / "release" / "11-job-scripts" / source.name), as_version=4)
    scripts = [c.source for c in theirs.cells if c.cell_type == "code" and c.source.startswith("%%writefile")]
    batch = [s for s in scripts if not s.split("\n", 1)[0].rstrip().endswith(".py") and "YOUR" in s]
    assert batch and not [s for s in batch if "NotImplementedError" in s], batch
    ours = student_version(nbformat.read(str(source), as_version=4), source.stem)
    assert [c.source for c in theirs.cells] == [c.source for c in ours.cells]


def test_one_assignment_per_notebook_and_the_whole_course():
    from course.grading.nbgrader_course import assignments

    found = assignments(ROOT / "solutions")
    stems = [p.stem for p in sorted((ROOT / "solutions").glob("*.ipynb"))]
    assert list(found) == [s.replace("_", "-") for s in stems] + ["ddl-hpc"]
    assert found["02-sgd"] == [ROOT / "solutions" / "02_sgd.ipynb"] and len(found["ddl-hpc"]) == len(stems)


def test_the_guide_says_which_cells_need_manual_grading():
    """Formgrader's manual grading is where instructors spend their time: the guide must name those cells."""
    manual = [
        f"{path.stem} {meta['grade_id']}"
        for path in sorted((ROOT / "solutions").glob("*.ipynb"))
        for cell in nbformat.read(str(path), as_version=4).cells
        for meta in [cell.metadata.get("nbgrader", {})]
        if meta.get("task") or (meta.get("grade") and meta.get("solution"))
    ]
    guide = " ".join((ROOT / "docs" / "guide" / "04-release-collect-grade.md").read_text().split())
    if not manual:
        assert "no cell of the course needs it today" in guide
    else:
        assert "no cell of the course needs it today" not in guide, f"the guide says none, but these do: {manual}"
        missing = [m for m in manual if m.split()[1] not in guide]
        assert not missing, f"the instructor guide does not name these manually graded cells: {missing}"
