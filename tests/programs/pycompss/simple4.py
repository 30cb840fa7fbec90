"""Seed 000, exercise 4 (simple4): blocked matrix multiply, C[i][j] += A[i][k] @ B[k][j] with c INOUT."""

import numpy as np
from pycompss.api.api import compss_wait_on
from pycompss.api.parameter import IN, INOUT
from pycompss.api.task import task

MSIZE = 3
BSIZE = 4


def initialize_variables():
    rng = np.random.default_rng(4)
    A = [[rng.integers(0, 10, (BSIZE, BSIZE)).astype(float) for _ in range(MSIZE)] for _ in range(MSIZE)]
    B = [[rng.integers(0, 10, (BSIZE, BSIZE)).astype(float) for _ in range(MSIZE)] for _ in range(MSIZE)]
    C = [[np.zeros((BSIZE, BSIZE)) for _ in range(MSIZE)] for _ in range(MSIZE)]
    return A, B, C


@task(a=IN, b=IN, c=INOUT)
def multiply(a, b, c):
    import numpy as np  # noqa: F401 - as in the seed

    c += a @ b


if __name__ == "__main__":
    A, B, C = initialize_variables()

    for i in range(MSIZE):
        for j in range(MSIZE):
            for k in range(MSIZE):
                multiply(A[i][k], B[k][j], C[i][j])

    for i in range(MSIZE):
        for j in range(MSIZE):
            C[i][j] = compss_wait_on(C[i][j])
            print("C" + str(i) + str(j) + "=" + str(C[i][j].tolist()))
