"""One `horovodrun` of each script answer per test session: course.checks.horovod_script.run_script, remembered by
the script's bytes and the run's arguments.

The strength test's notebook run and tests/test_checks_horovod_script.py run the same fixture scripts (and the
solution's, again after each wrong trial): each run takes about 30 core-s. With COURSE_TEST_SCRIPT_RUNS naming a
folder (tests/conftest.py makes one per session, for every xdist worker and the kernels they start), the first
call with a script runs it for real and keeps its folder and output there; every later call with the same bytes
gets a copy of that folder and the same output, as a second real run of a deterministic script would. A lock per
script makes a second caller wait for a run in progress rather than start its own.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from pathlib import Path

from course.checks import horovod_script

VARIABLE = "COURSE_TEST_SCRIPT_RUNS"
_REAL = horovod_script.run_script


def key(script: Path, ranks: int, horovod: bool) -> str:
    """What names one run: the script's bytes and how it is launched (its path and folder do not change a run)."""
    return hashlib.sha256(script.read_bytes() + f"\0{ranks}\0{horovod}".encode()).hexdigest()[:24]


def run_script(
    script: str | os.PathLike,
    folder: str | os.PathLike,
    ranks: int = 2,
    horovod: bool = True,
    timeout: float = horovod_script.TIMEOUT,
) -> horovod_script.Run:
    """horovod_script.run_script, run once per script and launch in this session (VARIABLE's folder)."""
    script, folder = Path(script), Path(folder)
    cache = os.environ.get(VARIABLE)
    if not cache or not script.is_file():
        return _REAL(script, folder, ranks, horovod, timeout)  # the real function's own error for a missing script
    kept = Path(cache) / key(script, ranks, horovod)
    kept.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{kept}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if not (kept / "run.json").is_file():
            done = _REAL(script, folder, ranks, horovod, timeout)
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
    return horovod_script.Run(
        script.name, ranks, said["returncode"], said["output"], horovod_script.read_records(folder)
    )


def install() -> None:
    """Make horovod_script.run_script this one, where a notebook's cells call it (a trial kernel)."""
    horovod_script.run_script = run_script
