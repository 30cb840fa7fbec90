"""`python -m course release`: notebooks/ is generated from solutions/ by nbgrader's preprocessors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course.grading.release import release, render, student_version
from tests.conftest import ROOT, run_course
from tests.grading_support import FIXTURE_COURSE, course_notebooks


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
    assert result.stderr.strip() == ("course: error: notebooks/ is out of date: 99_fixture.ipynb (changed), "
                                     "98_old.ipynb (no longer in course/, removed); run: python -m course release")
    repaired = run_course("release", *args)
    assert repaired.stdout.strip() == "released: 99_fixture.ipynb (changed), 98_old.ipynb (no longer in course/, removed)"
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
            assert "raise NotImplementedError()" in after.source
        if meta.get("locked"):
            assert after.metadata.get("editable") is False and after.metadata.get("deletable") is False
        if "### BEGIN HIDDEN TESTS" in before.source:
            assert before.source.split("### BEGIN HIDDEN TESTS")[0].strip() in after.source
    assert answers > 0, f"{source.name} has no answer cells"


@pytest.mark.slow
def test_nbgraders_own_generate_assignment_agrees_with_release(tmp_path):
    """nbgrader_config.py maps the course onto nbgrader's layout; its command releases the same cells."""
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path / "nbgrader_config.py")
    shutil.copytree(FIXTURE_COURSE, tmp_path / "solutions")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", "ddl-hpc"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    theirs = nbformat.read(str(tmp_path / "build/nbgrader/release/ddl-hpc/99_fixture.ipynb"), as_version=4)
    ours = student_version(nbformat.read(str(FIXTURE_COURSE / "99_fixture.ipynb"), as_version=4), "99_fixture")
    assert [(c.source, c.metadata.get("nbgrader")) for c in theirs.cells] == \
           [(c.source, c.metadata.get("nbgrader")) for c in ours.cells]
