"""COMMUTATIVE and COLLECTION_IN: partial sums folded into one total in any order, one at a time."""

import time

from pycompss.api.api import compss_barrier, compss_wait_on
from pycompss.api.parameter import COLLECTION_IN, COMMUTATIVE
from pycompss.api.task import task


@task(returns=1)
def partial(values):
    return sum(values)


@task(total=COMMUTATIVE)
def add(total, value):
    time.sleep(0.2)
    total[0] += value


@task(parts=COLLECTION_IN, returns=1)
def combine(parts):
    return sum(parts)


if __name__ == "__main__":
    data = list(range(40))
    parts = [partial(data[i : i + 10]) for i in range(0, 40, 10)]
    total = [0]
    for p in parts:
        add(total, p)
    both = combine(parts)
    compss_barrier()
    total = compss_wait_on(total)
    print(total[0], compss_wait_on(both))
