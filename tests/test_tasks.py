"""course.tasks on real ipyparallel engines: PyCOMPSs programs run after an import swap, data semantics, errors."""

from __future__ import annotations

import io
import re
import threading
import time
from contextlib import redirect_stdout
from pathlib import Path

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from course import UserError, cluster  # noqa: E402
from course import tasks  # noqa: E402
from course.tasks import (COLLECTION_IN, COLLECTION_INOUT, COMMUTATIVE, FILE_IN, FILE_OUT, IN, INOUT,  # noqa: E402
                          compss_barrier, compss_delete_object, compss_open, compss_wait_on, constraint, task)
from tests.conftest import PROGRAMS  # noqa: E402

pytestmark = pytest.mark.slow
SEEDS = PROGRAMS / "pycompss"


@pytest.fixture(scope="module")
def engines():
    c = cluster.start(2, cluster_id="course-test-tasks", threads=1, quiet=True, persist=False)
    try:
        yield c
    finally:
        tasks.reset()
        c.stop()


@pytest.fixture
def fresh(engines):
    tasks.reset()
    return engines


def swap_imports(source: str) -> str:
    """What a learner does to run a PyCOMPSs program here: change only the imports."""
    return source.replace("pycompss.api.", "course.tasks.api.")


def run_program(source: str, sequential: bool = False) -> str:
    """Run a program as __main__ and return what it printed; sequential: without any task runtime."""
    namespace = {"__name__": "__main__"}
    if sequential:  # the original sequential program: no decorators, waits are the identity
        source = "\n".join(line for line in source.splitlines()
                           if not line.lstrip().startswith(("@task", "from pycompss", "@constraint")))
        namespace.update(compss_wait_on=lambda x: x, compss_barrier=lambda: None)
    else:
        source = swap_imports(source)
    out = io.StringIO()
    with redirect_stdout(out):
        exec(compile(source, "<program>", "exec"), namespace)  # noqa: S102 - our own test programs
    return out.getvalue()


def parents(record: dict) -> list[int]:
    return [p for p, _ in record["parents"]]


# ---------------------------------------------------------------------------- the seed programs

@pytest.mark.parametrize("name", ["simple1", "simple2", "simple3", "simple4", "accumulate"])
def test_seed_program_prints_the_sequential_result(fresh, name):
    source = (SEEDS / f"{name}.py").read_text()
    assert "pycompss.api" in source and "course" not in source, "the program must be written for PyCOMPSs"
    expected = run_program(source, sequential=True)
    assert run_program(source) == expected
    assert expected.strip()


def test_simple1_is_four_tasks_joined_into_one(fresh):
    assert run_program((SEEDS / "simple1.py").read_text()).strip() == "12"
    records = tasks.history()
    assert [r["name"] for r in records] == ["f1", "f2", "f3", "f4"]
    assert sorted(parents(records[3])) == [0, 1, 2] and not any(parents(r) for r in records[:3])
    assert all(r["ok"] for r in records)


def test_simple2_runs_three_tasks_and_sums_in_the_program(fresh):
    assert run_program((SEEDS / "simple2.py").read_text()).strip() == "12"
    assert [r["name"] for r in tasks.history()] == ["f1", "f2", "f3"]


def test_simple3_runs_five_independent_tasks(fresh):
    assert run_program((SEEDS / "simple3.py").read_text()).strip() == "[2, 3, 4, 5, 6]"
    records = tasks.history()
    assert len(records) == 5 and not any(parents(r) for r in records)


def test_simple4_chains_multiplies_through_inout(fresh):
    out = run_program((SEEDS / "simple4.py").read_text())
    records = tasks.history()
    assert len(records) == 27 and {r["name"] for r in records} == {"multiply"}
    # each C block is a chain of MSIZE updates: task k of a chain depends on task k-1 through c (INOUT)
    chained = [r for r in records if r["parents"]]
    assert len(chained) == 18 and all(r["parents"] == [(r["number"] - 1, "INOUT")] for r in chained)
    blocks = {m[0]: np.array(eval(m[1])) for m in re.findall(r"C(\d\d)=(\[.*\])", out)}  # noqa: S307
    assert len(blocks) == 9


# ---------------------------------------------------------------------------- data semantics

def test_inout_later_tasks_see_the_new_version_and_readers_keep_theirs(fresh):
    @task(box=INOUT)
    def append(box, value):
        box.append(value)

    @task(returns=1)
    def snapshot(box):
        return list(box)

    box = [0]
    append(box, 1)
    first = snapshot(box)
    append(box, 2)
    second = snapshot(box)
    append(box, 3)
    assert compss_wait_on(first) == [0, 1]
    assert compss_wait_on(second) == [0, 1, 2]
    assert compss_wait_on(box) == [0, 1, 2, 3]
    assert box == [0], "the notebook's own object is not changed behind its back (as in PyCOMPSs)"


def test_inout_numpy_block_and_future_updated_in_place(fresh):
    @task(returns=1)
    def ones(n):
        import numpy as np
        return np.ones(n)

    @task(x=INOUT)
    def double(x):
        x *= 2

    v = ones(3)
    double(v)
    double(v)
    assert compss_wait_on(v).tolist() == [4.0, 4.0, 4.0]


def test_commutative_updates_run_one_at_a_time_in_any_order(fresh):
    @task(log=COMMUTATIVE)
    def record(log, i):
        import time
        time.sleep(0.3)
        log.append(i)

    @task(returns=1)
    def length(log):
        return len(log)

    log = []
    for i in range(4):
        record(log, i)
    n = length(log)  # a read ends the run of commutative updates
    record(log, 99)
    assert compss_wait_on(n) == 4
    final = compss_wait_on(log)
    assert sorted(final[:4]) == [0, 1, 2, 3] and final[4] == 99
    runs = sorted((r["start"], r["end"]) for r in tasks.history() if r["name"] == "record")
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(runs, runs[1:])), \
        f"commutative updates overlapped: {runs}"


def test_independent_tasks_overlap_on_different_engines(fresh):
    @task(returns=1)
    def nap(i):
        import time
        time.sleep(1.0)
        return i

    results = [nap(i) for i in range(4)]
    assert compss_wait_on(results) == [0, 1, 2, 3]
    records = tasks.history()
    overlapping = [(a["engine"], b["engine"]) for a in records for b in records
                   if a["number"] < b["number"] and a["engine"] != b["engine"]
                   and a["start"] < b["end"] and b["start"] < a["end"]]
    assert overlapping, f"no two tasks ran at the same time on different engines: {records}"
    assert tasks.stats().engines == 2


def test_collections_nested_waits_and_multiple_returns(fresh):
    @task(returns=2)
    def divmod_task(a, b):
        return a // b, a % b

    @task(items=COLLECTION_IN, returns=1)
    def total(items):
        return sum(items)

    @task(blocks=COLLECTION_INOUT)
    def bump(blocks):
        for b in blocks:
            b += 1

    q, r = divmod_task(17, 5)
    s = total([q, r, 10])
    blocks = [np.zeros(2), np.zeros(2)]
    bump(blocks)
    bump(blocks)
    got = compss_wait_on({"q": q, "pair": (q, r), "sum": s, "blocks": blocks})
    assert got["q"] == 3 and got["pair"] == (3, 2) and got["sum"] == 15
    assert [b.tolist() for b in got["blocks"]] == [[2.0, 2.0], [2.0, 2.0]]
    assert compss_wait_on(q, r) == [3, 2]


def test_file_out_then_file_in(fresh, tmp_path):
    @task(path=FILE_OUT)
    def write(path, text):
        with open(path, "w") as f:
            f.write(text)

    @task(path=FILE_IN, returns=1)
    def read(path):
        with open(path) as f:
            return f.read().upper()

    target = tmp_path / "msg.txt"
    write(str(target), "hello")
    shout = read(str(target))
    assert compss_wait_on(shout) == "HELLO"
    with compss_open(str(target)) as f:
        assert f.read() == "hello"
    assert tasks.history()[1]["parents"] == [(0, "FILE_IN")]


def test_delete_object_frees_it(fresh):
    @task(returns=1)
    def make():
        return [1, 2]

    value = make()
    assert compss_wait_on(value) == [1, 2]
    assert compss_delete_object(value)
    with pytest.raises(UserError, match="no longer on the cluster"):
        compss_wait_on(value)


def test_constraint_maps_to_engine_resources(fresh):
    @constraint(computing_units=1)
    @task(returns=1)
    def small():
        return "ok"

    assert compss_wait_on(small()) == "ok"

    @constraint(computing_units=4096)
    @task(returns=1)
    def huge():
        return "never"

    with pytest.raises(UserError, match="needs 4096 cores"):
        huge()

    @constraint(processors=[{"processorType": "GPU", "computingUnits": 64}])
    @task(returns=1)
    def gpus():
        return "never"

    with pytest.raises(UserError, match="64 GPUs"):
        gpus()


def test_graph_trace_and_stats(fresh):
    assert run_program((SEEDS / "simple1.py").read_text()).strip() == "12"
    s = tasks.stats()
    assert s.tasks == 4 and s.work >= s.critical_path > 0 and s.parallelism >= 1.0
    for figure in (tasks.graph(), tasks.trace()):
        assert figure.axes and figure.axes[0].get_title()
    tasks.reset()
    assert tasks.history() == [] and tasks.stats().tasks == 0


# ---------------------------------------------------------------------------- errors

def test_direction_for_a_missing_parameter_fails_at_decoration():
    with pytest.raises(UserError, match="'x' is not a parameter of f1"):
        @task(x=IN)
        def f1(i):
            return i * 2


def test_unknown_direction_fails_at_decoration():
    with pytest.raises(UserError, match="parameter 'c' has direction 'INOUT'"):
        @task(c="INOUT")
        def f(c):
            pass


def test_task_exception_is_raised_by_wait_on_with_type_and_remote_traceback(fresh):
    @task(returns=1)
    def fails(x):
        raise KeyError(f"no entry {x}")

    @task(returns=1)
    def after(v):
        return v

    with pytest.raises(KeyError, match="no entry 7") as info:
        compss_wait_on(after(fails(7)))  # the failure travels through the dependent task
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "fails#0" in notes and "Traceback" in notes and "raise KeyError" in notes
    assert [r["ok"] for r in tasks.history()] == [False, False]


def test_argument_that_cannot_be_sent_names_the_argument(fresh):
    @task(returns=1)
    def use(data, lock):
        return 1

    with pytest.raises(UserError, match="argument 'lock'.*cannot be sent to an engine"):
        use([1, 2], threading.Lock())


def test_inout_on_an_immutable_value_is_a_user_error(fresh):
    @task(c=INOUT)
    def inc(c):
        c += 1

    with pytest.raises(UserError, match="'c' is INOUT but its value is a int"):
        inc(3)


def test_bad_call_is_a_user_error(fresh):
    @task(returns=1)
    def one(a):
        return a

    with pytest.raises(UserError, match="task one: missing a required argument"):
        one()
