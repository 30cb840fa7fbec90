"""`doctor --json` tells the truth about this machine's stack."""

import json
import os
import shutil
import subprocess
import sys
import time

import psutil
import pytest

from course import doctor, mpi, processes
from course.doctor import machine
from tests.conftest import run_course, started_with

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
    assert mpi["ok"] and mpi["facts"]["ranks_started"] == 2 and mpi["facts"]["sum"] == 3, mpi
    assert "Open MPI" in mpi["facts"]["library"]


def test_reports_torch_and_a_two_rank_gloo_group(report):
    _, facts = report
    torch = facts["checks"]["torch"]
    assert torch["ok"] and torch["facts"]["version"].startswith("2.13.0"), torch
    assert torch["facts"]["groups"]["gloo"]["sums"] == [3.0, 3.0]
    assert "CPU build" in torch["detail"] and "gloo group all-reduced correctly" in torch["detail"]


def test_a_gloo_group_that_cannot_form_is_named_with_what_to_do(monkeypatch):
    """Members that wait for a peer who never comes (a group of 3 of which 2 start) time out and say so."""
    member = machine.TORCH_MEMBER.replace("world_size=2", "world_size=3").replace("seconds=60", "seconds=3")
    monkeypatch.setattr(machine, "TORCH_MEMBER", member)
    check = machine.check_torch()
    assert not check.ok and "gloo group failed" in check.detail and "loopback" in check.fix, check


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


def test_a_probe_that_gives_no_answer_is_ended_with_what_it_started_and_says_its_last_line():
    """A probe that hangs is reported with the last line it printed, and neither it nor its children outlive it."""
    program = (
        "import subprocess, sys, time; child = subprocess.Popen(['sleep', '600.25']);"
        "print(child.pid, flush=True); print('waiting for the others', file=sys.stderr, flush=True); time.sleep(600)"
    )
    started = time.monotonic()
    facts = machine._probe([sys.executable, "-c", program], timeout=5)
    assert facts["hung"] and facts["error"] == "no answer within 5 s; it last said: waiting for the others", facts
    assert time.monotonic() - started < 60
    assert not _running("sleep 600.25"), "the probe's child outlived it"


def test_an_mpi_job_that_hangs_once_is_tried_again_and_the_report_says_so(tmp_path, monkeypatch):
    """A first 2-rank job whose rank 1 never starts its program (as a job that hangs in its start) is ended with its
    ranks; the second job answers, so MPI is reported working, with a word about the first. Two hung jobs fail."""
    launch, held = mpi.command, tmp_path / "held"
    # mkdir succeeds once: rank 1 of the first job only (or of every job, with HOLD_ALWAYS) sleeps instead
    hold_once = (
        '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && { [ -n "$HOLD_ALWAYS" ] || mkdir "$HELD"; } && exec sleep 601; exec "$@"'
    )
    monkeypatch.setattr(mpi, "command", lambda n, *program: launch(n, "sh", "-c", hold_once, "sh", *program))
    monkeypatch.setattr(machine, "MPI_TIMEOUT", 30)  # a 2-rank job answers in about a second; this one never does
    monkeypatch.setenv("HELD", str(held))
    made, new_folder = [], mpi.segments_folder  # the doctor's own jobs' folders (other tests' jobs use /dev/shm too)
    monkeypatch.setattr(mpi, "segments_folder", lambda: made.append(new_folder()) or made[-1])

    check = machine.check_mpi()
    assert held.is_dir(), "the first job's rank 1 was not held: nothing was tried again"
    assert check.ok and check.facts["ranks_started"] == 2 and check.facts["sum"] == 3, check
    assert "(a first mpiexec -n 2 hung: no answer within 30 s" in check.detail, check.detail
    assert not started_with("HELD", str(held)), "the first job's processes outlived it"

    monkeypatch.setenv("HOLD_ALWAYS", "1")
    check = machine.check_mpi()
    assert not check.ok and "no answer within 30 s" in check.detail and "(twice in a row)" in check.detail, check
    assert not started_with("HELD", str(held)), "the first job's processes outlived it"
    assert len(made) == 4, made  # a folder for each of the four jobs
    assert not [folder for folder in made if folder.exists()], "a job's shared-memory folder was left"


def _running(text: str) -> list[psutil.Process]:
    """The processes (not zombies) whose command line holds TEXT."""
    return [
        p
        for p in psutil.process_iter(["cmdline"])
        if text in " ".join(p.info["cmdline"] or []) and processes.running(p) and p.pid != os.getpid()
    ]


def test_doctor_hub_names_a_stale_record_of_instructors_copies_with_the_fix(tmp_path):
    """Issue 65: `userdel -r` of an instructor removes their copy but not the line instructor-copy.sh recorded; a
    `userdel` without -r leaves a copy (every answer in it) owned by no account. Both are named, with the command
    that fixes each; a record of copies that exist is ok."""
    import pwd

    from course.doctor import hub

    prefix = tmp_path / "hub"
    (prefix / hub.COPIES_RECORD).parent.mkdir(parents=True)
    kept, removed, orphaned = tmp_path / "kept", tmp_path / "removed", tmp_path / "orphaned"
    kept.mkdir()
    (prefix / hub.COPIES_RECORD).write_text(f"{kept}\n")
    assert hub.check_records(prefix).ok, hub.check_records(prefix)
    lines = [kept, removed]
    if os.geteuid() == 0:  # only root gives a folder to a uid that no account has
        uid = next(u for u in range(54321, 60000) if not any(p.pw_uid == u for p in pwd.getpwall()))
        orphaned.mkdir()
        os.chown(orphaned, uid, uid)
        lines.append(orphaned)
    (prefix / hub.COPIES_RECORD).write_text("".join(f"{line}\n" for line in lines))
    check = hub.check_records(prefix)
    assert not check.ok and not check.essential, check
    assert f"{removed} no longer exists" in check.detail and str(kept) not in check.detail, check.detail
    assert check.fix.endswith(f"as root: {prefix}/bin/course hub forget-gone"), check.fix
    if os.geteuid() == 0:
        assert f"{orphaned} belongs to uid {uid}, an account that no longer exists" in check.detail, check.detail
        assert check.fix.startswith(f"rm -rf {orphaned} "), check.fix
    assert [c.name for c in hub.run_checks(prefix)].count("records") == 1
