"""Processes: one place that finds, waits for and kills a process and everything it started, for the engine
clusters, the task runtime and grading (a learner's kernel, its engines and their MPI ranks)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from typing import Callable

import psutil


def tree(process: psutil.Process) -> list[psutil.Process]:
    """`process` and every process it started, children first; [] if it is gone."""
    try:
        return [*process.children(recursive=True), process]
    except psutil.Error:
        return []


def _signal(processes: list[psutil.Process], send: Callable[[psutil.Process], None]) -> None:
    """Send each process a signal (`psutil.Process.kill` or `.terminate`); those already gone are skipped."""
    for process in processes:
        with contextlib.suppress(psutil.Error):
            send(process)


def kill(processes: list[psutil.Process], timeout: float = 10) -> None:
    """SIGKILL every process (those already gone are skipped) and wait up to `timeout` s for them to end."""
    _signal(processes, psutil.Process.kill)
    psutil.wait_procs(processes, timeout=timeout)


def kill_tree(process: psutil.Process, timeout: float = 10) -> None:
    """SIGKILL `process` and everything it started, and wait up to `timeout` s for them to end."""
    kill(tree(process), timeout=timeout)


def kill_group(pid: int, timeout: float = 10) -> None:
    """SIGKILL what a launcher started with start_new_session=True leads (such as mpiexec and its ranks): its process
    group and every process of its session, even members that have lost their parent. Open MPI puts each rank in a
    process group of its own, inside mpiexec's session. Returns once they have ended (or after `timeout` s)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    members = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getsid(process.pid) == pid:
                process.kill()
                members.append(process)
    deadline = time.monotonic() + timeout
    while any(running(p) for p in members) and time.monotonic() < deadline:
        time.sleep(0.01)  # a zombie has ended: its parent, not this, reaps it


def end(processes: list[psutil.Process], timeout: float = 10) -> None:
    """Ask every process to stop (SIGTERM), so that it can clean up; kill what has not ended after `timeout` s."""
    _signal(processes, psutil.Process.terminate)
    wait_gone(processes, timeout=timeout)


def running(process: psutil.Process | None) -> bool:
    """Whether `process` still runs (a zombie has ended; None is no process)."""
    if process is None:
        return False
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def exit_with(pid: int, host: str, every: float = 0.5) -> None:
    """End this process once process `pid` of `host` has ended (checked every `every` s, in a thread): a check's
    rank whose starter was killed must not spin in a collective that nobody waits for. On another host: nothing."""
    if socket.gethostname() != host:
        return
    try:
        starter = psutil.Process(pid)
    except psutil.Error:
        os._exit(1)

    def watch() -> None:
        while running(starter):
            time.sleep(every)
        print(f"[{os.getpid()}] ends: its check's caller, process {pid}, has ended", file=sys.stderr, flush=True)
        os._exit(1)  # no clean-up to run: what this rank computes has no reader any more

    threading.Thread(target=watch, name=f"exit-with-{pid}", daemon=True).start()


CALLER = "COURSE_CHECK_CALLER"  # PID@HOST of the process that ran a check's job: its ranks end with it


def as_caller(env: dict[str, str]) -> dict[str, str]:
    """`env`, for a check's job, with this process as its caller: each rank calls `exit_with_caller` first."""
    env[CALLER] = f"{os.getpid()}@{socket.gethostname()}"
    return env


def exit_with_caller() -> None:
    """`exit_with` the process that ran this check's job, where its environment names one (`as_caller`)."""
    pid, _, host = os.environ.get(CALLER, "").partition("@")
    if pid.isdigit():
        exit_with(int(pid), host)


def still(pid: int, create_time: float | None) -> bool:
    """True when `pid` is still the process recorded with `create_time` (not a reused number) and not a zombie."""
    try:
        process = psutil.Process(pid)
        if create_time is not None and abs(process.create_time() - create_time) > 1:
            return False
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_gone(processes: list[psutil.Process], timeout: float = 30) -> None:
    """Wait for processes to end; kill any left after `timeout` (and their children)."""
    processes = [p for p in processes if running(p)]
    if not processes:
        return
    _, alive = psutil.wait_procs(processes, timeout=timeout)
    for process in alive:
        kill_tree(process)


def parents(processes: list[psutil.Process]) -> dict[int, int | None]:
    """Each process's parent pid now (None if it ended), to tell later which lost their parent."""
    found = {}
    for process in processes:
        try:
            found[process.pid] = process.ppid()
        except psutil.Error:
            found[process.pid] = None
    return found


def orphaned(processes: list[psutil.Process], before: dict[int, int | None]) -> list[psutil.Process]:
    """Those of `processes` still running whose parent ended since `before` (from `parents`) was taken."""
    left = []
    for process in processes:
        try:
            if running(process) and before.get(process.pid) not in (None, process.ppid()):
                left.append(process)
        except psutil.Error:
            pass
    return left
