"""Collectives for teaching, over mpi4py: timing them, the alpha-beta model of their cost, counting a learner's
messages and running a learner's collective on more ranks than the notebook's engines.

`mpi_allreduce` and `reduce_scatter_allgather` take an mpi4py communicator and a NumPy array and return the
all-reduce, the second from MPI's own reduce-scatter and all-gather (the array size need not divide by the number
of ranks). The exchanges notebooks 03 and 04 ask learners to write by hand are not here: the course's own answers
are the instructor's (`course.answers.ALL`), and the checks refuse an answer that calls one of them or of these
(`course.shortcuts.references`).
"""

from __future__ import annotations

import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

from course import UserError

OPS: dict[str, Callable] = {"sum": np.add, "max": np.maximum, "min": np.minimum}


def _op(name: str) -> Callable:
    if name not in OPS:
        raise UserError(f"unknown reduction {name!r}; use one of: {', '.join(OPS)}")
    return OPS[name]


def _chunks(flat: np.ndarray, parts: int) -> list[np.ndarray]:
    """Contiguous views of `flat` in `parts` near-equal pieces (some may be empty), split as `np.array_split`
    does (the first len % parts pieces one longer) but by plain slicing, which costs far less per call."""
    size, extra = divmod(len(flat), parts)
    bounds = [i * size + min(i, extra) for i in range(parts + 1)]
    return [flat[bounds[i] : bounds[i + 1]] for i in range(parts)]


def _mpi_op(name: str):
    """The MPI reduction (MPI.SUM, MAX, MIN) for one of the names in OPS."""
    from mpi4py import MPI

    _op(name)
    return {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[name]


def reduce_scatter_allgather(comm, array: np.ndarray, op: str = "sum") -> np.ndarray:
    """All-reduce as MPI's own reduce-scatter followed by MPI's own all-gather.

    The same two phases as a ring all-reduce, but with library collectives instead of a hand-written ring:
    rank r receives the reduced chunk r (`Reduce_scatter`), then every rank gathers all chunks (`Allgatherv`).
    This is the decomposition Horovod and NCCL build their all-reduce from. Returns an array of `array`'s shape.
    """
    mpi_op = _mpi_op(op)
    array = np.asarray(array)
    rank, size = comm.Get_rank(), comm.Get_size()
    if size == 1:
        return array.copy()
    flat = np.ascontiguousarray(array).reshape(-1)
    counts = [len(chunk) for chunk in _chunks(flat, size)]
    owned = np.empty(counts[rank], dtype=flat.dtype)
    comm.Reduce_scatter(flat, owned, recvcounts=counts, op=mpi_op)
    result = np.empty_like(flat)
    comm.Allgatherv(owned, [result, counts])
    return result.reshape(array.shape)


def mpi_allreduce(comm, array: np.ndarray, op: str = "sum") -> np.ndarray:
    """The reference: MPI's own all-reduce of `array` (same signature as the hand-written ones)."""
    mpi_op = _mpi_op(op)
    array = np.ascontiguousarray(array)
    result = np.empty_like(array)
    comm.Allreduce(array, result, op=mpi_op)
    return result


def time_collective(comm, function: Callable, array: np.ndarray, repeats: int = 5) -> float:
    """Median wall time (seconds) of `function(comm, array)` across `repeats`, ranks started together."""
    times = []
    for _ in range(repeats):
        comm.Barrier()
        start = time.perf_counter()
        function(comm, array)
        times.append(comm.allreduce(time.perf_counter() - start, op=_max_op()))
    return float(np.median(times))


def _max_op():
    from mpi4py import MPI

    return MPI.MAX


# The alpha-beta (latency-bandwidth) model: sending n bytes costs alpha + n * beta.
def alpha_beta_ring(nbytes: float, ranks: int, alpha: float, beta: float) -> float:
    """Predicted ring all-reduce time: 2 (p-1) messages of n/p bytes each."""
    if ranks <= 1:
        return 0.0
    return 2 * (ranks - 1) * (alpha + nbytes / ranks * beta)


def alpha_beta_parameter_server(nbytes: float, ranks: int, alpha: float, beta: float) -> float:
    """Predicted parameter-server time: the server receives then sends p-1 full messages, one after another."""
    return 2 * (ranks - 1) * (alpha + nbytes * beta)


def fit_alpha_beta(nbytes: np.ndarray, seconds: np.ndarray) -> tuple[float, float]:
    """Least-squares alpha (s) and beta (s/byte) from point-to-point timings t = alpha + n beta.

    Errors are weighted relative to each time, so that sizes spanning several orders of magnitude all count:
    an unweighted fit lets the largest messages decide and leaves the latency alpha at noise level.
    """
    nbytes, seconds = np.asarray(nbytes, dtype=float), np.asarray(seconds, dtype=float)
    weights = 1.0 / np.maximum(seconds, np.finfo(float).tiny)
    design = np.column_stack([np.ones(len(nbytes)), nbytes]) * weights[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, seconds * weights, rcond=None)
    return float(max(alpha, 0.0)), float(beta)


# --- counting a learner's messages ------------------------------------------------------------------------------

COLLECTIVE_CALLS = frozenset(
    {
        "Allreduce",
        "allreduce",
        "Iallreduce",
        "Reduce",
        "reduce",
        "Ireduce",
        "Bcast",
        "bcast",
        "Allgather",
        "allgather",
        "Gather",
        "gather",
        "Scatter",
        "scatter",
        "Alltoall",
        "alltoall",
        "Reduce_scatter",
        "Reduce_scatter_block",
        "Allgatherv",
        "Gatherv",
        "Scatterv",
        "Alltoallv",
        "Ibcast",
        "Iallgather",
        "Iallgatherv",
        "Ireduce_scatter",
        "Ireduce_scatter_block",
    }
)


# Point-to-point calls that send a message (the buffer or object first, the destination second).
SEND_CALLS = frozenset(
    {
        "Send",
        "send",
        "Ssend",
        "ssend",
        "Isend",
        "isend",
        "Issend",
        "issend",
        "Bsend",
        "Rsend",
        "Sendrecv",
        "sendrecv",
        "Sendrecv_replace",
    }
)


def payload_bytes(message, buffer: bool) -> int:
    """Bytes a call sends: an mpi4py buffer's (an array, or its [array, type] / (array, count) forms) or a Python
    object's values as NumPy holds them (a float is 8 bytes, a list of n floats 8n), else the object's pickle."""
    if buffer and isinstance(message, (list, tuple)) and message:
        message = message[0]
    try:
        values = np.asarray(message)
        if values.dtype != object:
            return int(values.nbytes)
    except (ValueError, TypeError):  # arrays of several shapes in one list
        pass
    try:
        return len(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:  # MPI.IN_PLACE and other things that are no payload
        return 0


class CountingComm:
    """An mpi4py communicator that counts what is asked of it and passes every call to the real one.

    `calls` and `collectives` (names, in order) for checks such as "one all-reduce per step": each collective is
    one latency (alpha) on the network; `collective_bytes` is what this rank gave them (`given`: per collective, as
    (name, bytes)). `sent` lists this rank's point-to-point messages as (destination, bytes), leaving out those to
    MPI.PROC_NULL, which go nowhere. `ring_bytes()` is what this rank puts on the wire, collectives as rings.
    """

    def __init__(self, comm) -> None:
        self.comm, self.calls = comm, 0
        self.collectives: list[str] = []
        self.collective_bytes = 0
        self.given: list[tuple[str, int]] = []
        self.sent: list[tuple[int, int]] = []

    def __getattr__(self, name: str):
        attribute = getattr(self.comm, name)
        if name in COLLECTIVE_CALLS:
            self.calls += 1
            self.collectives.append(name)
            return self._counted(attribute, name, collective=True)
        if name in SEND_CALLS:
            return self._counted(attribute, name, collective=False)
        return attribute

    def _counted(self, method: Callable, name: str, collective: bool) -> Callable:
        def call(*args, **kwargs):
            named = [kwargs[key] for key in ("sendbuf", "buf", "obj", "sendobj") if key in kwargs]
            message = args[0] if args else (named or [None])[0]
            size = payload_bytes(message, buffer=name[0].isupper())
            if collective and _is_in_place(message):  # the data is in the receive buffer
                size = _in_place_bytes(name, args, kwargs, self.comm.Get_size())
            if collective:
                self.collective_bytes += size
                self.given.append((name, size))
            else:
                dest = args[1] if len(args) > 1 else kwargs.get("dest")
                if dest != _proc_null():
                    self.sent.append((dest, size))
            return method(*args, **kwargs)

        return call

    def ring_bytes(self) -> float:
        """Bytes this rank sends on the wire: its point-to-point messages, and each collective as the
        bandwidth-optimal ring does it (`ring_collective_bytes`)."""
        size = self.comm.Get_size()
        return sum(b for _, b in self.sent) + sum(ring_collective_bytes(n, b, size) for n, b in self.given)

    def traffic(self) -> dict:
        """What this rank asked for, as plain values (to return from an engine): collectives by name, bytes given
        to them, point-to-point messages sent, their bytes and their destinations."""
        return {
            "collectives": list(self.collectives),
            "collective_bytes": self.collective_bytes,
            "messages": len(self.sent),
            "bytes": sum(size for _, size in self.sent),
            "destinations": sorted({dest for dest, _ in self.sent}),
        }


def ring_collective_bytes(name: str, given: int, ranks: int) -> float:
    """Bytes one rank sends in a ring implementation of collective `name`, given `given` bytes by that rank:
    all-reduce 2 (p-1)/p of them, reduce-scatter (p-1)/p, all-gather (p-1) times its own part; any other
    collective is counted as sending what it was given."""
    if ranks <= 1:
        return 0.0
    base = name[1:].lower() if name.startswith("I") else name.lower()  # Iallreduce: the non-blocking form
    if base == "allreduce":
        return 2 * (ranks - 1) / ranks * given
    if base.startswith("reduce_scatter"):
        return (ranks - 1) / ranks * given
    if base.startswith("allgather"):
        return float((ranks - 1) * given)
    return float(given)


def _is_in_place(message) -> bool:
    from mpi4py import MPI

    return message is MPI.IN_PLACE or (
        isinstance(message, (list, tuple)) and bool(message) and message[0] is MPI.IN_PLACE
    )


def _in_place_bytes(name: str, args: tuple, kwargs: dict, ranks: int) -> int:
    """What an MPI.IN_PLACE collective takes from its receive buffer: all of it, or this rank's part of an
    all-gather's."""
    recvbuf = args[1] if len(args) > 1 else kwargs.get("recvbuf")
    size = payload_bytes(recvbuf, buffer=True) if recvbuf is not None else 0
    return size // ranks if name.lower().startswith("allgather") else size


def _proc_null() -> int:
    from mpi4py import MPI

    return MPI.PROC_NULL


# --- running a learner's collective on more ranks than the notebook's engines --------------------------------

_RANK_PROGRAM = """
import pickle, sys, traceback
sys.path.insert(0, sys.argv[1])
from course.processes import exit_with_caller
exit_with_caller()  # the caller killed: this rank ends too
from mpi4py import MPI
rank = MPI.COMM_WORLD.Get_rank()
out = f"{sys.argv[3]}.{rank}"
try:
    with open(sys.argv[2], "rb") as f:
        function, args = pickle.load(f)
    open(f"{out}.started", "w").close()
    result = ("ok", function(*args))
except BaseException as exc:
    result = ("error", f"{type(exc).__name__}: {exc}")
with open(out, "wb") as f:
    pickle.dump(result, f)
if result[0] == "error":
    MPI.COMM_WORLD.Abort(1)
"""
START_TIMEOUT = 300  # seconds for mpiexec to start every rank: seconds here, more on a loaded machine
RUN_TIMEOUT = 20  # seconds a learner's function may run once every rank has started it: the checks' cases take
# milliseconds, so a function still running after this waits for a message no one sends


# What mpiexec prints once a process of the job returned non-zero or called MPI_Abort: the job is over. mpiexec then
# says why and ends; one still running ABORT_GRACE s later (seen on a busy machine, for 300 s) is ended with its ranks.
_ABORTED = ("has been aborted", "MPI_ABORT was invoked")
ABORT_GRACE = 10.0


def _wait_for_ranks(
    process: subprocess.Popen, job: Path, ranks: int, timeout: float, log: Path | None = None
) -> str | None:
    """Wait for the job to end (or, in a pool, for every rank's result file `JOB.RANK`). 'hung' if it runs
    `timeout` s after every rank has started its function (each has written `JOB.RANK.started`), 'not started' if
    the ranks are not all started within START_TIMEOUT s, 'aborted' if mpiexec still runs ABORT_GRACE s after saying
    in `log` that it aborted the job; None once it ended. The function's own time is
    what `timeout` bounds, not mpiexec's start, which a busy machine slows."""
    started = [Path(f"{job}.{rank}.started") for rank in range(ranks)]
    finished = [Path(f"{job}.{rank}") for rank in range(ranks)]
    launched, running_since, looked, aborted_at = time.monotonic(), None, 0.0, None
    while process.poll() is None and not all(path.exists() for path in finished):
        now = time.monotonic()
        if running_since is None and all(path.exists() for path in started):
            running_since = now
        if log is not None and aborted_at is None and now - looked > 0.5:
            looked = now
            said = log.read_text(errors="replace")
            aborted_at = now if any(words in said for words in _ABORTED) else None
        if aborted_at is not None:  # over, whatever the ranks were doing: not hung
            if now - aborted_at > ABORT_GRACE:
                return "aborted"
        elif running_since is not None and now - running_since > timeout:
            return "hung"
        if running_since is None and now - launched > START_TIMEOUT:
            return "not started"
        time.sleep(0.005)
    return None


def on_ranks(function: Callable, ranks: int, *args, timeout: float = RUN_TIMEOUT) -> list:
    """`function(*args)` on every rank of a new `mpiexec -n RANKS` job (or of ranks kept up for such calls:
    course.rank_pool, in a process that keeps them); the results, by rank.

    For checking a learner's collective on more ranks than the notebook's engines: `function` may be
    defined in the notebook (it travels by value, with cloudpickle). An exception on a rank, or a function that
    does not return within `timeout` seconds of every rank starting it (a send with no matching receive),
    raises AssertionError with one line that says which rank and what happened; a job whose ranks end with
    neither a result nor an exception, or are not all started within START_TIMEOUT s, runs once more before it
    does (with Open MPI's own account of the job).
    """
    import cloudpickle

    from course import mpi

    mpi.command(ranks)  # a rank count below 1: one clear error
    payload = cloudpickle.dumps((function, args))
    name = getattr(function, "__name__", "the function")
    try:
        return _run_job(payload, ranks, name, timeout)
    except _EndedEarly:
        # Ranks ended with neither a result nor an exception: Open MPI lost them (a rank that failed to start, a
        # kill from outside) or the function ended its own process; or they were not all started in START_TIMEOUT
        # (a launch that hangs). Once more in a new job: a loss that is not the function's does not cost a learner
        # the check, and a function that does it again is told so.
        try:
            return _run_job(payload, ranks, name, timeout)
        except _EndedEarly as again:
            raise AssertionError(f"{again} (in two jobs, one after the other)") from None


class _EndedEarly(AssertionError):
    """A job whose ranks did not all return, none reporting an exception: it ended, or never started them all."""


def _run_job(payload: bytes, ranks: int, name: str, timeout: float) -> list:
    """One job of on_ranks: in the kept ranks (course.rank_pool) or a new `mpiexec`; its results, by rank."""
    from course import mpi, processes, rank_pool

    if rank_pool.wanted():
        pool = rank_pool.pool(ranks, mpi.env())
        job = pool.submit(payload)
        waited = "not waited"
        try:
            waited = _wait_for_ranks(pool.process, job, ranks, timeout)
            return _results(job, ranks, waited, pool.output(), name, timeout)
        finally:
            if waited is not None or pool.process.poll() is not None:  # hung, failed, or interrupted: a new pool
                rank_pool.discard(ranks)
    segments = mpi.segments_folder()  # the ranks' shared memory: removed below, however the job ends
    with tempfile.TemporaryDirectory(prefix="course-ranks-") as tmp:
        job, out, log = Path(tmp) / "job.pkl", Path(tmp) / "result", Path(tmp) / "output"
        job.write_bytes(payload)
        root = str(Path(__file__).resolve().parent.parent)
        command = mpi.command(ranks, sys.executable, "-c", _RANK_PROGRAM, root, str(job), str(out))
        with open(log, "w") as output:
            process = subprocess.Popen(
                command,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=mpi.with_segments(processes.as_caller(mpi.env()), segments),
                start_new_session=True,
            )
        waited = "not waited"
        try:
            waited = _wait_for_ranks(process, out, ranks, timeout, log)
        finally:
            if waited is not None:  # hung, not started, aborted, or the wait itself interrupted: end every rank
                processes.kill_group(process.pid)
            process.wait()
            shutil.rmtree(segments, ignore_errors=True)
        return _results(out, ranks, waited, log.read_text(errors="replace"), name, timeout)


_BOX = re.compile(r"^-{40,}\n(.*?)\n-{40,}$", re.S | re.M)  # a message Open MPI prints between lines of dashes
_MORE = re.compile(r"\d+ more process(es)? ha(s|ve) sent help message .*")  # the same message, from other ranks


def mpi_says(output: str, limit: int = 600) -> str:
    """What Open MPI said in a job's OUTPUT, in one line: its boxed messages and how many more ranks sent the same,
    without its advice on seeing them all; else the output's last line. A failed job is explained by these."""
    said = [" ".join(box.split()) for box in _BOX.findall(output)]
    said += [more.group(0) for more in _MORE.finditer(output)]
    if not said:
        said = output.strip().splitlines()[-1:] or ["no output"]
    text = " / ".join(said)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _results(job: Path, ranks: int, waited: str | None, output: str, name: str, timeout: float) -> list:
    """Every rank's result (`JOB.RANK`), or AssertionError saying in one line what went wrong."""
    said = mpi_says(output)
    if waited == "hung":
        raise AssertionError(
            f"{name} did not finish within {timeout:.0f} s on {ranks} ranks: does every send have a matching "
            "receive on the neighbour?"
        )
    if waited == "not started":
        raise _EndedEarly(f"the job on {ranks} ranks did not start within {START_TIMEOUT} s: {said}")
    results = []
    for rank in range(ranks):
        path = Path(f"{job}.{rank}")
        if not path.exists():
            continue
        status, value = pickle.loads(path.read_bytes())
        if status == "error":
            raise AssertionError(f"on {ranks} ranks, rank {rank} raised {value}")
        results.append(value)
    if len(results) != ranks:
        raise _EndedEarly(f"the job on {ranks} ranks ended before every rank returned: {said}")
    return results
