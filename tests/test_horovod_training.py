"""Horovod and MirroredStrategy training (issue 7), on real MPI ranks and real logical devices.

- Two Horovod ranks, each on half of every batch, end with the weights of one process on the whole batches.
- Only rank 0 writes checkpoints, TensorBoard logs, the model and one class-results row per run (workers = ranks);
  a second run resumes from rank 0's checkpoint, optimizer state included. A bad results file stops every rank
  before training. The warm-up ends on the scaled learning rate (read from the optimizer).
- The Horovod timeline is written and parsed into negotiation / all-reduce / compute.
- MirroredStrategy on 2 logical CPU devices gives the weights of 1 device at the same global batch; the
  MirroredStrategy program writes TensorBoard logs and a class-results row.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from course import UserError, mpi, perf, results, training
from tests.conftest import PROGRAMS, ROOT

TIMEOUT = 600  # seconds per launch: the machine is shared


def weights(path) -> list[np.ndarray]:
    with np.load(path) as npz:
        return [npz[f"arr_{i}"] for i in range(len(npz.files))]


def max_difference(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    assert [x.shape for x in a] == [x.shape for x in b]
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b))


def run(command: list[str], env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    env = dict(mpi.env() if env is None else env)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=cwd or ROOT)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr[-4000:]}"
    return result


# ------------------------------------------------------------------------------------------- Horovod


@pytest.mark.slow
def test_two_ranks_on_half_batches_equal_one_process_on_whole_batches(tmp_path):
    run(mpi.command(2, sys.executable, str(PROGRAMS / "hvd_same_as_one.py"), str(tmp_path)))
    one = weights(tmp_path / "one-process.npz")
    assert max_difference(one, weights(tmp_path / "initial.npz")) > 1e-3, "training did not change the weights"
    for rank in (0, 1):
        difference = max_difference(weights(tmp_path / f"horovod-rank{rank}.npz"), one)
        assert difference <= 1e-5, f"rank {rank} differs from one process by {difference}"


def summary_line(output: str) -> list[dict]:
    return [json.loads(m) for m in re.findall(r"^SUMMARY (\{.*\})$", output, flags=re.M)]


@pytest.mark.slow
def test_rank0_only_outputs_resume_and_timeline(tmp_path):
    timeline = tmp_path / "timeline.json"
    args = [
        "-m",
        "course.programs.horovod_mnist",
        "--limit",
        "400",
        "--batch",
        "50",
        "--checkpoint-dir",
        str(tmp_path / "ckpt-{rank}"),
        "--log-dir",
        str(tmp_path / "tb-{rank}"),
        "--save",
        str(tmp_path / "model-{rank}.h5"),
        "--summary",
        str(tmp_path / "summary-{rank}.json"),
        "--results",
        str(tmp_path / "results-{rank}.csv"),
        "--momentum",
        "0.9",
    ]
    env = dict(mpi.env(), HOROVOD_TIMELINE=str(timeline))
    first = run(mpi.command(2, sys.executable, *args, "--epochs", "2"), env=env, cwd=tmp_path)

    # Both ranks ran, but only rank 0 wrote: checkpoints, TensorBoard logs, the model, the summary.
    assert sorted(re.findall(r"rank (\d) of 2, local rank", first.stdout)) == ["0", "1"], first.stdout
    assert sorted(p.name for p in (tmp_path / "ckpt-0").iterdir()) == ["checkpoint-001.h5", "checkpoint-002.h5"]
    assert any((tmp_path / "tb-0").rglob("events.out.tfevents.*")), "rank 0 wrote no TensorBoard events"
    assert (tmp_path / "model-0.h5").is_file() and (tmp_path / "summary-0.json").is_file()
    for written_by_rank1 in ("ckpt-1", "tb-1", "model-1.h5", "summary-1.json", "results-1.csv"):
        assert not (tmp_path / written_by_rank1).exists(), f"rank 1 wrote {written_by_rank1}"
    (report,) = summary_line(first.stdout)  # printed once: by rank 0
    assert report["size"] == 2 and report["global_batch"] == 100 and report["epochs_run"] == [1, 2]
    assert report["steps_per_epoch"] == training.steps_per_epoch(400, 50, 2) == 4
    assert report["optimizer_steps"] == 2 * 4

    # Exactly one class-results row, well-formed for course.results' reader: 2 Horovod workers.
    table = results.collect(tmp_path / "results-0.csv")
    assert table.problems == [] and len(table.rows) == 1, (table.problems, table.rows)
    (row,) = table.rows
    assert (row["strategy"], row["workers"], row["engines"], row["epochs"], row["batch_size"]) == (
        "horovod",
        "2",
        "2",
        "2",
        "100",
    )
    assert row["network"] == "simple-mnist" and row["dataset"] in ("mnist", "digits") and row["hardware"]
    assert float(row["accuracy"]) == pytest.approx(report["test_accuracy"], abs=1e-6)
    assert float(row["elapsed_s"]) >= sum(report["epoch_times"]) * 0.99

    # The timeline (written by rank 0) parses into negotiation / all-reduce / compute for both ranks.
    breakdown = perf.timeline_breakdown(timeline)
    assert breakdown.tensors >= 6  # the CNN's 6 gradient tensors at least
    assert sorted(breakdown.ranks) == [0, 1]
    assert breakdown.allreduce > 0 and breakdown.negotiation > 0
    assert abs(breakdown.negotiation + breakdown.allreduce + breakdown.compute - breakdown.span) < breakdown.span
    assert "MPI_ALLREDUCE" in breakdown.phases

    # A second run continues from rank 0's checkpoint at epoch 2 and trains only epoch 3.
    second = run(mpi.command(2, sys.executable, *args, "--epochs", "3"), cwd=tmp_path)
    assert "resumed from rank 0's checkpoint at epoch 2" in second.stdout
    (report,) = summary_line(second.stdout)
    assert report["initial_epoch"] == 2 and report["epochs_run"] == [3]
    # The optimizer's state came back too (step count and momentum, saved with the checkpoint): 8 + 4 steps.
    assert report["optimizer_steps"] == 3 * 4, "the resumed optimizer started counting again from 0"
    assert (tmp_path / "ckpt-0" / "checkpoint-003.h5").is_file() and not (tmp_path / "ckpt-1").exists()
    rows = results.collect(tmp_path / "results-0.csv").rows  # appended to, not rewritten: the epoch it trained
    assert [(r["workers"], r["epochs"]) for r in rows] == [("2", "2"), ("2", "1")]

    # A third run, as a resubmitted job that finds every epoch done: it says so, exits 0, trains and writes nothing.
    third = run(mpi.command(2, sys.executable, *args, "--epochs", "3"), cwd=tmp_path)
    assert "already trained for 3 epochs (asked for 3): nothing to do" in third.stdout, third.stdout
    assert not summary_line(third.stdout) and len(results.collect(tmp_path / "results-0.csv").rows) == 2
    assert not (tmp_path / "ckpt-0" / "checkpoint-004.h5").exists()


def test_after_the_warning_an_epoch_is_estimated_by_the_slowest_recent_one():
    """The time-limit decision (issue 32): the slowest of the last 3 epochs, not the fastest nor the first
    (it also traces the model) unless it is the only one, plus the final evaluation before the last epoch; the
    job goes on only if all of that fits."""
    from course.programs.horovod_mnist import EXIT_SECONDS, EXIT_SHARE, SAFETY, decide

    times = [9.0, 2.0, 2.0, 2.0, 5.0]  # a slow first epoch, then a loaded node slows the latest
    assert decide(5, 20, 100.0, times).epoch_time == 5.0
    assert decide(5, 20, 100.0, [4.0, 3.0, 6.0, 2.0, 2.0]).epoch_time == 6.0  # not the first, nor the fastest
    assert decide(2, 20, 100.0, times[:2]).epoch_time == 2.0  # the tracing epoch and one more so far
    assert decide(1, 20, 100.0, times[:1]).epoch_time == 9.0  # only the tracing epoch so far: that one
    needed = SAFETY * 5.0 + EXIT_SECONDS
    assert decide(5, 20, needed, times).go_on and not decide(5, 20, needed - 0.5, times).go_on
    last = decide(5, 6, needed + 1, times, finish=3.0)  # the next epoch is the last: its evaluation must fit too
    assert last.needed == SAFETY * 8.0 + EXIT_SECONDS and not last.go_on
    assert not decide(5, 20, None, times).go_on  # Slurm did not say how long is left: stop while it is safe
    assert "3.0 s for the final evaluation" in str(last) and "stopping after this epoch" in str(last)
    slow_start = 4 * EXIT_SECONDS / EXIT_SHARE  # a start-up that slow: leaving will be slow too
    assert decide(5, 20, needed, times, startup=slow_start).needed == SAFETY * 5.0 + 4 * EXIT_SECONDS
    assert decide(5, 20, needed, times, startup=1.0).needed == needed  # a quick start: at least EXIT_SECONDS


@pytest.mark.slow
def test_warmup_ramps_up_to_the_scaled_rate_and_each_rule_trains_in_one_launch(tmp_path):
    """2 ranks at one worker's rate 0.05, three rules in one launch: linear+warmup starts below the scaled rate 0.1
    and ends on it; none stays at 0.05; sqrt stays at 0.05 x sqrt(2). Rates are read from the optimizer."""
    done = run(
        mpi.command(
            2,
            sys.executable,
            "-m",
            "course.programs.horovod_mnist",
            "--limit",
            "200",
            "--batch",
            "25",
            "--scaling",
            "linear+warmup,none,sqrt",
            "--epochs",
            "3",
            "--lr",
            "0.05",
        ),
        cwd=tmp_path,
    )
    reports = summary_line(done.stdout)
    assert [r["scaling"] for r in reports] == ["linear+warmup", "none", "sqrt"], done.stdout[-2000:]
    rates = reports[0]["learning_rates"]  # read from the optimizer at every step, mean per epoch
    assert len(rates) == 3 and reports[0]["warmup_epochs"] == 1, rates
    assert rates[0] < 0.1 - 1e-3, f"the first epoch should warm up below the scaled rate 0.1: {rates}"
    assert rates[1] == pytest.approx(0.1, rel=1e-6) and rates[2] == pytest.approx(0.1, rel=1e-6), (
        f"after the warm-up the rate should be the scaled 0.05 x 2 = 0.1: {rates}"
    )
    assert reports[1]["learning_rates"] == pytest.approx([0.05] * 3, rel=1e-6)
    assert reports[2]["learning_rates"] == pytest.approx([0.05 * 2**0.5] * 3, rel=1e-6)
    assert all(r["epochs_run"] == [1, 2, 3] and r["optimizer_steps"] == 3 * 4 for r in reports), (
        "each rule trains a fresh model for all its epochs"
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--scaling", "linear,cubic"], "'cubic' is not a configuration"),
        (["--scaling", "sqrt+decay"], "'sqrt+decay' is not a configuration"),
        (
            ["--scaling", "none,linear", "--checkpoint-dir", "ckpt"],
            "--checkpoint-dir need(s) one --scaling configuration",
        ),
        (["--min-epoch-seconds", "-2"], "--min-epoch-seconds must be 0 or more, not -2"),
        (["--dataset", "digits"], "argument --dataset: invalid choice: 'digits'"),
    ],
)
def test_bad_scaling_configurations_are_one_line_errors(argv, message):
    done = subprocess.run(
        [sys.executable, "-m", "course.programs.horovod_mnist", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.slow
def test_bad_results_file_stops_every_rank_before_training(tmp_path):
    command = mpi.command(
        2,
        sys.executable,
        "-m",
        "course.programs.horovod_mnist",
        "--limit",
        "400",
        "--results",
        str(tmp_path / "missing-folder" / "results.csv"),
    )
    env = dict(
        mpi.env(), TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=tmp_path)
    assert done.returncode != 0, done.stdout
    errors = [line for line in done.stderr.splitlines() if line.startswith("course: error:")]
    assert errors == [
        f"course: error: cannot write results to {tmp_path / 'missing-folder' / 'results.csv'}: "
        f"the folder {tmp_path / 'missing-folder'} does not exist"
    ], done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Epoch 1" not in done.stdout and "SUMMARY" not in done.stdout


def test_a_rank_killed_at_the_time_limit_says_where_it_was(tmp_path):
    """Slurm ends a job at its limit with SIGTERM: the rank still dies of it, after writing its stack to stderr."""
    env = dict(
        mpi.env(), TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    command = [
        sys.executable,
        "-m",
        "course.programs.horovod_mnist",
        "--limit",
        "200",
        "--epochs",
        "3",
        "--min-epoch-seconds",
        "10",
    ]
    rank = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        for line in rank.stdout:  # one rank, no mpiexec: Horovod runs alone
            if line.startswith("Epoch 2/"):  # past tracing, whose stack is deeper than faulthandler shows
                break
        time.sleep(4)  # in the epoch's floor: its few steps take well under a second
        rank.terminate()
        _, err = rank.communicate(timeout=60)
    finally:
        rank.kill()
    assert rank.returncode == -signal.SIGTERM, (rank.returncode, err[-3000:])
    assert "most recent call first" in err and re.search(r'horovod_mnist.py", line \d+ in on_epoch_end\n', err), err[
        -3000:
    ]


@pytest.mark.slow
def test_a_rank_held_up_at_exit_after_the_warning_does_not_hold_the_job_past_its_exit_allowance(tmp_path):
    """Issue 39: a job stopped by the warning sat in the collective at exit until Slurm killed it. Here rank 0 is
    held up (COURSE_TEST_HOLD_AT_EXIT, far longer than any allowance) after the stop, as a rank slowed by its file
    system would be, and a second warning arrives just after the stop decision: the ranks still leave within
    their exit allowance (the test allows 20 times the least, EXIT_SECONDS, so a slow machine passes too, and
    well under the hold), with status 75, one line saying so, and the checkpoint of the epoch they stopped at."""
    from course.programs import horovod_mnist

    env = dict(mpi.env(), TF_CPP_MIN_LOG_LEVEL="2", COURSE_TEST_HOLD_AT_EXIT="3600")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("SLURM_JOB_ID", None)  # no Slurm: the first decision stops
    program = ["-m", "course.programs.horovod_mnist", "--limit", "200", "--epochs", "6", "--batch", "16"]
    program += ["--min-epoch-seconds", "4", "--checkpoint-dir", str(tmp_path / "ckpt")]
    job = subprocess.Popen(
        mpi.command(2, sys.executable, *program),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=tmp_path,
        start_new_session=True,
    )
    allowance = 20 * horovod_mnist.EXIT_SECONDS
    lines, decided, timers = [], None, [threading.Timer(TIMEOUT, os.killpg, (job.pid, signal.SIGKILL))]
    timers[0].start()
    try:
        for line in job.stdout:  # ends when every rank has left (or the timers have ended them)
            lines.append(line)
            if line.startswith("Epoch 2/"):  # past start-up: every rank takes the warning
                job.send_signal(signal.SIGUSR1)  # mpiexec passes it on to the ranks, as in a job
            if "stopping after this epoch" in line and decided is None:
                decided = time.monotonic()
                job.send_signal(signal.SIGUSR1)  # a second warning, once the ranks have begun to leave
                timers.append(threading.Timer(allowance, os.killpg, (job.pid, signal.SIGKILL)))
                timers[-1].start()
        job.wait(timeout=60)
        left = time.monotonic() - decided if decided else None
    finally:
        for timer in timers:
            timer.cancel()
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    out = "".join(lines)
    assert decided is not None, out[-3000:]
    assert left < allowance, f"left {left:.0f} s after the stop decision:\n{out[-3000:]}"
    assert job.returncode == horovod_mnist.STOPPED, (job.returncode, out[-3000:])
    stopped = int(re.search(r"time-limit warning at epoch (\d+) of 6: .*stopping after this epoch", out).group(1))
    assert len(re.findall("time-limit warning at epoch", out)) == 1, out[-3000:]
    assert training.latest_checkpoint(tmp_path / "ckpt")[1] == stopped, out[-3000:]
    said = [line for line in out.splitlines() if "did not leave together" in line]
    assert said and f"stopped at epoch {stopped} of 6 by the time-limit warning" in said[0], out[-3000:]
    assert "rank 0's checkpoint is in" in said[0] and "most recent call first" in out, out[-3000:]


# ---------------------------------------------------------------------------------- MirroredStrategy


@pytest.mark.slow
def test_mirrored_two_logical_devices_equal_one_device(tmp_path):
    result = run([sys.executable, str(PROGRAMS / "mirrored_same_as_one.py"), str(tmp_path)], env=dict(os.environ))
    assert "REPLICAS 2 DEVICES" in result.stdout and "device:CPU:1" in result.stdout, result.stdout
    one, two = weights(tmp_path / "replicas1.npz"), weights(tmp_path / "replicas2.npz")
    assert max_difference(one, weights(tmp_path / "initial.npz")) > 1e-3, "training did not change the weights"
    # Tolerance: float32 sums in a different order (per-replica gradients summed, divided by the global batch).
    assert max_difference(one, two) <= 1e-5


@pytest.mark.slow
def test_mirrored_program_writes_tensorboard_logs_and_a_results_row(tmp_path):
    result = run(
        [
            sys.executable,
            "-m",
            "course.programs.mirrored_resnet",
            "--replicas",
            "2",
            "--model",
            "mnist_cnn",
            "--dataset",
            "mnist",
            "--input-size",
            "28",
            "--batch",
            "8",
            "--steps",
            "2",
            "--epochs",
            "1",
            "--limit",
            "64",
            "--log-dir",
            str(tmp_path / "tb"),
            "--results",
            str(tmp_path / "results.csv"),
        ],
        env=dict(os.environ, COURSE_OFFLINE="1"),
    )
    assert any((tmp_path / "tb").rglob("events.out.tfevents.*")), f"no TensorBoard events:\n{result.stdout}"
    table = results.collect(tmp_path / "results.csv")
    assert table.problems == [] and len(table.rows) == 1, (table.problems, table.rows)
    (row,) = table.rows
    assert (row["strategy"], row["workers"], row["engines"], row["batch_size"], row["accuracy"]) == (
        "mirrored",
        "2",
        "1",
        "16",
        "",
    )


def test_logical_cpus_after_tensorflow_started_is_a_clear_error(tmp_path):
    code = (
        "import tensorflow as tf; tf.constant(1.0)\n"
        "from course import training, UserError\n"
        "try:\n    training.logical_cpus(2)\nexcept UserError as e:\n    print('USERERROR', e)\n"
    )
    result = run([sys.executable, "-c", code], env=dict(os.environ))
    assert "USERERROR" in result.stdout and "fresh process" in result.stdout


# ------------------------------------------------------------------------------ pure helpers


def test_summary_excludes_first_epoch():
    summary = perf.summarize([10.0, 2.0, 4.0, 3.0], images_per_epoch=600)
    assert summary.epoch_time == 3.0 and summary.images_per_second == 200.0 and summary.excluded_first
    assert perf.summarize([5.0], 100).epoch_time == 5.0
    with pytest.raises(UserError):
        perf.summarize([], 100)


def test_scaling_figures():
    assert training.scaled_learning_rate(0.01, 4) == pytest.approx(0.04)
    assert training.steps_per_epoch(60000, 100, 4) == 150
    assert perf.weak_scaling_efficiency(180.0, 100.0, 2) == pytest.approx(0.9)
    assert perf.efficiency(perf.speedup(45.0, 12.0), 4) == pytest.approx(0.9375)
    assert perf.median_ratio([(2, 1), (3, 1), (10, 1)]) == 3


def test_largest_batch_stops_at_real_memory_error():
    def trial(batch):  # 1 GiB per batch unit of address space: batch 2**16 asks for 64 TiB and is refused
        np.empty((batch, 2**27), dtype=np.float64)

    search = training.largest_batch(trial, [1, 2, 4, 2**16])
    assert search.fits == [1, 2, 4] and search.largest == 4 and list(search.failed) == [2**16]
    assert "out of memory" in str(search)
    capped = training.largest_batch(trial, [1, 2])
    assert capped.largest == 2 and "capped" in capped.stopped_because

    def buggy(batch):
        raise ValueError("a bug, not memory")

    with pytest.raises(ValueError):
        training.largest_batch(buggy, [1])


def test_timeline_errors_are_clear(tmp_path):
    with pytest.raises(UserError, match="HOROVOD_TIMELINE"):
        perf.read_timeline(tmp_path / "missing.json")
    (tmp_path / "t.json").write_text('[\n{"name": "process_name", "ph": "M", "pid": 0, "args": {}},\n')
    with pytest.raises(UserError, match="no events"):
        perf.timeline_breakdown(tmp_path / "t.json")
