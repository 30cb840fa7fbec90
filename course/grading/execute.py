"""Run a notebook under limits: nbgrader's `Execute` preprocessor plus a watchdog.

Limits, so that one hostile notebook cannot stall or sink a grading run:
- time: nbclient interrupts a cell after `timeout` seconds (nbgrader records CellTimeoutError); a
  kernel that ignores the interrupt (a second timeout in a row, or `timeout + grace` seconds on one
  cell) is killed;
- memory: the resident memory of the kernel and every process it starts is polled; above the limit
  the whole process tree is killed;
- output: more than `max_output_bytes` per cell is dropped (errors are always kept);
- processes: whatever the kernel started (ipyparallel engines, MPI ranks) is killed at the end.
"""

from __future__ import annotations

import copy
import math
import os
import subprocess
import threading
import time
import uuid
import warnings
from dataclasses import dataclass, field

import psutil
from nbclient.util import run_sync
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Integer

from course import UserError, processes
from course.grading import KERNEL_START_TIMEOUT, parse_memory, quiet_log, size_words  # noqa: F401  (re-exported)

MAX_OUTPUT = 2**20  # bytes of output kept per cell
START_ATTEMPTS = 3  # tries to start a kernel before the grader gives up on it
GRACE = 30  # seconds a timed-out cell's kernel gets to honour the interrupt before it is killed


def check_timeout(seconds: float) -> float:
    """The per-cell limit as a float, or a UserError: it must be a positive, finite number of seconds.

    Fractions are honoured (0.5 means half a second), so a small limit is never read as "no limit"."""
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        raise UserError(f"--timeout must be a number of seconds, not {seconds!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"--timeout must be a positive number of seconds (e.g. 0.5 or 300), not {value:g}")
    return value


@dataclass
class Outcome:
    """How a run ended: `stopped` is None (ran to the end), 'timeout', 'memory', 'died' or 'nostart'."""

    executed: set[int] = field(default_factory=set)
    stopped: str | None = None
    stopped_cell: int | None = None
    detail: str = ""
    truncated: set[int] = field(default_factory=set)
    timed_out: set[int] = field(default_factory=set)


class Watchdog(threading.Thread):
    """Polls the kernel's process tree: kills it above the memory limit or when a cell hangs."""

    def __init__(self, memory: int, hang_after: float, interval: float = 0.1):
        super().__init__(daemon=True)
        self.memory, self.hang_after, self.interval = memory, hang_after, interval
        self.me = psutil.Process()
        self.before = {child.pid for child in self.me.children()}  # not the kernel's: never watched nor killed
        self.kernel: int | None = None
        self.seen: dict[int, psutil.Process] = {}
        self.cell: int | None = None
        self.cell_started: float | None = None
        self.reason: str | None = None
        self.reason_cell: int | None = None
        self.peak = 0
        self.done = threading.Event()

    def watch(self, kernel: int | None) -> None:
        """Watch the kernel KERNEL (a pid) and what it starts. Without one (a provisioner that is not a local
        process), the children this process starts from now on: never one it had before (a notebook server's other
        kernels, a test runner's browser), which the limits are not about."""
        self.kernel = kernel

    def _tree(self) -> list[psutil.Process]:
        try:
            if self.kernel is not None:
                root = psutil.Process(self.kernel)
                tree = [root, *root.children(recursive=True)]
            else:
                tree = []
                for child in self.me.children():
                    if child.pid not in self.before:
                        tree += [child, *child.children(recursive=True)]
        except psutil.Error:
            return []
        for proc in tree:
            self.seen.setdefault(proc.pid, proc)
        return tree

    def run(self) -> None:
        while not self.done.wait(self.interval):
            rss = 0
            for proc in self._tree():
                try:
                    rss += proc.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, rss)
            if rss > self.memory:
                self.kill("memory")
            started = self.cell_started
            if started is not None and time.monotonic() - started > self.hang_after:
                self.kill("timeout")

    def kill(self, reason: str) -> None:
        """Kill the kernel and everything it started, remembering why and in which cell."""
        if self.reason is None:
            self.reason, self.reason_cell = reason, self.cell
        self.cell_started = None
        processes.kill(self._tree(), timeout=0)  # the watchdog goes on polling: no waiting here

    def stop(self) -> None:
        """Stop polling and kill anything the kernel left behind (engines, ranks)."""
        self.done.set()
        self._tree()
        processes.kill([proc for proc in self.seen.values() if proc.is_running()], timeout=0)


class LimitedExecute(Execute):
    """nbgrader's Execute preprocessor that reports to a watchdog and caps each cell's output."""

    max_output_bytes = Integer(MAX_OUTPUT, help="output kept per cell; the rest is dropped").tag(config=True)

    def __init__(self, *args, watchdog: Watchdog, outcome: Outcome, **kwargs):
        super().__init__(*args, **kwargs)
        self.watchdog, self.outcome = watchdog, outcome
        self._output_bytes: dict[int, int] = {}
        self._timeouts_in_a_row = 0

    async def async_start_new_kernel(self, **kwargs):
        # the kernel's own stdout/stderr (not the notebook's outputs) would flood the grader's terminal
        kwargs.setdefault("stdout", subprocess.DEVNULL)
        kwargs.setdefault("stderr", subprocess.DEVNULL)
        started = await super().async_start_new_kernel(**kwargs)
        process = getattr(getattr(self.km, "provisioner", None), "process", None)  # jupyter_client's local kernel
        self.watchdog.watch(getattr(process, "pid", None))
        return started

    start_new_kernel = run_sync(async_start_new_kernel)

    def on_cell_start(self, cell: NotebookNode, cell_index: int, **_) -> None:
        if cell.cell_type == "code" and cell.source.strip():
            self.watchdog.cell = cell_index
            self.watchdog.cell_started = time.monotonic()

    def on_cell_executed(self, **kwargs) -> None:
        super().on_cell_executed(**kwargs)
        self.watchdog.cell_started = None
        self.outcome.executed.add(kwargs["cell_index"])
        content = kwargs["execute_reply"]["content"]
        if content.get("status") == "error" and content.get("ename") == "CellTimeoutError":
            self._timeouts_in_a_row += 1
            self.outcome.timed_out.add(kwargs["cell_index"])
            if self._timeouts_in_a_row >= 2:  # the interrupt was ignored: the kernel is stuck
                self.watchdog.kill("timeout")
        else:
            self._timeouts_in_a_row = 0

    def output(self, outs, msg, display_id, cell_index):
        if msg["msg_type"] in ("stream", "display_data", "execute_result", "update_display_data"):
            size = sum(len(str(v)) for v in msg["content"].get("data", {}).values()) + len(
                msg["content"].get("text", "")
            )
            total = self._output_bytes.get(cell_index, 0) + size
            self._output_bytes[cell_index] = total
            if total > self.max_output_bytes:
                if cell_index not in self.outcome.truncated:
                    self.outcome.truncated.add(cell_index)
                    note = NotebookNode(
                        output_type="stream",
                        name="stdout",
                        text=f"\n[output truncated by the grader: more than {size_words(self.max_output_bytes)}]\n",
                    )
                    outs.append(note)
                return None
        return super().output(outs, msg, display_id, cell_index)


def run(nb: NotebookNode, cwd: str, timeout: float, memory: int, kernel_name: str | None = None) -> Outcome:
    """Execute `nb` in place (outputs land in its cells) under the limits; returns how it ended.

    A kernel that dies before the notebook's first code cell ran (a port taken by another kernel
    starting at the same moment, say) is the grading machine's trouble, not the learner's: the start
    is tried `START_ATTEMPTS` times, and if it never succeeds the outcome is 'nostart'."""
    timeout = check_timeout(timeout)
    pristine = copy.deepcopy(nb)
    for _ in range(START_ATTEMPTS):
        outcome = _run_once(nb, cwd, timeout, memory, kernel_name)
        if not (outcome.stopped == "died" and outcome.stopped_cell is None):
            return outcome
        nb.clear()
        nb.update(copy.deepcopy(pristine))
    outcome.stopped = "nostart"
    return outcome


def _run_once(nb: NotebookNode, cwd: str, timeout: float, memory: int, kernel_name: str | None) -> Outcome:
    """One attempt: a fresh kernel and watchdog, the whole notebook."""
    from jupyter_client.kernelspec import NoSuchKernel
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    outcome = Outcome()
    watchdog = Watchdog(memory, hang_after=timeout + GRACE)
    # nbclient's `timeout` is whole seconds (0 would mean no limit); `timeout_func` gives it the exact limit.
    executor = LimitedExecute(
        timeout=max(1, math.ceil(timeout)),
        timeout_func=lambda cell: timeout,
        iopub_timeout=30,
        startup_timeout=KERNEL_START_TIMEOUT,
        watchdog=watchdog,
        outcome=outcome,
        log=quiet_log(),
        **({"kernel_name": kernel_name} if kernel_name else {}),
    )
    resources = {"metadata": {"path": cwd}}
    watchdog.start()
    warnings.filterwarnings("ignore", module="nbgrader")
    warnings.filterwarnings("ignore", message=".*not in session.*")
    # The kernel inherits these: nbgrader's marker, and a cluster id of its own, so that notebooks graded
    # side by side never re-attach to (or stop) each other's cluster, nor a learner's running one.
    saved = {k: os.environ.get(k) for k in ("NBGRADER_EXECUTION", "COURSE_CLUSTER_ID")}
    os.environ["NBGRADER_EXECUTION"] = "autograde"
    os.environ["COURSE_CLUSTER_ID"] = f"grading-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        executor.preprocess(nb, resources)
    except NoSuchKernel as exc:
        raise UserError(
            f"the notebook's kernel {exc.name!r} is not installed here; "
            f"run `make setup` (it registers the ddl-hpc kernel)"
        ) from None
    except (DeadKernelError, CellTimeoutError, RuntimeError, TimeoutError) as exc:
        outcome.stopped = watchdog.reason or "died"
        outcome.stopped_cell = watchdog.reason_cell if watchdog.reason else watchdog.cell
        outcome.detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    finally:
        watchdog.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    if outcome.stopped is None and watchdog.reason:  # killed after the last cell, say
        outcome.stopped, outcome.stopped_cell = watchdog.reason, watchdog.reason_cell
    outcome.peak_memory = watchdog.peak  # type: ignore[attr-defined]
    return outcome
