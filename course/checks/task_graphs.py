"""Notebook 01's checks of the task graphs a learner builds with `@task` and `compss_wait_on` (course.tasks): the
result, the tasks and the waits as the runtime recorded them (`tasks.history()`, `tasks.waits()`), not as the
answer claims, and the answer's own `ex<N>_units` and `ex<N>_waits` against digests (course.checks.quiz), so the
key says whether they are right without showing them.

    simple1(ex1_sum, ex1_units, ex1_waits)          # None, or what is wrong
"""

from __future__ import annotations

from typing import Any

import numpy as np

from course import tasks
from course.checks import check, expect, quiz

# Digests of the right ex<N>_units (a set of function names) and ex<N>_waits (a number) for exercises 1 to 4.
UNITS_WAITS_KEY = {
    "ex1_units": "7694c7758adb588e00dc1f61d0f31afc872bd439df82959e5f48c55e003f596a",
    "ex1_waits": "4c08966977b6a838049ce1caaf31a47007a3382f973030379a58f332afef418d",
    "ex2_units": "1eb2636c3dee6e216e000b85fc346011c399d6ffa19c2e72954f267ab936bd7a",
    "ex2_waits": "ebe350eb6e4977dd60edde1804c63fffa2e6386c0ff7606e49582992cfe0832c",
    "ex3_units": "ffbc83a322bc01cd68879827b5cc70b82db1ffbf2aa3413b1017d885005e040c",
    "ex3_waits": "30a219f084a010e0efe7665f2b832895e17603bdc01ac55a9ef7aa94de0115bb",
    "ex4_units": "e5174ceb5efb09217ee767c28fbb7acf167a21044e1992dd9894e4ad3aac9bd5",
    "ex4_waits": "16967fdc0a3389f2c9e7124889c597243b9045890515e93c83f1f243c83beb2f",
}


def _units_and_waits(units: Any, waits: Any, exercise: int) -> None:
    """What is wrong in ex<N>_units (a set of function names) and ex<N>_waits (a number), as a Wrong."""
    expect(
        isinstance(units, (set, frozenset)) and all(isinstance(u, str) for u in units),
        f"ex{exercise}_units should be a set of function names (strings), e.g. {{'name'}}",
    )
    expect(
        quiz.is_right(f"ex{exercise}_units", units, UNITS_WAITS_KEY),
        f"ex{exercise}_units is not right yet: which functions must become tasks?",
    )
    expect(
        isinstance(waits, (int, np.integer)) and not isinstance(waits, bool),
        f"ex{exercise}_waits should be a whole number, got {waits!r}",
    )
    expect(
        quiz.is_right(f"ex{exercise}_waits", int(waits), UNITS_WAITS_KEY),
        f"ex{exercise}_waits is not right yet: how many compss_wait_on calls does the program need?",
    )


@check
def simple1(total: Any, units: Any, waits: Any) -> None:
    """Exercise `ex1`: four tasks, f4 joining the three Futures of f1, f2 and f3, and one wait, for the sum."""
    history, waited = tasks.history(), tasks.waits()
    expect(total == 12, f"the sum should be 12, got {total!r}")
    expect(len(history) == 4, f"the program should run 4 tasks, it ran {len(history)}")
    joins = [r for r in history if r["name"] == "f4"]
    expect(
        len(joins) == 1 and len(joins[0]["parents"]) == 3,
        "f4 should be a task that takes the three Futures of f1, f2 and f3 (pass them without waiting)",
    )
    expect(waited == 1, f"your program called compss_wait_on {waited} times: wait only for the final sum")
    _units_and_waits(units, waits, 1)


@check
def simple2(total: Any, units: Any, waits: Any) -> None:
    """Exercise `ex2`: f1, f2 and f3 as tasks, f4 an ordinary function in the master after one wait per input."""
    history, waited = tasks.history(), tasks.waits()
    expect(tasks.synchronised(total), "ex2_sum is a Future: f4 runs in the master, so wait for its inputs first")
    expect(total == 12, f"the sum should be 12, got {total!r}")
    expect(len(history) == 3, f"the program should run 3 tasks, it ran {len(history)}")
    expect("f4" not in {r["name"] for r in history}, "f4 ran as a task: in this version it is an ordinary function")
    expect(
        waited == 3,
        f"your program called compss_wait_on {waited} times: wait for each of f4's three inputs "
        "with its own call, as the lab's simple2 does",
    )
    _units_and_waits(units, waits, 2)


@check
def simple3(values: Any, units: Any, waits: Any) -> None:
    """Exercise `ex3`: one `increment` task per element, and one wait, for the whole list."""
    history, waited = tasks.history(), tasks.waits()
    expect(
        tasks.synchronised(values),
        "ex3_arr holds Futures: wait for the whole list and store what compss_wait_on returns",
    )
    expect(values == [2, 3, 4, 5, 6], f"the result should be [2, 3, 4, 5, 6], got {values!r}")
    expect(len(history) == 5, f"there should be one task per element (5), there were {len(history)}")
    expect(
        waited == 1,
        f"your program called compss_wait_on {waited} times: wait once, for the whole list "
        "(waiting inside the loop runs the increments one after the other)",
    )
    _units_and_waits(units, waits, 3)


@check
def simple4(a: list, b: list, c: list, msize: int, units: Any, waits: Any) -> None:
    """Exercise `ex4`: the blocked product C = A @ B as msize**3 multiply tasks, each block of C a chain of INOUT
    updates, every block of C waited for and assigned back."""
    history = tasks.history()
    expect(
        len(history) == msize**3,
        f"there should be MSIZE**3 = {msize**3} multiply tasks, there were {len(history)}",
    )
    stale = [(i, j) for i in range(msize) for j in range(msize) if not tasks.synchronised(c[i][j])]
    expect(
        not stale,
        f"C[{stale[0][0]}][{stale[0][1]}] (and {len(stale) - 1} other block(s)) is still the master's "
        "block from before the tasks: compss_wait_on returns the updated block, so assign its result: "
        "C[i][j] = compss_wait_on(C[i][j])"
        if stale
        else "",
    )
    expect(
        all(isinstance(c[i][j], np.ndarray) for i in range(msize) for j in range(msize)),
        "every C[i][j] should be a NumPy block",
    )
    chained = [r for r in history if r["parents"]]
    expect(
        len(chained) == msize**3 - msize**2,
        f"{len(chained)} multiplies waited for an earlier one, where each block of C is a chain of MSIZE updates: "
        "is c INOUT?",
    )
    expect(np.allclose(np.block(c), np.block(a) @ np.block(b)), "the blocks of C should make up A @ B")
    _units_and_waits(units, waits, 4)
