"""One `horovodrun` (or `torchrun`) of each script answer per test session: course.checks.horovod_script.run_script
and course.checks.torchrun_script.run_script, remembered by the script's bytes and the run's arguments.

The strength test's notebook run and tests/test_checks_horovod_script.py run the same fixture scripts (and the
solution's, again after each wrong trial): each run takes about 30 core-s. With COURSE_TEST_SCRIPT_RUNS naming a
folder (tests/conftest.py makes one per session, for every xdist worker and the kernels they start), the first
call with a script runs it for real and keeps its folder and output there; every later call with the same bytes
gets a copy of that folder and the same output, as a second real run of a deterministic script would. A lock per
script makes a second caller wait for a run in progress rather than start its own. In a trial kernel
(`install`) horovodrun's own probe of Horovod's build is asked once per session too (tests/horovodrun_once.py).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from course import training
from course.checks import horovod_script, torchrun_script
from tests import horovodrun_once

VARIABLE = horovodrun_once.VARIABLE
_REAL = horovod_script.run_script
_REAL_TORCHRUN = torchrun_script.run_script
_REAL_HOROVODRUN = training.horovodrun
_ROOT = str(Path(__file__).resolve().parent.parent)


def key(script: Path, *launch) -> str:
    """What names one run: the script's bytes and how it is launched (its path and folder do not change a run)."""
    return hashlib.sha256(script.read_bytes() + "".join(f"\0{a}" for a in launch).encode()).hexdigest()[:24]


def run_script(
    script: str | os.PathLike,
    folder: str | os.PathLike,
    ranks: int = 2,
    horovod: bool = True,
    timeout: float = horovod_script.TIMEOUT,
    hosts: int = 2,
) -> horovod_script.Run:
    """horovod_script.run_script, run once per script and launch in this session (VARIABLE's folder)."""
    script, folder = Path(script), Path(folder)
    hosts = min(hosts, ranks) if horovod else 1
    if not os.environ.get(VARIABLE) or not script.is_file():
        return _REAL(
            script, folder, ranks, horovod, timeout, hosts
        )  # the real function's own error for a missing script

    def again(returncode: int, output: str) -> horovod_script.Run:
        records = horovod_script.read_records(folder)
        return horovod_script.Run(script.name, ranks, returncode, output, records, hosts)

    real = lambda: _REAL(script, folder, ranks, horovod, timeout, hosts)  # noqa: E731
    return _once(key(script, ranks, horovod, hosts), folder, real, again)


def run_torchrun(
    script: str | os.PathLike,
    folder: str | os.PathLike,
    ranks: int = 2,
    args: list[str] = (),
    timeout: float = torchrun_script.TIMEOUT,
    max_restarts: int = 0,
    kill: tuple[int, int] | None = None,
    nodes: int = 2,
) -> torchrun_script.Run:
    """torchrun_script.run_script, run once per script and launch in this session (VARIABLE's folder)."""
    script, folder = Path(script), Path(folder)
    if not os.environ.get(VARIABLE) or not script.is_file():
        return _REAL_TORCHRUN(script, folder, ranks, args, timeout, max_restarts, kill, nodes)

    def again(returncode: int, output: str) -> torchrun_script.Run:
        records = torchrun_script.read_records(folder)
        laid = nodes if ranks % nodes == 0 else 1  # as the real function lays them out
        return torchrun_script.Run(script.name, ranks, returncode, output, records, str(folder.resolve()), laid)

    real = lambda: _REAL_TORCHRUN(script, folder, ranks, args, timeout, max_restarts, kill, nodes)  # noqa: E731
    return _once(key(script, ranks, "torchrun", max_restarts, kill, nodes, *args), folder, real, again)


def _once(name: str, folder: Path, real: Callable, again: Callable):
    """real() the first time NAME is asked for in this session, its folder and output kept; later, a copy of
    them in `folder` and again(returncode, output)."""
    kept = Path(os.environ[VARIABLE]) / name
    kept.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{kept}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if not (kept / "run.json").is_file():
            done = real()
            if done.returncode == -1:
                return done  # stopped at its time limit: a busy machine's, not the script's, so not kept
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(folder, kept / "folder")
            (kept / "run.json").write_text(json.dumps({"returncode": done.returncode, "output": done.output}))
            return done
    if folder.exists():
        shutil.rmtree(folder)  # as the real function: the folder holds this run only
    shutil.copytree(kept / "folder", folder)
    said = json.loads((kept / "run.json").read_text())
    return again(said["returncode"], said["output"])


def horovodrun(ranks: int, hosts: int = 1) -> list[str]:
    """training.horovodrun's command, launched by tests/horovodrun_once.py: horovodrun itself, its build probe (a
    TensorFlow import per launch) asked once in this session (VARIABLE's folder)."""
    command = _REAL_HOROVODRUN(ranks, hosts)
    if not os.environ.get(VARIABLE):
        return command
    program = f"import sys; sys.path.insert(0, {_ROOT!r}); from tests.horovodrun_once import main; main()"
    return [sys.executable, "-c", program, *command[1:]]


def install() -> None:
    """Make the script runners these, where a notebook's cells call them (a trial kernel); and horovodrun's build
    probe asked once per session, for the scripts and the notebooks' own Horovod runs."""
    horovod_script.run_script = run_script
    torchrun_script.run_script = run_torchrun
    training.horovodrun = horovodrun
