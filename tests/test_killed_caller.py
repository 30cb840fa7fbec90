"""A check's own job (on_ranks' mpiexec, fresh or kept; horovodrun; torchrun) ends within seconds when the process
that ran it is killed with SIGKILL, which runs no clean-up: each rank watches its caller
(course.processes.exit_with_caller), busy in a collective or not."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from course import comm, processes
from tests.conftest import ROOT, started_with

ON_RANKS = """
import sys
from course import comm, rank_pool
rank_pool.KEEP = sys.argv[2] == "kept"

def stuck(folder):
    from pathlib import Path
    import numpy as np
    from mpi4py import MPI
    rank = MPI.COMM_WORLD.Get_rank()
    (Path(folder) / str(rank)).touch()
    if rank == 1:  # rank 0 waits in the all-reduce for ever
        import time
        time.sleep(3600)
    MPI.COMM_WORLD.Allreduce(np.ones(4), np.zeros(4))

comm.on_ranks(stuck, 2, sys.argv[1], timeout=3600)
"""

SCRIPT = """
import os, pathlib, time
pathlib.Path(os.environ["MARKER"], os.environ.get("RANK", os.environ.get("HOROVOD_RANK", "?"))).touch()
time.sleep(3600)  # a rank that never finishes
"""

LAUNCHED = """
import sys
from course.checks import horovod_script, torchrun_script
launcher = {"horovodrun": horovod_script, "torchrun": torchrun_script}[sys.argv[2]]
launcher.run_script(sys.argv[3], sys.argv[1] + "/job", ranks=2, timeout=3600)
"""


@pytest.mark.slow
@pytest.mark.parametrize("job", ["on_ranks fresh", "on_ranks kept", "horovodrun", "torchrun"])
def test_a_checks_job_ends_within_seconds_when_its_caller_is_killed(job, tmp_path):
    marker = tmp_path / "started"
    marker.mkdir()
    env = dict(os.environ, MARKER=str(marker), PYTHONPATH=str(ROOT))
    if job.startswith("on_ranks"):
        command = [sys.executable, "-c", ON_RANKS, str(marker), job.split()[1]]
    else:
        script = tmp_path / "train.py"
        script.write_text(SCRIPT)
        command = [sys.executable, "-c", LAUNCHED, str(tmp_path), job, str(script)]
    caller = subprocess.Popen(command, env=env, cwd=tmp_path)
    try:
        ends = time.monotonic() + comm.START_TIMEOUT
        while len(list(marker.iterdir())) < 2 and time.monotonic() < ends:
            assert caller.poll() is None, f"the caller ended first ({caller.returncode})"
            time.sleep(0.2)
        assert len(list(marker.iterdir())) == 2, "both ranks should be running"
    finally:
        caller.kill()
        caller.wait()
    ends = time.monotonic() + 30
    while started_with("MARKER", str(marker)) and time.monotonic() < ends:
        time.sleep(0.5)
    left = started_with("MARKER", str(marker))
    said = [" ".join(p.cmdline())[:80] for p in left]
    processes.kill(left)  # a failing run leaves nothing behind either
    assert not said, f"left running: {said}"
