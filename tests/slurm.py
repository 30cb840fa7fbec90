"""A real single-node Slurm for the tests that need one (scripts/single-node-slurm.sh), as a session fixture.

Use it with `from tests.slurm import slurm` and a `slurm` argument. It skips only where Slurm cannot run
here (not root, or no apt to install slurm-wlm and munge), saying why. At the end of the session it stops the
daemons it started (munged, slurmctld, slurmd) and only those: a Slurm that was running before is left alone.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from course import slurm as speak

ROOT = Path(__file__).resolve().parents[1]  # the checkout (not from conftest, which imports this module)


SCRIPT = ROOT / "scripts" / "single-node-slurm.sh"
# the daemons single-node-slurm.sh starts, by the pid files it starts them with
PID_FILES = {
    "slurmd": Path("/run/course-slurm/slurmd.pid"),
    "slurmctld": Path("/run/course-slurm/slurmctld.pid"),
    "munged": Path("/run/munge/munged.pid"),
}


def running() -> dict[str, int]:
    """The daemons of PID_FILES that run now: name -> pid."""
    found = {}
    for name, file in PID_FILES.items():
        try:
            pid = int(file.read_text().split()[0])
            os.kill(pid, 0)
        except (OSError, ValueError, IndexError):
            continue
        found[name] = pid
    return found


def _node_up() -> bool:
    if not shutil.which("sinfo"):
        return False
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True, timeout=30)
    return out.returncode == 0 and out.stdout.strip().startswith(("idle", "mix", "alloc", "comp"))


@pytest.fixture(scope="session")
def slurm():
    """Make sure a Slurm that takes jobs answers; yields its default partition name. At the session's end,
    stop the daemons this fixture started (none if Slurm was already up)."""
    before = running()
    started = []
    if not _node_up():
        _start()
        started = [name for name, pid in running().items() if before.get(name) != pid]
        speak.PINGED.clear()  # a ping from before the start said it was down; it answers now
    out = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30)
    yield out.stdout.split()[0].rstrip("*")
    if started:
        subprocess.run(["bash", str(SCRIPT), "stop", *started], capture_output=True, text=True, timeout=120)


def _start() -> None:
    """Install Slurm if need be and start it (skips where it cannot run here)."""
    if os.geteuid() != 0:
        pytest.skip("Slurm is not running and starting a single-node Slurm needs root (munged, slurmctld, slurmd)")
    if not shutil.which("slurmctld", path=os.environ.get("PATH", "") + ":/usr/sbin"):
        if not shutil.which("apt-get"):
            pytest.skip("Slurm is not installed and there is no apt-get to install slurm-wlm and munge")
        setup = subprocess.run(
            ["bash", str(ROOT / "scripts" / "setup-system.sh"), "slurm-wlm", "munge"],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if setup.returncode != 0:
            pytest.skip(f"could not install slurm-wlm and munge: {setup.stderr.strip()[-300:]}")
    # --fresh: a killed earlier run's jobs, recovered from Slurm's state files, must not hold the node
    started = subprocess.run(["bash", str(SCRIPT), "start", "--fresh"], capture_output=True, text=True, timeout=180)
    if started.returncode == 3:
        pytest.skip(started.stderr.strip())
    assert started.returncode == 0, f"single-node Slurm did not start: {started.stdout}{started.stderr}"


def dead_controller(folder: Path, name: str = "gone") -> Path:
    """A slurm.conf in FOLDER naming a controller that does not run (a port nothing listens on): a site whose
    slurmctld is stopped."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    conf = folder / "slurm.conf"
    conf.write_text(
        f"ClusterName={name}\nSlurmctldHost=localhost\nSlurmctldPort={port}\nAuthType=auth/munge\n"
        "NodeName=localhost CPUs=1 State=UNKNOWN\nPartitionName=debug Nodes=ALL Default=YES\n"
    )
    return conf
