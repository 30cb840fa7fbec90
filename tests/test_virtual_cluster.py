"""Two Slurm nodes on one machine (scripts/virtual-cluster.sh): nodes with their own names and addresses, MPI
and Horovod across them, and a stop that leaves nothing behind."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROGRAMS, ROOT, run_course
from tests.virtual_cluster import SCRIPT, exports

pytestmark = pytest.mark.slow
CPUS = max(1, (os.cpu_count() or 2) // 2)  # each of the two virtual nodes has half this machine's cores


def run(args: list[str], env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)


def own_munged() -> list[str]:
    """The munged processes of the virtual cluster (its own socket under /var/lib/course-vc), as pgrep lists them."""
    found = subprocess.run(["pgrep", "-af", "munged .*--socket=/var/lib/course-vc/"], capture_output=True, text=True)
    return found.stdout.splitlines()


def test_start_prints_what_a_client_needs_and_is_idempotent(virtual_cluster):
    again = run(["bash", str(SCRIPT), "start", "--nodes", "2"], virtual_cluster)
    assert again.returncode == 0 and "already running" in again.stderr, again.stderr
    given = exports(again.stdout)
    assert given["SLURM_CONF"] == virtual_cluster["SLURM_CONF"] != "/etc/slurm/slurm.conf"
    assert given["COURSE_CONTROLLER_HOST"] == "10.77.0.1"
    status = run(["bash", str(SCRIPT), "status"], virtual_cluster)
    assert status.returncode == 0 and re.search(r"vc1 idle", status.stdout) and "vc2" in status.stdout, status.stdout
    # its own munged, named in its slurm.conf, so that stop can end it without touching the machine's
    assert len(own_munged()) == 1, own_munged()
    assert "AuthInfo=socket=/var/lib/course-vc/munge/munge.socket" in Path(given["SLURM_CONF"]).read_text()


def test_each_node_has_its_own_hostname(virtual_cluster):
    done = run(["srun", "-N2", "-n2", "hostname"], virtual_cluster)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == ["vc1", "vc2"]


def test_the_single_node_slurm_runs_beside_it(virtual_cluster, slurm):
    """Clients without SLURM_CONF still reach the single-node Slurm: the two clusters do not mix."""
    env = {k: v for k, v in virtual_cluster.items() if k != "SLURM_CONF"}
    done = run(["sinfo", "-h", "-o", "%P"], env)
    assert done.returncode == 0 and done.stdout.split()[0].rstrip("*") == slurm
    assert "vc" not in done.stdout.split()


MPI_PROGRAM = """
import socket
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
values = np.full(1_000_000, comm.rank + 1.0)
total = np.empty_like(values)
comm.Allreduce(values, total)
# One process prints every rank's line: lines written by two ranks can interleave mid-line when
# mpiexec forwards them (each piece of an unbuffered print is its own write).
reports = comm.gather(f"RANK {comm.rank} HOST {socket.gethostname()} SUM {total[0]} {total[-1]}")
if comm.rank == 0:
    print("\\n".join(reports), flush=True)
"""


def test_mpi4py_allreduce_across_two_nodes_in_one_allocation(virtual_cluster, tmp_path):
    from course import mpi

    program = tmp_path / "allreduce.py"
    program.write_text(MPI_PROGRAM)
    done = run(
        ["salloc", "-N2", "-n2", "mpiexec", "-n", "2", *mpi.JOB_FLAGS, sys.executable, str(program)],
        mpi.env(virtual_cluster),
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = sorted(line.split() for line in done.stdout.splitlines() if line.startswith("RANK"))
    assert [line[1] for line in lines] == ["0", "1"], done.stdout
    assert {line[3] for line in lines} == {"vc1", "vc2"}, "the two ranks should run on different nodes"
    assert all(line[5:] == ["3.0", "3.0"] for line in lines), done.stdout


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--nodes", "3", "--tasks-per-node", "1"], "--nodes 3 is more than partition vc has (2 node(s))"),
        (["--nodes", "2", "--tasks-per-node", str(CPUS + 1)], f"{CPUS + 1} task(s) per node"),
    ],
)
def test_requests_the_nodes_cannot_run_are_refused_before_submission(virtual_cluster, tmp_path, argv, message):
    env = dict(virtual_cluster, COURSE_JOBS_DIR=str(tmp_path / "records"))
    done = run_course("job", "horovod", *argv, "--submit", env=env, timeout=120)
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert not (tmp_path / "records").exists() or not list((tmp_path / "records").iterdir())


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["-n", str(2 * CPUS + 2), "--tasks-per-node", str(CPUS + 1)],
            f"{CPUS + 1} task(s) per node x 1 CPU(s) per task = {CPUS + 1} CPUs",
        ),
        (["-n", str(2 * CPUS + 1)], f"is more than partition vc has (2 node(s) x {CPUS} CPUs)"),
        (["-n", "2", "--sbatch", "exclusive"], "not an sbatch option"),
    ],
)
def test_slurm_engines_the_nodes_cannot_run_are_refused_before_submission(virtual_cluster, argv, message):
    before = _ipengine_jobs(virtual_cluster)
    done = run_course(
        "cluster", "start", "--engines", "slurm", "--id", "vc-refused", *argv, env=virtual_cluster, timeout=120
    )
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert _ipengine_jobs(virtual_cluster) == before


def _engines(virtual_cluster, cluster_id: str, *extra: str) -> subprocess.CompletedProcess:
    return run([sys.executable, str(PROGRAMS / "slurm_engines.py"), cluster_id, *extra], virtual_cluster, timeout=300)


def _ipengine_jobs(env: dict) -> str:
    return run(["squeue", "-h", "-o", "%i %j"], env).stdout


def test_slurm_engines_on_two_nodes_reach_the_controller_and_share_one_mpi_world(virtual_cluster):
    """cluster.start(2, engines="slurm", tasks_per_node=1): an engine on each node, connected to a controller
    that listens where the nodes can reach it; %px and mpi4py work across them; stop() cancels the job."""
    done = _engines(virtual_cluster, "vc-engines", "--horovod")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "HOSTS vc1 vc2" in done.stdout, done.stdout
    assert "MPI_SUM 3.0 3.0" in done.stdout, "the engines should form one MPI world across the two nodes"
    # training.horovod_nodes leaves engines on real nodes to Horovod: each is local rank 0 of its node
    assert "HOROVOD_LAYOUT 2 engines on the cluster's own nodes" in done.stdout, done.stdout
    assert "HOROVOD [(0, 0, 1, 3.0), (1, 0, 1, 3.0)]" in done.stdout, done.stdout
    assert "PX vc1 vc2" in done.stdout and "STOPPED" in done.stdout, done.stdout
    assert "ipengine-course-vc-engines" not in _ipengine_jobs(virtual_cluster)


def test_cluster_stop_all_cancels_a_two_node_engine_job(virtual_cluster):
    kept = _engines(virtual_cluster, "vc-kept", "--keep")
    assert kept.returncode == 0 and "HOSTS vc1 vc2" in kept.stdout, kept.stdout + kept.stderr
    assert "ipengine-course-vc-kept" in _ipengine_jobs(virtual_cluster)
    stopped = run_course("cluster", "stop", "--all", env=virtual_cluster, timeout=180)
    assert stopped.returncode == 0, stopped.stderr
    assert "ipengine-course-vc-kept" not in _ipengine_jobs(virtual_cluster)
    status = run_course("cluster", "status", env=virtual_cluster, timeout=120)
    assert "vc-kept" not in status.stdout, status.stdout


def test_not_root_is_told_why_with_exit_3():
    """Where it cannot run, it says why on stderr and exits 3 (the fixture then skips with that reason). Run from a
    copy that user nobody can read: the hub tests close the checkout to other users, as the guide tells a site to."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as folder:  # not under pytest's tmp_path, which only root may enter
        copy = Path(folder)
        copy.chmod(0o755)
        for name in (SCRIPT.name, "slurm-common.sh"):
            shutil.copy(SCRIPT.parent / name, copy / name)
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", str(copy / SCRIPT.name), "start"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "needs root" in done.stderr and not done.stdout


def guide_block(heading: str) -> str:
    """The first bash block after `heading` in the instructor guide's Slurm page."""
    text = (ROOT / "docs" / "guide" / "06-slurm.md").read_text()
    after = text[text.index(heading) :]
    return after.split("```bash\n", 1)[1].split("```", 1)[0]


def test_the_guides_rehearsal_runs_in_order_and_stop_leaves_nothing_behind(virtual_cluster, tmp_path):
    """Last in this file: the guide's block, as written (from a folder with the checkout's scripts/), then
    every daemon (its munged too), namespace, link and /etc/hosts line that start made is gone."""
    block = guide_block("## Rehearsing a multi-node workshop on one machine")
    (tmp_path / "scripts").symlink_to(ROOT / "scripts")
    env = dict(
        virtual_cluster,
        COURSE_JOBS_DIR=str(tmp_path / "records"),
        PYTHONPATH=str(ROOT),
        PATH=f"{Path(sys.executable).parent}:{virtual_cluster['PATH']}",
    )
    done = subprocess.run(
        ["bash", "-e", "-c", block], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(done.stdout.splitlines()[:2]) == ["vc1", "vc2"], done.stdout  # srun -N2 hostname
    # course job horovod --nodes 2 --tasks-per-node 1: both ranks train in one job, one on each node
    assert "COMPLETED" in done.stdout and "vc[1-2]" in done.stdout, done.stdout
    ranks = re.findall(r"^rank (\d) of 2, local rank (\d).* on (vc\d)", done.stdout, flags=re.M)
    assert sorted(r for r, _, _ in ranks) == ["0", "1"], done.stdout
    assert {local for _, local, _ in ranks} == {"0"} and {host for _, _, host in ranks} == {"vc1", "vc2"}
    assert "SUMMARY" in done.stdout and '"size": 2' in done.stdout, done.stdout
    # course cluster start --engines slurm -n 2 --tasks-per-node 1: an engine on each node
    assert "2 of 2 engines running" in done.stdout and re.search(r"engine +0 +running +vc\d", done.stdout)
    assert {m for m in re.findall(r"running +(vc\d):", done.stdout)} == {"vc1", "vc2"}, done.stdout
    namespaces = run(["ip", "netns", "list"], virtual_cluster).stdout
    assert not re.search(r"^vc\d", namespaces, flags=re.M), namespaces
    links = run(["ip", "-o", "link", "show"], virtual_cluster).stdout
    assert "brvc" not in links and not re.search(r"\bvch\d", links), links
    with open("/etc/hosts") as hosts:
        assert "virtual-cluster" not in hosts.read()
    daemons = run(["pgrep", "-af", "slurm(ctld|d) -f /var/lib/course-vc"], virtual_cluster).stdout
    assert not daemons.strip(), daemons
    assert not own_munged(), f"the munged virtual-cluster.sh started outlived its stop: {own_munged()}"
    assert run(["bash", str(SCRIPT), "status"], virtual_cluster).returncode != 0
