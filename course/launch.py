"""Run a launcher of ranks (mpiexec, horovodrun) from a notebook, bounded: a launch that hangs is tried once more.

An Open MPI launch on a busy node now and then never gets going (a rank that does not start, a collective
nobody joins), and then it waits for ever. A launch that prints nothing for `quiet` seconds is taken for hung:
its ranks write where each thread was (SIGTERM, which the course's programs answer with faulthandler), that
output is kept in a file, and the same command runs once more.

    done = launch.run(mpi.command(2, sys.executable, "-m", "course.programs.horovod_mnist"), env=mpi.env())
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from course import UserError, mpi, processes

QUIET = 150  # seconds without a line: a start beside other work takes 30-40 s before the first
TIMEOUT = 1800  # seconds for one attempt in all: the full profile's longest run is a few minutes
DUMP_GRACE = 5  # seconds the ranks get to write where they were before they are killed


def run(
    command: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    quiet: float = QUIET,
    timeout: float = TIMEOUT,
    attempts: int = 2,
) -> subprocess.CompletedProcess:
    """Run COMMAND to its end and return its exit status and output, as subprocess.run(capture_output=True, text=True)
    does. An attempt silent for `quiet` s is ended and run again, up to `attempts` in all; one that runs longer than
    `timeout` s is ended. Both raise UserError in the end, naming the file with the last attempt's output."""
    if attempts < 1:
        raise UserError(f"attempts must be at least 1, not {attempts}")
    for attempt in range(1, attempts + 1):
        done, hung = _attempt(command, env, cwd, quiet, timeout)
        if hung is None:
            return done
        ended = f"its ranks were ended (their output, with where each was: {_keep(done)})"
        if hung == "long":
            raise UserError(
                f"{Path(command[0]).name} ran longer than {timeout:.0f} s: {ended}; give it a larger "
                "timeout, or less to do"
            )
        said = f"{Path(command[0]).name} printed nothing for {quiet:.0f} s: {ended}"
        if attempt == attempts:
            again = f"; it hung {attempts} times in a row" if attempts > 1 else ""
            raise UserError(
                f"{said}{again}: see where the ranks waited in that file, and what else holds this "
                "node's cores (top), then run the cell again"
            )
        print(f"{said}; running it once more", file=sys.stderr, flush=True)
    raise AssertionError("not reached: the last attempt returns or raises")


def _attempt(command, env, cwd, quiet: float, timeout: float) -> tuple[subprocess.CompletedProcess, str | None]:
    """One run of COMMAND in a session of its own, watched: (what it did, None), or (what it printed, "quiet" or
    "long") for an attempt ended as silent for `quiet` s or running past `timeout` s."""
    segments = mpi.segments_folder()  # an ended attempt's shared-memory files go with it
    env = mpi.with_segments(dict(os.environ if env is None else env), segments)
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd, start_new_session=True
    )
    out: list[str] = []
    err: list[str] = []
    heard = [time.monotonic()]

    def read(stream, into: list[str]) -> None:
        for line in stream:
            into.append(line)
            heard[0] = time.monotonic()

    readers = [
        threading.Thread(target=read, args=pair, daemon=True) for pair in ((process.stdout, out), (process.stderr, err))
    ]
    for reader in readers:
        reader.start()
    began, hung = time.monotonic(), None
    try:
        while process.poll() is None and hung is None:
            time.sleep(0.2)
            now = time.monotonic()
            if now - heard[0] > quiet:
                hung = "quiet"
            elif now - began > timeout:
                hung = "long"
        if hung is not None:
            _ask_where(process.pid)
    finally:
        processes.kill_group(process.pid)  # also on an interrupt: no rank outlives its launch
        process.wait()
        for reader in readers:
            reader.join(timeout=DUMP_GRACE)
        shutil.rmtree(segments, ignore_errors=True)
    return subprocess.CompletedProcess(command, process.returncode, "".join(out), "".join(err)), hung


def _ask_where(launcher: int) -> None:
    """SIGTERM what the launcher started (its ranks dump their threads' stacks); kill what is left after DUMP_GRACE s.
    Its tree, not its session: horovodrun starts its ranks in sessions of their own."""
    with contextlib.suppress(psutil.Error):
        processes.end(processes.tree(psutil.Process(launcher))[:-1], timeout=DUMP_GRACE)


def _keep(done: subprocess.CompletedProcess) -> Path:
    """Write a hung attempt's output to a file of its own, for whoever looks into it."""
    handle, name = tempfile.mkstemp(prefix="course-hung-launch-", suffix=".log")
    with open(handle, "w") as file:
        file.write(f"$ {' '.join(map(str, done.args))}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}")
    return Path(name)
