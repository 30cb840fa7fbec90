"""Every instructor notebook (solutions/*.ipynb) runs top to bottom in the quick profile, as CI and Binder run it."""

from __future__ import annotations

import time

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import ROOT

NOTEBOOKS = sorted((ROOT / "solutions").glob("*.ipynb"))
CELL_TIMEOUT = 900  # seconds per cell: generous, the machine is shared


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "quick")
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))  # its clusters live apart from anyone else's
    monkeypatch.setenv("COURSE_CLUSTER_ID", f"nbtest-{path.stem}")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    notebook = nbformat.read(path, as_version=4)
    assert notebook.metadata.kernelspec.name == "ddl-hpc"
    client = NotebookClient(notebook, kernel_name="ddl-hpc", timeout=CELL_TIMEOUT, startup_timeout=180,
                            resources={"metadata": {"path": str(path.parent)}})
    started = time.perf_counter()
    try:
        client.execute()
    finally:
        print(f"{path.name}: {time.perf_counter() - started:.1f} s")
        from course import cluster

        left = cluster.stop_all()  # a failing notebook must not leave engines behind
    assert left == [], f"{path.name} did not stop its cluster: {left}"
