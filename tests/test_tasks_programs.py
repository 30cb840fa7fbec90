"""PyCOMPSs programs run as scripts, as a user runs them: imports swapped, `python program.py`, its own cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import PROGRAMS, ROOT

pytestmark = pytest.mark.slow
SOURCES = PROGRAMS / "pycompss"


def run_script(name: str, workdir: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    """Copy program `name` (and the modules beside it) into `workdir` with its `pycompss.` imports swapped for
    `course.tasks.` (pycompss.api.task -> course.tasks.api.task); run it from `workdir` as `python [folder/]name.py`."""
    source = (SOURCES / f"{name}.py").read_text()
    assert "from pycompss." in source and "course" not in source, "the program must be written for PyCOMPSs"
    script = workdir / f"{name}.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    for module in (SOURCES / name).parent.glob("*.py"):
        if module.name != script.name and "/" in name:
            (script.parent / module.name).write_text(module.read_text())
    script.write_text(source.replace("from pycompss.", "from course.tasks."))
    env = dict(
        os.environ,
        IPYTHONDIR=str(workdir / ".ipython"),
        PYTHONPATH=str(ROOT),
        COURSE_CLUSTER_ID=f"test-prog-{name.replace('/', '-')}",
    )
    return subprocess.run(
        [sys.executable, str(script.relative_to(workdir))],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_readers_keep_the_version_they_were_given(tmp_path):
    """A FILE_INOUT/FILE_OUT (or INOUT) update submitted after a slow reader must not change what it reads."""
    done = run_script("file_versions", tmp_path)
    assert done.returncode == 0, done.stderr
    keys = ("first", "second", "third", "before", "after", "file")
    lines = [line for line in done.stdout.splitlines() if line.split(":")[0] in keys]
    assert lines == [
        "first: 'one\\n'",
        "second: 'one\\ntwo\\n'",
        "third: 'three\\n'",
        "before: [1]",
        "after: [1, 2]",
        "file: 'three\\n'",
    ], done.stdout + done.stderr
    assert (tmp_path / "log.txt").read_text() == "three\n"


def test_work_pending_at_exit_runs_and_its_files_come_back(tmp_path):
    """The program ends without a wait: every task still runs, and the result files hold the product."""
    done = run_script("pending_files", tmp_path)
    assert done.returncode == 0, done.stderr
    n, size = 2, 4
    A = np.block([[np.loadtxt(tmp_path / f"A_{i}{j}.txt") for j in range(n)] for i in range(n)])
    B = np.block([[np.loadtxt(tmp_path / f"B_{i}{j}.txt") for j in range(n)] for i in range(n)])
    C = np.block([[np.loadtxt(tmp_path / f"C_{i}{j}.txt") for j in range(n)] for i in range(n)])
    assert C.shape == (n * size, n * size) and A.any() and B.any()
    zero = [(i, j) for i in range(n) for j in range(n) if not np.loadtxt(tmp_path / f"C_{i}{j}.txt").any()]
    assert np.array_equal(C, A @ B), f"C blocks still zero: {zero}"
    assert not [p for p in tmp_path.rglob("*") if ".course-tasks" in p.parts and p.is_file()], (
        "no version files are left beside the user's files"
    )


def test_failed_tasks_follow_their_on_failure_policy_and_the_program_fails(tmp_path):
    done = run_script("failures", tmp_path)
    out = done.stdout.splitlines()
    assert "fragile: None" in out, done.stdout + done.stderr  # IGNORE: the outputs are empty
    assert "guarded: -1 2" in out  # @on_failure(management="IGNORE", returns=-1): the default value
    assert "follow 0 0" in out and "follow 2 200" in out  # CANCEL_SUCCESSORS: only the successors of step(1) go
    assert any(line.startswith("follow 1 cancelled:") and "step 1 fails" in line for line in out), done.stdout
    assert "main program done" in out
    assert (tmp_path / "attempts.txt").read_text().count("attempt") == 2, "RETRY runs a failed task a second time"
    assert done.returncode != 0, "a task that failed under the default on_failure fails the program"
    assert "flaky" in done.stderr and "ZeroDivisionError" in done.stderr, done.stderr


def test_methods_collections_with_depth_and_the_programs_own_modules(tmp_path):
    """Run from another folder (as `python app/methods_collections.py`): its module shapes.py must import on the
    engines; methods are tasks with self INOUT (IN with target_direction=IN); Depth decides what is an element."""
    done = run_script("app/methods_collections", tmp_path)
    assert done.returncode == 0, done.stderr
    out = {line.split(":")[0]: line.split(":", 1)[1].strip() for line in done.stdout.splitlines() if ":" in line}
    assert out.get("balance") == "15", done.stdout + done.stderr  # the reader kept its version of the account
    assert out["history"] == "ada [10, 5, 1]"
    assert out["area"] == "14"
    assert out["lengths"] == "[3, 2, 1]" and out["rows"] == "[[7, 8, 2], [9, 1], [0]]"  # Depth 1: rows are objects
    assert out["grid"] == "[[[2.0, 2.0], [3.0, 3.0]], [[7.0, 7.0]]]"  # Depth 2: each block is updated
    assert out["flat"] == "10"


def test_the_rest_of_the_api_programs_import(tmp_path):
    done = run_script("api_tour", tmp_path)
    assert done.returncode == 0, done.stderr
    out = {line.split(":")[0]: line.split(":", 1)[1].strip() for line in done.stdout.splitlines() if ":" in line}
    assert out.get("reduce") == "15 True", done.stdout + done.stderr
    assert out["chunks"] == "[[1, 2], [3, 4], [5]]"
    assert out["generator"] == "[(4, 3), (4, 3)]"
    assert out["group"] == "3 is too big"  # a task's COMPSsException ends its group, in the program
    assert out["later"] == "[0, 1]"
    assert out["dict"] == "{'ada': [1, 3], 'bo': [2]}"
    assert out["lines"] == "3" and out["join"] == "to be sure"
    assert out["directory"] == "['0.txt', '1.txt', '2.txt']"
    assert out["size"] == "3" and out["implement"] == "3" and out["deleted"] == "True"
    assert out["binary"] == "hello"  # echo's stdout went to the FILE_OUT with StdIOStream STDOUT
    assert out["mpi"] == "2"  # hostname on 2 MPI ranks
    assert (tmp_path / "w1.txt").read_text() == "be"


@pytest.mark.parametrize("module", ["ompss", "container", "http", "multinode"])
def test_unsupported_decorators_are_refused_at_import_in_one_line(tmp_path, module):
    done = subprocess.run(
        [sys.executable, "-c", f"from course.tasks.api.{module} import {module}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=60,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"@{module}" in lines[0] and "use " in lines[0], done.stderr
