"""Every instructor notebook (solutions/*.ipynb) runs top to bottom in the quick profile, as CI and Binder run it,
through the same code as an instructor's dry run (`python -m course run`)."""

from __future__ import annotations

import pytest

from course import cluster, run
from tests.conftest import ROOT

NOTEBOOKS = sorted((ROOT / "solutions").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path, monkeypatch):
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))  # its clusters live apart from anyone else's
    result, executed = run.execute(path, profile="quick")
    print(f"{path.name}: {result.seconds:.1f} s")  # the slowest notebook stays visible with pytest -s / --durations
    assert executed.metadata.kernelspec.name == run.KERNEL
    assert result.ok, f"{path.name} failed: {result.error}"
    assert cluster.running_ids() == [], f"{path.name} left a cluster running"
