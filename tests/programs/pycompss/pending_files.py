"""Blocked matrix multiply on files, as the tutorial writes it: the program ends without waiting for its tasks."""

import time

import numpy as np
from pycompss.api.parameter import FILE_IN, FILE_INOUT
from pycompss.api.task import task

MSIZE = 2
BSIZE = 4


@task(a=FILE_IN, b=FILE_IN, c=FILE_INOUT)
def multiply(a, b, c, delay):
    time.sleep(delay)
    block = np.loadtxt(c) + np.loadtxt(a) @ np.loadtxt(b)
    np.savetxt(c, block)


def block_name(matrix, i, j):
    return f"{matrix}_{i}{j}.txt"


if __name__ == "__main__":
    rng = np.random.default_rng(7)
    for i in range(MSIZE):
        for j in range(MSIZE):
            np.savetxt(block_name("A", i, j), rng.integers(0, 5, (BSIZE, BSIZE)))
            np.savetxt(block_name("B", i, j), rng.integers(0, 5, (BSIZE, BSIZE)))
            np.savetxt(block_name("C", i, j), np.zeros((BSIZE, BSIZE)))
    for i in range(MSIZE):
        for j in range(MSIZE):
            for k in range(MSIZE):
                multiply(block_name("A", i, k), block_name("B", k, j), block_name("C", i, j), 0.3)
    print("submitted", MSIZE**3, "tasks")
