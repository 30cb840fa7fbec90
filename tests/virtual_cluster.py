"""A real two-node Slurm in network namespaces (scripts/virtual-cluster.sh), as a session fixture.

Use it with `from tests.virtual_cluster import virtual_cluster` and a `virtual_cluster` argument: the value is
the environment a client needs (SLURM_CONF of the virtual cluster, the controller host the nodes reach, Open
MPI's interfaces), to pass to subprocesses; the test process's own environment is left alone, so the
single-node Slurm of the other tests is not affected. It skips only where the cluster cannot run here (not
root, no network namespaces, no Slurm packages), saying why, and stops the cluster at the end of the session.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]  # the checkout (not from conftest, which imports this module)


SCRIPT = ROOT / "scripts" / "virtual-cluster.sh"


def exports(text: str) -> dict[str, str]:
    """The `export NAME=VALUE` lines that `virtual-cluster.sh start` prints, as a dict."""
    pairs = [line.removeprefix("export ").split("=", 1) for line in text.splitlines() if line.startswith("export ")]
    return {name: value for name, value in pairs}


@pytest.fixture(scope="session")
def virtual_cluster(slurm) -> dict[str, str]:
    """Start the two-node cluster (idempotent); returns os.environ plus what its clients need."""
    started = subprocess.run(
        ["bash", str(SCRIPT), "start", "--nodes", "2"], capture_output=True, text=True, timeout=180
    )
    if started.returncode == 3:
        pytest.skip(started.stderr.strip())
    assert started.returncode == 0, f"virtual cluster did not start: {started.stdout}{started.stderr}"
    env = dict(os.environ)
    env.update(exports(started.stdout))
    yield env
    subprocess.run(["bash", str(SCRIPT), "stop"], capture_output=True, text=True, timeout=180)
