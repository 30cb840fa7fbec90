"""`doctor --json` tells the truth about this machine's stack."""

import json
import shutil
import subprocess

import pytest

from course import doctor
from course.doctor import machine
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
    checks = [
        doctor.Check("python", True, "3.11"),
        doctor.Check("mpi", False, "mpiexec not found", "install Open MPI"),
        doctor.Check("slurm", False, "no sbatch", "use a cluster", essential=False),
    ]
    text = doctor.report(checks)
    assert "FAIL  mpi" in text and "note  slurm" in text and "- mpi: install Open MPI" in text
    assert not doctor.all_essentials_ok(checks)
    assert doctor.all_essentials_ok(checks[::2])


def test_a_machine_without_gpus_is_told_so_in_the_gpu_line(report):
    """Issue 19: the line an instructor reads says "no GPU"; the JSON has the build and NCCL facts behind it."""
    _, facts = report
    smi = shutil.which("nvidia-smi")
    if smi and "GPU " in subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout:
        pytest.skip("this machine has GPUs")
    gpu = facts["checks"]["gpu"]
    assert gpu["detail"].startswith("no GPU") and "make setup GPU=1" in gpu["detail"], gpu
    assert gpu["facts"]["gpus"] == [] and gpu["facts"]["cuda_build"] is False and gpu["facts"]["cuda"] is None
    assert gpu["facts"]["horovod_nccl"] is False and facts["checks"]["horovod"]["facts"]["nccl_built"] is False
    assert (
        "no GPU" in facts["checks"]["tensorflow"]["detail"] and "CPU build" in facts["checks"]["tensorflow"]["detail"]
    )


def test_gpus_without_nccl_in_horovod_are_a_note_with_the_rebuild():
    seen = {
        "gpus": ["NVIDIA A100-SXM4-40GB"] * 4,
        "cuda_build": True,
        "cuda": "12.2",
        "cudnn": "8",
        "nccl": "2.16.5",
        "horovod": {"nccl_built": False},
    }
    without, with_nccl = machine.check_gpus(seen), machine.check_gpus({**seen, "horovod": {"nccl_built": True}})
    assert not without.ok and not without.essential and "make setup GPU=1" in without.fix
    assert "4 GPU(s)" in without.detail and "NCCL 2.16.5" in without.detail and "has no NCCL" in without.detail
    assert with_nccl.ok and with_nccl.fix == "" and "all-reduces with NCCL" in with_nccl.detail
