"""course.slurm, the one place that speaks Slurm: #SBATCH lines, partitions and requests that cannot fit (asked of
the two-node virtual cluster), job states and cancelling (a real job on the single-node Slurm)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from course import UserError
from course.doctor import machine
from course import slurm as speak
from tests.slurm import dead_controller


def test_sbatch_lines_carry_site_options_and_refuse_what_is_not_an_option():
    lines = speak.sbatch_lines(
        speak.Options(
            job_name="hvd",
            nodes=2,
            tasks_per_node=4,
            gpus_per_node=4,
            time="01:00:00",
            qos="normal",
            constraint="a100",
            exclusive=True,
            extra=["--reservation=workshop"],
        )
    )
    assert lines == [
        "#SBATCH --job-name=hvd",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --gres=gpu:4",
        "#SBATCH --time=01:00:00",
        "#SBATCH --qos=normal",
        "#SBATCH --constraint=a100",
        "#SBATCH --exclusive",
        "#SBATCH --reservation=workshop",
    ]
    for bad in ("reservation=workshop", "--x\n#SBATCH --y", ""):
        with pytest.raises(UserError, match="not an sbatch option"):
            speak.check_extra(bad)


@pytest.mark.parametrize(
    "gres,gpus",
    [
        ("gpu:a100:4(S:0-1)", 4),  # sinfo's GRES column
        ("gpu:2", 2),
        ("(null)", 0),
        ("gpu", 1),  # sbatch's --gres: a bare gpu is one
        ("gpu:a100", 1),
        ("gpu:a100:8,mps:100", 8),
        ("mps:100", 0),
        ("gpu:1g.5gb:2", 2),  # a MIG type, starting with a digit
    ],
)
def test_gpus_are_read_from_a_gres_value_as_sinfo_and_sbatch_write_it(gres, gpus):
    assert speak.gres_gpus(gres) == gpus


@pytest.fixture
def on_virtual_cluster(virtual_cluster, monkeypatch):
    for name in ("SLURM_CONF",):
        monkeypatch.setenv(name, virtual_cluster[name])
    return virtual_cluster


def test_partitions_of_the_virtual_cluster(on_virtual_cluster):
    part, site = speak.partitions()  # the default first
    cpus = max(1, os.cpu_count() // 2)
    assert (part.name, part.nodes, part.cpus_per_node, part.gpus_per_node) == ("vc", 2, cpus, 0)
    assert (site.name, site.nodes, site.cpus_per_node, site.gpus_per_node) == ("gpu", 2, 48, 8)  # notebook 11's site


@pytest.mark.parametrize(
    "request_, message",
    [
        (dict(nodes=3, tasks_per_node=1), "--nodes 3 is more than partition vc has (2 node(s))"),
        (dict(nodes=2, tasks_per_node=8), "8 task(s) per node"),
        (dict(nodes=1, tasks_per_node=1, gpus_per_node=1), "--gpus-per-node 1"),
        (dict(nodes=1, tasks_per_node=1, partition="bigmem"), "no partition 'bigmem' here"),
    ],
)
def test_requests_that_cannot_fit_are_refused(on_virtual_cluster, request_, message):
    with pytest.raises(UserError) as refused:
        speak.check_fits(**request_)
    assert message in str(refused.value) and "\n" not in str(refused.value)
    speak.check_fits(nodes=2, tasks_per_node=1)  # what fits passes


def test_job_state_and_cancel_on_a_real_job(slurm, tmp_path):
    script = tmp_path / "sleep.sh"
    script.write_text(
        "#!/bin/sh\n"
        + "\n".join(
            speak.sbatch_lines(speak.Options(job_name="course-sleep", output=str(tmp_path / "%j.out"), time="00:05:00"))
        )
        + "\nsleep 600\n"
    )
    job_id = speak.submit(str(script))
    assert speak.job(job_id).state in ("PENDING", "RUNNING", "CONFIGURING")
    assert str(job_id) in speak.my_jobs("course-sleep") and str(job_id) not in speak.my_jobs("ipengine-")
    final = speak.cancel(job_id, wait=60)
    assert final is None or (final.ended and final.state == "CANCELLED"), final
    assert subprocess.run(["squeue", "-h", "-j", str(job_id)], capture_output=True, text=True).stdout.strip() == ""
    assert str(job_id) not in speak.my_jobs("course-sleep")


def test_srun_offers_an_mpi_plugin(slurm):
    assert speak.srun_mpi_plugin() in ("pmix", "pmi2")


def test_sbatch_refusal_is_one_line(slurm, tmp_path):
    script = tmp_path / "bad.sh"
    script.write_text("#!/bin/sh\n#SBATCH --partition=no-such-partition\ntrue\n")
    with pytest.raises(UserError, match="sbatch refused the job: .*partition"):
        speak.submit(str(script))


def test_a_controller_that_does_not_answer_is_known_at_once_without_waiting_on_sinfo(slurm, tmp_path, monkeypatch):
    assert speak.available() and speak.controller_down() is None  # the test Slurm answers
    conf = dead_controller(tmp_path, "stopped")
    # sinfo on PATH notes each call, then runs the real one: it retries for about 10 s before failing here
    spy, calls = tmp_path / "bin", tmp_path / "sinfo-calls"
    spy.mkdir()
    (spy / "sinfo").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec {shutil.which("sinfo")} "$@"\n')
    (spy / "sinfo").chmod(0o755)
    monkeypatch.setenv("SLURM_CONF", str(conf))
    monkeypatch.setenv("PATH", f"{spy}{os.pathsep}{os.environ['PATH']}")
    down = speak.controller_down()
    assert down is not None and "DOWN" in down and "*" not in down, down
    assert speak.available() is False and speak.partitions() == []
    check = machine.check_slurm()
    assert not check.ok and "is DOWN" in check.detail and check.fix == "check that slurmctld runs", check
    assert not calls.exists(), (
        f"sinfo was asked although scontrol ping said the controller is down: {calls.read_text()}"
    )


def test_a_test_session_leaves_the_slurm_daemons_as_it_found_them(tmp_path):
    """Issue 39: the `slurm` fixture stops at the session's end the daemons it started, and only those. A session
    of one test that uses it runs here: afterwards munged, slurmctld and slurmd run exactly as before (the same
    processes when they ran, none when it started them). Run alone, with no Slurm up, it starts and stops them."""
    import sys

    from tests.slurm import ROOT, running

    (tmp_path / "test_inner.py").write_text(
        "from tests.slurm import slurm  # noqa: F401\n\n\ndef test_uses_slurm(slurm):\n    assert slurm\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    before = running()
    inner = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull, "test_inner.py"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    if "1 skipped" in inner.stdout:
        pytest.skip(f"Slurm cannot run here: {inner.stdout[-300:]}")
    assert "1 passed" in inner.stdout, inner.stdout[-3000:] + inner.stderr[-2000:]
    assert running() == before, f"before the session: {before}; after it: {running()}"
