"""Tasks on methods, collections with Depth, and a module of the program's own imported inside a task."""

import numpy as np
from pycompss.api.api import compss_barrier, compss_wait_on
from pycompss.api.parameter import COLLECTION_IN, COLLECTION_INOUT, IN, Depth, Type
from pycompss.api.task import task

from shapes import area  # a module beside this program, not installed anywhere


class Account:
    def __init__(self, owner):
        self.owner = owner
        self.history = []

    @task()
    def deposit(self, amount):
        self.history.append(amount)

    @task(target_direction=IN, returns=1)
    def balance(self):
        return sum(self.history)


@task(returns=1)
def total_area(sides):
    return sum(area(s) for s in sides)


@task(rows={Type: COLLECTION_INOUT, Depth: 1})
def number_rows(rows):
    for row in rows:
        row.append(len(row))


@task(grid={Type: COLLECTION_INOUT, Depth: 2})
def bump(grid):
    for row in grid:
        for block in row:
            block += 1


@task(rows={Type: COLLECTION_IN, Depth: 1}, returns=1)
def lengths(rows):
    return [len(row) for row in rows]


@task(values=COLLECTION_IN, returns=1)
def flat_sum(values):
    return sum(v for row in values for v in row)


if __name__ == "__main__":
    account = Account("ada")
    account.deposit(10)
    account.deposit(5)
    seen = account.balance()
    account.deposit(1)
    print("balance:", compss_wait_on(seen))
    account = compss_wait_on(account)
    print("history:", account.owner, account.history)

    print("area:", compss_wait_on(total_area([1, 2, 3])))

    rows = [[7, 8], [9], []]
    number_rows(rows)
    print("lengths:", compss_wait_on(lengths(rows)))
    print("rows:", compss_wait_on(rows))

    grid = [[np.zeros(2), np.ones(2)], [np.full(2, 5.0)]]
    bump(grid)
    bump(grid)
    grid = compss_wait_on(grid)
    print("grid:", [[b.tolist() for b in row] for row in grid])
    print("flat:", compss_wait_on(flat_sum([[1, 2], [3, [4][0]]])))
    compss_barrier()
