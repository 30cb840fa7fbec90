"""Under `nbgrader autograde` (nbgrader's own command, real kernels, real engines) every notebook gets a cluster of its
own, and its engines end with its kernel: a submission that stops early cannot hand its engines, and the variables of
that learner in them, to the next submission."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import MACHINE, run_course
from tests.nbgrader_support import cell, config_copy, nbgrader, notebook, with_answer

# Its `cluster stop --all` ends every course Slurm job of this user: it runs beside no other Slurm test (conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(MACHINE)]
NB = "99_isolation"
ASSIGNMENT = "99-isolation"  # one nbgrader assignment per notebook

START = "import course.cluster\n\ncluster = course.cluster.start(1)"
FRESH = """cluster.view.execute("_left = sorted(k for k in globals() if k.startswith('learner_'))")
left = cluster.view["_left"]
print(cluster.cluster_id, left)
assert left == [[]], f"this notebook's engine holds another notebook's variables: {left}"
"""
ANSWER = '### BEGIN SOLUTION\ncluster.view.push({"learner_answer": 42})\n### END SOLUTION'
CHECK = 'assert cluster.view["learner_answer"] == [42], "push learner_answer = 42 to the engine"'
# Alice's notebook leaves her work on the engine and stops with an error before any cluster.stop()
ALICE = 'cluster.view.push({"learner_alice": "alice\'s notes"})\nraise RuntimeError("a mistake in the last cell")'


def _leftovers(ipython_dir: str) -> list[str]:
    """Processes (engines, controllers) started under this test's IPYTHONDIR that are still running."""
    left = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.environ().get("IPYTHONDIR") == ipython_dir and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(" ".join(proc.info["cmdline"] or [])[:100])
        except psutil.Error:
            continue
    return left


def test_two_submissions_in_a_row_do_not_share_engines(tmp_path):
    from nbgrader.api import Gradebook

    course = config_copy(tmp_path / "course")
    (course / "solutions").mkdir()
    source = notebook(
        [
            cell("# Isolation\n\nA notebook that starts an engine cluster.", "intro", "markdown"),
            cell(START, "start"),
            cell(FRESH, "fresh-engine", points=1),
            cell(ANSWER, "answer", solution=True),
            cell(CHECK, "answer-check", points=1),
        ]
    )
    (course / "solutions" / f"{NB}.ipynb").write_text(__import__("nbformat").writes(source))
    ipython_dir = str(tmp_path / "ipython")
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_CLUSTER_ID", "JPY_SESSION_NAME")}
    root = tmp_path / "grading"
    env.update(
        IPYTHONDIR=ipython_dir,
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        COURSE_PROFILE="quick",
        COURSE_NBGRADER_ROOT=str(root),
    )
    try:
        assert run_course("nbgrader-setup", "--solutions", str(course / "solutions"), env=env).returncode == 0
        nbgrader("generate_assignment", ASSIGNMENT, cwd=course, env=env)
        released = root / "release" / ASSIGNMENT / f"{NB}.ipynb"
        for student, answer in (("alice", ALICE), ("bob", ANSWER)):
            folder = root / "submitted" / student / ASSIGNMENT
            folder.mkdir(parents=True)
            (folder / f"{NB}.ipynb").write_text(with_answer(released, "answer", answer))
        for student in ("alice", "bob"):  # two submissions in a row, as an instructor grades them
            nbgrader("autograde", ASSIGNMENT, "--student", student, cwd=course, env=env)
        with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
            scores = {
                (s, g.name): g.score
                for s in ("alice", "bob")
                for g in gb.find_submission_notebook(NB, ASSIGNMENT, s).grades
            }
        assert scores[("alice", "fresh-engine")] == 1 and scores[("alice", "answer-check")] == 0, scores
        assert scores[("bob", "fresh-engine")] == 1, (
            f"bob's notebook saw alice's engine variables: {scores} (the two submissions shared a cluster)"
        )
        assert scores[("bob", "answer-check")] == 1, scores
        deadline = time.monotonic() + 20
        while _leftovers(ipython_dir) and time.monotonic() < deadline:
            time.sleep(1)
        assert not _leftovers(ipython_dir), f"engines outlived their kernels: {_leftovers(ipython_dir)}"
        records = sorted(p.name for p in (tmp_path / "ipython").rglob("course-record-*.json"))
        assert not records, f"clusters still on record after grading: {records}"
    finally:
        subprocess.run(
            [sys.executable, "-m", "course", "cluster", "stop", "--all"], env=env, capture_output=True, timeout=120
        )
