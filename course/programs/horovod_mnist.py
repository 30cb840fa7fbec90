"""The MNIST CNN trained with Horovod, as a standalone program (the code changes the University of Queensland
Deep Learning on HPC workshop makes to a Keras script, in one file).

    horovodrun -np 2 -H localhost:2 python -m course.programs.horovod_mnist --epochs 3
    mpiexec -n 2 --bind-to none python -m course.programs.horovod_mnist --epochs 3      # what a Slurm job runs
    HOROVOD_TIMELINE=timeline.json horovodrun -np 2 ... python -m course.programs.horovod_mnist   # a timeline from rank 0

Every rank runs this same file. Output paths may contain {rank}; only rank 0 writes checkpoints, TensorBoard
logs, the saved model, the summary and the class-results row (so e.g. --checkpoint-dir ckpt-{rank} shows that
only ckpt-0 appears). A second run with the same --checkpoint-dir continues from rank 0's newest checkpoint.
--scaling may list several configurations (e.g. none,linear,linear+warmup,sqrt): each trains a fresh model from
the same seed in turn, in one launch (the start-up of TensorFlow and Horovod is paid once), and rank 0 prints one
SUMMARY per configuration.
With --results FILE rank 0 appends one row to the class results (course.results: strategy horovod, workers =
ranks); a bad results file is refused before training starts.

Time limits: SIGUSR1 is Slurm's warning before a job's limit (`#SBATCH --signal=USR1@N` to the tasks, or
`--signal=B:USR1@N` to the batch shell, whose trap passes it on; mpiexec forwards it to every rank). After it,
the ranks go on while another epoch fits in the time Slurm leaves the job (an epoch: the slowest of the job's
last few; the last epoch also needs the final evaluation, timed once, and the exit); then, at the end of an epoch
(rank 0's checkpoint of it is written as after every epoch), the program exits with status 75 (EX_TEMPFAIL: try
again) saying at which epoch it stopped; the same command with the same --checkpoint-dir, in the next job,
continues from there. Each decision is printed with the figures it rests on. From the stop on, a further USR1
changes nothing, and the ranks leave within the time counted for leaving: a rank still there then (the ranks did
not get through the collective at exit together) says so in one line and leaves anyway, with status 75. The
warning must leave more time than one epoch takes. --min-epoch-seconds makes short epochs as long as a real
dataset's, to rehearse this.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass

from course import settings

STOPPED = 75  # exit status after the time-limit warning: sysexits' EX_TEMPFAIL, "temporary failure, try again"
# After the warning, an epoch is estimated as the slowest of the job's last 3 (a busy node slows some), leaving
# out the job's first (it also traces the model) once there is another. The estimates are multiplied by SAFETY.
# Leaving (TensorFlow's, Horovod's and mpiexec's ends after the last line) is slow where starting was: on 2 cores,
# 3-5 s after a start of 10-15 s, 7-15 s after a start of 30-40 s beside other work. It is counted as
# EXIT_SHARE of this job's measured start-up, at least EXIT_SECONDS.
RECENT_EPOCHS = 3
SAFETY = 1.5
EXIT_SHARE = 0.5
EXIT_SECONDS = 10.0
_began = time.monotonic()  # the program's start (main() resets it), for its start-up time
_warned: list[float] = []  # when SIGUSR1 arrived (the handler only records it; the training loop acts on it)
_left_together = threading.Event()  # set once every rank has passed the collective at exit after the stop


def _on_warning(signum, frame) -> None:
    """SIGUSR1: Slurm's time-limit warning. Remember it; the epoch in progress finishes first."""
    _warned.append(time.time())


def exit_allowance(startup: float) -> float:
    """Seconds a stopped job has to leave after its last epoch: EXIT_SHARE of its start-up, at least EXIT_SECONDS."""
    return max(EXIT_SECONDS, EXIT_SHARE * startup)


def leave_within(seconds: float, rank: int, stopped: str, checkpoint_dir: str | None) -> None:
    """Once this rank stops at the warning (`stopped`: "epoch E of N"): later warnings change nothing (USR1 is
    ignored from here on, so it interrupts no collective either), and should the rank still be here `seconds`
    later (the ranks did not get through the end of training and the collective at exit together), it says so
    in one line, writes where each of its threads was to stderr (as when Slurm kills it) and leaves anyway with
    status STOPPED. Its writes never wait: a rank held up writing its output must not hold up this one."""
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)

    def leave() -> None:
        if not _left_together.is_set():
            line = (
                f"rank {rank}: stopped at {stopped} by the time-limit warning, but the ranks did not leave together "
                f"within {seconds:.0f} s: leaving anyway; rank 0's checkpoint is in {checkpoint_dir}; resubmit to "
                "continue\n"
            )
            for fd in (1, 2):
                try:
                    os.set_blocking(fd, False)
                except OSError:
                    pass
            try:
                os.write(1, line.encode())
            except OSError:
                pass
            faulthandler.dump_traceback(all_threads=True)
        os._exit(STOPPED)

    timer = threading.Timer(seconds, leave)
    timer.daemon = True
    timer.start()
    # the last resort, where Python no longer runs threads (the interpreter's own end): the kernel ends the rank
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(int(seconds) + 10)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The program's options: one add_argument per option, hence over 60 lines."""
    from course.data import DATASETS

    parser = argparse.ArgumentParser(
        prog="python -m course.programs.horovod_mnist", description=" ".join(__doc__.split("\n\n")[0].split())
    )
    parser.add_argument("--epochs", type=int, default=3, help="total epochs (a resumed run stops at the same total)")
    parser.add_argument("--batch", type=int, default=100, help="batch per rank (the global batch is batch x ranks)")
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate of ONE worker; scaled by the ranks")
    parser.add_argument(
        "--scaling",
        type=configurations,
        default=[("linear", None)],
        metavar="RULE[+warmup][,...]",
        help="how the learning rate grows with the ranks: linear (x ranks, the default), sqrt "
        "(x sqrt(ranks)) or none; +warmup adds a warm-up of --warmup-epochs (at least 1); "
        "a comma-separated list trains each configuration in turn",
    )
    parser.add_argument("--momentum", type=float, default=0.0)
    parser.add_argument(
        "--warmup-epochs",
        type=int,
        default=0,
        help="ramp the learning rate from the scaled rate / ranks up to the scaled rate over these "
        "epochs (Horovod's LearningRateWarmupCallback)",
    )
    parser.add_argument("--limit", type=int, default=None, help="use at most this many samples per split")
    parser.add_argument("--dataset", default="mnist", choices=sorted(DATASETS))
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow threads per rank on CPU")
    parser.add_argument("--checkpoint-dir", default=None)
    parser.add_argument("--log-dir", default=None, help="TensorBoard logs")
    parser.add_argument("--save", default=None, help="save the trained model here (rank 0)")
    parser.add_argument("--summary", default=None, help="write a JSON summary here (rank 0)")
    parser.add_argument(
        "--results",
        default=None,
        metavar="FILE",
        help="append one row to this class results CSV (rank 0; epochs = the epochs this run trained)",
    )
    parser.add_argument(
        "--validate",
        action="store_true",
        help="after every epoch, evaluate on each rank's share of the test images (averaged over the "
        "ranks: val_accuracy per epoch in the summary; epoch times include it)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--min-epoch-seconds",
        type=float,
        default=0.0,
        metavar="S",
        help="make every epoch last at least S seconds (each rank sleeps at the epoch's end): stands in for a "
        "larger dataset when rehearsing time limits and resubmission on a small one; epoch times include it",
    )
    args = parser.parse_args(argv)
    if args.epochs < 1 or args.batch < 1 or args.threads < 1:
        parser.error("--epochs, --batch and --threads must be positive")
    if args.min_epoch_seconds < 0:
        parser.error(f"--min-epoch-seconds must be 0 or more, not {args.min_epoch_seconds:g}")
    several = [
        f"--{k.replace('_', '-')}"
        for k in ("checkpoint_dir", "log_dir", "save", "summary", "results")
        if getattr(args, k)
    ]
    if len(args.scaling) > 1 and several:
        parser.error(f"{', '.join(several)} need(s) one --scaling configuration, not {len(args.scaling)}")
    return args


def announce_ready(rank: int) -> None:
    """Create $COURSE_READY_FILE (set by a resubmitting job script) once every rank handles the warning, so
    that the script passes USR1 on only then: before, it would kill a rank still starting."""
    ready = settings.get("COURSE_READY_FILE")
    if ready:
        import horovod.tensorflow as hvd_tf

        hvd_tf.broadcast_object(None, root_rank=0, name="ready_for_the_warning")  # every rank is past its handler
        if rank == 0:
            open(ready, "w").close()


def configurations(text: str) -> list[tuple[str, str | None]]:
    """--scaling's value: [(rule, "warmup" or None), ...] from e.g. "none,linear+warmup"; a bad one is named."""
    from course.training import SCALING_RULES

    found = []
    for item in text.split(","):
        rule, _, extra = item.strip().partition("+")
        if rule not in SCALING_RULES or extra not in ("", "warmup"):
            raise argparse.ArgumentTypeError(
                f"{item.strip()!r} is not a configuration: use {', '.join(SCALING_RULES)}, optionally with +warmup"
            )
        found.append((rule, extra or None))
    return found


def main(argv: list[str] | None = None) -> int:
    global _began
    signal.signal(signal.SIGUSR1, _on_warning)  # before the slow imports: the default action would kill the rank
    # Killed at the time limit (Slurm's SIGTERM), each rank first writes where it was to stderr, then dies as before
    faulthandler.register(signal.SIGTERM, chain=True)
    _began = time.monotonic()
    args = parse(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from course import training

    hvd = training.horovod_init(threads=args.threads)  # 1. initialise, pin the device by local rank
    from course import data

    rank, size = hvd.rank(), hvd.size()
    announce_ready(rank)
    paths = {
        k: (v.format(rank=rank) if v else None)
        for k, v in dict(
            checkpoint_dir=args.checkpoint_dir,
            log_dir=args.log_dir,
            save=args.save,
            summary=args.summary,
            results=args.results,
        ).items()
    }
    # One write per line, even where Python runs unbuffered (PYTHONUNBUFFERED): print() would write the text and its
    # newline separately, and mpiexec could put another rank's line between the two.
    print(
        f"rank {rank} of {size}, local rank {hvd.local_rank()}, device {training.horovod_device()} "
        f"on {socket.gethostname()}\n",
        end="",
        flush=True,
    )
    if paths["results"] and not results_file_ok(paths["results"], rank):  # before any training: every rank stops
        return 1

    loaded = data.load(args.dataset, limit=args.limit)  # .dataset: "digits" if the fallback stood in
    (x_train, y_train), (x_test, y_test) = loaded
    x, y = data.shard((x_train, y_train), rank, size)  # 2. each rank its own part of the data
    validation = data.shard((x_test, y_test), rank, size) if args.validate else None  # metrics averaged: all of it
    for rule, warmup in args.scaling:
        code = train(args, rule, warmup, paths, (x, y), len(x_train), validation, (x_test, y_test), loaded.dataset)
        if code:
            return code
    return 0


def train(
    args: argparse.Namespace,
    rule: str,
    warmup: str | None,
    paths: dict,
    shard: tuple,
    samples: int,
    validation,
    test: tuple,
    dataset: str,
) -> int:
    """Train one configuration on this rank's shard: a fresh model from the seed, or rank 0's checkpoint; rank 0
    reports. Over 60 lines on purpose: like Horovod's own examples, the numbered distributed changes read in order
    in one function, each with its comment."""
    import horovod.tensorflow as hvd_tf
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    from course import models, perf, training

    rank, size = hvd.rank(), hvd.size()
    x, y = shard
    warmup_epochs = max(args.warmup_epochs, 1) if warmup else args.warmup_epochs
    lr = training.scaled_learning_rate(args.lr, size, rule)  # 3. learning rate x workers
    steps = training.steps_per_epoch(samples, args.batch, size)  # 4. steps / workers: one pass per epoch

    tf.keras.utils.set_random_seed(args.seed)
    model = models.mnist_cnn(x.shape[1:], 10)
    model.compile(
        optimizer=training.distributed_sgd(lr, args.momentum),  # 5. average gradients
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    model, initial_epoch = training.resume(model, paths["checkpoint_dir"])  # 6. continue from rank 0's checkpoint
    if initial_epoch:
        training.root_print(f"resumed from rank 0's checkpoint at epoch {initial_epoch}")
    if initial_epoch >= args.epochs:
        training.root_print(f"already trained for {initial_epoch} epochs (asked for {args.epochs}): nothing to do")
        return 0

    warning = time_limit_stop(paths["checkpoint_dir"], test)
    timer = perf.timing_callback(steps * args.batch * size)
    rates = training.learning_rate_log()  # what the optimizer really used
    callbacks = training.horovod_callbacks(
        checkpoint_dir=paths["checkpoint_dir"], log_dir=paths["log_dir"], warmup_epochs=warmup_epochs, initial_lr=lr
    )  # 7. rank 0 writes
    train_set = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=args.seed + rank).repeat()
    started = time.perf_counter()
    history = model.fit(
        train_set.batch(args.batch),
        steps_per_epoch=steps,
        epochs=args.epochs,
        initial_epoch=initial_epoch,
        validation_data=validation,
        callbacks=callbacks + [epoch_floor(args.min_epoch_seconds), timer, rates, warning],
        verbose=2 if rank == 0 else 0,
    )
    elapsed = time.perf_counter() - started
    if warning.stopped_at is not None:  # the job's time is nearly up: no evaluation, no summary
        if rank == 0 and settings.get("COURSE_TEST_HOLD_AT_EXIT"):  # a test's rank 0 held up at exit
            time.sleep(float(settings.get("COURSE_TEST_HOLD_AT_EXIT")))
        training.root_print(
            f"stopped at epoch {warning.stopped_at} of {args.epochs} by the time-limit warning; "
            f"rank 0's checkpoint is in {paths['checkpoint_dir']}; resubmit to continue"
        )
        # every rank leaves together: mpiexec ends the others as soon as one exits non-zero, which could cut rank 0
        # short before it has said the above; bounded by leave_within (armed at the stop)
        hvd_tf.broadcast_object(None, root_rank=0, name="stopped_by_warning")
        _left_together.set()
        return STOPPED
    loss, accuracy = model.evaluate(*test, verbose=0)
    summary = timer.summary()
    if rank == 0:  # 8. only rank 0 saves and reports
        if paths["save"]:
            model.save(paths["save"])
        result = {
            "scaling": rule + ("+warmup" if warmup else ""),
            "warmup_epochs": warmup_epochs,
            "size": size,
            "batch_per_rank": args.batch,
            "global_batch": args.batch * size,
            "learning_rate": lr,
            "steps_per_epoch": steps,
            "initial_epoch": initial_epoch,
            "epochs_run": [initial_epoch + i + 1 for i in range(len(history.history["loss"]))],
            "epoch_times": summary.epoch_times,
            "epoch_time": summary.epoch_time,
            "images_per_second": summary.images_per_second,
            "test_accuracy": float(accuracy),
            "test_loss": float(loss),
            "learning_rates": rates.rates,
            "val_accuracy": [float(a) for a in history.history.get("val_accuracy", [])],
            "optimizer_steps": int(model.optimizer.iterations.numpy()),
        }
        if paths["summary"]:
            with open(paths["summary"], "w") as handle:
                json.dump(result, handle)
        print(f"SUMMARY {json.dumps(result)}", flush=True)
        if paths["results"]:
            return append_result(paths["results"], args, dataset, size, hvd.cross_size(), result, elapsed)
    return 0


@dataclass(frozen=True)
class Decision:
    """Rank 0's choice at the end of an epoch after the time-limit warning, and the figures it rests on."""

    epoch: int  # the epoch just finished (1-based)
    epochs: int  # the epochs asked for
    left: float | None  # seconds until the job's end time; None where Slurm did not say
    epoch_time: float  # the slowest of the job's recent epochs
    finish: float  # what follows the next epoch if it is the last (the final evaluation, timed), else 0
    startup: float = 0.0  # seconds from the program's start to its training's

    @property
    def needed(self) -> float:
        """Seconds the next epoch and what follows it need, with the margins."""
        return SAFETY * (self.epoch_time + self.finish) + self.exit_time

    @property
    def exit_time(self) -> float:
        """Seconds to leave after the last line (exit_allowance of the job's start-up)."""
        return exit_allowance(self.startup)

    @property
    def go_on(self) -> bool:
        return self.left is not None and self.left >= self.needed

    def __str__(self) -> str:
        left = "Slurm did not say how much time is left" if self.left is None else f"{self.left:.1f} s left"
        finish = f" + {self.finish:.1f} s for the final evaluation" if self.finish else ""
        return (
            f"time-limit warning at epoch {self.epoch} of {self.epochs}: {left}; the next epoch needs "
            f"{self.needed:.1f} s ({SAFETY:g} x ({self.epoch_time:.1f} s, the slowest recent epoch{finish}) + "
            f"{self.exit_time:.1f} s to exit, after a {self.startup:.0f} s start-up): "
            + ("training goes on" if self.go_on else "stopping after this epoch")
        )


def decide(
    epoch: int, epochs: int, left: float | None, epoch_times: list[float], finish: float = 0.0, startup: float = 0.0
) -> Decision:
    """Whether another epoch fits in what is left of the job: the slowest recent epoch, not the fastest or the first."""
    recent = epoch_times[1:][-RECENT_EPOCHS:] or epoch_times
    return Decision(epoch, epochs, left, max(recent), finish, startup)


def epoch_floor(seconds: float):
    """A Keras callback that makes each epoch last at least `seconds` (--min-epoch-seconds)."""
    import tensorflow as tf

    class EpochFloor(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self._began = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            time.sleep(max(0.0, seconds - (time.perf_counter() - self._began)))

    return EpochFloor()


def time_limit_stop(checkpoint_dir: str | None, test: tuple):
    """A Keras callback acting on the time-limit warning at the end of each epoch. (Over 60 lines: the callback
    class is defined here, where Keras and Horovod are already imported, as Horovod's examples do.)

    The ranks agree (one all-reduce) whether any of them was warned. Then rank 0 decides for all (a broadcast,
    so that every rank stops at the same epoch and none is left waiting in a collective): go on while the next
    epoch fits in the time Slurm leaves the job (course.slurm.seconds_left; `decide`), else stop after this
    epoch, whose checkpoint rank 0's ModelCheckpoint has written, and leave within exit_allowance (leave_within).
    Before the last epoch, the final evaluation on `test` is timed once and counted too. Without a checkpoint
    folder there is nothing to save: training goes on, and says so once.
    """
    import horovod.tensorflow as hvd_tf
    import tensorflow as tf

    from course import slurm

    class TimeLimitStop(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.stopped_at: int | None = None
            self._told = False
            self._times: list[float] = []  # this job's epoch times, checkpoint included (the first also traces)
            self._began = 0.0
            self._finish: float | None = None  # the final evaluation, timed when the next epoch is the last
            self._startup = 0.0

        def on_train_begin(self, logs=None):
            self._startup = time.monotonic() - _began

        def on_epoch_begin(self, epoch, logs=None):
            self._began = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self._times.append(time.perf_counter() - self._began)
            warned = hvd_tf.allreduce(tf.constant(len(_warned), tf.int32), op=hvd_tf.Sum, name="time_limit_warning")
            epochs = self.params.get("epochs", 0)
            if int(warned.numpy()) == 0 or epoch + 1 >= epochs:
                return  # no warning, or this was the last epoch anyway
            if checkpoint_dir is None:
                if not self._told and hvd_tf.rank() == 0:
                    print("time-limit warning, but no --checkpoint-dir to save to: training goes on", flush=True)
                self._told = True
                return
            stop = None
            if hvd_tf.rank() == 0:
                finish = self._final(epoch + 2 == epochs)  # before asking Slurm: timing it takes time
                decision = decide(epoch + 1, epochs, self._left(), self._times, finish, self._startup)
                print(decision, flush=True)
                stop = not decision.go_on
            if hvd_tf.broadcast_object(stop, root_rank=0, name="time_limit_stop"):
                self.stopped_at = epoch + 1
                self.model.stop_training = True
                stopped = f"epoch {self.stopped_at} of {epochs}"
                leave_within(exit_allowance(self._startup), hvd_tf.rank(), stopped, checkpoint_dir)

        def _left(self) -> float | None:
            job = os.environ.get("SLURM_JOB_ID")
            return slurm.seconds_left(job) if job else None

        def _final(self, next_is_last: bool) -> float:
            """Seconds the final evaluation takes, timed on this model once; 0 unless the next epoch is the last."""
            if next_is_last and self._finish is None:
                began = time.perf_counter()
                self.model.evaluate(*test, verbose=0)
                self._finish = time.perf_counter() - began
            return self._finish if next_is_last else 0.0

    return TimeLimitStop()


def results_file_ok(path: str, rank: int) -> bool:
    """Rank 0 checks that a row could be appended to `path`; every rank learns the answer (True: go on).

    Only rank 0 touches the file (the others may be on nodes that do not share it); on a problem rank 0 prints
    the one-line error and every rank returns False, so no rank is left waiting in a collective.
    """
    import horovod.tensorflow as hvd_tf

    from course import UserError, results

    problem = None
    if rank == 0:
        try:
            results.check_file(path)
        except UserError as exc:
            problem = str(exc)
    problem = hvd_tf.broadcast_object(problem, root_rank=0, name="results_file_check")
    if problem is not None and rank == 0:
        print(f"course: error: {problem}", file=sys.stderr, flush=True)
    return problem is None


def append_result(
    path: str, args: argparse.Namespace, dataset: str, size: int, nodes: int, result: dict, elapsed: float
) -> int:
    """Rank 0: append this run to the class results (course.results' schema); 1 with a one-line error if it cannot."""
    from course import UserError, results

    machine = results.hardware() + (f" per node, {nodes} nodes" if nodes > 1 else "")
    row = {
        "strategy": "horovod",
        "dataset": dataset,
        "network": "simple-mnist",
        "workers": size,
        "epochs": len(result["epochs_run"]),
        "batch_size": result["global_batch"],
        "elapsed_s": round(elapsed, 4),
        "accuracy": round(result["test_accuracy"], 6),
        "epoch_time_s": round(result["epoch_time"], 4),
        "images_per_s": round(result["images_per_second"], 2),
        "engines": size,
        "hardware": machine,
    }
    try:
        results.append_row(path, row)
    except UserError as exc:
        print(f"course: error: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"Appended this run to {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
