"""course.comm: the hand-written collectives equal MPI's on 2 and 4 real MPI ranks; the cost model's arithmetic."""

import os
import re
import subprocess
import sys
import time

from pathlib import Path

import numpy as np
import pytest
from sklearn.cluster import KMeans

from course import UserError, answers, comm, mpi, shortcuts
from tests.conftest import PROGRAMS, started_with
from tests.programs import comm_check


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [2, 4])
def test_ring_and_parameter_server_equal_mpi_allreduce(ranks, tmp_path):
    centroids_file = tmp_path / "centroids.npy"
    result = subprocess.run(
        mpi.command(ranks, sys.executable, str(PROGRAMS / "comm_check.py"), str(centroids_file)),
        capture_output=True,
        text=True,
        timeout=300,
        env=mpi.env(),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    ok = re.findall(r"RANK (\d+) OK (\d+)", result.stdout)
    assert sorted(int(r) for r, _ in ok) == list(range(ranks))
    assert {int(n) for _, n in ok} == {comm_check.OK_COUNT}  # every comparison ran: the counts are the program's
    also = re.findall(r"RANK (\d+) ALSO (\d+)", result.stdout)
    assert sorted(int(r) for r, _ in also) == list(range(ranks))
    assert {int(n) for _, n in also} == {comm_check.ALSO_COUNT}

    # Distributed K-Means matches scikit-learn's single-process Lloyd from the same initial centroids.
    points = np.random.default_rng(7).standard_normal((300, 2)) + np.repeat(np.eye(2) * 4, 150, axis=0)
    reference = KMeans(n_clusters=3, init=points[:3], n_init=1, max_iter=20, tol=0, algorithm="lloyd").fit(points)
    np.testing.assert_allclose(np.load(centroids_file), reference.cluster_centers_, rtol=1e-9, atol=1e-9)


def test_every_reference_answer_is_compared_with_mpi_or_is_part_of_one_that_is():
    """A reference answer added to course.answers is tested without a list to add it to (comm_check finds the
    all-reduces); one of another kind fails here until comm_check compares it (OTHERS)."""
    compared = set(comm_check.COUNTED) | set(comm_check.OTHERS)
    assert {"ring_allreduce", "parameter_server_allreduce"} <= compared
    called = {name for f in answers.ALL if f.__name__ in compared for name in shortcuts.names_used(f)}
    untested = [f.__name__ for f in answers.ALL if f.__name__ not in compared | called]
    assert not untested, (
        f"course.answers.{untested[0]} is compared with nothing: name it ..._allreduce if it is one, or compare it "
        "in tests/programs/comm_check.py and add it to OTHERS"
    )
    source = (PROGRAMS / "comm_check.py").read_text()
    assert all(f"answers.{name}(" in source for name in comm_check.OTHERS), "OTHERS names what comm_check calls"


class OneRank:
    """The one-process communicator's interface, for the single-rank shortcut."""

    def Get_size(self):
        return 1

    def Get_rank(self):
        return 0


def test_single_rank_allreduce_is_a_copy():
    data = np.arange(5.0)
    out = answers.ring_allreduce(OneRank(), data)
    assert out.tolist() == data.tolist() and out is not data


def test_unknown_reduction_is_a_user_error():
    with pytest.raises(UserError, match="sum, max, min"):
        answers.ring_allreduce(type("Two", (OneRank,), {"Get_size": lambda self: 2})(), np.ones(3), op="mean")


def test_alpha_beta_model():
    # Ring: 2(p-1) steps of n/p bytes; parameter server: 2(p-1) full messages through one link.
    assert comm.alpha_beta_ring(8e6, 4, alpha=1e-5, beta=1e-9) == pytest.approx(6 * (1e-5 + 2e6 * 1e-9))
    assert comm.alpha_beta_parameter_server(8e6, 4, alpha=1e-5, beta=1e-9) == pytest.approx(6 * (1e-5 + 8e6 * 1e-9))
    assert comm.alpha_beta_ring(8e6, 1, 1e-5, 1e-9) == 0.0
    # Ring time stays bounded as ranks grow, the parameter server's grows linearly.
    assert comm.alpha_beta_ring(8e6, 64, 0, 1e-9) < 2 * 8e6 * 1e-9 < comm.alpha_beta_parameter_server(8e6, 64, 0, 1e-9)


def test_fit_alpha_beta_recovers_a_line():
    sizes = np.array([1e3, 1e4, 1e5, 1e6, 1e7])
    alpha, beta = comm.fit_alpha_beta(sizes, 2e-6 + sizes * 5e-10)
    assert alpha == pytest.approx(2e-6, rel=1e-3) and beta == pytest.approx(5e-10, rel=1e-6)


def test_fit_alpha_beta_keeps_the_latency_under_noise():
    # Timings from 16 B to 4 MB with 5% multiplicative noise: the latency must survive the large messages' noise.
    sizes = 2.0 ** np.arange(4, 23, 2)
    noise = 1 + 0.05 * np.random.default_rng(0).standard_normal(len(sizes))
    alpha, beta = comm.fit_alpha_beta(sizes, (2e-6 + sizes * 5e-10) * noise)
    assert alpha == pytest.approx(2e-6, rel=0.2)
    assert beta == pytest.approx(5e-10, rel=0.2)


@pytest.mark.slow
def test_on_ranks_runs_a_notebook_function_on_three_ranks_and_names_a_failing_or_hanging_rank(monkeypatch):
    from course import rank_pool

    monkeypatch.setattr(rank_pool, "KEEP", False)  # a fresh mpiexec job per call, as in a learner's kernel

    def rank_and_sum(offset):
        from mpi4py import MPI

        world = MPI.COMM_WORLD
        return world.Get_rank(), world.allreduce(world.Get_rank() + offset)

    assert comm.on_ranks(rank_and_sum, 3, 10) == [(0, 33), (1, 33), (2, 33)]

    def fails_on_rank_two():
        from mpi4py import MPI

        if MPI.COMM_WORLD.Get_rank() == 2:
            raise ValueError("chunk index out of range")
        MPI.COMM_WORLD.Barrier()

    with pytest.raises(AssertionError, match=r"^on 3 ranks, rank 2 raised ValueError: chunk index out of range$"):
        comm.on_ranks(fails_on_rank_two, 3)

    def killed_on_rank_one():
        import os
        import signal

        from mpi4py import MPI

        if MPI.COMM_WORLD.Get_rank() == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        MPI.COMM_WORLD.Barrier()

    # No rank returns: the message is Open MPI's own account of the job (mpiexec's, which it always prints)
    with pytest.raises(
        AssertionError,
        match=r"^the job on 3 ranks ended before every rank returned: .*process rank 1 .* exited on signal 9",
    ):
        comm.on_ranks(killed_on_rank_one, 3)

    def waits_for_a_message_never_sent():
        import numpy as np
        from mpi4py import MPI

        if MPI.COMM_WORLD.Get_rank() == 0:
            MPI.COMM_WORLD.Recv(np.empty(1), source=1)

    with pytest.raises(AssertionError, match="did not finish within 5 s on 3 ranks"):
        comm.on_ranks(waits_for_a_message_never_sent, 3, timeout=5)


def test_a_ranks_function_is_timed_from_when_every_rank_started_it_not_from_the_launch(tmp_path, monkeypatch):
    """A busy machine slows mpiexec's start, not the learner's function: the time limit counts from the moment every
    rank has started the function (its `started` file), so a slow start is not taken for a hang, and a job whose
    ranks never start is told apart. Real processes stand for the job: a shell that starts late, or never."""
    import subprocess

    started = [tmp_path / "r.0.started", tmp_path / "r.1.started"]
    marks = " ".join(str(p) for p in started)
    late = subprocess.Popen(["sh", "-c", f"sleep 3; touch {marks}"])
    assert (
        comm._wait_for_ranks(late, tmp_path / "r", 2, timeout=1) is None
    )  # 3 s to start, then done at once: not a hang
    for path in started:
        path.unlink()
    hanging = subprocess.Popen(["sh", "-c", f"touch {marks}; exec sleep 600"])
    try:
        assert comm._wait_for_ranks(hanging, tmp_path / "r", 2, timeout=1) == "hung"
    finally:
        hanging.kill()
        hanging.wait()
    monkeypatch.setattr(comm, "START_TIMEOUT", 1)
    never = subprocess.Popen(["sleep", "600"])
    try:
        assert comm._wait_for_ranks(never, tmp_path / "never", 1, timeout=600) == "not started"
    finally:
        never.kill()
        never.wait()


def test_counting_comm_counts_collectives_and_passes_them_to_mpi():
    def two_allreduces_and_a_rank():
        import numpy as np
        from mpi4py import MPI
        from course.comm import CountingComm

        counted = CountingComm(MPI.COMM_WORLD)
        total = np.empty(2)
        counted.Allreduce(np.array([1.0, counted.Get_rank()]), total, op=MPI.SUM)
        count = counted.allreduce(1)
        return counted.calls, total.tolist(), count

    assert comm.on_ranks(two_allreduces_and_a_rank, 2) == [(2, [2.0, 1.0], 2)] * 2


def test_counting_comm_counts_messages_bytes_and_collectives_per_rank():
    """The traffic a check compares with what an exchange needs: a halo of one value per neighbour (buffer and
    object forms, PROC_NULL left out), against an all-gather of everything."""

    def halo_then_gather():
        import numpy as np
        from mpi4py import MPI

        from course.comm import CountingComm

        world = MPI.COMM_WORLD
        rank, size = world.Get_rank(), world.Get_size()
        counted = CountingComm(world)
        right = rank + 1 if rank < size - 1 else MPI.PROC_NULL
        left = rank - 1 if rank > 0 else MPI.PROC_NULL
        got = np.zeros(1)
        counted.Sendrecv(np.ones(1), dest=right, recvbuf=got, source=left)
        counted.sendrecv(float(rank), dest=left, source=right)
        halo = counted.traffic()
        counted.allgather(np.arange(10.0))
        return halo, counted.traffic()

    (first, first_all), (last, last_all) = comm.on_ranks(halo_then_gather, 2)
    assert first == {"collectives": [], "collective_bytes": 0, "messages": 1, "bytes": 8, "destinations": [1]}
    assert last == {"collectives": [], "collective_bytes": 0, "messages": 1, "bytes": 8, "destinations": [0]}
    assert first_all["collectives"] == ["allgather"] and first_all["collective_bytes"] == 80
    assert comm.payload_bytes([np.zeros(3, dtype=np.float32), "MPI.FLOAT"], buffer=True) == 12
    assert comm.payload_bytes([1.0, 2.0], buffer=False) == 16


def test_ring_bytes_of_each_collective():
    """What a rank puts on the wire when each collective runs as a ring: an all-reduce is a reduce-scatter and an
    all-gather, so the two halves add up to it."""
    n = 1200
    assert comm.ring_collective_bytes("Allreduce", n, 4) == 1800
    assert (
        comm.ring_collective_bytes("Reduce_scatter", n, 4) + comm.ring_collective_bytes("Allgatherv", n // 4, 4) == 1800
    )
    assert comm.ring_collective_bytes("Iallreduce", n, 2) == comm.ring_collective_bytes("allreduce", n, 2) == n
    assert comm.ring_collective_bytes("Bcast", n, 4) == n
    assert comm.ring_collective_bytes("Allreduce", n, 1) == 0


@pytest.mark.slow
def test_counting_comm_ring_bytes_and_in_place_collectives():
    """Per collective, the bytes a rank gave it, MPI.IN_PLACE read from the receive buffer; ring_bytes adds them
    up as rings, with the point-to-point messages."""

    def collectives():
        import numpy as np
        from mpi4py import MPI

        from course.comm import CountingComm

        counted = CountingComm(MPI.COMM_WORLD)
        x = np.ones(100)
        counted.Allreduce(MPI.IN_PLACE, x, op=MPI.SUM)
        part = np.empty(50)
        counted.Reduce_scatter(np.ones(100), part, recvcounts=[50, 50], op=MPI.SUM)
        counted.Allgatherv(part, [np.empty(100), [50, 50]])
        counted.Allgather(MPI.IN_PLACE, np.ones(100))
        return counted.given, counted.ring_bytes()

    for given, wire in comm.on_ranks(collectives, 2):
        assert given == [("Allreduce", 800), ("Reduce_scatter", 800), ("Allgatherv", 400), ("Allgather", 400)]
        assert wire == 800 + 400 + 400 + 400


@pytest.fixture
def kept_ranks(monkeypatch):
    """on_ranks with its ranks kept between calls (course.rank_pool), every pool ended after the test."""
    from course import rank_pool

    monkeypatch.setattr(rank_pool, "KEEP", True)
    yield rank_pool
    rank_pool.close_all()


def _pid_and_rank(*ranks: int) -> list:
    """(pid, rank, size) of every rank of a job of `ranks` ranks (the function defined here travels by value)."""

    def pid_and_rank():
        import os

        from mpi4py import MPI

        return os.getpid(), MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()

    return comm.on_ranks(pid_and_rank, *ranks)


@pytest.mark.slow
def test_kept_ranks_run_each_call_on_the_same_processes_and_answer_as_a_fresh_job(kept_ranks):
    first = _pid_and_rank(3)
    assert [(rank, size) for _, rank, size in first] == [(0, 3), (1, 3), (2, 3)]
    assert _pid_and_rank(3) == first  # the same three processes
    assert [size for *_, size in _pid_and_rank(2)] == [2, 2]  # another count: ranks of its own
    assert _pid_and_rank(3) == first

    def rank_and_sum(offset):
        from mpi4py import MPI

        world = MPI.COMM_WORLD
        return world.Get_rank(), world.allreduce(world.Get_rank() + offset)

    assert comm.on_ranks(rank_and_sum, 3, 10) == [(0, 33), (1, 33), (2, 33)]


@pytest.mark.slow
def test_kept_ranks_that_wait_for_a_job_leave_the_cores_to_others(kept_ranks):
    """Pools stay up through everything a process does after its checks: waiting, eight ranks use under 3% of one
    core together (looking for the next job every 5 ms, as right after a job, they used about 12%)."""
    import psutil

    ranks = [psutil.Process(pid) for pid, *_ in _pid_and_rank(8)]
    time.sleep(kept_ranks.IDLE_POLL * 20)  # how long until a waiting rank looks only every IDLE_POLL s
    before, start = sum(sum(r.cpu_times()[:2]) for r in ranks), time.monotonic()
    time.sleep(5)
    used = (sum(sum(r.cpu_times()[:2]) for r in ranks) - before) / (time.monotonic() - start)
    assert used < 0.03, f"eight waiting ranks kept {used:.0%} of a core busy"
    assert [pid for pid, *_ in _pid_and_rank(8)] == [r.pid for r in ranks]  # and they still take jobs


@pytest.mark.slow
def test_a_message_one_call_left_unreceived_never_reaches_the_next(kept_ranks):
    """Each call gets a communicator of its own: rank 1 of the second call receives what rank 0 sends in that call,
    not the message a wrong answer sent in the first and nobody received (on one shared COMM_WORLD it would)."""

    def leaves_a_message():
        from mpi4py import MPI

        if MPI.COMM_WORLD.Get_rank() == 0:
            MPI.COMM_WORLD.send("left over", dest=1, tag=7)  # small: sent at once, and never received

    def receives_any():
        from mpi4py import MPI

        world = MPI.COMM_WORLD
        if world.Get_rank() == 0:
            world.send("this call's", dest=1, tag=3)
            return None
        return world.recv(source=0, tag=MPI.ANY_TAG)

    before = _pid_and_rank(2)
    comm.on_ranks(leaves_a_message, 2)
    assert comm.on_ranks(receives_any, 2) == [None, "this call's"]
    assert _pid_and_rank(2) == before  # still the same ranks: nothing was restarted


@pytest.mark.slow
def test_kept_ranks_that_hang_or_fail_are_replaced_and_say_so_as_a_fresh_job(kept_ranks):

    def waits_for_a_message_never_sent():
        import numpy as np
        from mpi4py import MPI

        if MPI.COMM_WORLD.Get_rank() == 0:
            MPI.COMM_WORLD.Recv(np.empty(1), source=1)

    def fails_on_rank_two():
        from mpi4py import MPI

        if MPI.COMM_WORLD.Get_rank() == 2:
            raise ValueError("chunk index out of range")
        MPI.COMM_WORLD.Barrier()

    hung = _pid_and_rank(3)
    with pytest.raises(AssertionError, match="did not finish within 2 s on 3 ranks"):
        comm.on_ranks(waits_for_a_message_never_sent, 3, timeout=2)
    assert _ended([pid for pid, *_ in hung]), "the hung job's ranks are still running"
    failed = _pid_and_rank(3)
    assert {pid for pid, *_ in failed}.isdisjoint(pid for pid, *_ in hung)  # new ranks
    with pytest.raises(AssertionError, match=r"^on 3 ranks, rank 2 raised ValueError: chunk index out of range$"):
        comm.on_ranks(fails_on_rank_two, 3)
    assert [rank for _, rank, _ in _pid_and_rank(3)] == [0, 1, 2]
    kept_ranks.close_all()
    assert _ended([pid for pid, *_ in failed]), "ranks still running after close_all"


def _ended(pids: list[int]) -> bool:
    """Whether every process in `pids` has ended (or is a zombie), waiting up to a minute for them to go."""
    import psutil

    from course import processes

    found = []
    for pid in pids:
        try:
            found.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs([p for p in found if processes.running(p)], timeout=60)
    return alive == []


def _first_jobs_rank_1(monkeypatch: pytest.MonkeyPatch, marker: Path, instead: str) -> None:
    """Make rank 1 of the first MPI job (of every job once EVERY_JOB is set) run the shell command INSTEAD of its
    program: `mkdir MARKER` succeeds only once, and the jobs' processes have MARKER in their environment."""
    launch = mpi.command
    then = f'[ "$OMPI_COMM_WORLD_RANK" = 1 ] && {{ [ -n "$EVERY_JOB" ] || mkdir "$MARKER"; }} && {instead}; exec "$@"'

    def command(n: int, *program: str) -> list[str]:
        return launch(n, "sh", "-c", then, "sh", *program) if program else launch(n)

    monkeypatch.setattr(mpi, "command", command)
    monkeypatch.setenv("MARKER", str(marker))


def test_a_job_that_loses_a_rank_before_it_starts_runs_once_more_and_a_repeated_loss_is_reported(tmp_path, monkeypatch):
    """A rank Open MPI loses before the function starts (here: rank 1's process exits as it is launched, before
    Python) costs the call a second job, not its result; a rank lost in every job is reported with Open MPI's words."""
    from course import rank_pool

    monkeypatch.setattr(rank_pool, "KEEP", False)
    lost = tmp_path / "lost"
    _first_jobs_rank_1(monkeypatch, lost, "exit 1")  # rank 1's process exits with status 1, before Python

    def rank_and_size():
        from mpi4py import MPI

        return MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.allreduce(1)

    assert comm.on_ranks(rank_and_size, 3) == [(0, 3), (1, 3), (2, 3)]
    assert lost.is_dir(), "the first job did not lose its rank 1: nothing was tried again"

    monkeypatch.setenv("EVERY_JOB", "1")
    with pytest.raises(AssertionError, match=r"ended before every rank returned: .*non-zero.*\(in two jobs") as ended:
        comm.on_ranks(rank_and_size, 3)
    assert "orte_base_help_aggregate" not in str(ended.value)


def test_a_job_whose_ranks_do_not_all_start_in_time_runs_once_more_and_a_repeated_one_is_reported(
    tmp_path, monkeypatch
):
    """A launch that hangs (here: rank 1 of the first job sleeps instead of starting Python, so the others wait for
    it in MPI_Init) is ended with its ranks after START_TIMEOUT and the call runs in a new job; every job hanging is
    reported, and nothing of either job is left."""
    from course import rank_pool

    monkeypatch.setattr(rank_pool, "KEEP", False)
    monkeypatch.setattr(comm, "START_TIMEOUT", 30)  # a 3-rank job starts in seconds; this one never does
    held = tmp_path / "held"
    _first_jobs_rank_1(monkeypatch, held, "exec sleep 602")  # the other ranks wait for it in MPI_Init

    def rank_and_size():
        from mpi4py import MPI

        return MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.allreduce(1)

    assert comm.on_ranks(rank_and_size, 3) == [(0, 3), (1, 3), (2, 3)]
    assert held.is_dir(), "the first job's rank 1 was not held: nothing was tried again"
    assert not started_with("MARKER", str(held)), "the held job's processes outlived it"

    monkeypatch.setenv("EVERY_JOB", "1")
    with pytest.raises(AssertionError, match=r"did not start within 30 s: .*\(in two jobs, one after the other\)$"):
        comm.on_ranks(rank_and_size, 3)
    assert not started_with("MARKER", str(held)), "the held jobs' processes outlived them"


def test_a_jobs_shared_memory_files_are_its_own_and_gone_after_it_even_when_it_aborts(tmp_path, monkeypatch):
    """Open MPI leaves an aborted job's shared-memory files in /dev/shm under names a later job reuses: here each
    job's ranks keep theirs in a folder of the job's own, and the folder is gone after the job, aborted or not."""
    from course import mpi, rank_pool

    monkeypatch.setattr(rank_pool, "KEEP", False)
    seen = tmp_path / "seen"

    def lists_its_segments_then_aborts(path):
        import os
        from pathlib import Path

        from mpi4py import MPI

        world = MPI.COMM_WORLD
        world.Barrier()  # every rank has set up its shared memory
        if world.Get_rank() == 0:
            folder = os.environ[mpi.SEGMENTS]
            Path(path).write_text("\n".join([folder, *sorted(os.listdir(folder))]))
        world.Barrier()
        if world.Get_rank() == 0:
            world.Abort(3)
        world.Barrier()

    with pytest.raises(AssertionError, match="ended before every rank returned"):
        comm.on_ranks(lists_its_segments_then_aborts, 2, str(seen))
    folder, *files = seen.read_text().splitlines()
    assert sum(name.startswith("vader_segment.") for name in files) == 2, files  # one per rank, in the job's folder
    assert not Path(folder).exists(), f"the aborted job's shared memory is still in {folder}: {os.listdir(folder)}"


# The end of a real job's output where three ranks called MPI_Abort (Open MPI 4.1.4): one boxed message, the count
# of ranks that sent the same, and Open MPI's advice on seeing them all
ABORTED_BY_THREE = """--------------------------------------------------------------------------
MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD
with errorcode 7.

NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.
--------------------------------------------------------------------------
[vm:19032] 2 more processes have sent help message help-mpi-api.txt / mpi-abort
[vm:19032] Set MCA parameter "orte_base_help_aggregate" to 0 to see all help / error messages
"""


def test_what_open_mpi_said_is_its_messages_and_their_count_not_its_advice():
    said = comm.mpi_says(ABORTED_BY_THREE)
    assert said.startswith("MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD with errorcode 7."), said
    assert said.endswith("/ 2 more processes have sent help message help-mpi-api.txt / mpi-abort"), said
    assert "orte_base_help_aggregate" not in said
    assert comm.mpi_says("") == "no output"
    assert comm.mpi_says("rank 1: out of memory\n") == "rank 1: out of memory"
    assert len(comm.mpi_says("-" * 74 + "\n" + "x " * 900 + "\n" + "-" * 74, limit=100)) == 100


def test_a_job_mpiexec_aborted_but_does_not_end_is_ended_after_a_grace(tmp_path, monkeypatch):
    """mpiexec that said it aborted the job (a rank returned non-zero) and still runs (seen on a busy machine, for
    START_TIMEOUT s) is taken for ended after ABORT_GRACE s, not waited for until the start timeout."""
    monkeypatch.setattr(comm, "ABORT_GRACE", 0.5)
    log = tmp_path / "output"
    log.write_text("Primary job terminated normally, but 1 process returned\na non-zero exit code. Per user-direction, "
                   "the job has been aborted.\n")  # fmt: skip
    stuck = subprocess.Popen(["sleep", "60"])
    try:
        started = time.monotonic()
        assert comm._wait_for_ranks(stuck, tmp_path / "job", 3, timeout=60, log=log) == "aborted"
        assert time.monotonic() - started < 30, "waited for the start timeout, not the grace"
        # a rank's MPI_Abort, with every rank started and past the function's timeout: aborted, not hung
        log.write_text(ABORTED_BY_THREE)
        for rank in range(3):
            (tmp_path / f"job.{rank}.started").touch()
        assert comm._wait_for_ranks(stuck, tmp_path / "job", 3, timeout=0.1, log=log) == "aborted"
        log.write_text("")
        for rank in range(3):
            (tmp_path / f"job.{rank}.started").unlink()
        monkeypatch.setattr(comm, "START_TIMEOUT", 1)
        assert comm._wait_for_ranks(stuck, tmp_path / "job", 3, timeout=60, log=log) == "not started"
    finally:
        stuck.kill()
        stuck.wait()
