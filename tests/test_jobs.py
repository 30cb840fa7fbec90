"""course.jobs and `python -m course job`: scripts checked by a real Slurm, jobs run, timed out, refused."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from course import UserError, jobs
from tests.conftest import PROGRAMS, run_course


@pytest.fixture
def records(tmp_path, monkeypatch):
    """Job records in a fresh folder, so a test sees exactly the jobs it submitted."""
    folder = tmp_path / "records"
    monkeypatch.setenv("COURSE_JOBS_DIR", str(folder))
    return folder


def _env(records: Path) -> dict:
    import os

    env = dict(os.environ)
    env["COURSE_JOBS_DIR"] = str(records)
    return env


# ------------------------------------------------------------------------------------------ refusals

REFUSED = [
    (["horovod", "--gpus-per-node", "2", "--tasks-per-node", "4"], "more than --gpus-per-node 2"),
    (["horovod", "--gpus-per-node", "4", "--tasks-per-node", "2"], "idle"),
    (["horovod", "--time", "1h"], "HH:MM:SS"),
    (["horovod", "--time", "1:2:3:4"], "D-HH:MM:SS"),
    (["horovod", "--time", "00:00:00"], "no time"),
    (["mirrored", "--nodes", "2"], "one node"),
    (["mirrored", "--tasks-per-node", "2"], "one process"),
    (["train", "--nodes", "3"], "one node"),
    (["horovod", "--nodes", "0"], "--nodes must be"),
    (["horovod", "--mem", "lots"], "--mem"),
    (["horovod", "--job-name", "my job"], "--job-name"),
    (["resnet"], "unknown workload"),
    (["no/such/script.py"], "no script at"),
    ([str(PROGRAMS / "hvd_allreduce.py"), "--gpus-per-node", "1", "--tasks-per-node", "2"], "its own GPU"),
    (["horovod", "--sbatch", "reservation=ws"], "not an sbatch option"),
    (["horovod", "--constraint", "a100 v100"], "--constraint"),
    (["horovod", "--resubmit-on-timeout", "600", "--", "--epochs", "90"], "--checkpoint-dir"),
    (["horovod", "--time", "00:05:00", "--resubmit-on-timeout", "300", "--", "--checkpoint-dir", "c"], "not before"),
    (["mirrored", "--resubmit-on-timeout", "60"], "does not"),
    (["mirrored", "--array", "1,2"], "--array sweeps the worker count"),
    (["horovod", "--array", "1,4", "--tasks-per-node", "2"], "up to 4 Horovod ranks"),
]


@pytest.mark.parametrize("argv,message", REFUSED, ids=[" ".join(a[:1] + a[1:3]) for a, _ in REFUSED])
def test_inconsistent_requests_are_refused_before_submission(argv, message, records):
    """Each refusal is one line on stderr, exit 1, and nothing reaches sbatch (no job record is written)."""
    done = run_course("job", *argv, "--submit", env=_env(records), timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("course: error: ") and message in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    assert not records.exists() or not list(records.iterdir()), "a refused request left a submitted job behind"


def test_site_options_and_cores_per_gpu_rank_in_the_script():
    """--qos, --constraint, --exclusive and any other #SBATCH line reach the script; GPU ranks get cores."""
    text = jobs.script(
        jobs.Request(
            "horovod",
            nodes=2,
            gpus_per_node=4,
            qos="long",
            constraint="a100|h100",
            exclusive=True,
            sbatch=["--reservation=workshop", "--mail-type=END"],
        )
    )
    for line in ("--qos=long", "--constraint=a100|h100", "--exclusive", "--reservation=workshop", "--mail-type=END"):
        assert f"#SBATCH {line}\n" in text, line
    assert "#SBATCH --cpus-per-task=4\n" in text  # four cores per GPU rank: each feeds one GPU
    mirrored = jobs.script(jobs.Request("mirrored", gpus_per_node=2))
    assert "#SBATCH --cpus-per-task=8\n" in mirrored  # one process feeding both GPUs
    assert "#SBATCH --cpus-per-task=1\n" in jobs.script(jobs.Request("horovod", tasks_per_node=2))


def test_time_limits_are_read_as_sbatch_reads_them():
    """One grammar for --time, sbatch's, in course.slurm: what the job command takes, the #SBATCH checker reads."""
    for limit, seconds in (("45", 2700), ("45:30", 2730), ("01:00:00", 3600), ("1-00", 86400), ("1-02:03:04", 93784)):
        assert jobs.parse_time(limit) == seconds
    with pytest.raises(UserError, match="no time at all"):
        jobs.parse_time("0")


def test_status_of_a_non_number_is_refused():
    with pytest.raises(UserError, match="not a Slurm job id"):
        jobs.status("12; rm -rf /")


# --------------------------------------------------------------------------- scripts a real Slurm accepts

VARIANTS = {
    "single-gpu horovod": dict(workload="horovod", gpus_per_node=1),
    # sized to fit this 2-core node apart from the GPUs and the node count (see the test's docstring)
    "one node, 2 GPUs, horovod (mpiexec)": dict(workload="horovod", gpus_per_node=2, mem="500M", account=None),
    "one node, 2 GPUs, horovod (srun)": dict(workload="horovod", gpus_per_node=2, launcher="srun"),
    "two nodes x 2 GPUs, horovod": dict(workload="horovod", nodes=2, gpus_per_node=2),
    "horovod on CPU, 2 ranks, timeline": dict(workload="horovod", tasks_per_node=2, timeline="tl.json"),
    "mirrored, 2 GPUs, one process": dict(workload="mirrored", gpus_per_node=2, args=["--epochs", "5"]),
    "mirrored on CPU": dict(workload="mirrored"),
    "course train": dict(workload="train", args=["--workers", "2", "--sync", "sync"]),
    "script, 2 tasks": dict(workload=str(PROGRAMS / "hvd_allreduce.py"), tasks_per_node=2, partition="debug"),
}


def _test_only(text: str, folder: Path) -> subprocess.CompletedProcess:
    file = folder / "job.sbatch"
    file.write_text(text)
    return subprocess.run(["sbatch", "--test-only", str(file)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_generated_script_is_accepted_by_slurm(name, slurm, tmp_path):
    """`sbatch --test-only` parses every directive and schedules the job.

    This Slurm is one node without GPUs: for GPU and multi-node scripts, the only complaint allowed is about
    exactly that hardware, and the same script with the GPUs, nodes and cores this node has is accepted.
    """
    options = dict(VARIANTS[name])
    workload = options.pop("workload")
    if options.get("partition"):
        options["partition"] = slurm
    request = jobs.Request(workload, output_dir=str(tmp_path), workdir=str(tmp_path), **options)
    text = jobs.script(request)
    assert "#SBATCH --output=" in text and "_%j.out" in text and "_%j.err" in text
    assert f"#SBATCH --time={request.time}" in text and f"#SBATCH --job-name={request.job_name}" in text
    gpus = request.gpus_per_node
    if gpus:
        assert f"#SBATCH --gres=gpu:{gpus}" in text
    if workload == "horovod":
        assert f"#SBATCH --ntasks-per-node={gpus or request.tasks_per_node}" in text
    done = _test_only(text, tmp_path)
    if done.returncode != 0:
        assert gpus or request.nodes > 1, f"sbatch refused {name}: {done.stderr}"
        assert re.search(r"gres|node configuration|node count", done.stderr, re.I), done.stderr
        # GPU ranks get slurm.CPUS_PER_GPU cores each, more than this 2-core node has: one core each here
        here = re.sub(r"#SBATCH --gres=gpu:\d+\n", "", text).replace(f"--nodes={request.nodes}", "--nodes=1")
        here = re.sub(r"--cpus-per-task=\d+", "--cpus-per-task=1", here)
        done = _test_only(here, tmp_path)
    assert done.returncode == 0, f"sbatch --test-only refused {name}: {done.stderr}"
    assert "to start at" in done.stderr, done.stderr


def test_mpi_launch_uses_course_mpi_settings():
    from course import mpi

    text = jobs.script(jobs.Request("horovod", tasks_per_node=2))
    assert "mpiexec -n ${SLURM_NTASKS} " + " ".join(mpi.JOB_FLAGS) in text
    for key, value in mpi.SETTINGS.items():
        if key not in (jobs.OVERSUBSCRIBE, mpi.YIELD):  # both only with --oversubscribe (next test)
            assert f"export {key}={value}" in text
    assert "mpiexec" not in jobs.script(jobs.Request("mirrored", gpus_per_node=2))
    assert "newline apart" not in text, "a note for the course's developers, not for the script's reader"


def test_single_copy_is_turned_off_only_inside_a_container():
    """Open MPI's single-copy (CMA) transfers speed up large messages on a real node; only a container may refuse
    them: the job script sets `none` under the same condition as course.mpi, read by bash on the node itself."""
    from course import mpi

    ((key, value),) = mpi.SINGLE_COPY.items()
    text = jobs.script(jobs.Request("horovod", tasks_per_node=2))
    lines = text.splitlines()
    assert f"export {key}={value}" not in lines, "exported unconditionally: slows large messages on a real node"
    start = lines.index(f"if {mpi.container_test()}; then")
    assert lines[start + 1].strip() == f"export {key}={value}" and lines[start + 2] == "fi", text
    outside = {"PATH": "/usr/bin:/bin"}
    for environ in (outside, {**outside, "APPTAINER_CONTAINER": "/images/course.sif"}):
        shell = subprocess.run(["bash", "-c", mpi.container_test()], env=environ).returncode == 0
        assert shell == mpi.in_container(environ), environ
        assert (mpi.env(environ).get(key) == value) == mpi.in_container(environ), environ
    assert mpi.in_container({**outside, "APPTAINER_CONTAINER": "/images/course.sif"})
    if not any(Path(f).exists() for f in mpi.CONTAINER_FILES):  # on a real node: no workaround
        assert key not in mpi.env(outside)


def test_job_scripts_oversubscribe_only_when_asked():
    """More ranks than Slurm's slots is a mistake on a cluster: Open MPI must be left to refuse it, unless asked."""
    plain = jobs.script(jobs.Request("horovod", tasks_per_node=2))
    assert "OMPI_MCA_rmaps_base_oversubscribe" not in plain and "yield_when_idle" not in plain, plain
    asked = jobs.script(jobs.Request("horovod", tasks_per_node=2, oversubscribe=True))
    assert "export OMPI_MCA_rmaps_base_oversubscribe=1" in asked
    assert "export OMPI_MCA_mpi_yield_when_idle=1" in asked, asked  # ranks sharing cores yield while they wait
    for request, why in (
        (jobs.Request("horovod", tasks_per_node=2, launcher="srun", oversubscribe=True), "srun"),
        (jobs.Request("mirrored", oversubscribe=True), "several tasks"),
    ):
        with pytest.raises(UserError, match=why):
            jobs.script(request)
    printed = run_course("job", "horovod", "--tasks-per-node", "2", "--oversubscribe", "--print")
    assert printed.returncode == 0 and "export OMPI_MCA_rmaps_base_oversubscribe=1" in printed.stdout, printed.stderr


# ------------------------------------------------------------------------------------------ real jobs


@pytest.mark.slow
def test_horovod_job_runs_to_completion_with_both_ranks(slurm, tmp_path, records):
    """Submitted through the CLI: two ranks under mpiexec, both print the summed all-reduce [1+2, 10+10]."""
    env = _env(records)
    submitted = run_course(
        "job",
        str(PROGRAMS / "hvd_allreduce.py"),
        "--tasks-per-node",
        "2",
        "--time",
        "00:10:00",
        "--output-dir",
        str(tmp_path),
        "--submit",
        env=env,
        timeout=120,
    )
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    assert job_id.isdigit(), submitted.stdout
    waited = run_course("job", "wait", job_id, "--wait-timeout", "600", env=env, timeout=700)
    assert waited.returncode == 0 and "COMPLETED" in waited.stdout, waited.stdout + waited.stderr
    shown = run_course("job", "output", job_id, env=env, timeout=60)
    assert shown.returncode == 0, shown.stderr
    for rank in (0, 1):
        assert f"RANK {rank} SIZE 2 SUM [3.0, 20.0]" in shown.stdout, shown.stdout
    assert (tmp_path / f"course-hvd_allreduce_{job_id}.out").is_file()


@pytest.mark.slow
def test_a_sweep_as_a_job_array_appends_one_row_per_worker_count(slurm, tmp_path, records, monkeypatch):
    """`job train --array 1,2` (issue 15): one array task per worker count, each with its own %A_%a files, both
    running at once on the test Slurm (a CPU each); every task's `course train` appends its row to the one
    class-results CSV, and no row is lost to the other task writing at the same time."""
    import csv

    monkeypatch.setenv("COURSE_OFFLINE", "1")  # the job inherits it: the digits stand in for MNIST
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / ".keras"))
    table = tmp_path / "class.csv"
    request = jobs.Request(
        "train",
        ["--epochs", "1", "--limit", "120", "--batch-size", "20", "-n", "1", "--results", str(table)],
        cpus_per_task=1,
        array=[1, 2],
        time="00:10:00",
        output_dir=str(tmp_path),
        workdir=str(tmp_path),
    )
    assert "#SBATCH --array=0-1\n" in jobs.script(request)
    job_id = jobs.submit(request)
    final = jobs.wait(job_id, timeout=600)
    out, err = jobs.output(job_id)
    assert final.state == "COMPLETED" and [t.state for t in final.tasks] == ["COMPLETED"] * 2, f"{final}\n{out}\n{err}"
    assert "array tasks: 0 COMPLETED, 1 COMPLETED" in str(final), str(final)
    for task, workers in enumerate((1, 2)):
        assert f"array task {task} of job {job_id}: {workers} worker(s)" in out, out
        assert (tmp_path / f"course-train_{job_id}_{task}.out").is_file()
    with open(table, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted(int(row["workers"]) for row in rows) == [1, 2], rows


EPOCH_SECONDS = 30  # --min-epoch-seconds: the epochs' length, set here rather than by this machine's speed
EPOCHS = 6  # asked of the chain below: more than fit in one three-minute job, however fast (6 x 30 s = 3 min)
# one line per decision after the warning: where, the time left, what the next epoch needs, the slowest epoch
DECISION = re.compile(
    r"^time-limit warning at epoch (\d+) of \d+: ([\d.]+) s left; the next epoch needs ([\d.]+) s "
    r"\([\d.]+ x \(([\d.]+) s, the slowest recent epoch.*: (training goes on|stopping after this epoch)$",
    re.M,
)


def _resubmitted(out: str) -> int | None:
    found = re.search(r"resubmitted as job (\d+)", out)
    return int(found.group(1)) if found else None


def _decisions(out: str) -> list[tuple[int, float, float, float, bool]]:
    """(epoch, seconds left, seconds needed, epoch estimate, goes on) for each decision the job printed."""
    found = [
        (int(e), float(left), float(need), float(est), go == "training goes on")
        for e, left, need, est, go in DECISION.findall(out)
    ]
    for epoch, left, needed, estimate, goes_on in found:
        assert estimate >= EPOCH_SECONDS, (
            f"epoch {epoch}: estimated {estimate} s, but every epoch lasts {EPOCH_SECONDS} s"
        )
        if abs(left - needed) < 0.1:  # both are printed to 0.1 s: a tie on the line may be either side of it
            continue
        assert goes_on == (left >= needed), f"epoch {epoch}: {left} s left, {needed} s needed, goes on: {goes_on}"
    return found


@pytest.mark.slow
def test_job_warned_before_its_time_limit_is_resubmitted_and_resumes_to_the_same_epochs(slurm, tmp_path, records):
    """Three-minute Horovod jobs (2 ranks) warned 150 s before their limit (issue 15): the script resubmits itself,
    rank 0 decides at each epoch's end whether the next one still fits (printing its figures), the job stops with
    status 75 after a checkpoint, and the next job resumes from it ("resumed from rank 0's checkpoint at epoch E")
    until one completes the epochs asked for, with as many optimizer steps as an uninterrupted run.

    Every epoch lasts EPOCH_SECONDS (--min-epoch-seconds; the real work is well under a second), so how many fit
    in a job depends on the test, not on this machine's speed: no job may be killed at its limit (TIMEOUT), the
    last ends COMPLETED, and a job it had submitted on its warning is cancelled, not left queued. Three minutes
    and epochs of 30 s (issue 39): a job's start-up and first epoch (TensorFlow traces the model) took 90 s on a
    loaded machine, and every job must get through them and one more epoch, or the chain needs more jobs than
    MAX_RESUBMITS allows (with two minutes and epochs of 10 s, a job trained one epoch there, of 13). Here a
    fast machine trains 4 epochs per job (2 jobs), one that takes a minute to start 2 (3 jobs), a slower one
    at least 1 (6 jobs, within MAX_RESUBMITS).
    """
    import json
    import time

    from course import slurm as course_slurm
    from course import training

    args = ["--epochs", str(EPOCHS), "--limit", "400", "--batch", "16", "--threads", "1", "--checkpoint-dir", "ckpt"]
    args += ["--min-epoch-seconds", str(EPOCH_SECONDS)]
    request = jobs.Request(
        "horovod",
        args,
        tasks_per_node=2,
        time="00:03:00",
        resubmit_on_timeout=150,
        output_dir=str(tmp_path),
        workdir=str(tmp_path),
    )
    assert "#SBATCH --signal=B:USR1@150\n" in jobs.script(request)
    started, chain, job_id, epoch = time.monotonic(), [], jobs.submit(request), 0
    try:
        while True:
            final = jobs.wait(job_id, timeout=600)
            out, err = jobs.output(job_id)
            apart = " (the ranks did not leave together)" if "did not leave together" in out else ""
            chain.append(f"{final} in {time.monotonic() - started:.0f} s{apart}")
            assert final.time_limit == "00:03:00", final
            if epoch:
                assert f"resumed from rank 0's checkpoint at epoch {epoch}" in out, out
            decisions = _decisions(out)
            if final.state == "COMPLETED":
                break
            assert len(chain) <= jobs.MAX_RESUBMITS, f"still not done after {chain}"
            _, saved = training.latest_checkpoint(tmp_path / "ckpt")  # rank 0's, at the end of an epoch
            assert epoch < saved < EPOCHS, f"checkpoint of epoch {saved} after epoch {epoch}: {out}"
            assert final.state == "FAILED" and final.exit_code.startswith("75:"), f"{final}\n{out}\n{err}"
            assert decisions and decisions[-1][0] == saved and not decisions[-1][4], f"{decisions}\n{out}"
            # said by rank 0, or (where the ranks did not leave together) by the rank that left anyway
            assert f"stopped at epoch {saved} of {EPOCHS} by the time-limit warning" in out, out
            assert "stopped at the time-limit warning" in str(final), str(final)
            assert _resubmitted(out), f"{final}\n{out}\n{err}"
            job_id, epoch = _resubmitted(out), saved
    finally:
        print("\n".join(chain))
        for left in (job_id, _resubmitted(jobs.output(job_id)[0])):  # never leave a job running or queued
            if left and course_slurm.job(left) and not course_slurm.job(left).ended:
                course_slurm.cancel(left)
    assert len(chain) >= 2, f"the first job was not stopped by its time limit: {chain}"
    assert all(goes_on for *_, goes_on in decisions), f"the last job stopped yet COMPLETED: {decisions}"
    summary = json.loads(re.search(r"^SUMMARY (.*)$", out, re.M).group(1))
    assert summary["epochs_run"] == list(range(epoch + 1, EPOCHS + 1)), summary["epochs_run"]
    assert summary["optimizer_steps"] == EPOCHS * summary["steps_per_epoch"], summary
    if _resubmitted(out):  # warned, but it finished: the job it had submitted is cancelled, not left queued
        assert "is not needed and was cancelled" in out, out
        assert course_slurm.job(_resubmitted(out)) is None or course_slurm.job(_resubmitted(out)).state == "CANCELLED"


@pytest.mark.slow
def test_a_warning_that_comes_as_the_job_starts_waits_until_every_rank_can_take_it(slurm, tmp_path, records):
    """Slurm may send the warning up to a minute early, even as the job starts, while the ranks are still
    importing TensorFlow: USR1 then would kill them (exit 138). The script holds it until the program has
    created $COURSE_READY_FILE; the program then goes on (plenty of time is left), finishes, and the job
    it had queued is cancelled. A second warning (Slurm's own, or another early one) queues nothing more."""
    import time

    from course import slurm as course_slurm

    args = ["--epochs", "2", "--limit", "200", "--batch", "16", "--threads", "1", "--checkpoint-dir", "ckpt"]
    request = jobs.Request(
        "horovod",
        args,
        tasks_per_node=2,
        time="00:10:00",  # Slurm's own warning comes 9 minutes later, long after the program has finished
        resubmit_on_timeout=60,
        output_dir=str(tmp_path),
        workdir=str(tmp_path),
    )
    job_id = jobs.submit(request)
    deadline = time.monotonic() + 300
    while f"job {job_id} " not in jobs.output(job_id)[0] and time.monotonic() < deadline:
        time.sleep(0.2)  # the script's first line (after its trap), while the ranks are not even started
    # what Slurm's --signal=B:USR1 does, now rather than a minute before the limit
    for count in (1, 2):
        warned = subprocess.run(["scancel", "--batch", "--signal=USR1", str(job_id)], capture_output=True, text=True)
        assert warned.returncode == 0, warned.stderr
        # the shell runs its trap between commands, after a second or more on a busy machine: wait until it has
        # (a second USR1 sent while the first is still pending would merge with it, and the trap run once)
        while jobs.output(job_id)[0].count("time-limit warning:") < count and time.monotonic() < deadline:
            time.sleep(0.2)
    final = jobs.wait(job_id, timeout=600)
    out, err = jobs.output(job_id)
    queued = _resubmitted(out)
    try:
        assert final.state == "COMPLETED", f"{final}\n{out}\n{err}"
        assert out.index("time-limit warning:") < out.index("time-limit warning passed on to the program"), out
        assert re.search(r"^time-limit warning at epoch 1 of 2: .*: training goes on$", out, re.M), out
        assert queued and f"finished: job {queued} is not needed and was cancelled" in out, out
        assert out.count("time-limit warning:") == 2 and out.count("resubmitted as job") == 1, out
        assert not list(tmp_path.glob(".course-ready-*")), "the ready file is left behind"
    finally:
        if queued and course_slurm.job(queued) and not course_slurm.job(queued).ended:
            course_slurm.cancel(queued)


@pytest.mark.slow
def test_cancel_a_queued_or_running_job(slurm, tmp_path, records):
    sleepy = tmp_path / "sleepy.py"
    sleepy.write_text("import time\ntime.sleep(900)\n")
    job_id = jobs.submit(jobs.Request(str(sleepy), time="00:20:00", output_dir=str(tmp_path), workdir=str(tmp_path)))
    cancelled = run_course("job", "cancel", str(job_id), env=_env(records), timeout=60)
    assert cancelled.returncode == 0, cancelled.stderr
    assert jobs.wait(job_id, timeout=300).state == "CANCELLED"


def test_submit_without_slurm_says_what_to_do(tmp_path, records):
    """On a laptop or Binder (no sbatch on PATH): one line saying how to use the script instead."""
    env = _env(records)
    env["PATH"] = str(tmp_path)
    done = run_course("job", "horovod", "--output-dir", str(tmp_path), "--submit", env=env, timeout=120)
    assert done.returncode == 1 and "no Slurm client" in done.stderr and "--print" in done.stderr, done.stderr
    printed = run_course("job", "horovod", "--print", env=env, timeout=120)
    assert printed.returncode == 0 and printed.stdout.startswith("#!/bin/bash"), printed.stderr


def test_the_hand_written_warning_demo_takes_a_second_warning_without_a_change(tmp_path):
    """Issue 39: 11's hand-written job (part 2, section 1) run by bash itself, warned twice as Slurm may warn (an early
    USR1, then Slurm's own). The first is passed on once the program is ready and it saves its checkpoint; the
    second changes nothing: the trap says so and does not pass it on, and the script still waits for the
    program (before, the second USR1 ended the script's last `wait`, and the script, while the program ran)."""
    import json
    import os
    import signal
    import sys
    import threading

    from tests.conftest import ROOT

    cells = json.loads((ROOT / "solutions" / "11_running_on_a_cluster.ipynb").read_text())["cells"]
    demo = next("".join(c["source"]) for c in cells if "sleeper.sbatch" in "".join(c["source"]))
    exec(compile(demo, "11 demo", "exec"), {"WORK": tmp_path, "SLURM": False, "jobs": jobs, "__name__": "demo"})
    shell = subprocess.Popen(
        ["bash", "sleeper.sbatch"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        start_new_session=True,
    )
    ending = threading.Timer(120, os.killpg, (shell.pid, signal.SIGKILL))  # never left behind
    ending.start()
    lines = []
    try:
        for line in shell.stdout:  # ends when the shell and the program have both left (or were ended)
            lines.append(line)
            if line.startswith("working"):  # the program runs: warn the batch shell, as Slurm's B:USR1 does
                shell.send_signal(signal.SIGUSR1)
            elif "checkpoint saved" in line:
                shell.send_signal(signal.SIGUSR1)  # the second warning
            elif "again" in line:  # the trap has handled it: the script must still be waiting for the program
                still = shell.poll() is None
                program = subprocess.run(["pgrep", "-f", "-s", str(shell.pid), "sleeper.py"], capture_output=True)
                for pid in program.stdout.split():
                    os.kill(int(pid), signal.SIGTERM)
        shell.wait(timeout=60)
    finally:
        ending.cancel()
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
    out = "".join(lines)
    assert "batch shell: USR1 again: passed on already, nothing changes" in out, out
    assert still and out.count("checkpoint saved") == 1, out
    assert (tmp_path / "checkpoint.txt").read_text().endswith("s of work saved\n"), out
    assert sys.executable in (tmp_path / "sleeper.sbatch").read_text()
