"""`doctor --json` tells the truth about this machine's stack."""

import json

import pytest

from course import doctor
from tests.conftest import run_course

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report():
    result = run_course("doctor", "--json", timeout=600)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def test_reports_horovod_with_tensorflow_mpi_and_gloo(report):
    _, facts = report
    horovod = facts["checks"]["horovod"]
    assert horovod["ok"], horovod
    assert horovod["facts"]["frameworks"] == ["tensorflow"]
    assert {"MPI", "Gloo"} <= set(horovod["facts"]["controllers"])
    assert {"MPI", "Gloo"} <= set(horovod["facts"]["tensor_operations"])


def test_reports_an_mpi_that_starts_two_ranks(report):
    _, facts = report
    mpi = facts["checks"]["mpi"]
    assert mpi["ok"] and mpi["facts"]["ranks_started"] == 2 and mpi["facts"]["sum"] == 3
    assert "Open MPI" in mpi["facts"]["library"]


def test_essentials_decide_the_exit_status(report):
    status, facts = report
    essentials_ok = all(c["ok"] for c in facts["checks"].values() if c["essential"])
    assert facts["ok"] == essentials_ok and status == (0 if essentials_ok else 1)
    assert facts["checks"]["ipyparallel"]["ok"] and facts["checks"]["ipyparallel"]["facts"]["start_s"] > 0


def test_a_failed_essential_is_reported_with_what_to_do():
    checks = [doctor.Check("python", True, "3.11"), doctor.Check("mpi", False, "mpiexec not found", "install Open MPI"),
              doctor.Check("slurm", False, "no sbatch", "use a cluster", essential=False)]
    text = doctor.report(checks)
    assert "FAIL  mpi" in text and "note  slurm" in text and "- mpi: install Open MPI" in text
    assert not doctor.all_essentials_ok(checks)
    assert doctor.all_essentials_ok(checks[::2])
