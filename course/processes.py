"""Ending processes: one place that kills a process and everything it started, for the engine clusters, the
task runtime and grading (a learner's kernel, its engines and their MPI ranks)."""

from __future__ import annotations

import psutil


def tree(process: psutil.Process) -> list[psutil.Process]:
    """`process` and every process it started, children first; [] if it is gone."""
    try:
        return [*process.children(recursive=True), process]
    except psutil.Error:
        return []


def kill(processes: list[psutil.Process], timeout: float = 10) -> None:
    """SIGKILL every process (those already gone are skipped) and wait up to `timeout` s for them to end."""
    for process in processes:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(processes, timeout=timeout)


def kill_tree(process: psutil.Process, timeout: float = 10) -> None:
    """SIGKILL `process` and everything it started, and wait up to `timeout` s for them to end."""
    kill(tree(process), timeout=timeout)
