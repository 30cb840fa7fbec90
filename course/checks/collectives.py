"""Notebook 03's checks of the exchanges a learner writes by hand with point-to-point messages, run on the
notebook's MPI engines and on new `mpiexec` jobs of other sizes (`course.comm.on_ranks`): the result against
MPI's own collective, and what was sent where, measured by the communicator (course.comm.CountingComm), not by
the answer.

    parameter_server(my_parameter_server_allreduce, view)   # None, or what is wrong
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from course.checks import check, expect
from course.comm import on_ranks
from course.shortcuts import shortcut


def server_matches(ps_allreduce: Callable, server: int, n: int) -> bool:
    """On every rank: whether ps_allreduce(comm, x, server=server) equals MPI.Allreduce of a random array."""
    import numpy as np
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    x = np.random.default_rng(world.Get_rank()).random(n)
    want = np.empty_like(x)
    world.Allreduce(x, want, op=MPI.SUM)
    got = np.asarray(ps_allreduce(world, x.copy(), server=server))
    return got.shape == want.shape and bool(np.allclose(got, want))


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
    """Exercise `ex3`: a parameter-server all-reduce written with Send and Recv. Its sum on the notebook's engines
    with the first and the last rank serving, and on 3 ranks with rank 1 serving; who talks first; and the messages
    each rank sent on 3 ranks (the server one to each worker, a worker one to the server)."""
    import numpy as np

    ranks = len(view)
    used = [u for u in view.apply_sync(shortcut, ps_allreduce, np.arange(8.0), server=0) if u]
    expect(
        not used,
        f"my_parameter_server_allreduce: {used[0] if used else ''}: write the exchange yourself, "
        "with comm.Send and comm.Recv",
    )
    for server in (0, ranks - 1):
        ok = view.apply_sync(server_matches, ps_allreduce, server, 1000)
        expect(all(ok), f"with server={server}, rank(s) {_differing(ok)} returned a different sum than MPI.Allreduce")
    ok = on_ranks(server_matches, 3, ps_allreduce, 1, 1000, timeout=30)
    expect(
        all(ok),
        f"on 3 ranks with server=1, rank(s) {_differing(ok)} returned a different sum than "
        "MPI.Allreduce: does every worker get the sum of all the arrays?",
    )
    for rank, log in view.apply_sync(first_calls, ps_allreduce, ranks - 1):
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
    for rank, traffic in enumerate(on_ranks(server_traffic, 3, ps_allreduce, 1, 1000, timeout=30)):
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
