"""Run under mpiexec: the course's hand-written collectives (course.answers) must equal MPI's for many sizes, dtypes and ops.

Prints 'RANK r OK n' (n = OK_COUNT: the comparisons of the COUNTED answers on every case, plus K-Means) after
'RANK r ALSO m' (m = ALSO_COUNT: the EXTRA functions on every case, the ring's VIEWS and reduce_scatter_allgather's
SHAPES), or the first mismatch and exits 1. tests/test_comm.py reads every rank's line and imports the two counts
from here: importing this module runs nothing.
"""

import sys

import numpy as np

from course import answers
from course import comm as collectives

DTYPES = (np.float64, np.float32, np.int32, np.int64)
SIZES = (1, 2, 3, 5, 7, 100, 1001, 65537)
OPS = ("sum", "max", "min")
# Every all-reduce of course.answers (a name ending in _allreduce), found there: a new one is compared with MPI's
# without a list to add it to. An answer of another kind has its own comparison below, named in OTHERS.
COUNTED = tuple(f.__name__ for f in answers.ALL if f.__name__.endswith("_allreduce"))
OTHERS = ("kmeans_spmd",)
# Checked beside the two counted ones: the library-collective all-reduce, and a server that is not rank 0.
EXTRA = {
    "reduce_scatter_allgather": collectives.reduce_scatter_allgather,
    "parameter_server_allreduce(server=last)": lambda comm, x, op: answers.parameter_server_allreduce(
        comm, x, op, server=comm.Get_size() - 1
    ),
}
VIEWS = ("ring transposed", "ring input unchanged")
SHAPES = ("2-D", "transposed", "COMM_SELF")
CASES = len(DTYPES) * len(SIZES) * len(OPS)
OK_COUNT = CASES * len(COUNTED) + 1  # and K-Means, compared by the test
ALSO_COUNT = CASES * len(EXTRA) + len(VIEWS) + len(SHAPES)


def main(centroids_file: str) -> None:
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    checked = also = 0
    functions = {name: getattr(answers, name) for name in COUNTED}
    for dtype in DTYPES:
        for n in SIZES:
            rng = np.random.default_rng(1000 * rank + n)
            data = (rng.standard_normal(n) * 100).astype(dtype)
            for op in OPS:
                expected = collectives.mpi_allreduce(world, data, op)
                # Floating-point sums depend on the order of additions: allow a few ulps of the largest value.
                exact = np.issubdtype(dtype, np.integer)
                tolerance = 0.0 if exact else 4 * size * np.finfo(dtype).eps * 400
                for name, function in {**functions, **EXTRA}.items():
                    got = function(world, data, op)
                    if (
                        got.dtype != expected.dtype
                        or got.shape != expected.shape
                        or not np.allclose(got, expected, rtol=0, atol=tolerance)
                    ):
                        print(f"RANK {rank} MISMATCH {name} dtype={np.dtype(dtype).name} n={n} op={op}", flush=True)
                        sys.exit(1)
                    if name in functions:
                        checked += 1
                    else:
                        also += 1
    matrix = np.arange(12.0).reshape(3, 4) * (rank + 1)
    if not np.array_equal(answers.ring_allreduce(world, matrix), np.arange(12.0).reshape(3, 4) * size * (size + 1) / 2):
        print(f"RANK {rank} MISMATCH 2-D shape", flush=True)
        sys.exit(1)
    # reduce_scatter_allgather keeps any shape, also of a non-contiguous view, and a one-rank communicator copies.
    total = np.arange(12.0).reshape(3, 4) * size * (size + 1) / 2
    # The ring reads a non-contiguous view as it is and leaves its input unchanged (it works in its own output).
    kept = matrix.copy()
    for name, (got, want) in zip(
        VIEWS, ((answers.ring_allreduce(world, matrix.T), total.T), (matrix, kept)), strict=True
    ):
        if got.shape != want.shape or not np.array_equal(got, want):
            print(f"RANK {rank} MISMATCH {name}", flush=True)
            sys.exit(1)
        also += 1
    shapes = (
        (collectives.reduce_scatter_allgather(world, matrix), total),
        (collectives.reduce_scatter_allgather(world, matrix.T), total.T),
        (collectives.reduce_scatter_allgather(MPI.COMM_SELF, matrix), matrix),
    )
    for name, (got, want) in zip(SHAPES, shapes, strict=True):
        if got.shape != want.shape or not np.array_equal(got, want):
            print(f"RANK {rank} MISMATCH reduce_scatter_allgather {name}", flush=True)
            sys.exit(1)
        also += 1

    # Distributed K-Means on this rank's chunk, from shared initial centroids.
    points = np.random.default_rng(7).standard_normal((300, 2)) + np.repeat(np.eye(2) * 4, 150, axis=0)
    chunk = np.array_split(points, size)[rank]
    centroids = answers.kmeans_spmd(world, chunk, points[:3], iterations=20)
    if rank == 0:
        np.save(centroids_file, centroids)
    print(f"RANK {rank} ALSO {also}", flush=True)
    print(f"RANK {rank} OK {checked + 1}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
