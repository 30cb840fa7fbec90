"""course.cluster: real local, MPI and Slurm engine clusters start, work, report, survive faults and stop cleanly.

No mocks: ipyparallel, Open MPI and Slurm are the real ones. Stray processes are checked by process id.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest
from ipyparallel import interactive

from course import UserError, cluster, devices, processes
from course.cluster import warden
from tests.conftest import ROOT, run_course
from tests.slurm import dead_controller

KINDS = ["local", "mpi", "slurm"]


@pytest.fixture(autouse=True)
def own_ipython_dir(tmp_path, monkeypatch):
    """Each test's clusters live in their own profile dir, so `stop --all` here never touches anyone else's."""
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.delenv("COURSE_CLUSTER_ID", raising=False)


def needs(kind, request):
    if kind == "slurm":
        request.getfixturevalue("slurm")


def processes_of(c: cluster.Cluster) -> list[psutil.Process]:
    """Engine, controller and launcher (mpiexec) processes of a running cluster, by pid."""
    pids = [e["pid"] for e in c.engines]
    controller = c._ipp.controller
    pids.append(controller.pid)
    engine_set = c._engine_set()
    if c.kind == "mpi":
        pids.append(engine_set.pid)
    procs = [psutil.Process(p) for p in pids]
    for p in list(procs):
        procs += p.children(recursive=True)
    return procs


def off_loopback(pids: set[int]) -> list[tuple[int, str]]:
    """The TCP sockets the processes PIDS listen on at an address other than the loopback (`ss -ltnp`)."""
    lines = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines()
    found = []
    for line in lines:
        local = line.split()[3]
        address = local.rsplit(":", 1)[0].strip("[]")
        if address in ("127.0.0.1", "::1") or address.startswith("127."):
            continue
        found += [(int(pid), local) for pid in re.findall(r"pid=(\d+),", line) if int(pid) in pids]
    return found


def gone(procs: list[psutil.Process]) -> list[psutil.Process]:
    """The processes still running (a zombie counts as ended)."""
    alive = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    return alive


def squeue(job: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True).stdout.strip()


# ------------------------------------------------------------------------------------------- pure logic


def test_gpus_pinned_by_local_rank_one_each():
    engines = [{"id": 0, "host": "n1", "gpus": ["0", "1"]}, {"id": 1, "host": "n1", "gpus": ["0", "1"]}]
    plan = cluster.plan_devices(engines)
    assert [plan[i]["CUDA_VISIBLE_DEVICES"] for i in (0, 1)] == ["0", "1"]
    assert all(plan[i]["TF_FORCE_GPU_ALLOW_GROWTH"] == "true" for i in (0, 1))
    assert "OMP_NUM_THREADS" not in plan[0]


def test_gpu_pinning_uses_the_launchers_local_rank_and_a_scheduler_subset():
    # MPI/Slurm say which local rank each engine is, whatever the engine ids; Slurm gave this job GPUs 2 and 3
    engines = [
        {"id": 0, "host": "a", "gpus": ["2", "3"], "local_rank": 1},
        {"id": 1, "host": "a", "gpus": ["2", "3"], "local_rank": 0},
        {"id": 2, "host": "b", "gpus": ["0", "1"], "local_rank": 0},
        {"id": 3, "host": "b", "gpus": ["0", "1"], "local_rank": 1},
    ]
    plan = cluster.plan_devices(engines)
    assert {i: plan[i]["CUDA_VISIBLE_DEVICES"] for i in plan} == {0: "3", 1: "2", 2: "0", 3: "1"}
    assert {i: plan[i]["COURSE_LOCAL_RANK"] for i in plan} == {0: "1", 1: "0", 2: "0", 3: "1"}


def test_local_rank_is_the_position_on_each_host_when_no_launcher_says():
    engines = [{"id": 5, "host": "b"}, {"id": 1, "host": "a"}, {"id": 3, "host": "b"}, {"id": 2, "host": "a"}]
    assert cluster.local_ranks(engines) == {1: 0, 2: 1, 3: 0, 5: 1}


def test_more_engines_than_gpus_says_so():
    engines = [{"id": i, "host": "n1", "gpus": ["0", "1"]} for i in range(3)]
    with pytest.raises(cluster.ClusterError, match=r"more engines than GPUs: 3 engine\(s\) on n1, which has 2 GPU"):
        cluster.plan_devices(engines)


def test_cpu_only_engines_get_a_thread_limit():
    engines = [{"id": 0, "host": "n1", "gpus": []}, {"id": 1, "host": "n1", "gpus": []}]
    plan = cluster.plan_devices(engines)
    assert all(plan[i]["OMP_NUM_THREADS"] == "1" and plan[i]["TF_NUM_INTRAOP_THREADS"] == "1" for i in (0, 1))
    assert "CUDA_VISIBLE_DEVICES" not in plan[0]
    assert cluster.plan_devices(engines, threads=3)[1]["OMP_NUM_THREADS"] == "3"
    with pytest.raises(cluster.ClusterError, match="threads"):
        cluster.plan_devices(engines, threads=0)


def test_default_engine_count_is_one_per_gpu_else_the_cores(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")  # a GPU node with 3 GPUs for this process
    assert cluster.default_engines("local") == 3 and cluster.default_engines("mpi") == 3
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert cluster.default_engines("local") == 2  # at least 2, even on one core
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert cluster.default_engines("local") == 8


def test_visible_gpus_from_scheduler_or_driver(tmp_path):
    driver = tmp_path / "gpus"
    (driver / "0000:01:00.0").mkdir(parents=True)
    (driver / "0000:02:00.0").mkdir()
    assert devices.visible_gpus({}, proc=str(driver)) == ["0", "1"]
    assert devices.visible_gpus({"CUDA_VISIBLE_DEVICES": "3,5"}, proc=str(driver)) == ["3", "5"]
    assert devices.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, proc=str(driver)) == []
    assert devices.visible_gpus({}, proc=str(tmp_path / "none")) == []


def test_slurm_script_carries_the_options():
    """The engine job asks for GPUs the way course job does (--gres, from course.slurm), with the site's options."""
    script = cluster.slurm_script(
        "course-x",
        4,
        partition="gpu",
        time_limit="0:30:00",
        account="proj",
        gpus_per_node=2,
        tasks_per_node=2,
        qos="long",
        constraint="a100",
        exclusive=True,
        sbatch=["--reservation=ws"],
        srun_mpi="pmix",
    )
    for line in (
        "#SBATCH --partition=gpu",
        "#SBATCH --time=0:30:00",
        "#SBATCH --account=proj",
        "#SBATCH --gres=gpu:2",
        "#SBATCH --ntasks-per-node=2",
        "#SBATCH --ntasks=4",
        "#SBATCH --job-name=ipengine-course-x",
        "#SBATCH --qos=long",
        "#SBATCH --constraint=a100",
        "#SBATCH --exclusive",
        "#SBATCH --reservation=ws",
        "srun --mpi=pmix {program_and_args}",
    ):
        assert line in script.splitlines()


def test_cluster_ids_are_marked_as_the_courses(monkeypatch):
    assert cluster.normalise_id("my run/1") == "course-my-run-1"
    assert cluster.normalise_id("course-a") == "course-a"
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/u/notebooks/00_environment_and_cluster.ipynb")
    assert cluster.default_cluster_id() == "course-00_environment_and_cluster"


def test_bad_arguments_are_user_errors():
    with pytest.raises(UserError, match="unknown engines 'pbs'"):
        cluster.start(2, engines="pbs")
    with pytest.raises(UserError, match="positive whole number"):
        cluster.start(0)
    with pytest.raises(UserError, match="only apply to engines='slurm'"):
        cluster.start(2, partition="gpu")


def test_more_engines_than_gpus_on_this_machine_is_refused_before_starting(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # as a scheduler would give this process one GPU
    with pytest.raises(cluster.ClusterError, match=r"asked for 2 engines, this machine has 1 GPU"):
        cluster.start(2, cluster_id="gpus")
    assert cluster.running_ids() == []


# ------------------------------------------------------------------------------------- real clusters


# functions run on engines: `interactive` ships them by value (engines cannot import this test module)
@interactive
def _rank_size():
    from mpi4py import MPI

    return MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size


@interactive
def _square(x):
    return x * x


@interactive
def _omp_threads():
    import os

    return os.environ["OMP_NUM_THREADS"]


@interactive
def _pid():
    import os

    return os.getpid()


@interactive
def _sleep(seconds):
    import time

    time.sleep(seconds)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_two_engines_start_work_report_and_stop_without_strays(kind, request):
    needs(kind, request)
    c = cluster.start(2, engines=kind, cluster_id=f"t-{kind}")
    try:
        assert cluster.current() is c
        assert sorted(c.client.ids) == [0, 1]
        assert c.view.apply_sync(_square, 7) == [49, 49]
        # every engine was told its device: one thread each on this CPU machine
        assert c.view.apply_sync(_omp_threads) == ["1", "1"]
        status = c.status()
        assert status.ok and status.alive == 2 and status.dead == [], str(status)
        if kind in ("mpi", "slurm"):  # one MPI world across the engines
            ranks = dict(zip(c.view.targets, c.view.apply_sync(_rank_size)))
            assert sorted(ranks.values()) == [(0, 2), (1, 2)]
            if kind == "mpi":
                assert all(engine_id == rank for engine_id, (rank, _) in ranks.items()), ranks
        procs = processes_of(c)
        if kind != "slurm":  # on this machine nothing listens off the loopback, mpiexec included (course.mpi)
            if kind == "mpi":
                assert "mpiexec" in psutil.Process(c._engine_set().pid).name(), "the launcher is not in the list"
            exposed = off_loopback({p.pid for p in procs})
            assert not exposed, f"listening beyond 127.0.0.1 and ::1: {exposed}"
        job = c._engine_set().job_id if kind == "slurm" else ""
    finally:
        c.stop()
    assert gone(procs) == [], f"stray processes after stop: {gone(procs)}"
    assert c.status().stopped and cluster.current() is None
    assert cluster.running_ids() == []
    if job:
        assert squeue(job) == "", f"Slurm job {job} still listed after stop"


@interactive
def _gpu_seen() -> str:
    import os

    return os.environ.get("CUDA_VISIBLE_DEVICES", "")


@pytest.mark.slow
def test_local_engines_inside_a_slurm_job_take_one_gpu_each(monkeypatch):
    # A JupyterLab that runs as a Slurm job (batchspawner, Open OnDemand) has SLURM_LOCALID=0 and the job's GPUs;
    # the local engines it starts inherit both, yet each must take its own GPU (two named GPUs stand in for them:
    # nothing here loads a GPU library, the engines only read the variable they were given).
    monkeypatch.setenv("SLURM_LOCALID", "0")
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with cluster.start(2, cluster_id="t-in-job") as c:
        assert sorted(c.view.apply_sync(_gpu_seen)) == ["0", "1"]
        assert sorted(e["device"] for e in c.engines) == ["GPU 0", "GPU 1"]


@pytest.mark.slow
def test_context_manager_stops():
    with cluster.start(2, cluster_id="t-ctx") as c:
        assert cluster.ensure() is c  # ensure() reuses the running cluster rather than starting another
        procs = processes_of(c)
        assert c.view.apply_sync(_square, 1) == [1, 1]
    assert gone(procs) == []


@pytest.mark.slow
def test_a_controller_that_does_not_deliver_work_is_replaced_twice_then_refused(monkeypatch):
    """Engines that register but do not answer their first call (a controller whose scheduler lost the race for
    its port when several clusters start at once) get a new controller, twice; then one clear error, no strays.
    Here no first call can be answered in time: every attempt fails, each with its own controller."""
    monkeypatch.setattr(cluster.handle, "FIRST_CALL_TIMEOUT", 0.001)
    made, real = [], cluster.lifecycle._new_ipp_cluster
    monkeypatch.setattr(
        cluster.lifecycle, "_new_ipp_cluster", lambda *a: made.append(a) or real(*a)
    )  # counts, then the real one
    with pytest.raises(cluster.ControllerBroken, match="registered but did not answer a first call"):
        cluster.start(1, cluster_id="t-broken", quiet=True, persist=False)
    assert len(made) == 3, "a broken controller is replaced twice, then the error is raised"
    assert cluster.running_ids() == []
    assert gone(launched_for("course-t-broken")) == []


# Ports a controller picks as free but that a cluster starting beside it binds first (ipyparallel picks them in
# the controller's process, then binds each in the process that serves it): its engines' registration port, bound
# by the controller itself, and its task scheduler's and heart monitor's, each bound by a process of its own.
LOST_PORTS = {"registration": 0, "task scheduler": 3, "heartbeat": 5}  # places in its list of engine ports


@pytest.fixture(params=sorted(LOST_PORTS))
def port_taken(request):
    """One of the next controllers' ports already taken (a real socket listens on it); yields the file that says
    how many controllers are still to get it (the profile's config reads it at each controller's start)."""

    sockets = [socket.socket() for _ in range(7)]  # the controller's engine ports
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    taken = sockets.pop(LOST_PORTS[request.param])
    for s in sockets:
        s.close()
    taken.listen(1)
    profile = cluster.profile_dir()
    profile.mkdir(parents=True, exist_ok=True)
    left = profile / "controllers-to-collide"
    (profile / "ipcontroller_config.py").write_text(
        textwrap.dedent(f"""
            import pathlib
            left = pathlib.Path({str(left)!r})
            if int(left.read_text()) > 0:
                left.write_text(str(int(left.read_text()) - 1))
                c.IPController.engine_ports = {ports}
        """)
    )
    yield left
    taken.close()


@pytest.mark.slow
def test_a_controller_that_lost_a_port_to_a_cluster_beside_it_is_replaced_at_once(port_taken):
    port_taken.write_text("1")
    with cluster.start(2, cluster_id="t-port", quiet=True, persist=False) as c:
        assert port_taken.read_text() == "0", "the first controller never met the taken port"
        assert len(set(c.view.apply_sync(_pid))) == 2
        assert c.client.load_balanced_view().apply_async(_pid).get(timeout=60) in {e["pid"] for e in c.engines}
        procs = processes_of(c)
    assert gone(procs) == []
    assert cluster.running_ids() == []


@pytest.mark.slow
def test_a_controller_that_loses_a_port_at_every_try_is_one_clear_error_not_a_wait(port_taken):
    """Without the replacement: a traceback from ipyparallel (the registration port), or a wait until the engines
    give up after 75 s of missed heartbeats (the heart monitor's)."""
    port_taken.write_text("3")
    with pytest.raises(cluster.ControllerBroken, match="Address already in use") as raised:
        cluster.start(1, cluster_id="t-portless", quiet=True, persist=False, timeout=300)
    assert "ended the same way 3 times; start it again" in str(raised.value), "what to do, after the retries"
    assert port_taken.read_text() == "0", "a broken controller is replaced twice, then the error is raised"
    assert cluster.running_ids() == []
    assert gone(launched_for("course-t-portless")) == []


@pytest.mark.slow
def test_a_killed_engine_is_detected_work_fails_clearly_and_restart_works():
    import ipyparallel as ipp

    c = cluster.start(2, cluster_id="t-kill")
    try:
        victim = c.engines[1]
        running = c.client[victim["id"]].apply_async(_sleep, 60)
        os.kill(victim["pid"], signal.SIGKILL)
        with pytest.raises(ipp.error.RemoteError, match=f"Engine {victim['id']} died"):
            running.get(timeout=120)
        status = c.status()
        assert status.dead == [victim["id"]] and not status.ok
        assert f"engine(s) {victim['id']} died" in str(status)
        with pytest.raises(cluster.EngineLost, match=f"engine\\(s\\) {victim['id']} no longer running"):
            c.view.apply_sync(_pid)
        c.restart()
        assert c.status().ok
        assert len(c.view.apply_sync(_pid)) == 2
        procs = processes_of(c)
    finally:
        c.stop()
    assert gone(procs) == []


@pytest.mark.slow
def test_an_engine_killed_as_it_registers_says_how_it_ended_and_its_own_last_words():
    # Every engine runs the profile's startup files after it has registered and started its nanny, and before its
    # heart beats (the controller only counts it then): this one says a last word and is killed, so the cluster
    # surely sees an engine process end while it starts, its nanny's lines ("Pipe closed ...") last in its log.
    startup = cluster.profile_dir() / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-die.py").write_text(
        "import os, signal, sys\nprint('the last words of engine', os.getpid(), file=sys.stderr, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    with pytest.raises(cluster.ClusterDown) as failed:
        cluster.start(1, cluster_id="t-dies", quiet=True, persist=False)
    message = str(failed.value)
    assert "engine process 0 was killed by SIGKILL" in message, message
    assert "the last words of engine" in message, message
    assert "KernelNanny" not in message, message
    assert cluster.running_ids() == []
    assert gone(launched_for("course-t-dies")) == []


def launched_for(cluster_id: str) -> list[psutil.Process]:
    """The processes ipyparallel launched for one cluster of this test's profile (its launchers put IPP_CLUSTER_ID
    and IPP_PROFILE_DIR in their environment), whatever else runs on the machine."""
    found, profile = [], str(cluster.profile_dir())
    for p in psutil.process_iter():
        try:
            environ = p.environ()
            if environ.get("IPP_CLUSTER_ID") == cluster_id and environ.get("IPP_PROFILE_DIR") == profile:
                found.append(p)
        except psutil.Error:
            pass
    return found


def test_how_a_process_ended_and_an_engines_own_last_lines_in_words():
    from course.cluster.errors import ended, engine_tail

    assert ended(255) == "exited with status 255"
    assert ended(-signal.SIGTERM) == "was killed by SIGTERM"
    assert ended(-signal.SIGKILL).startswith("was killed by SIGKILL (")
    assert ended(None) == "exited (its exit status is unknown)"
    # an engine's output as ipyparallel 9 leaves it: its own lines, a traceback, then its nanny's last lines
    output = textwrap.dedent("""
        2026-01-01 10:00:00.001 [IPEngine.0] Starting nanny
        2026-01-01 10:00:00.002 [KernelNanny.0] Nanny watching parent pid 26767.
        2026-01-01 10:00:00.003 [IPEngine.0] CRITICAL | Error completing registration: boom
        Traceback (most recent call last):
        RuntimeError: boom
        2026-01-01 10:00:00.004 [KernelNanny.0] Pipe closed, parent 26767 has status: None
        2026-01-01 10:00:00.005 [KernelNanny.0] Notifying Hub that our parent has shut down
        2026-01-01 10:00:00.006 [KernelNanny.0] Parent 26767 exited with status None.
    """)
    assert engine_tail(output) == (
        "2026-01-01 10:00:00.003 [IPEngine.0] CRITICAL | Error completing registration: boom | "
        "Traceback (most recent call last): | RuntimeError: boom"
    )
    assert engine_tail("") == "(no output)"


CLIENT = textwrap.dedent("""
    import json, os, sys
    from course import cluster
    # persist: its warden leaves it running, as a cluster started from a terminal that was closed
    c = cluster.start(2, engines=sys.argv[1], cluster_id="t-orphan", quiet=True, persist=True)
    pids = [e["pid"] for e in c.engines] + [c._ipp.controller.pid]
    if sys.argv[1] == "mpi":
        pids.append(c._engine_set().pid)
    print(json.dumps({"pids": pids, "job": getattr(c._engine_set(), "job_id", "")}), flush=True)
    os.kill(os.getpid(), 9)   # the client dies without stopping its cluster
""")


def orphan_cluster(kind: str) -> dict:
    """Start a cluster from a client process that is then killed; returns its pids (with children) and job."""
    out = subprocess.run([sys.executable, "-c", CLIENT, kind], capture_output=True, text=True, timeout=400, cwd=ROOT)
    assert out.returncode == -9, out.stderr
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    procs = [psutil.Process(p) for p in facts["pids"]]
    for p in list(procs):
        procs += p.children(recursive=True)
    assert len(gone(procs)) >= 3, "the orphaned cluster should still be running before stop --all"
    facts["procs"] = procs
    return facts


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_stop_all_cleans_up_after_a_client_that_died(kind, request):
    needs(kind, request)
    facts = orphan_cluster(kind)
    result = run_course("cluster", "stop", "--all")
    assert result.returncode == 0, result.stderr
    assert "course-t-orphan" in result.stdout
    assert gone(facts["procs"]) == [], f"stray processes after stop --all: {gone(facts['procs'])}"
    if facts["job"]:
        assert squeue(facts["job"]) == ""
    assert cluster.running_ids() == []


def dead_slurm(tmp_path) -> dict:
    """The environment of a site whose slurm.conf names a controller that does not run (a port nothing listens on),
    with squeue, scancel and scontrol noting each call before running the real one: {"env", "calls"}."""
    if not shutil.which("scontrol"):
        pytest.skip("needs Slurm's client commands (make test installs slurm-wlm)")
    conf = dead_controller(tmp_path)
    spy, calls = tmp_path / "bin", tmp_path / "slurm-calls"
    spy.mkdir()
    for name in ("squeue", "scancel", "scontrol"):
        (spy / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\nexec {shutil.which(name)} "$@"\n')
        (spy / name).chmod(0o755)
    env = {**os.environ, "SLURM_CONF": str(conf), "PATH": f"{spy}{os.pathsep}{os.environ['PATH']}"}
    return {"env": env, "calls": calls}


def test_stop_all_goes_on_without_a_slurm_controller_that_does_not_answer(tmp_path):
    """Issue 65: a slurm.conf names a controller that is not running, and a cluster left by a process that died names
    an engine job (in the course's record and in ipyparallel's file). `stop --all` pings the controller once, says in
    one line that Slurm does not answer, asks it nothing more (each squeue, scancel or scontrol would wait ~10 s on
    it), and removes the cluster's files."""
    site = dead_slurm(tmp_path)
    cid = "course-t-gone"
    security = cluster.profile_dir() / "security"
    gone = {"owner": [2**22 + 7, 1.0], "slurm_job": "4242", "settings": {"kind": "slurm", "n": 2}}
    (security / f"course-record-{cid}.json").write_text(json.dumps(gone))
    engine_set = {"cluster_id": cid, "job_id": "4242", "n": 2, "profile_dir": str(cluster.profile_dir())}
    ipp_file = {
        "cluster": {"cluster_id": cid, "n": 2, "profile_dir": str(cluster.profile_dir())},
        "engines": {"class": "slurm", "sets": {"1": {**engine_set, "state": "running"}}},
    }
    (security / f"cluster-{cid}.json").write_text(json.dumps(ipp_file))
    started = time.monotonic()
    result = run_course("cluster", "stop", "--all", env=site["env"], timeout=120)
    took = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert re.search(r"^Slurm does not answer \(.*DOWN.*\): no engine job", result.stdout, re.M), result.stdout
    assert cid in result.stdout and cluster.running_ids() == [], result.stdout
    assert site["calls"].read_text().splitlines() == ["scontrol ping"], site["calls"].read_text()
    assert took < 8, f"stop --all took {took:.0f} s"  # a bound on a hang: one Slurm command alone waits ~10 s


def test_a_controller_that_never_answers_is_pinged_once_for_a_bounded_time(tmp_path, monkeypatch):
    """A controller host that drops packets (or a missing slurm.conf) holds `scontrol ping` for 10-60 s: the ping is
    given up after slurm.PING_SECONDS, counts as down, and is not asked again for slurm.PING_KEPT s."""
    from course import slurm

    spy, calls = tmp_path / "bin", tmp_path / "calls"
    spy.mkdir()
    (spy / "scontrol").write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec sleep 60\n')
    (spy / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{spy}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    started = time.monotonic()
    down = slurm.controller_down()
    took = time.monotonic() - started
    assert down == f"scontrol ping got no answer within {slurm.PING_SECONDS:g} s", down
    assert slurm.PING_SECONDS <= took < slurm.PING_SECONDS + 5, took
    assert slurm.controller_down() == down and slurm.my_jobs() == [] and slurm.job_state("4242")[0] == "UNKNOWN"
    assert calls.read_text().splitlines() == ["ping"], calls.read_text()


@pytest.mark.slow
def test_what_is_left_of_a_cluster_long_gone_never_harms_a_process_that_got_one_of_its_pids():
    # A cluster whose processes all ended without a stop (a client killed, then its cluster's processes: a node that
    # went down) leaves its files; by the time someone looks, the pids they name may be other processes'. Here one
    # process (with a child of its own) has the controller's and every engine's pid, in both files.
    facts = orphan_cluster("local")
    for p in facts["procs"]:
        p.kill()
    psutil.wait_procs(facts["procs"], timeout=30)
    stranger = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, time; subprocess.Popen(['sleep', '600']); print('ready'); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        security = cluster.profile_dir() / "security"
        record_file, cluster_file = (
            security / "course-record-course-t-orphan.json",
            security / "cluster-course-t-orphan.json",
        )
        record, ipp_state = json.loads(record_file.read_text()), json.loads(cluster_file.read_text())
        record["controller_pid"] = ipp_state["controller"]["state"]["pid"] = stranger.pid
        for engine in record["engines"]:
            engine["pid"] = stranger.pid  # with the engine's own start time, as recorded
        for engine_set in ipp_state["engines"]["sets"].values():
            for engine in engine_set["engines"].values():
                engine["pid"] = stranger.pid
        record_file.write_text(json.dumps(record))
        cluster_file.write_text(json.dumps(ipp_state))
        assert stranger.stdout.readline().strip() == "ready"  # its child started
        family = [psutil.Process(stranger.pid), *psutil.Process(stranger.pid).children()]

        status = run_course("cluster", "status")
        assert status.returncode == 0 and "course-t-orphan" not in status.stdout, status.stdout  # not taken as running
        result = run_course("cluster", "stop", "--all")
        assert result.returncode == 0, result.stderr
        assert "course-t-orphan" in result.stdout, result.stdout
        assert cluster.running_ids() == []
        assert gone(family) == family, "a process that only had a pid of the cluster was ended with it"
    finally:
        for p in psutil.Process(stranger.pid).children(recursive=True):
            p.kill()
        stranger.kill()
        stranger.wait()


@pytest.mark.slow
def test_a_restarted_notebook_reattaches_to_its_running_cluster(capsys):
    facts = orphan_cluster("local")  # as a kernel restart leaves a persistent cluster running
    c = cluster.start(2, cluster_id="t-orphan")
    try:
        assert "Re-attached to running cluster course-t-orphan" in capsys.readouterr().out
        assert set(c.view.apply_sync(_pid)) == set(facts["pids"][:2])
        assert c.status().ok
        with pytest.raises(cluster.ClusterError, match="already running with 2 local engine"):
            cluster.start(3, cluster_id="t-orphan")
    finally:
        c.stop()
    assert gone(facts["procs"]) == []


@pytest.mark.slow
def test_cli_start_status_stop():
    started = run_course("cluster", "start", "-n", "2", "--engines", "mpi", "--id", "cli")
    assert started.returncode == 0, started.stderr
    assert "2 of 2 engines running" in started.stdout
    record = json.loads((cluster.profile_dir() / "security" / "course-record-course-cli.json").read_text())
    procs = [psutil.Process(e["pid"]) for e in record["engines"]] + [psutil.Process(record["launcher_pid"])]
    status = run_course("cluster", "status")
    assert status.returncode == 0 and "course-cli (mpi)" in status.stdout and "2 of 2" in status.stdout
    stopped = run_course("cluster", "stop", "--id", "cli")
    assert stopped.returncode == 0 and "stopped course-cli" in stopped.stdout
    assert gone(procs) == []
    assert run_course("cluster", "status").stdout.strip() == "no course clusters running"


# ----------------------------------------------------------------------------------------- faults


def test_cli_errors_are_one_line():
    for args, code, text in [
        (["cluster", "start", "-n", "0"], 1, "positive whole number"),
        (["cluster", "start", "--engines", "pbs"], 2, "invalid choice"),
        (["cluster", "stop", "--id", "nothing"], 1, "no cluster course-nothing is running"),
        (["cluster", "status", "--id", "nothing"], 1, "no cluster course-nothing is running"),
        (["cluster", "stop", "--force"], 1, "--force goes with --all"),
        (["cluster"], 2, "required"),
    ]:
        result = run_course(*args)
        assert result.returncode == code, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and text in lines[0] and "Traceback" not in result.stderr, (args, result.stderr)


def without_tools(*tools: str) -> dict:
    """The environment with PATH limited to directories that hold none of `tools` (plus this Python's)."""
    keep = [
        d
        for d in os.environ["PATH"].split(os.pathsep)
        if d and not any(os.path.exists(os.path.join(d, t)) for t in tools)
    ]
    return dict(os.environ, PATH=os.pathsep.join(keep))


def test_missing_mpiexec_names_what_to_install():
    result = run_course("cluster", "start", "--engines", "mpi", "-n", "2", env=without_tools("mpiexec"))
    assert result.returncode == 1
    assert result.stderr.startswith("course: error: mpiexec not found: install Open MPI")
    assert len(result.stderr.strip().splitlines()) == 1


def test_missing_slurm_names_what_to_install():
    result = run_course("cluster", "start", "--engines", "slurm", "-n", "2", env=without_tools("sbatch", "squeue"))
    assert result.returncode == 1
    assert "Slurm not found" in result.stderr and "slurm-wlm" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_slurm_engines_that_cannot_start_in_time_say_why(slurm):
    # another job holds every core, so the engine job stays PENDING (Resources)
    cores = os.cpu_count()
    blocker = (
        subprocess.run(
            ["sbatch", "--parsable", "-n", str(cores), "-o", "/dev/null", "--wrap", "sleep 600"],
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .split(";")[0]
    )
    try:
        with pytest.raises(cluster.ClusterError) as info:
            cluster.start(2, engines="slurm", cluster_id="t-pending", timeout=20)
        message = str(info.value)
        assert "only 0 of 2 engines connected within 20 s" in message
        assert "is PENDING (" in message, message
    finally:
        subprocess.run(["scancel", blocker], check=False)
    assert cluster.running_ids() == []
    assert not [
        line
        for line in subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True).stdout.split()
        if line == "ipengine-course-t-pending"
    ]


@pytest.mark.slow
def test_slurm_refusing_the_job_is_one_clear_error(slurm):
    # GPUs this node does not have: refused from what sinfo says, before anything is submitted
    with pytest.raises(cluster.ClusterError, match="--gpus-per-node 1 is more than a node of partition"):
        cluster.start(1, engines="slurm", cluster_id="t-gpus", gpus_per_node=1, timeout=60)
    # the same asked through an #SBATCH line of the site's: sbatch itself refuses, and says so in one error
    with pytest.raises(cluster.ClusterError, match="Slurm refused the engine job"):
        cluster.start(1, engines="slurm", cluster_id="t-gpus", sbatch=["--gres=gpu:1"], timeout=60)
    assert cluster.running_ids() == []
    # its own processes only: other clusters may be starting beside this test (the strength test's runs)
    assert gone(launched_for("course-t-gpus")) == [], "the controller of a refused engine job was left running"


@pytest.mark.slow
def test_a_quick_px_cell_shows_every_engines_output_also_when_it_comes_seconds_after_the_results(capsys):
    """An engine's output travels to the notebook through the controller's IOPub relay, a process apart from the
    results': on a busy node it can arrive seconds after them. A quick %%px cell still shows every engine's line.
    Here the relay is stopped for 4 s as the cell runs (SIGSTOP), so the output comes 4 s after the results."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()  # as in a notebook: the cluster turns on %px in it
    with cluster.start(2, engines="local", quiet=True) as started:
        relay = _iopub_relay(started)
        relay.suspend()
        resume = threading.Timer(4, relay.resume)
        resume.start()
        try:
            capsys.readouterr()
            assert shell.run_cell("%%px\nimport os\nprint('hello from', os.getpid())").success
            shown = capsys.readouterr().out
        finally:
            resume.cancel()
            relay.resume()
    assert shown.count("hello from") == 2, shown


def _iopub_relay(started) -> psutil.Process:
    """The process of STARTED's controller that relays the engines' output (it listens on the clients' iopub port)."""
    port = started.client._config["iopub"]
    port = int(str(port).rsplit(":", 1)[-1])
    controller = psutil.Process(started._ipp.controller.pid)
    for process in [controller, *controller.children(recursive=True)]:
        if any(c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN for c in process.net_connections()):
            return process
    raise AssertionError(f"no process of the controller listens on the iopub port {port}")


@pytest.mark.slow
def test_a_px_cell_in_a_kernel_shows_every_engines_line_when_the_output_came_before_the_cell_streamed():
    """In a kernel (JupyterLab's path), %%px shows each engine's output as its own display. On a busy kernel the
    engines' output can arrive before the cell starts streaming it: here the kernel waits for it first. Each engine's
    line must still be its own display, none replacing another's (ipyparallel 9.2 gave them one display id)."""
    from jupyter_client.manager import start_new_kernel

    manager, kernel = start_new_kernel(kernel_name="python3")
    try:
        _in_kernel(kernel, "import course.cluster\ncluster = course.cluster.start(2, engines='local', quiet=True)")
        _in_kernel(
            kernel,
            "from ipyparallel.client.asyncresult import AsyncResult\n"
            "streaming = AsyncResult.stream_output\n"
            "def busy(self):\n    self.wait_for_output(60)\n    return streaming(self)\n"
            "AsyncResult.stream_output = busy",
        )
        shown = _in_kernel(kernel, "%%px\nimport os\nprint('hello from', os.getpid())")
        engines = _in_kernel(kernel, "print(sorted(cluster.view.apply_sync(__import__('os').getpid)))")
        _in_kernel(kernel, "cluster.stop()")
    finally:
        manager.shutdown_kernel(now=True)
    pids = sorted(int(p) for p in re.findall(r"\d+", "".join(engines)))
    lines = sorted(text for text in shown if "hello from" in text)
    assert sorted(int(line.split()[-1]) for line in lines) == pids, (shown, pids)


def _in_kernel(kernel, code: str) -> list[str]:
    """Run CODE in KERNEL; the outputs a notebook would show, in order (a display id's updates replace its outputs)."""
    msg_id = kernel.execute(code)
    shown: list[list] = []  # [display id or None, text]
    while True:
        msg = kernel.get_iopub_msg(timeout=180)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        key = content.get("transient", {}).get("display_id")
        if kind in ("display_data", "update_display_data"):
            for output in shown:
                if key and output[0] == key:
                    output[1] = content["data"]["text/plain"]
            if kind == "display_data":
                shown.append([key, content["data"]["text/plain"]])
        elif kind == "stream":
            shown.append([None, content["text"]])
        elif kind == "error":
            raise AssertionError(f"{content['ename']}: {content['evalue']}")
        elif kind == "status" and content["execution_state"] == "idle":
            return [text for _, text in shown]


# ---- the warden: no cluster outlives what started it
def _gone_within(cluster_id: str, seconds: float) -> list[psutil.Process]:
    """Wait until nothing ipyparallel launched for the cluster runs and its record is gone; what is left if not."""
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        left = launched_for(cluster_id)
        if not left and cluster_id not in cluster.running_ids():
            return []
        time.sleep(0.2)
    return launched_for(cluster_id) or [f"the record of {cluster_id}"]


STUCK = """
import sys, time
from course import cluster
c = cluster.start(2, engines="mpi", cluster_id="t-warden", quiet=True)
def stuck():
    import numpy as np
    from mpi4py import MPI
    if MPI.COMM_WORLD.rank == 1:  # rank 0 waits in the all-reduce for ever
        return
    MPI.COMM_WORLD.Allreduce(np.ones(4), np.zeros(4))
c.view.apply_async(stuck)
print("started", flush=True)
time.sleep(600)
"""


def test_a_cluster_whose_starter_is_killed_mid_collective_ends_within_seconds():
    """SIGKILL runs no clean-up: the warden ends the controller, mpiexec and the engines, one spinning in MPI."""
    starter = subprocess.Popen([sys.executable, "-c", STUCK], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert starter.stdout.readline().strip() == "started"
        assert launched_for("course-t-warden"), "the cluster should be running"
    finally:
        starter.kill()
        starter.wait()
    assert _gone_within("course-t-warden", 60) == []


GRADER = """
import sys, time
from jupyter_client.manager import start_new_kernel
manager, kernel = start_new_kernel(kernel_name="python3")
reply = kernel.execute_interactive("import course.cluster; course.cluster.start(2, quiet=True)", timeout=180)
print("ready", reply["content"]["status"], manager.provisioner.pid, flush=True)
time.sleep(600)
"""


def test_a_kernels_cluster_ends_when_the_grader_that_ran_the_kernel_is_killed():
    """A cluster started in a kernel persists across kernel restarts, but not beyond what runs the kernel (a
    grader such as course validate, or the Jupyter server)."""
    env = dict(os.environ, COURSE_CLUSTER_ID="t-graded")
    grader = subprocess.Popen([sys.executable, "-c", GRADER], stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    kernel = None
    try:
        said = next((line.split() for line in grader.stdout if "ready" in line), ["ready", "ended", ""])
        status, kernel = said[-2:]
        assert status == "ok" and launched_for("course-t-graded"), "the kernel's cluster should be running"
    finally:
        grader.kill()
        grader.wait()
    try:
        assert _gone_within("course-t-graded", 60) == []
    finally:
        if kernel and psutil.pid_exists(int(kernel)):
            processes.kill_tree(psutil.Process(int(kernel)))


def test_a_kernels_cluster_outlives_a_killed_kernel_while_idle_and_ends_while_busy():
    """The kernel restarted (killed) with idle engines: the cluster is kept for the notebook to re-attach; killed
    while its engines work for it, nobody waits for that work, and the cluster ends."""
    from jupyter_client.manager import start_new_kernel

    env = dict(os.environ, COURSE_CLUSTER_ID="t-restarted")
    manager, kernel = start_new_kernel(kernel_name="python3", env=env)
    try:
        _in_kernel(kernel, "import course.cluster\ncluster = course.cluster.start(2, quiet=True)")
    finally:
        _kill_kernel(manager, kernel)
    # the warden looks every POLL s and measures the engines over BUSY_WINDOW: three looks and they are idle
    time.sleep(3 * (warden.POLL + warden.BUSY_WINDOW))
    assert "course-t-restarted" in cluster.running_ids() and launched_for("course-t-restarted")
    manager, kernel = start_new_kernel(kernel_name="python3", env=env)
    try:
        shown = _in_kernel(kernel, "import course.cluster\ncluster = course.cluster.start(2)")
        assert any("Re-attached" in line for line in shown), shown
        _in_kernel(kernel, BUSY_ENGINES)
    finally:
        _kill_kernel(manager, kernel)
    assert _gone_within("course-t-restarted", 60) == []


# An endless loop on every engine, killed with the kernel only once the controller has passed it to them (the
# client sends from a thread of its own: a kernel killed at once can take the task with it).
BUSY_ENGINES = """
import time
work = cluster.view.apply_async(lambda: [0 for _ in iter(int, 1)])
work.wait_for_send(60)
ends = time.monotonic() + 60
while not all(q["queue"] for e, q in cluster.client.queue_status().items() if e != "unassigned"):
    assert time.monotonic() < ends, "the controller never passed the work to the engines"
    time.sleep(0.1)
"""


def _kill_kernel(manager, client) -> None:
    """SIGKILL a kernel, as a crash or the kernel's restart does, and let its manager clean up after it."""
    client.stop_channels()
    os.kill(manager.provisioner.pid, signal.SIGKILL)
    manager.shutdown_kernel(now=True)
