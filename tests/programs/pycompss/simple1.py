"""Seed 000, exercise 1 (simple1) parallelised with 4 COMPSs tasks: f1, f2, f3 independent, f4 joins them."""

from pycompss.api.api import compss_wait_on
from pycompss.api.parameter import IN
from pycompss.api.task import task


@task(val=IN)
def f1(val):
    return val + 1


@task(val=IN)
def f2(val):
    return val + 2


@task(val=IN)
def f3(val):
    return val + 3


@task(returns=1)
def f4(val1, val2, val3):
    return val1 + val2 + val3


if __name__ == "__main__":
    val1 = f1(1)
    val2 = f2(2)
    val3 = f3(3)

    sum = f4(val1, val2, val3)
    sum = compss_wait_on(sum)
    print(sum)
