"""Seed 000, exercise 2 (simple2) with 3 COMPSs tasks: f4 stays in the main program after waiting on each value."""

from pycompss.api.api import compss_wait_on
from pycompss.api.task import task


@task(returns=1)
def f1(val):
    return val + 1


@task(returns=1)
def f2(val):
    return val + 2


@task(returns=1)
def f3(val):
    return val + 3


def f4(val1, val2, val3):
    return val1 + val2 + val3


if __name__ == "__main__":
    val1 = f1(1)
    val2 = f2(2)
    val3 = f3(3)

    val1 = compss_wait_on(val1)
    val2 = compss_wait_on(val2)
    val3 = compss_wait_on(val3)
    sum = f4(val1, val2, val3)
    print(sum)
