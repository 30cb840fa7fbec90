"""The instructor guide's command blocks run as written: clusters, grading, the class results table and
cleaning up (docs/guide/: their four pages), in the guide's order, on this 2-core machine.

The blocks are read from the guide itself, so this test breaks when the guide changes. Only paths are
substituted (the shared results folder, the submissions folder, and the checkout, which here is a folder
with the fixture course as its solutions/ and the course's .venv); `course` is `.venv/bin/python -m course`,
as the guide says. The nbgrader route runs on a real hub in tests/test_hub.py, the student copy in
tests/test_student_copy.py.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from course import cluster, mpi
from tests.conftest import ROOT
from tests.grading_support import FIXTURE_COURSE, HOSTILE

GUIDE = ROOT / "docs" / "guide"
PAGES = ("03-engine-clusters.md", "04-release-collect-grade.md", "05-class-results.md", "07-clean-up.md")
# The nbgrader route's steps are the hub block's and the end of a class on the hub is the hub's (both run by
# tests/test_hub.py, with real accounts); the student copy's, test_student_copy.py's
SKIP_SUBSECTIONS = ("## The nbgrader route", "## Student copy", "## The end of a class on a JupyterHub")

pytestmark = pytest.mark.slow


def blocks() -> list[tuple[str, str]]:
    """(page, bash block) for every ```bash block of the pages this test covers, in order."""
    found = []
    for page in PAGES:
        skip, inside, lines = False, False, []
        for line in (GUIDE / page).read_text().splitlines():
            stripped = line.strip()
            if not inside and line.startswith("## "):
                skip = line.startswith(SKIP_SUBSECTIONS)
            elif stripped.startswith("```bash") and not inside:
                inside, lines = True, []
            elif stripped == "```" and inside:
                inside = False
                if not skip:
                    found.append((page, "\n".join(lines)))
            elif inside:
                lines.append(stripped)
    return found


def test_the_guide_has_the_blocks_this_test_expects():
    pages = [page[:2] for page, _ in blocks()]
    assert pages == ["03", "03", "04", "05", "05", "05", "07"], pages


def results_rows(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_every_command_block_runs_in_order(tmp_path, slurm):
    checkout = tmp_path / "checkout"  # the course checkout: the fixture course as solutions/, the real .venv
    checkout.mkdir()
    (checkout / ".venv").symlink_to(ROOT / ".venv")
    shutil.copytree(FIXTURE_COURSE, checkout / "solutions")
    submissions = tmp_path / "SUBMISSIONS"
    for student in ("good", "unanswered"):
        shutil.copytree(HOSTILE / student, submissions / student)
    shared = tmp_path / "shared" / "class-results"
    paths = {"/shared/class-results": str(shared), "SUBMISSIONS": str(submissions)}
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_CLUSTER_ID", "JPY_SESSION_NAME", "COURSE_DATA_DIR")}
    env.update(
        mpi.env(),
        IPYTHONDIR=str(tmp_path / "ipython"),
        HOME=str(tmp_path / "home"),
        KERAS_HOME=str(tmp_path / "home" / ".keras"),
        COURSE_OFFLINE="1",
        COURSE_JOBS_DIR=str(tmp_path / "jobs"),
    )
    (tmp_path / "home").mkdir()
    outputs = []
    for page, block in blocks():
        script = block
        for given, here in paths.items():
            script = re.sub(rf"(?<![\w/]){re.escape(given)}", here, script)
        shell = 'set -eo pipefail\ncourse() { .venv/bin/python -m course "$@"; }\n' + script
        done = subprocess.run(
            ["bash", "-c", shell], cwd=checkout, env=env, capture_output=True, text=True, timeout=1200
        )
        assert done.returncode == 0, (
            f"{page}\n{script}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
        )
        outputs.append((page, script, done.stdout))

    by_page = {}
    for page, script, out in outputs:
        by_page.setdefault(page[:2], []).append(out)
    # 03: two clusters side by side, each with its own id, both seen by status; then the Slurm one
    status = by_page["03"][0]
    assert "course-class-local (local)" in status and "course-class-mpi (mpi)" in status, status
    # 04: the class graded, with totals
    grades = checkout / "grades"
    totals = {(r["student"], r["notebook"]): r["points"] for r in results_rows(grades / "totals.csv")}
    assert totals[("good", "TOTAL")] == "5" and totals[("unanswered", "TOTAL")] == "0", totals
    # 05: the folder every learner can write to, four runs appended by this learner, merged and plotted
    assert shared.stat().st_mode & 0o1777 == 0o1777
    merged = results_rows(checkout / "class.csv")
    assert sorted(r["strategy"] for r in merged) == ["async", "horovod", "horovod", "mirrored"], merged
    assert len({r["learner"] for r in merged}) == 1 and merged[0]["learner"]
    assert (checkout / "class.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # 07: nothing left running
    os.environ["IPYTHONDIR"] = env["IPYTHONDIR"]
    try:
        assert cluster.running_ids() == []
    finally:
        os.environ.pop("IPYTHONDIR")


def test_make_clean_keeps_the_gradebook_and_says_what_it_kept(tmp_path):
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    for folder in ("build/nbgrader/submitted/alice", "build/wheels", "grades", ".venv/bin"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "build" / "nbgrader" / "gradebook.db").write_text("marks")
    done = subprocess.run(["make", "clean"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "build" / "nbgrader" / "gradebook.db").read_text() == "marks"
    assert not (tmp_path / "build" / "wheels").exists() and not (tmp_path / ".venv").exists()
    assert "kept" in done.stdout and "build/nbgrader" in done.stdout and "grades" in done.stdout, done.stdout


def test_gitignore_keeps_student_data_and_class_output_out_of_git(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    shutil.copy(ROOT / ".gitignore", tmp_path / ".gitignore")
    made = [
        "SUBMISSIONS/alice/02_sgd.ipynb",
        "grades/grades.csv",
        "grades/totals.csv",
        "dry-run/index.html",
        "run-output/index.html",
        "class-results/alice.csv",
        "class.csv",
        "class.png",
        "results.csv",
        "build/nbgrader/gradebook.db",
        "course-horovod_1234.out",
    ]
    for name in made:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    listed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert listed.strip() == "?? .gitignore", listed


def test_root_is_asked_for_one_way_everywhere():
    """The machines these deployments run on are administered as root (a minimal Debian has no sudo): README, the
    guide, the Makefile, the course's messages (doctor's fixes among them), the scripts and deploy/ say "as root",
    never `sudo COMMAND`. (batchspawner's `sudo -E -u`, a program's own default, is named, not asked for.)"""
    files = [
        ROOT / "README.md",
        *GUIDE.glob("*.md"),
        ROOT / "Makefile",
        *ROOT.glob("course/**/*.py"),
        *ROOT.glob("scripts/*"),
    ]
    files += [path for path in ROOT.glob("deploy/**/*") if path.is_file()]
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if re.search(r"\bsudo [a-z]", line)
    ]
    assert not found, found
