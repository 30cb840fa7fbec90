"""Peak memory of a notebook's run: its kernel, the engines and controller it starts, and their children together.

Binder restarts a kernel whose container goes above 2 GB, so `course run` and the notebook tests sample what the
processes started inside a block use, and report the highest total. Each process counts its proportional set size
(PSS: shared pages split between the processes sharing them), so TensorFlow's libraries, loaded by the kernel and by
every engine, count once in all rather than once per process.

`arrays_kept` measures one call inside a process: the NumPy memory it leaves allocated (tracemalloc), which is what a
rank really holds, whatever the objects it returned say about their own size (a slice keeps its whole array).
"""

from __future__ import annotations

import gc
import threading
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import psutil

BINDER_LIMIT = 2 * 1024**3  # bytes: above it Binder restarts the kernel


def megabytes(nbytes: int) -> str:
    """'1234 MB' for a number of bytes (MB = 2**20 bytes)."""
    return f"{nbytes / 2**20:.0f} MB"


class PeakMemory:
    """`with PeakMemory() as memory: ...` then `memory.peak` (bytes): the highest total memory, sampled every
    `interval` seconds, of the processes this process started inside the block and all their descendants.

    Processes it had started before the block (a Slurm the tests run, say) are left out, and so is this process.
    """

    def __init__(self, interval: float = 1.0):
        self.interval, self.peak, self.samples = interval, 0, 0
        self._me = psutil.Process()
        self._my_cmdline = self._me.cmdline()
        self._before: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="course-peak-memory")

    def __enter__(self) -> PeakMemory:
        self._before = {child.pid for child in self._me.children()}
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def processes(self) -> list[psutil.Process]:
        """The children started inside the block and their descendants, as they are now.

        A child that is still a copy of this process (forked, not yet exec'd) is left out: its pages are this
        process's, which are not counted."""
        started = [child for child in self._me.children() if child.pid not in self._before and not self._is_copy(child)]
        found = list(started)
        for child in started:
            try:
                found += child.children(recursive=True)
            except psutil.NoSuchProcess:
                pass
        return found

    def _is_copy(self, child: psutil.Process) -> bool:
        try:
            return child.cmdline() == self._my_cmdline
        except psutil.Error:
            return False

    def sample(self) -> int:
        """Total memory (bytes) of those processes now; raises the peak if higher."""
        total = 0
        for process in self.processes():
            try:
                info = process.memory_full_info()
                total += getattr(info, "pss", info.rss)
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                pass  # it ended between listing and measuring
            except psutil.AccessDenied:
                total += _rss(process)
        self.peak, self.samples = max(self.peak, total), self.samples + 1
        return total

    def _run(self) -> None:
        started = time.monotonic()
        while True:
            self.sample()
            # every 0.1 s in the first seconds: a notebook that runs in one second is seen too
            if self._stop.wait(self.interval if time.monotonic() - started > 3 else min(self.interval, 0.1)):
                return


def _rss(process: psutil.Process) -> int:
    try:
        return process.memory_info().rss
    except psutil.Error:
        return 0


def arrays_kept(function: Callable, *args: Any) -> tuple[Any, int]:
    """`function(*args)` and the bytes of NumPy array data it allocated that are still allocated once it returned
    (tracemalloc, NumPy's domain): what its result and anything else still hold, views' whole arrays included.
    Arrays allocated while a module is imported are the module's own and left out."""
    import numpy as np

    def numpy_traces() -> tracemalloc.Snapshot:
        gc.collect()  # what is only garbage is not held
        return tracemalloc.take_snapshot().filter_traces(
            [
                tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain),
                tracemalloc.Filter(False, "<frozen importlib._bootstrap*>", all_frames=True),
            ]
        )

    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start(32)  # frames enough to see an import below the call
    try:
        before = numpy_traces()
        result = function(*args)
        after = numpy_traces()
    finally:
        if started:
            tracemalloc.stop()
    return result, sum(max(0, stat.size_diff) for stat in after.compare_to(before, "traceback"))
