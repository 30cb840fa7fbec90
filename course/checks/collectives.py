"""Notebook 03's checks of the exchanges a learner writes with MPI, run on the notebook's MPI engines and on new
`mpiexec` jobs of other sizes (`course.comm.on_ranks`): the result against a one-process computation or MPI's own
collective, and what was sent where, measured by the communicator (course.comm.CountingComm), not by the answer.

    smoothing(smooth_local, view)                            # ex1: a halo exchange
    predictions(predict, view)                               # ex-predict: what each collective leaves
    ring(my_ring_allreduce, view)                            # ex2: a ring all-reduce
    parameter_server(my_parameter_server_allreduce, view)    # ex3: a parameter server
    fusion(fused_allreduce, view)                            # ex-fusion: tensor fusion

Each returns None, or what is wrong in words. The functions they send to the ranks are public, for the hidden tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from course.checks import Wrong, check, deadline, expect
from course.comm import on_ranks
from course.shortcuts import shortcut


# --- ex1: one smoothing step on a decomposed domain ---------------------------------------------------------


def smoothed_on_root(x: Any, smooth: Callable) -> Any:
    """On every rank: the notebook's driver. Partition x into one part per rank, smooth each with `smooth` (which
    exchanges the halo), gather the parts on rank 0; the whole smoothed array on rank 0, None elsewhere."""
    import numpy as np
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    local = np.array_split(x, world.Get_size())[world.Get_rank()]
    parts = world.gather(smooth(world, local), root=0)
    return np.concatenate(parts) if world.Get_rank() == 0 else None


def smooth_part(x: Any, smooth: Callable) -> Any:
    """On every rank: this rank's part of the smoothed array, computed by `smooth`."""
    import numpy as np
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    return np.asarray(smooth(world, np.array_split(x, world.Get_size())[world.Get_rank()]))


def halo_traffic(x: Any, smooth: Callable) -> dict:
    """On every rank: what `smooth` sent and asked of MPI for this rank's part of x (CountingComm.traffic)."""
    import numpy as np
    from mpi4py import MPI

    from course.comm import CountingComm

    world = MPI.COMM_WORLD
    counted = CountingComm(world)
    smooth(counted, np.array_split(x, world.Get_size())[world.Get_rank()])
    return counted.traffic()


def _one_process_smooth(x: Any) -> Any:
    """The same smoothing step on one process: the mean of each value and its two neighbours, zeros beyond."""
    import numpy as np

    padded = np.concatenate([[0.0], x, [0.0]])
    return (padded[:-2] + padded[1:-1] + padded[2:]) / 3


@dataclass(frozen=True)
class SmoothCase:
    """A decomposition for the halo exchange: how many ranks share how many values (every part holds one or more)."""

    name: str
    ranks: int
    values: int


# The rule's boundaries where ranks divide an array: even and uneven parts, parts of a single value (the halo is
# the whole part), two values in all, and one rank alone (no neighbour on either side).
SMOOTH_CASES = (
    SmoothCase("parts of 4", 3, 12),
    SmoothCase("parts of 4, 3 and 3", 3, 10),
    SmoothCase("one value per rank", 3, 3),
    SmoothCase("parts of 2, 1 and 1", 3, 4),
    SmoothCase("parts of 3 and 2", 2, 5),
    SmoothCase("one value per rank", 2, 2),
    SmoothCase("one rank alone, no neighbour", 1, 6),
)


def smooth_cases(arrays: list, smooth: Callable) -> list:
    """On every rank: this rank's part of each array smoothed by `smooth`, or the error it raised, in words; after
    a case where any rank raised, every rank stops (the ranks' exchanges would no longer match)."""
    from mpi4py import MPI

    found = []
    for x in arrays:
        try:
            found.append(smooth_part(x, smooth))
        except Exception as error:  # the learner's code on a part of another size
            found.append(f"{type(error).__name__}: {error}")
        if MPI.COMM_WORLD.allreduce(isinstance(found[-1], str), op=MPI.LOR):
            break
    return found


def _smoothing_cases(smooth_local: Callable) -> None:
    """Each rank's part against the one-process result, for every case of SMOOTH_CASES (a new mpiexec job per rank
    count, so that the notebook's engines never wait on a case)."""
    import numpy as np

    for ranks in sorted({c.ranks for c in SMOOTH_CASES}):
        table = [c for c in SMOOTH_CASES if c.ranks == ranks]
        arrays = [np.random.default_rng(c.values).random(c.values) for c in table]
        try:
            found = on_ranks(smooth_cases, ranks, arrays, smooth_local)
        except AssertionError as error:  # a send with no receive: the job did not finish
            raise Wrong(f"with {ranks} rank(s) and {[c.values for c in table]} values: {error}") from None
        for case, x, k in zip(table, arrays, range(len(table))):
            where = f"with {ranks} rank(s) and {case.values} values ({case.name})"
            for rank, parts in enumerate(found):
                part = parts[k] if k < len(parts) else "no result (an earlier case failed)"
                expect(not isinstance(part, str), f"{where}, rank {rank} raised {part}")
                want = np.array_split(_one_process_smooth(x), ranks)[rank]
                same_shape = part.shape == want.shape
                expect(
                    same_shape and np.allclose(part, want),
                    f"{where}, rank {rank}'s part differs from the one-process result at its positions "
                    f"{[int(i) for i in np.flatnonzero(~np.isclose(part, want))] if same_shape else 'all'} "
                    f"(of 0-{len(want) - 1}): does each rank exchange with both neighbours, whatever its part's size?",
                )


@check
def smoothing(smooth_local: Callable, view: Any) -> None:
    """Exercise `ex1`: a halo exchange. The decomposed smoothing against the one-process result on the notebook's
    engines; each rank's part on every decomposition of SMOOTH_CASES (uneven parts, parts of one value, one rank);
    and what each rank sent on 3 ranks: one value to each neighbour, no collective."""
    import numpy as np

    x = np.random.default_rng(1).random(20)
    got = next(r for r in deadline.apply(view, smoothed_on_root, x, smooth_local) if r is not None)
    expect(got.shape == x.shape, "the gathered result should have one value per input value")
    want = _one_process_smooth(x)
    expect(np.allclose(got[1:-1], want[1:-1]), "the smoothed values differ from the one-process result")
    expect(np.allclose(got, want), "the two ends of the array should use zeros beyond the border")
    _smoothing_cases(smooth_local)
    x = np.random.default_rng(4).random(30)
    for rank, traffic in enumerate(on_ranks(halo_traffic, 3, x, smooth_local)):
        neighbours = [r for r in (rank - 1, rank + 1) if 0 <= r < 3]
        expect(
            not traffic["collectives"],
            f"on 3 ranks, rank {rank} called comm.{traffic['collectives'][0] if traffic['collectives'] else ''}: "
            "a halo exchange sends each border value only to the neighbour that needs it (comm.Sendrecv), not to "
            "every rank",
        )
        expect(
            set(traffic["destinations"]) <= set(neighbours) and traffic["bytes"] <= 8 * len(neighbours),
            f"on 3 ranks (10 values each), rank {rank} sent {traffic['bytes']} bytes to rank(s) "
            f"{traffic['destinations']}: its halo is one float64 value (8 bytes) for each neighbour {neighbours}, "
            "not its whole part",
        )


# --- ex-predict: what each collective leaves on every rank --------------------------------------------------

COLLECTIVES = ("bcast", "reduce", "allreduce", "reduce_scatter", "allgather", "alltoall")


def what_collectives_leave() -> dict:
    """On every rank: the six collectives of the notebook on a tiny array (rank r starts with
    x = arange(2 * size) + 10 r, float64), and what each left on this rank (None: reduce, off the root)."""
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    x = np.arange(2 * size, dtype=np.float64) + 10 * rank
    b = x.copy() if rank == 0 else np.empty_like(x)
    comm.Bcast(b, root=0)
    r = np.empty_like(x) if rank == 0 else None
    comm.Reduce(x, r, op=MPI.SUM, root=0)
    ar = np.empty_like(x)
    comm.Allreduce(x, ar, op=MPI.SUM)
    rs = np.empty(2)
    comm.Reduce_scatter_block(x, rs, op=MPI.SUM)
    ag = np.empty(2 * size)
    comm.Allgather(rs, ag)
    a2a = np.empty_like(x)
    comm.Alltoall(x, a2a)
    return {"x": x, "bcast": b, "reduce": r, "allreduce": ar, "reduce_scatter": rs, "allgather": ag, "alltoall": a2a}


def prediction_problems(predict: Callable, results: list[dict]) -> list[str]:
    """What differs between `predict` and what MPI left on each rank (results: one dict per rank), in words."""
    import numpy as np

    size, problems = len(results), []
    for rank, left in enumerate(results):
        guess = predict(rank, size)
        if not isinstance(guess, dict) or set(guess) != set(COLLECTIVES):
            return [f"predict({rank}, {size}) should return a dict with exactly the keys {list(COLLECTIVES)}"]
        for name in COLLECTIVES:
            want, got = left[name], guess[name]
            if want is None and got is not None:
                problems.append(f"{name} on rank {rank}: MPI leaves nothing there (None): only the root receives")
            elif got is None and want is not None:
                problems.append(f"{name} on rank {rank}: MPI leaves an array there, you predicted None")
            elif want is None:
                continue
            elif np.shape(got) != want.shape:
                problems.append(
                    f"{name} on rank {rank}: MPI leaves {want.size} values there, you predicted {np.size(got)}"
                )
            elif not np.allclose(got, want):
                problems.append(f"{name} on rank {rank}: your prediction is not what MPI left there")
    return problems


@check
def predictions(predict: Callable, view: Any) -> None:
    """Exercise `ex-predict`: `predict(rank, size)` against what the six collectives left on each rank, on the
    notebook's engines and on 3 ranks."""
    on_engines = (len(view), lambda: deadline.apply(view, what_collectives_leave))
    on_three = (3, lambda: on_ranks(what_collectives_leave, 3))
    for size, results in (on_engines, on_three):
        problems = prediction_problems(predict, results())
        expect(
            not problems,
            f"on {size} ranks, {problems[0] if problems else ''}"
            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
        )


# --- ex2: a ring all-reduce ---------------------------------------------------------------------------------


def wrong_chunks(allreduce: Callable, n: int, dtype: Any, seed: int = 0) -> str:
    """On every rank: what differs between `allreduce` and MPI.Allreduce of a random array, in words ('' if
    nothing): its shape, its data type, or which of the ring's chunks."""
    import numpy as np
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    x = (np.random.default_rng(seed + world.Get_rank()).random(n) * 100).astype(dtype)
    want = np.empty_like(x)
    world.Allreduce(x, want, op=MPI.SUM)
    got = np.asarray(allreduce(world, x.copy()))
    if got.shape != want.shape:
        return f"returned shape {got.shape} for {n} values"
    if got.dtype != want.dtype:
        return f"returned {got.dtype} values for {np.dtype(dtype).name} input"
    pieces = zip(np.array_split(got, world.Get_size()), np.array_split(want, world.Get_size()))
    bad = [c for c, (g, w) in enumerate(pieces) if not np.allclose(g, w, rtol=1e-5)]
    return f"chunk(s) {bad} differ from MPI.Allreduce" if bad else ""


def ring_traffic(allreduce: Callable, n: int) -> dict:
    """On every rank: the point-to-point messages `allreduce` sent for n float64 values (CountingComm.traffic)."""
    import numpy as np
    from mpi4py import MPI

    from course.comm import CountingComm

    counted = CountingComm(MPI.COMM_WORLD)
    allreduce(counted, np.ones(n))
    return counted.traffic()


@check
def ring(ring_allreduce: Callable, view: Any) -> None:
    """Exercise `ex2`: a ring all-reduce from comm.Sendrecv. No MPI collective or course reference called; each
    chunk of the sum against MPI.Allreduce on the notebook's engines and on 3 and 4 ranks (2 ranks alone cannot tell
    a right chunk index from a wrong one), with float and integer arrays; and on 3 ranks, messages to the ring's
    neighbours only, 2(p-1) of one chunk each."""
    import numpy as np

    ranks = len(view)
    used = [u for u in deadline.apply(view, shortcut, ring_allreduce, np.arange(8.0)) if u]
    expect(
        not used,
        f"my_ring_allreduce: {used[0] if used else ''}: build the ring yourself, from comm.Sendrecv between neighbours",
    )
    cases = [(ranks, 8 * ranks, np.float64), (ranks, 1001, np.float64), (3, 10, np.int64), (4, 1001, np.float64)]
    for size, n, dtype in cases:
        if size == ranks:  # on the notebook's engines
            problems = deadline.apply(view, wrong_chunks, ring_allreduce, n, dtype)
        else:  # on a new MPI job of 3 or 4 ranks
            problems = on_ranks(wrong_chunks, size, ring_allreduce, n, dtype)
        bad = [(r, p) for r, p in enumerate(problems) if p]
        expect(
            not bad,
            f"on {size} ranks ({n} {np.dtype(dtype).name} values), rank {bad[0][0] if bad else ''}: "
            f"{bad[0][1] if bad else ''}" + (f" (and {len(bad) - 1} other rank(s))" if len(bad) > 1 else ""),
        )
    for rank, traffic in enumerate(on_ranks(ring_traffic, 3, ring_allreduce, 3000)):
        neighbours = sorted({(rank + 1) % 3, (rank - 1) % 3})
        expect(
            set(traffic["destinations"]) <= set(neighbours),
            f"on 3 ranks, rank {rank} sent to rank(s) {traffic['destinations']}: in a ring a rank sends only to its "
            "neighbour",
        )
        expect(
            traffic["messages"] == 4 and traffic["bytes"] <= 4 * 1000 * 8,
            f"on 3 ranks with 3000 float64 values, rank {rank} sent {traffic['messages']} message(s), "
            f"{traffic['bytes']:,d} bytes; the ring sends 2(p-1) = 4 messages of one chunk (1000 values, 8,000 "
            "bytes) each: does it pass whole arrays?",
        )


# --- ex3: a parameter-server exchange -----------------------------------------------------------------------


def server_matches(ps_allreduce: Callable, server: int, n: int, dtype: Any = "float64") -> bool:
    """On every rank: whether ps_allreduce(comm, x, server=server) equals MPI.Allreduce of a random array."""
    import numpy as np
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    x = (np.random.default_rng(world.Get_rank()).random(n) * 100).astype(dtype)
    want = np.empty_like(x)
    world.Allreduce(x, want, op=MPI.SUM)
    got = np.asarray(ps_allreduce(world, x.copy(), server=server))
    return got.shape == want.shape and got.dtype == want.dtype and bool(np.allclose(got, want))


@dataclass(frozen=True)
class ServerCase:
    """A parameter-server exchange to try: which rank serves (negative: from the last), how many values, of what
    type, on how many ranks (0: the notebook's engines)."""

    name: str
    ranks: int
    server: int
    values: int
    dtype: str = "float64"


# The rule's boundaries: the first, the last and a middle rank serving; integer values (the buffers keep the
# arrays' type); a single value.
SERVER_CASES = (
    ServerCase("rank 0 serving", 0, 0, 1000),
    ServerCase("the last rank serving", 0, -1, 1000),
    ServerCase("rank 1 of 3 serving", 3, 1, 1000),
    ServerCase("rank 2 of 3 serving int64 values", 3, 2, 10, "int64"),
    ServerCase("rank 0 serving a single int32 value", 3, 0, 1, "int32"),
)  # integers only in the mpiexec job: a type error on one rank leaves the others waiting, there until a timeout


def server_cases(ps_allreduce: Callable, cases: list[tuple[int, int, str]]) -> list[bool]:
    """On every rank: `server_matches` for each (server, values, dtype) in turn."""
    return [server_matches(ps_allreduce, server, n, dtype) for server, n, dtype in cases]


def first_calls(ps_allreduce: Callable, server: int) -> tuple[int, list[tuple[str, int]]]:
    """On every rank: (rank, the point-to-point calls ps_allreduce made, in order, as ("send", dest) or
    ("recv", source)), noted by a wrapper around the real communicator."""
    import numpy as np
    from mpi4py import MPI

    class Recorder:
        def __init__(self, comm):
            self._comm, self.log = comm, []

        def __getattr__(self, name):
            return getattr(self._comm, name)

        def Send(self, buf, dest, *a, **k):  # noqa: N802 (mpi4py's names)
            self.log.append(("send", dest))
            return self._comm.Send(buf, dest, *a, **k)

        def send(self, obj, dest, *a, **k):
            self.log.append(("send", dest))
            return self._comm.send(obj, dest, *a, **k)

        def Recv(self, buf, source=MPI.ANY_SOURCE, *a, **k):  # noqa: N802
            self.log.append(("recv", source))
            return self._comm.Recv(buf, source, *a, **k)

        def recv(self, buf=None, source=MPI.ANY_SOURCE, *a, **k):
            self.log.append(("recv", source))
            return self._comm.recv(buf, source, *a, **k)

    recorder = Recorder(MPI.COMM_WORLD)
    ps_allreduce(recorder, np.ones(10), server=server)
    return MPI.COMM_WORLD.Get_rank(), recorder.log


def server_traffic(ps_allreduce: Callable, server: int, n: int) -> dict:
    """On every rank: the point-to-point messages ps_allreduce sent for n float64 values (CountingComm.traffic)."""
    import numpy as np
    from mpi4py import MPI

    from course.comm import CountingComm

    counted = CountingComm(MPI.COMM_WORLD)
    ps_allreduce(counted, np.ones(n), server=server)
    return counted.traffic()


def _differing(ok: list[bool]) -> list[int]:
    return [rank for rank, fine in enumerate(ok) if not fine]


@check
def parameter_server(ps_allreduce: Callable, view: Any) -> None:
    """Exercise `ex3`: a parameter-server all-reduce written with Send and Recv. Its sum on every case of
    SERVER_CASES (on the notebook's engines and on 3 ranks: the first, last and a middle rank serving, integer
    values, a single value); who talks first; and the messages each rank sent on 3 ranks (the server one to each
    worker, a worker one to the server)."""
    import numpy as np

    ranks = len(view)
    used = [u for u in deadline.apply(view, shortcut, ps_allreduce, np.arange(8.0), server=0) if u]
    expect(
        not used,
        f"my_parameter_server_allreduce: {used[0] if used else ''}: write the exchange yourself, "
        "with comm.Send and comm.Recv",
    )
    for where in (0, 3):
        table = [c for c in SERVER_CASES if c.ranks == where]
        args = [(c.server % (where or ranks), c.values, c.dtype) for c in table]
        if where:
            try:
                found = on_ranks(server_cases, where, ps_allreduce, args)
            except AssertionError as error:  # a rank raised, or waits for a message never sent
                raise Wrong(f"on {where} ranks with {', '.join(c.name for c in table)} in turn: {error}") from None
        else:
            found = deadline.apply(view, server_cases, ps_allreduce, args)
        for k, case in enumerate(table):
            ok = [per_rank[k] for per_rank in found]
            expect(
                all(ok),
                f"on {where or ranks} ranks with {case.name} ({case.values} {case.dtype}), rank(s) {_differing(ok)} "
                "returned another sum or data type than MPI.Allreduce: does every worker get the sum of all the "
                "arrays, in their own data type?",
            )
    for rank, log in deadline.apply(view, first_calls, ps_allreduce, ranks - 1):
        if rank == ranks - 1:
            expect(
                log and log[0][0] == "recv",
                "the server (the `server` argument) should first receive the workers' arrays",
            )
        else:
            expect(
                log and log[0] == ("send", ranks - 1),
                "a worker should first send its array to the rank given as `server`",
            )
    for rank, traffic in enumerate(on_ranks(server_traffic, 3, ps_allreduce, 1, 1000)):
        want = ([0, 2], 2) if rank == 1 else ([1], 1)
        expect(
            (traffic["destinations"], traffic["messages"]) == want,
            f"on 3 ranks with server=1, rank {rank} sent {traffic['messages']} message(s) to rank(s) "
            f"{traffic['destinations']}: "
            + (
                "the server sends the sum once to each worker"
                if rank == 1
                else "a worker sends its array to the server only, once, and gets the sum from it"
            ),
        )


# --- ex-fusion: many small tensors in one all-reduce --------------------------------------------------------

FUSION_SHAPES = [(3, 3), (10,), (2, 4, 5), (1,), (7,)]  # like a small network's weights and biases


@dataclass(frozen=True)
class FusionCase:
    """Tensors to fuse: their shapes and data type."""

    name: str
    shapes: tuple[tuple[int, ...], ...]
    dtype: str


# The rule's boundaries: the notebook's float64 tensors, other data types (the buffer keeps the tensors' type), a
# 0-d tensor (one value, no axis), an empty tensor, and a single tensor.
FUSION_CASES = (
    FusionCase("a small network's float64 weights and biases", tuple(FUSION_SHAPES), "float64"),
    FusionCase("float32 gradients with a 0-d one", ((3, 2), (), (5,)), "float32"),
    FusionCase("int32 tensors with an empty one", ((2, 2), (0,), (3,)), "int32"),
    FusionCase("a single tensor", ((6, 1),), "float64"),
)


def fusion_problems(fused_allreduce: Callable, shapes: list[tuple], dtype: Any, seed: int = 0) -> str:
    """On every rank: what differs between fused_allreduce and one MPI.Allreduce per tensor, in words ('' if
    nothing): the collectives it asked for (counted by CountingComm), their bytes, and each tensor's sum, shape and
    data type."""
    import numpy as np
    from mpi4py import MPI

    from course.comm import CountingComm

    world = MPI.COMM_WORLD
    generator = np.random.default_rng(seed + world.Get_rank())
    tensors = [(generator.random(shape) * 100).astype(dtype) for shape in shapes]
    wanted = []
    for tensor in tensors:
        total = np.empty_like(tensor)
        world.Allreduce(tensor, total, op=MPI.SUM)
        wanted.append(total)
    counted = CountingComm(world)
    try:
        got = fused_allreduce(counted, [t.copy() for t in tensors])
    except (ValueError, IndexError, TypeError) as error:  # a cut at the wrong offsets, a reshape that cannot fit
        sizes = [int(np.prod(s)) for s in shapes]
        return (
            f"it raised {type(error).__name__}: {error} - for tensors of {sizes} values the fused buffer holds "
            f"{sum(sizes)}; cut it at each tensor's size, in order, and reshape each piece to its tensor's shape"
        )
    if counted.calls != 1:
        return (
            f"{counted.calls} collectives for {len(tensors)} tensors: pack them into one buffer and all-reduce it once"
        )
    if counted.collectives[0] not in ("Allreduce", "allreduce"):
        return (
            f"the one collective is comm.{counted.collectives[0]}: all-reduce the fused buffer, so that MPI sums it "
            "and every rank gets only the sums, not every rank's tensors"
        )
    if counted.collective_bytes != sum(t.nbytes for t in tensors):
        return (
            f"the all-reduce carried {counted.collective_bytes} bytes for {sum(t.nbytes for t in tensors)} bytes "
            "of tensors: all-reduce one buffer that holds every tensor once, in its own data type"
        )
    if not isinstance(got, (list, tuple)) or len(got) != len(tensors):
        return f"return a list of {len(tensors)} arrays, one per tensor, in order"
    for i, (g, w) in enumerate(zip(got, wanted)):
        g = np.asarray(g)
        if g.shape != w.shape:
            return f"tensor {i}: shape {g.shape}, it should keep its shape {w.shape}"
        if g.dtype != w.dtype:
            return f"tensor {i}: {g.dtype} values, it should keep its data type {w.dtype}"
        if not np.allclose(g, w, rtol=1e-5):
            return f"tensor {i} (shape {w.shape}) is not the sum over all ranks"
    return ""


@check
def fusion(fused_allreduce: Callable, view: Any) -> None:
    """Exercise `ex-fusion`: the tensors of every case of FUSION_CASES (a small network's shapes, float32 and int32,
    a 0-d and an empty tensor, a single tensor), fused into one all-reduce on the notebook's engines, against one
    MPI.Allreduce per tensor; the collectives asked for are counted by the communicator."""
    for case in FUSION_CASES:
        for problem in deadline.apply(view, fusion_problems, fused_allreduce, list(case.shapes), case.dtype):
            expect(not problem, f"with {case.name} (shapes {list(case.shapes)}): {problem}")
