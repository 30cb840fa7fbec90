"""course.tasks on real ipyparallel engines: PyCOMPSs programs run after an import swap, data semantics, errors."""

from __future__ import annotations

import io
import os
import re
import socket
import subprocess
import sys
import threading
import time
from contextlib import redirect_stdout

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from course import UserError, cluster  # noqa: E402
from course import tasks  # noqa: E402
from course.tasks import (
    COLLECTION_IN,
    COLLECTION_INOUT,
    COMMUTATIVE,
    FILE_IN,
    FILE_INOUT,
    FILE_OUT,
    IN,  # noqa: E402
    INOUT,
    OUT,
    compss_barrier,
    compss_delete_object,
    compss_open,
    compss_wait_on,
    constraint,
    runtime,
    task,
    worker,
)
from tests.conftest import PROGRAMS  # noqa: E402

pytestmark = pytest.mark.slow
SEEDS = PROGRAMS / "pycompss"


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """Two engines in an IPython profile of this module's own: no other cluster's stop (`stop --all`, a job's clean-up
    under the same user) reaches them."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("IPYTHONDIR", str(tmp_path_factory.mktemp("ipython")))
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
        source = "\n".join(
            line
            for line in source.splitlines()
            if not line.lstrip().startswith(("@task", "from pycompss", "@constraint"))
        )
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


def test_synchronised_tells_a_stale_object_from_the_value_compss_wait_on_returned_and_waits_counts(fresh):
    @task(c=INOUT)
    def add_one(c):
        c += 1

    block, untouched = np.zeros(2), np.zeros(2)
    add_one(block)
    assert not tasks.synchronised(block) and not tasks.synchronised([[untouched, block]])
    compss_wait_on(block)  # the result discarded: the notebook's block is still the old one
    assert not tasks.synchronised(block) and block.tolist() == [0.0, 0.0]
    fetched = compss_wait_on(block)
    assert tasks.synchronised(fetched) and fetched.tolist() == [1.0, 1.0]
    assert tasks.synchronised({"a": untouched, "b": [1, "x"]})

    @task(returns=1)
    def two():
        return 2

    future = two()
    assert not tasks.synchronised(future) and not tasks.synchronised((1, future))
    assert tasks.synchronised(compss_wait_on(future))
    assert tasks.waits() == 3  # the program's compss_wait_on calls since reset()
    tasks.reset()
    assert tasks.waits() == 0


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
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(runs, runs[1:])), (
        f"commutative updates overlapped: {runs}"
    )


def test_independent_tasks_overlap_on_different_engines(fresh):
    @task(returns=1)
    def nap(i):
        import time

        time.sleep(1.0)
        return i

    results = [nap(i) for i in range(4)]
    assert compss_wait_on(results) == [0, 1, 2, 3]
    records = tasks.history()
    overlapping = [
        (a["engine"], b["engine"])
        for a in records
        for b in records
        if a["number"] < b["number"] and a["engine"] != b["engine"] and a["start"] < b["end"] and b["start"] < a["end"]
    ]
    assert overlapping, f"no two tasks ran at the same time on different engines: {records}"
    assert tasks.stats().engines == 2


def test_chains_of_updates_spread_over_the_engines_and_each_stays_on_one(fresh):
    """Blocks made by one task all live on one engine; their chains of INOUT updates (a blocked multiply's
    k-loops) must not all follow them there, but each chain, once placed, keeps its block where it is."""

    @task(returns=4)
    def make():
        import numpy as np

        return tuple(np.zeros(3) for _ in range(4))

    @task(c=INOUT)
    def add(c, k):
        import time

        time.sleep(0.3)  # both engines are free when the first updates are placed
        c += k

    blocks = make()
    for k in range(3):
        for block in blocks:
            add(block, k)
    assert [b.tolist() for b in compss_wait_on(list(blocks))] == [[3.0] * 3] * 4
    records = tasks.history()
    chains = [[r for r in records[1:] if r["number"] % 4 == i % 4] for i in range(1, 5)]
    assert all(len(chain) == 3 for chain in chains), records
    assert len({chain[0]["engine"] for chain in chains}) == 2, (
        f"every chain of updates ran where its block was made (engine {records[0]['engine']}): {records}"
    )
    assert all(len({r["engine"] for r in chain}) == 1 for chain in chains), f"a chain changed engine: {records}"


def test_a_task_runs_where_its_input_lives_and_a_k_loop_stays_on_one_engine(fresh):
    """Locality: with the engines equally busy, a task goes to the engine that holds its input (nothing moves);
    each block of C of a blocked multiply has its whole k-loop on one engine, and both engines work."""

    @task(returns=1)
    def make(seed):
        import numpy as np

        return np.random.default_rng(seed).random((8, 8))

    @task(returns=1)
    def norm(block):
        import numpy as np

        return float(np.linalg.norm(block))

    @task(c=INOUT)
    def multiply(a, b, c):
        c += a @ b

    blocks = []
    for i in range(4):  # each made before the next is placed: the engines share them all the same
        blocks.append(make(i))
        compss_barrier()
    made = {r["number"]: r["engine"] for r in tasks.history()}
    assert len(set(made.values())) == 2, f"the blocks were all made on one engine: {made}"
    for i in (0, 0, 1, 1, 2, 3, 3, 2):  # one at a time (both engines free, one holds the block), not in turn
        compss_wait_on(norm(blocks[i]))
        record = tasks.history()[-1]
        assert record["engine"] == made[i] and record["fetched"] == 0, f"norm of block {i} ran away from it: {record}"

    tasks.reset()
    n = 2
    A = [[make(10 * i + k) for k in range(n)] for i in range(n)]
    B = [[make(100 + 10 * k + j) for j in range(n)] for k in range(n)]
    C = [[np.zeros((8, 8)) for _ in range(n)] for _ in range(n)]
    for i in range(n):
        for j in range(n):
            for k in range(n):
                multiply(A[i][k], B[k][j], C[i][j])
    a, b, c = np.block(compss_wait_on(A)), np.block(compss_wait_on(B)), np.block(compss_wait_on(C))
    assert np.allclose(c, a @ b)
    loops = [[r for r in tasks.history() if r["name"] == "multiply"][n * q : n * (q + 1)] for q in range(n * n)]
    assert all(len({r["engine"] for r in loop}) == 1 for loop in loops), f"a k-loop changed engine: {loops}"
    assert len({loop[0]["engine"] for loop in loops}) == 2, f"every k-loop ran on one engine: {loops}"


def test_tasks_go_to_busy_engines_in_batches_and_run_without_a_wait(fresh, tmp_path):
    """Batched submission: tasks placed on a busy engine wait in the master's outbox and go together, in far
    fewer messages than tasks, yet all run while the program does something else (no compss_* call), and
    each keeps its own times in the trace."""

    @task(returns=0)
    def touch(path):
        import pathlib
        import time

        time.sleep(0.02)
        pathlib.Path(path).write_text("x")

    paths = [tmp_path / f"{i}.txt" for i in range(40)]
    for path in paths:
        touch(str(path))
    deadline = time.time() + 120
    while not all(path.exists() for path in paths) and time.time() < deadline:
        time.sleep(0.05)  # the program is busy elsewhere: nothing waits for the tasks
    assert all(path.exists() for path in paths), "tasks left in the outbox were never sent"
    messages = {id(t.ar) for t in runtime.current().tasks}
    assert len(messages) <= 20, f"40 tasks went in {len(messages)} messages"
    records = tasks.history()
    assert all(r["ok"] for r in records) and len({(r["engine"], r["start"]) for r in records}) == 40


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


def test_out_parameter_is_filled_by_the_task(fresh):
    @task(result=OUT)
    def fill(result, n):
        result.extend(range(n))

    @task(block=OUT)
    def fill_block(block, value):
        block[:] = value

    @task(returns=1)
    def total(values):
        return sum(values)

    out = []
    fill(out, 4)
    s = total(out)  # a later task reads the version the OUT task wrote
    block = np.zeros(3)
    fill_block(block, 7.0)
    assert compss_wait_on(out) == [0, 1, 2, 3]
    assert compss_wait_on(s) == 6
    assert compss_wait_on(block).tolist() == [7.0, 7.0, 7.0]
    assert tasks.history()[1]["parents"] == [(0, "IN")]
    assert out == [] and block.tolist() == [0.0, 0.0, 0.0], (
        "the notebook's own objects are not changed behind its back (as in PyCOMPSs)"
    )


def test_file_inout_appends_in_the_order_of_the_calls(fresh, tmp_path):
    @task(path=FILE_INOUT)
    def append(path, text, delay):
        import time

        time.sleep(delay)
        with open(path, "a") as f:
            f.write(text + "\n")

    log = tmp_path / "log.txt"
    log.write_text("start\n")
    append(str(log), "first", 1.0)  # slow: without the dependency the second append would overtake it
    append(str(log), "second", 0.0)
    with compss_open(str(log)) as f:
        assert f.read() == "start\nfirst\nsecond\n"
    assert tasks.history()[1]["parents"] == [(0, "FILE_INOUT")]


def test_barrier_alone_waits_for_every_task(fresh, tmp_path):
    @task(path=FILE_OUT)
    def slow_write(path, i):
        import time

        time.sleep(1.0)
        with open(path, "w") as f:
            f.write(str(i))

    paths = [tmp_path / f"part{i}.txt" for i in range(4)]
    for i, path in enumerate(paths):
        slow_write(str(path), i)
    assert not all(p.exists() for p in paths), "the tasks should still be running when the barrier is called"
    assert compss_barrier() is None
    assert [p.read_text() if p.exists() else None for p in paths] == ["0", "1", "2", "3"]
    assert all(r["ok"] for r in tasks.history(wait=False))


def test_first_task_without_a_cluster_starts_one_and_says_so(tmp_path, monkeypatch, capsys):
    """As in a fresh kernel: no cluster yet, so the first task call starts a local one and announces it."""
    monkeypatch.setattr(
        cluster.lifecycle, "_current", None
    )  # the module's cluster (if started) is set aside, not stopped
    monkeypatch.setattr(runtime, "_RUNTIME", None)
    monkeypatch.setattr(worker, "STATE", dict(worker.STATE))  # the new runtime's auth key and peers stay apart
    monkeypatch.setattr(worker, "_CONNECTIONS", {})
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))  # its files live apart from anyone else's
    monkeypatch.setenv("COURSE_CLUSTER_ID", "test-tasks-autostart")

    @task(returns=1)
    def double(x):
        return 2 * x

    try:
        first = double(21)
        announced = capsys.readouterr().out
        assert compss_wait_on(first) == 42
        assert compss_wait_on(double(1)) == 2
        again = capsys.readouterr().out
        started = cluster.current()
        n = cluster.default_engines()
        assert f"No cluster running in this session: starting {n} local engines." in announced
        assert re.search(rf"Started cluster course-test-tasks-autostart: {n} local engine\(s\)", announced), announced
        assert "No cluster running" not in again and "Started cluster" not in again, "one cluster, started once"
        assert started is not None and started.cluster_id == "course-test-tasks-autostart"
        assert started.status().alive == n
        assert runtime.current(start=False).cluster is started
    finally:
        if cluster.current() is not None and cluster.current().cluster_id == "course-test-tasks-autostart":
            cluster.current().stop()
        for conn in worker._CONNECTIONS.values():
            conn.close()


def test_waits_end_when_the_cluster_is_stopped_under_them(tmp_path, monkeypatch):
    """A cluster stopped in this process while its tasks run or wait in the outbox: no answer will ever come, so a
    barrier (and reset(), which waits for the old graph's tasks) ends with the reason instead of waiting for ever."""
    monkeypatch.setattr(cluster.lifecycle, "_current", None)  # the module's cluster is set aside, not stopped
    monkeypatch.setattr(runtime, "_RUNTIME", None)
    monkeypatch.setattr(worker, "STATE", dict(worker.STATE))
    monkeypatch.setattr(worker, "_CONNECTIONS", {})
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    c = cluster.start(2, cluster_id="course-test-tasks-stopped", threads=1, quiet=True, persist=False)
    try:

        @task(returns=1)
        def slow(x):
            import time

            time.sleep(600)
            return x

        pending = [slow(i) for i in range(20)]  # the first two calls per engine are sent, the rest wait in outboxes
        graph = runtime.current(start=False)
        assert any(graph.outbox.values()), "some tasks must still wait in the master's outbox"
        assert graph.tasks[0].target is not None
        c.stop()
        with pytest.raises(runtime.TaskError, match="did not finish: its cluster was stopped"):
            graph.barrier()
        assert all(t.done() for t in graph.tasks), "every task of the stopped cluster's graph is over"
        assert len(pending) == len(graph.tasks)
    finally:
        c.stop()
        for conn in worker._CONNECTIONS.values():
            conn.close()


def test_a_closed_data_connection_says_what_its_server_recorded(monkeypatch):
    """A request whose connection a data server ended says why, as the server recorded it (asked on a new
    connection): a full run failed once on a bare "the peer closed the connection", with no cause to go on."""
    monkeypatch.setattr(worker, "STATE", dict(worker.STATE, address=None, authkey=None))
    monkeypatch.setattr(worker, "_CONNECTIONS", {})
    address = worker.setup(0, socket.gethostname(), os.urandom(16))["address"]  # a data server in this process
    assert worker.request(address, "ping") == "pong"
    with pytest.raises(EOFError, match="the peer closed the connection") as closed:
        worker.request(address, "no-such-request")
    notes = "\n".join(getattr(closed.value, "__notes__", []))
    assert "it recorded: ValueError: unknown request 'no-such-request'" in notes, notes
    assert worker.request(address, "ping") == "pong", "the next request connects anew"


_SERVER = """
import sys
from multiprocessing.connection import Listener
from course.tasks import worker
listener = Listener(("127.0.0.1", int(sys.argv[1])), authkey=bytes.fromhex(sys.argv[2]))
print(listener.address[1], flush=True)
worker._serve(listener)
"""


def _data_server(port: int, authkey: bytes) -> tuple[subprocess.Popen, tuple]:
    """A data server in its own process (an engine's, without the engine), listening on `port` (0: any)."""
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER, str(port), authkey.hex()], stdout=subprocess.PIPE, text=True
    )
    return server, ("127.0.0.1", int(server.stdout.readline()))  # the port, printed once it listens


def test_a_new_task_graph_never_talks_to_an_earlier_graphs_server(monkeypatch):
    """An engine that stopped frees its data server's port, and the next cluster's server may listen on the same
    one: a full run failed there, twice, with "the peer closed the connection" (the request went down the
    connection kept for the server that had stopped). A new graph's key closes what was kept for the last one."""
    monkeypatch.setattr(worker, "STATE", dict(worker.STATE, address=None, authkey=None))
    monkeypatch.setattr(worker, "_CONNECTIONS", {})
    first_key, second_key = os.urandom(16), os.urandom(16)
    first, address = _data_server(0, first_key)
    try:
        worker.use_key(first_key)
        assert worker.request(address, "ping") == "pong"  # the connection is kept for the next request
    finally:
        first.kill()
        first.wait()
    second, same = _data_server(address[1], second_key)
    try:
        assert same == address
        worker.use_key(second_key)  # what a new Runtime (and an engine's setup) does
        assert worker.request(address, "ping") == "pong"
    finally:
        second.kill()
        second.wait()


def test_results_move_between_engines_not_through_the_notebook(fresh, monkeypatch):
    @task(returns=1)
    def produce(n):
        import numpy as np

        return np.arange(n)

    @task(returns=1)
    def consume(x):
        import time

        time.sleep(0.3)  # keeps both engines busy, so some consumers run away from the producer
        return int(x.sum())

    rt = runtime.current()
    seen = []  # every value the notebook sends to, or fetches from, an engine
    get, put = rt._get, rt._put
    monkeypatch.setattr(rt, "_get", lambda engine, key: seen.append(("get", key)) or get(engine, key))
    monkeypatch.setattr(rt, "_put", lambda engine, key, value: seen.append(("put", key)) or put(engine, key, value))
    data = produce(1000)
    sums = [consume(data) for _ in range(4)]
    records = tasks.history()  # waits for every task; fetches no value
    assert all(op == "put" and key.startswith("fn:") for op, key in seen), (
        f"only the task functions may go through the notebook before compss_wait_on: {seen}"
    )
    home = records[0]["engine"]
    consumers = records[1:]
    assert all(r["parents"] == [(0, "IN")] for r in consumers)
    away = sorted((r for r in consumers if r["engine"] != home), key=lambda r: r["start"])
    assert away, f"every consumer ran on the producer's engine {home}: {records}"
    assert [r["fetched"] for r in consumers if r["engine"] == home] == [0] * (len(consumers) - len(away)), (
        "a consumer on the producer's engine finds the result there"
    )
    assert [r["fetched"] for r in away] == [1] + [0] * (len(away) - 1), (
        f"the first consumer on engine {away[0]['engine']} fetches the result from its peer once, later ones reuse it"
    )
    assert compss_wait_on(sums) == [499500] * 4


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


# ---------------------------------------------------------------------------- versions and failures


def test_a_file_reader_keeps_its_version_and_the_graph_says_which(fresh, tmp_path):
    @task(path=FILE_IN, returns=1)
    def slow_read(path):
        import time

        time.sleep(1.0)
        with open(path) as f:
            return f.read()

    @task(path=FILE_INOUT)
    def append(path, text):
        with open(path, "a") as f:
            f.write(text)

    log = tmp_path / "log.txt"
    log.write_text("a")
    seen = slow_read(str(log))
    append(str(log), "b")
    append(str(log), "c")
    assert compss_wait_on(seen) == "a"
    compss_barrier()
    assert log.read_text() == "abc"
    files = [r["files"] for r in tasks.history()]
    assert files == [
        [("log.txt", 0, "reads")],
        [("log.txt", 0, "reads"), ("log.txt", 1, "writes")],
        [("log.txt", 1, "reads"), ("log.txt", 2, "writes")],
    ]
    labels = [t.get_text() for t in tasks.graph().axes[0].texts]
    assert "r log.txt v1\nw log.txt v2" in labels, f"the graph shows which version each task read and wrote: {labels}"


def test_barrier_raises_a_failure_that_stops_the_application_and_warns_about_others(fresh, capsys):
    @task(returns=1, on_failure="CANCEL_SUCCESSORS")
    def shaky(x):
        raise ValueError("shaky")

    @task(returns=1)
    def after(v):
        return v

    @task(returns=0, on_failure="FAIL")
    def broken():
        raise OSError("disk on fire")

    cancelled = after(shaky(1))
    compss_barrier()  # CANCEL_SUCCESSORS: the program goes on
    assert "shaky#0 failed with ValueError: shaky; its successors are cancelled" in capsys.readouterr().err
    records = tasks.history()
    assert [r["cancelled"] for r in records] == [False, True] and not records[1]["ok"]
    with pytest.raises(ValueError, match="shaky"):
        compss_wait_on(cancelled)
    broken()
    with pytest.raises(OSError, match="disk on fire"):
        compss_barrier()
    compss_barrier()  # reported once


def test_bad_on_failure_is_a_user_error():
    with pytest.raises(UserError, match="on_failure='SKIP'; use one of RETRY, CANCEL_SUCCESSORS, FAIL, IGNORE"):

        @task(on_failure="SKIP")
        def f(x):
            return x
