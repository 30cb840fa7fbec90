"""The course's own answers to the exercises that write an exchange by hand, kept for the instructor's tests and
benchmarks. `ALL`, at the end, is the one list of them; each one's docstring names the answer cell it answers (by
notebook and grade_id, which stay when exercises are renumbered).

Instructor-only: `python -m course student-copy` leaves this module out, so no learner can read or call an answer
(a hub's learners run the student copy's package). The checks refuse an answer that calls one of these where
they exist (`course.shortcuts.references`).
"""

from __future__ import annotations

import numpy as np

from course.comm import _chunks, _op


def ring_reduce_scatter(
    comm, array: np.ndarray, op: str = "sum", out: np.ndarray | None = None
) -> tuple[np.ndarray, int]:
    """Phase 1 of ring all-reduce (part of the answer to 03's `ex2-answer`): after p-1 steps rank r holds the reduced
    chunk (r+1) % p.

    Works straight in `out` (a new flat array unless given; `array` is only read): each step receives a
    neighbour's partial sum into the chunk it belongs to and adds this rank's own values to it in place.
    Returns `out` (only the finished chunk is final) and the index of that chunk.
    """
    reduce = _op(op)
    rank, size = comm.Get_rank(), comm.Get_size()
    mine = np.ascontiguousarray(array).reshape(-1)  # a copy only if `array` is not contiguous
    out = np.empty_like(mine) if out is None else out
    inputs, chunks = _chunks(mine, size), _chunks(out, size)
    right, left = (rank + 1) % size, (rank - 1) % size
    for step in range(size - 1):
        sending, receiving = (rank - step) % size, (rank - step - 1) % size
        send = inputs[sending] if step == 0 else chunks[sending]  # at first our own values, then partial sums
        comm.Sendrecv(send, dest=right, recvbuf=chunks[receiving], source=left)
        reduce(chunks[receiving], inputs[receiving], out=chunks[receiving])
    return out, (rank + 1) % size


def ring_allgather(comm, work: np.ndarray, owned: int) -> np.ndarray:
    """Phase 2 of ring all-reduce (part of the answer to 03's `ex2-answer`): pass finished chunks around the ring
    until every rank has all of them (in `work`, in place)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    chunks = _chunks(work, size)
    right, left = (rank + 1) % size, (rank - 1) % size
    for step in range(size - 1):
        send, recv = chunks[(owned - step) % size], chunks[(owned - step - 1) % size]
        comm.Sendrecv(send, dest=right, recvbuf=recv, source=left)
    return work


def ring_allreduce(comm, array: np.ndarray, op: str = "sum") -> np.ndarray:
    """All-reduce as Horovod and NCCL do it, the answer to 03's `ex2-answer`: a ring reduce-scatter, then a ring
    all-gather.

    Each rank sends 2 (p-1)/p of the data whatever the number of ranks: bandwidth-optimal. One output
    buffer serves both phases, so nothing is copied up front and `array` is left as it was.
    """
    array = np.asarray(array)
    if comm.Get_size() == 1:
        return array.copy()
    work, owned = ring_reduce_scatter(comm, array, op)
    return ring_allgather(comm, work, owned).reshape(array.shape)


def parameter_server_allreduce(comm, array: np.ndarray, op: str = "sum", server: int = 0) -> np.ndarray:
    """All-reduce through one parameter server, the answer to 03's `ex3-answer`: everyone sends to `server`, it
    reduces and sends back.

    The server receives and sends p-1 full arrays: its link is the bottleneck as p grows.
    """
    reduce = _op(op)
    rank, size = comm.Get_rank(), comm.Get_size()
    array = np.asarray(array)
    result = np.array(array, copy=True)
    if rank == server:
        incoming = np.empty_like(result)
        for worker in (r for r in range(size) if r != server):
            comm.Recv(incoming, source=worker)
            reduce(result, incoming, out=result)
        for worker in (r for r in range(size) if r != server):
            comm.Send(result, dest=worker)
    else:
        comm.Send(np.ascontiguousarray(array), dest=server)
        comm.Recv(result, source=server)
    return result


def kmeans_spmd(comm, points: np.ndarray, centroids: np.ndarray, iterations: int) -> np.ndarray:
    """Distributed K-Means (Lloyd) in SPMD style, the answer to 04's `ex-kmeans-answer`: each rank holds its chunk of
    `points`; per iteration the ranks all-reduce per-cluster sums and counts, so every rank gets the same centroids.
    """
    from mpi4py import MPI

    centroids = np.array(centroids, dtype=np.float64, copy=True)
    k = len(centroids)
    for _ in range(iterations):
        distances = ((points[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=-1)
        nearest = distances.argmin(axis=1)
        local = np.zeros((k, points.shape[1] + 1))
        np.add.at(local[:, :-1], nearest, points)
        np.add.at(local[:, -1], nearest, 1.0)
        total = np.empty_like(local)
        comm.Allreduce(local, total, op=MPI.SUM)
        counts = total[:, -1:]
        centroids = np.where(counts > 0, total[:, :-1] / np.maximum(counts, 1), centroids)
    return centroids


# Every answer above, the one list of them: refused in a learner's answer (course.shortcuts.references adds them to
# the library-built ones), and looked for in the student copy and on a hub (none may be there)
ALL = (ring_reduce_scatter, ring_allgather, ring_allreduce, parameter_server_allreduce, kmeans_spmd)
