"""Seed 000, exercise 3 (simple3): one independent `increment` task per element, then one wait on the list."""

from pycompss.api.api import compss_wait_on
from pycompss.api.task import task


@task(returns=1)
def increment(val):
    return val + 1


if __name__ == "__main__":
    arr = [1, 2, 3, 4, 5]

    for i in range(len(arr)):
        arr[i] = increment(arr[i])

    arr = compss_wait_on(arr)
    print(arr)
