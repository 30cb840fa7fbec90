"""`python -m course doctor --hub`: whether a JupyterHub serves the course safely (deploy/jupyterhub/).

Six lines: the shared environment the servers run from, the kernel every user gets, nbgrader's exchange, whether
every checkout of the course (the site's, wherever `make setup HUB=1` ran, the instructors' copies that
scripts/instructor-copy.sh made, and the one it runs from) is closed to other users, whether the record of those
copies names any that is gone (a note), and whether any file a learner account can read holds an answer block or a
hidden test. A learner "can read" a file when others may read it and enter every folder above it (learners are
neither owner nor group of these).
"""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path

from course import settings
from course.doctor.report import Check

DEFAULT_PREFIX = "/opt/ddl-hpc"
KERNEL = "ddl-hpc"
# An answer is a course notebook (its kernel is the course's) with nbgrader's answer or hidden-test blocks: nbgrader's
# own example notebooks, installed with it, have the blocks but are not the course's.
MARKERS = (b"### BEGIN SOLUTION", b"### BEGIN HIDDEN TESTS")
KERNEL_LINE = b'"name": "ddl-hpc"'
BIGGEST = 20 * 1024 * 1024  # larger files are data, not notebooks
# Where scripts/setup-hub.sh records the checkout it ran from (the site's), inside the environment it made, and where
# scripts/instructor-copy.sh records each instructor's copy it made (a path a line).
CHECKOUT_RECORD = Path("share") / "ddl-hpc" / "checkout"
COPIES_RECORD = Path("share") / "ddl-hpc" / "instructor-copies"


def closed_to_others(path: Path, need: int = stat.S_IROTH) -> Path | None:
    """The first folder on the way to PATH that others cannot enter, or PATH if they lack NEED on it; else None."""
    path = Path(os.path.realpath(path))
    for part in reversed(path.parents):
        if not part.stat().st_mode & stat.S_IXOTH:
            return part
    return None if path.stat().st_mode & need else path


def check_environment(prefix: Path) -> Check:
    """The servers' environment: JupyterHub, the installed student package, runnable by every user."""
    python = prefix / "bin" / "python"
    if not (prefix / "bin" / "jupyterhub-singleuser").exists():
        return Check("hub-env", False, f"no JupyterHub in {prefix}", "as root: make setup HUB=1 (HUB_PREFIX=DIR)")
    closed = closed_to_others(python, stat.S_IXOTH)
    if closed is not None:
        return Check(
            "hub-env",
            False,
            f"{python} cannot be run by other users ({closed} is closed to them)",
            f"rm -r {prefix}, then HUB_PYTHON=/usr/bin/python3.11 make setup HUB=1",
        )
    probe = "import course, json, nbgrader; print(json.dumps(course.__file__))"
    # Isolated and from /: a `course` folder where this runs (a checkout) must not stand in for the installed one.
    done = subprocess.run([str(python), "-I", "-c", probe], capture_output=True, text=True, timeout=120, cwd="/")
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Check("hub-env", False, f"{python} cannot import the course: {tail}", "as root: make setup HUB=1")
    package = Path(json.loads(done.stdout.strip().splitlines()[-1])).parent
    if prefix.resolve() not in package.resolve().parents:
        return Check(
            "hub-env",
            False,
            f"the servers' `course` is {package}, outside {prefix}: learners' kernels would read that checkout",
            "as root: make setup HUB=1 (it installs the student package, not an editable checkout)",
        )
    return Check("hub-env", True, f"{prefix}: JupyterHub and the student package, runnable by every user")


def check_kernel(prefix: Path) -> Check:
    """The kernel "Python (DDL on HPC)" in the environment, so every user's JupyterLab lists it."""
    spec = prefix / "share" / "jupyter" / "kernels" / KERNEL / "kernel.json"
    if not spec.is_file():
        return Check("hub-kernel", False, f"no kernel {KERNEL} in {prefix}", "as root: make setup HUB=1")
    program = Path(json.loads(spec.read_text())["argv"][0])
    closed = closed_to_others(spec) or (closed_to_others(program, stat.S_IXOTH) if program.exists() else program)
    if closed is not None:
        return Check("hub-kernel", False, f"kernel {KERNEL}: {closed} is closed to other users", f"chmod o+rX {closed}")
    return Check("hub-kernel", True, f"kernel {KERNEL} for every user ({program})")


def check_exchange(exchange: Path) -> Check:
    """nbgrader's exchange: every user may write into it; no learner may list another's submissions."""
    fix = f"as root: mkdir -p {exchange} && chmod 1777 {exchange}"
    if not exchange.is_dir():
        return Check("exchange", False, f"no exchange at {exchange}", fix)
    mode = exchange.stat().st_mode
    if mode & 0o003 != 0o003:
        return Check("exchange", False, f"{exchange} is {stat.filemode(mode)}: learners cannot submit", fix)
    problems = []
    for course in sorted(p for p in exchange.iterdir() if p.is_dir()):
        for name, writable in (("inbound", True), ("feedback", False)):  # learners submit; they fetch feedback
            folder = course / name
            if folder.is_dir():
                bits = folder.stat().st_mode & 0o007
                if bits & 0o004 or not bits & 0o001 or (writable and not bits & 0o002):
                    problems.append(f"{folder} is {stat.filemode(folder.stat().st_mode)}")
    if problems:
        return Check(
            "exchange",
            False,
            "; ".join(problems),
            "learners must not list these (nbgrader makes inbound rwx-wx-wx, feedback rwx--x--x): chmod 733 inbound, "
            "chmod 711 feedback",
        )
    return Check("exchange", True, f"{exchange}: every user submits, none lists another's work")


def is_checkout(folder: Path) -> bool:
    """Whether FOLDER is a checkout of the course: the instructor's notebooks or the course's own answers."""
    try:
        return (folder / "solutions").is_dir() or (folder / "course" / "answers.py").is_file()
    except OSError:
        return False


def check_checkouts(checkouts: list[Path]) -> Check:
    """Every checkout of the course is closed to other users as a whole: solutions/, the tests' wrong answers and
    course/answers.py are all inside it, and so is its .git."""
    open_ones, seen = [], []
    for checkout in checkouts:
        try:
            closed = closed_to_others(checkout, stat.S_IXOTH)
        except OSError:  # gone since it was recorded: nothing there to read
            continue
        (seen if closed is not None else open_ones).append(checkout)
    if open_ones:
        names = ", ".join(map(str, open_ones))
        return Check(
            "checkout",
            False,
            f"other users can read {names}: a course checkout holds every answer (solutions/, the tests, "
            "course/answers.py)",
            "; ".join(f"chmod 700 {c}" for c in open_ones),
        )
    if not seen:
        return Check("checkout", True, "no course checkout on record (make setup HUB=1 records the site's)")
    return Check("checkout", True, f"closed to other users: {', '.join(map(str, seen))}")


def recorded_copies(prefix: Path) -> list[Path]:
    """The instructors' copies scripts/instructor-copy.sh recorded in PREFIX (a path a line)."""
    record = prefix / COPIES_RECORD
    lines = record.read_text().splitlines() if record.is_file() else []
    return [Path(line.strip()) for line in lines if line.strip()]


def stale_copies(prefix: Path) -> dict[Path, str]:
    """Recorded copies that are gone, or whose owner's account is (`userdel` without -r): path -> what is stale."""
    stale = {}
    for copy in recorded_copies(prefix):
        try:
            owner = copy.stat().st_uid
        except FileNotFoundError:
            stale[copy] = "no longer exists"
            continue
        except OSError:
            continue
        try:
            pwd.getpwuid(owner)
        except KeyError:
            stale[copy] = f"belongs to uid {owner}, an account that no longer exists"
    return stale


def check_records(prefix: Path) -> Check:
    """The record of instructors' copies names only copies that exist, of accounts that exist."""
    stale = stale_copies(prefix)
    if not stale:
        return Check(
            "records", True, f"every instructor's copy on record exists ({prefix / COPIES_RECORD})", essential=False
        )
    orphans = [str(c) for c in stale if c.exists()]  # a copy left by `userdel` without -r: answers nobody owns
    forget = f"as root: {prefix / 'bin' / 'course'} hub forget-gone"
    return Check(
        "records",
        False,
        f"{prefix / COPIES_RECORD} is stale: " + "; ".join(f"{c} {why}" for c, why in stale.items()),
        (f"rm -rf {' '.join(orphans)} (a copy holds every answer), then " if orphans else "") + forget,
        essential=False,
    )


def checkouts(prefix: Path) -> list[Path]:
    """The checkouts to check: the site's and the instructors' copies (recorded in PREFIX by setup-hub.sh and
    instructor-copy.sh), this `course`'s, the current folder."""
    from course.grading import ROOT

    record = prefix / CHECKOUT_RECORD
    found = [Path(line.strip()) for line in record.read_text().splitlines() if line.strip()] if record.is_file() else []
    found += recorded_copies(prefix)
    found += [folder for folder in (ROOT, Path.cwd()) if is_checkout(folder)]
    return list(dict.fromkeys(found))


def readable_answers(roots: list[Path]) -> list[Path]:
    """Course notebooks under ROOTS that other users can read and that hold an answer block or hidden tests."""
    found = []
    for root in roots:
        if not root.is_dir() or closed_to_others(root, stat.S_IXOTH):
            continue
        for folder, dirs, files in os.walk(root):
            # Folders others can enter but not list (nbgrader's inbound, feedback) hide their files behind random names.
            listable = stat.S_IXOTH | stat.S_IROTH
            dirs[:] = [d for d in dirs if os.stat(Path(folder, d)).st_mode & listable == listable]
            for name in files:
                path = Path(folder, name)
                try:
                    info = path.stat()
                    if not stat.S_ISREG(info.st_mode) or not info.st_mode & stat.S_IROTH or info.st_size > BIGGEST:
                        continue
                    if path.suffix != ".ipynb":
                        continue
                    data = path.read_bytes()
                except OSError:
                    continue
                if KERNEL_LINE in data and any(marker in data for marker in MARKERS):
                    found.append(path)
    return found


def _outermost(path: Path, roots: list[Path]) -> Path:
    """The folder right under one of ROOTS that holds PATH (the checkout's solutions/, not the whole checkout)."""
    root = next(r for r in roots if r in path.parents)
    return root / path.relative_to(root).parts[0] if len(path.relative_to(root).parts) > 1 else root


def check_answers(roots: list[Path]) -> Check:
    """No answer block or hidden test is readable by a learner account."""
    found = readable_answers(roots)
    where = ", ".join(str(r) for r in roots if r.exists())
    if found:
        shown = ", ".join(str(p) for p in found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        return Check(
            "answers",
            False,
            f"learners can read answers or hidden tests: {shown}",
            "close the folders that hold them to learners, e.g. "
            + "; ".join(f"chmod 700 {d}" for d in dict.fromkeys(_outermost(p, roots) for p in found)),
        )
    return Check("answers", True, f"no answer or hidden test readable by learners in {where}")


def hub_prefix(prefix: Path | None = None) -> Path:
    """PREFIX, else HUB_PREFIX, else the running environment if it is a hub's, else /opt/ddl-hpc."""
    here = Path(sys.prefix)  # run from the hub's environment (a terminal of a hub session): that one
    if not prefix and not os.environ.get("HUB_PREFIX") and (here / "bin" / "jupyterhub-singleuser").exists():
        prefix = here
    return Path(prefix or os.environ.get("HUB_PREFIX") or DEFAULT_PREFIX)


def run_checks(prefix: Path | None = None) -> list[Check]:
    """The hub's checks for the environment PREFIX (see `hub_prefix`)."""
    prefix = hub_prefix(prefix)
    exchange = Path(settings.get("COURSE_NBGRADER_EXCHANGE"))
    roots = [prefix, exchange]
    if settings.get("COURSE_NBGRADER_ROOT"):
        roots.append(Path(settings.get("COURSE_NBGRADER_ROOT")))
    return [
        check_environment(prefix),
        check_kernel(prefix),
        check_exchange(exchange),
        check_checkouts(checkouts(prefix)),
        check_records(prefix),
        check_answers(roots),
    ]
