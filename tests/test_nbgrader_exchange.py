"""nbgrader's exchange, end to end, as a course on a JupyterHub runs it: an instructor and two students who are
separate Unix users, a real exchange directory, nbgrader's own commands from the course's nbgrader_config.py.

release 02 -> both students fetch -> alice submits the solution, bob a plausible wrong answer -> collect ->
autograde -> the gradebook holds the right scores -> generate_feedback (no hidden test in it) -> release_feedback ->
each student fetches only their own feedback; neither can read the other's submission.

The tests run as root, so real users are made with useradd. The environment's Python lives under /root, which
other users cannot enter; each user's command therefore runs in a private mount namespace where /root is an
empty folder holding only the Python installation (nothing changes outside that namespace).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from tests.conftest import ROOT
from tests.grading_support import WRONG
from tests.nbgrader_support import FLOWS

pytestmark = pytest.mark.slow
ASSIGNMENT, NB = "02-sgd", "02_sgd"
USERS = {"instructor": "ddlhpc-instructor", "alice": "ddlhpc-alice", "bob": "ddlhpc-bob"}
REAL_PYTHON = Path(os.path.realpath(sys.executable))  # e.g. /root/.pyenv/versions/3.11.7/bin/python3.11
# the folder under /root that holds it (other users cannot enter /root), or None when it lives elsewhere
UNDER_ROOT = Path(*REAL_PYTHON.parts[:3]) if REAL_PYTHON.parts[1:2] == ("root",) else None
BIN = str(Path(sys.executable).parent)


def _missing() -> str:
    if os.geteuid() != 0:
        return (
            "needs root to create the instructor and student Unix users (make test runs as root in CI); "
            "as a normal user, nbgrader's exchange cannot be shown between users"
        )
    for tool in ("useradd", "unshare", "setpriv", "mount"):
        if shutil.which(tool) is None:
            return f"needs {tool} (util-linux / passwd) to run the course as other Unix users"
    return ""


@dataclass
class Course:
    base: Path
    grading: Path  # the instructor's nbgrader course directory (COURSE_NBGRADER_ROOT)
    exchange: Path
    homes: dict[str, Path]
    runs: dict[str, subprocess.CompletedProcess]
    feedback_files: dict[str, list[Path]]


def run_as(
    who: str,
    course_base: Path,
    homes: dict[str, Path],
    argv: list[str],
    cwd: Path,
    env: dict | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess:
    """Run ARGV as the Unix user of WHO (instructor, alice, bob), with the environment's Python reachable."""
    user, home = USERS[who], homes[who]
    script = f'set -e; cd {cwd}; exec setpriv --reuid={user} --regid={user} --clear-groups "$@"'
    if UNDER_ROOT is not None:
        stash = course_base / f".python-{who}"
        script = (
            f"set -e; mkdir -p {stash}; mount --bind {UNDER_ROOT} {stash}; mount -t tmpfs -o mode=0755 tmpfs "
            f"/root; mkdir -p {UNDER_ROOT}; mount --move {stash} {UNDER_ROOT}; " + script
        )
    environment = {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "HOME": str(home),
        "USER": user,
        "LOGNAME": user,
        "LANG": "C.UTF-8",
        "COURSE_PROFILE": "quick",
        "COURSE_OFFLINE": "1",
        **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},
        **(env or {}),
    }
    result = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *argv],
        env=environment,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if check:
        assert result.returncode == 0, (
            f"{who}: {' '.join(argv)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result


def nbgrader_as(
    who: str, course: Course, *args: str, cwd: Path | None = None, env: dict | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    return run_as(
        who, course.base, course.homes, [sys.executable, "-m", "nbgrader", *args], cwd or course.homes[who], env, check
    )


def _users(base: Path, created: list[str]) -> dict[str, Path]:
    homes = {}
    for who, user in USERS.items():
        home = base / "home" / who
        home.mkdir(parents=True)
        if subprocess.run(["id", user], capture_output=True).returncode != 0:
            subprocess.run(["useradd", "-M", "-s", "/bin/sh", user], check=True, capture_output=True)
            created.append(user)
        shutil.chown(home, user, user)
        home.chmod(0o700)  # nobody reads another's home, as on a hub
        homes[who] = home
    return homes


def hidden_lines() -> list[str]:
    """The instructor's hidden-test lines of notebook 02 that are not in the released notebook."""
    public = {
        line.strip()
        for cell in nbformat.read(str(ROOT / "notebooks" / f"{NB}.ipynb"), as_version=4).cells
        for line in cell.source.splitlines()
    }
    lines, inside = [], False
    for cell in nbformat.read(str(ROOT / "solutions" / f"{NB}.ipynb"), as_version=4).cells:
        for line in cell.source.splitlines():
            if "BEGIN HIDDEN TESTS" in line or "END HIDDEN TESTS" in line:
                inside = "BEGIN" in line
            elif inside and len(line.strip()) >= 12 and line.strip() not in public:
                lines.append(line.strip())
    assert lines, "notebook 02 has no hidden tests to look for"
    return lines


def visible_text(page: str) -> str:
    """An HTML page as the words a reader sees: tags dropped (syntax highlighting splits code), entities decoded."""
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    return " ".join(text.split())


def _answers(source: Path) -> dict[str, str]:
    return {
        c.metadata.nbgrader["grade_id"]: c.source
        for c in nbformat.read(str(source), as_version=4).cells
        if c.metadata.get("nbgrader", {}).get("solution")
    }


def _answer(fetched: Path, answers: dict[str, str], owner: str) -> None:
    nb = nbformat.read(str(fetched), as_version=4)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    nbformat.write(nb, str(fetched))
    shutil.chown(fetched, owner, owner)


# The flow runs once per session, also when another test module imports this fixture (pytest then loads this module
# a second time under another name, so the record of it lives in the shared helper module).
_FLOW = FLOWS.setdefault("exchange", [])


@pytest.fixture(scope="session")
def exchange_course():
    """The whole exchange flow, once; the tests below (and the formgrader test) read what it left."""
    if _FLOW:
        yield _FLOW[0]
        return
    reason = _missing()
    if reason:
        pytest.skip(reason)
    base = Path(tempfile.mkdtemp(prefix="course-exchange-"))
    base.chmod(0o755)
    created: list[str] = []
    try:
        homes = _users(base, created)
        exchange = base / "exchange"
        exchange.mkdir()
        exchange.chmod(0o777)  # as nbgrader's docs ask: everyone may create their course's folders in it
        grading = homes["instructor"] / "grading"
        course = Course(base, grading, exchange, homes, {}, {})
        for who in ("alice", "bob"):  # a student's nbgrader needs only the course id and the exchange
            config = homes[who] / ".jupyter" / "nbgrader_config.py"
            config.parent.mkdir()
            config.write_text(
                f'c = get_config()\nc.CourseDirectory.course_id = "ddl-hpc"\nc.Exchange.root = "{exchange}"\n'
            )
            shutil.chown(config.parent, USERS[who], USERS[who])
        teach = {"COURSE_NBGRADER_ROOT": str(grading), "COURSE_NBGRADER_EXCHANGE": str(exchange)}
        # the instructor works from the checkout, which they cannot write to: everything goes under COURSE_NBGRADER_ROOT
        run_as("instructor", base, homes, [sys.executable, "-m", "course", "nbgrader-setup"], ROOT, teach)
        for step in ("generate_assignment", "release_assignment"):
            nbgrader_as("instructor", course, step, ASSIGNMENT, cwd=ROOT, env=teach)
        for who in ("alice", "bob"):
            nbgrader_as(who, course, "fetch_assignment", ASSIGNMENT)
        wrong = json.loads((WRONG / f"{NB}.json").read_text())
        bobs = next(answer for answer in wrong if "ex2-answer" in answer)  # fails a hidden test
        _answer(
            homes["alice"] / ASSIGNMENT / f"{NB}.ipynb", _answers(ROOT / "solutions" / f"{NB}.ipynb"), USERS["alice"]
        )
        _answer(
            homes["bob"] / ASSIGNMENT / f"{NB}.ipynb",
            {**_answers(ROOT / "solutions" / f"{NB}.ipynb"), "ex2-answer": bobs["ex2-answer"]},
            USERS["bob"],
        )
        for who in ("alice", "bob"):
            nbgrader_as(who, course, "submit", ASSIGNMENT)
        inbound = exchange / "ddl-hpc" / "inbound"
        course.runs["bob lists inbound"] = run_as("bob", base, homes, ["ls", str(inbound)], homes["bob"], check=False)
        course.runs["bob looks for alice's"] = run_as(
            "bob",
            base,
            homes,
            [sys.executable, "-c", (f"import glob; print(glob.glob('{inbound}/*') + glob.glob('{homes['alice']}/*'))")],
            homes["bob"],
        )
        for step in ("collect", "autograde", "generate_feedback", "release_feedback"):
            nbgrader_as("instructor", course, step, ASSIGNMENT, cwd=ROOT, env=teach)
        for who in ("alice", "bob"):
            nbgrader_as(who, course, "fetch_feedback", ASSIGNMENT)
            course.feedback_files[who] = sorted((homes[who] / ASSIGNMENT / "feedback").rglob("*.html"))
        _FLOW.append(course)
        yield course
    finally:
        subprocess.run(
            [sys.executable, "-m", "course", "cluster", "stop", "--all"],
            capture_output=True,
            timeout=120,
            env={**os.environ, "IPYTHONDIR": str(base / "home" / "instructor" / ".ipython")},
        )
        shutil.rmtree(base, ignore_errors=True)
        for user in created:
            subprocess.run(["userdel", user], capture_output=True)


def test_the_gradebook_holds_the_right_scores(exchange_course):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{exchange_course.grading / 'gradebook.db'}", "ddl-hpc") as gb:
        scores = {
            who: {
                g.name: (g.score, g.max_score) for g in gb.find_submission_notebook(NB, ASSIGNMENT, USERS[who]).grades
            }
            for who in ("alice", "bob")
        }
    assert all(score == top for score, top in scores["alice"].values()), scores["alice"]
    assert scores["bob"]["ex2-check"][0] == 0, scores["bob"]  # the plain mean fails the hidden test
    assert scores["bob"]["ex1-check"][0] == scores["bob"]["ex1-check"][1], scores["bob"]  # his other answers are right
    assert set(scores["alice"]) == {"ex1-check", "ex2-check", "ex3-check"}


def test_no_hidden_test_line_is_in_any_feedback(exchange_course):
    files = sorted((exchange_course.grading / "feedback").rglob("*.html"))
    files += [f for who in ("alice", "bob") for f in exchange_course.feedback_files[who]]
    assert len(files) == 4, files  # the instructor's copy of each, and what each student fetched
    for page in files:
        text = visible_text(page.read_text())
        assert "ex2-check" in text or "Score" in text, f"{page} does not look like feedback"
        shown = [line for line in hidden_lines() if " ".join(line.split()) in text]
        assert not shown, f"{page.name} shows hidden tests: {shown[:3]}"


def test_each_student_fetches_only_their_own_feedback(exchange_course):
    instructor = exchange_course.grading / "feedback"
    for who in ("alice", "bob"):
        fetched = exchange_course.feedback_files[who]
        assert len(fetched) == 1, fetched
        own = instructor / USERS[who] / ASSIGNMENT / f"{NB}.html"
        assert fetched[0].read_text() == own.read_text(), f"{who} fetched feedback that is not theirs"


def test_one_student_cannot_read_anothers_submission(exchange_course):
    """nbgrader hides submissions by their names (a timestamp and a random key) in an inbound folder nobody but the
    instructor can list; alice's home is hers alone. So bob cannot find, let alone open, alice's notebook."""
    listing, looking = exchange_course.runs["bob lists inbound"], exchange_course.runs["bob looks for alice's"]
    assert listing.returncode != 0 and "Permission denied" in listing.stderr, listing
    found = looking.stdout.strip()
    assert found == "[]", f"bob can see these of alice's and the exchange's notebooks: {found[:300]}"
    inbound = exchange_course.exchange / "ddl-hpc" / "inbound"
    assert [p.name for p in inbound.iterdir() if p.name.startswith(f"{USERS['alice']}+")], "alice submitted nothing?"
