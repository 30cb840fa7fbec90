"""Helpers for the tests that run nbgrader's own commands on the course's nbgrader_config.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat

from tests.conftest import ROOT

BIN = str(Path(sys.executable).parent)
KERNEL = {"name": "ddl-hpc", "display_name": "Python (DDL on HPC)", "language": "python"}


def nbgrader(
    *args: str, cwd: Path, env: dict, timeout: float = 900, user: str | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    """Run `nbgrader ARGS` as an instructor (or, with `user`, as that Unix user) would: the environment's bin on PATH."""
    env = {**env, "PATH": f"{BIN}{os.pathsep}{env.get('PATH', os.environ['PATH'])}"}
    command = [sys.executable, "-m", "nbgrader", *args]
    extra = {}
    if user is not None:
        import pwd

        entry = pwd.getpwnam(user)
        env.update(HOME=entry.pw_dir, USER=user, LOGNAME=user)
        extra = dict(user=entry.pw_uid, group=entry.pw_gid, extra_groups=[])
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, **extra)
    if check:
        assert result.returncode == 0, (
            f"nbgrader {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result


def cell(
    source: str,
    grade_id: str,
    kind: str = "code",
    *,
    solution: bool = False,
    points: float = 0,
    locked: bool | None = None,
) -> nbformat.NotebookNode:
    """A cell with nbgrader metadata: an answer (`solution`), a check (`points` > 0) or a locked cell."""
    make = nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell
    meta = {
        "grade": points > 0,
        "grade_id": grade_id,
        "locked": (not solution) if locked is None else locked,
        "schema_version": 3,
        "solution": solution,
    }
    if points:
        meta["points"] = points
    return make(source, metadata={"nbgrader": meta}, id=grade_id)


def notebook(cells: list) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": KERNEL, "language_info": {"name": "python"}})


def with_answer(released: Path, grade_id: str, source: str) -> str:
    """The released notebook at RELEASED with one answer cell's source replaced, as text."""
    nb = nbformat.read(str(released), as_version=4)
    target = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    assert target, f"{released.name} has no cell {grade_id}"
    target[0].source = source
    return nbformat.writes(nb)


def config_copy(target: Path) -> Path:
    """The course's nbgrader_config.py copied into TARGET (a course folder under test)."""
    target.mkdir(parents=True, exist_ok=True)
    (target / "nbgrader_config.py").write_text((ROOT / "nbgrader_config.py").read_text())
    return target
