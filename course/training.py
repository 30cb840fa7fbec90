"""Training helpers the notebooks share, one section per way of training in parallel.

- Horovod (notebook 07, both parts): `horovod_init` (hvd.init, one GPU per process by local rank with memory growth,
  or a few CPU threads per rank), rank-0-only output (`is_root`, `root_print`, `horovod_callbacks`), scaled batch and
  learning rate, steps per epoch, the learning rate in effect per epoch (`learning_rate_log`), resuming from rank
  0's checkpoint with the optimizer's state.
- MirroredStrategy (notebook 08): one replica per GPU, or per logical CPU device where there is no GPU
  (`logical_cpus` must run before TensorFlow initialises: use `in_fresh_process`), `mirrored_run`,
  `largest_batch`.
TensorFlow and Horovod are imported inside the functions: they take seconds to import.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from course import UserError

# ============================================================================================ Horovod


def horovod_init(threads: int = 1):
    """hvd.init(), then pin this process's device; returns the `horovod.tensorflow.keras` module.

    With GPUs: memory growth on every GPU (else TensorFlow reserves all memory of all of them in every process)
    and only the GPU at this process's local rank visible. Without GPUs: `threads` TensorFlow threads per rank,
    so that N ranks on N cores do not oversubscribe them.
    """
    import horovod.tensorflow.keras as hvd

    from course import devices

    hvd.init()
    devices.pin_tensorflow(hvd.local_rank(), threads)
    return hvd


def horovod_device() -> str:
    """What this rank computes on, for printing: 'GPU <n>' or 'CPU (<k> threads)'."""
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    gpus = tf.config.get_visible_devices("GPU")
    if gpus:
        return f"GPU {gpus[0].name.split(':')[-1]} (local rank {hvd.local_rank()})"
    threads = tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count()
    return f"CPU ({threads} thread{'s' if threads != 1 else ''})"


def is_root() -> bool:
    """True on Horovod rank 0 (and in a process that never called hvd.init)."""
    import horovod.tensorflow.keras as hvd

    try:
        return hvd.rank() == 0
    except ValueError:  # Horovod not initialised: a single process is its own rank 0
        return True


def root_print(*args: Any, **kwargs: Any) -> None:
    """print() on rank 0 only: every rank runs the same program, one copy of the output is enough."""
    if is_root():
        print(*args, **kwargs, flush=True)


SCALING_RULES = ("linear", "sqrt", "none")


def scaled_learning_rate(base_lr: float, size: int, rule: str = "linear") -> float:
    """The learning rate for `size` workers: base x size (linear, Goyal et al.: the global batch is size x larger),
    base x sqrt(size) (square root, Krizhevsky 2014: the gradient's noise falls as 1/sqrt(batch)), or base (none)."""
    factors = {"linear": float(size), "sqrt": size**0.5, "none": 1.0}
    if rule not in factors:
        raise UserError(f"unknown learning-rate scaling {rule!r}; valid: {', '.join(SCALING_RULES)}")
    return base_lr * factors[rule]


def steps_per_epoch(samples: int, batch_per_rank: int, size: int) -> int:
    """Steps each rank takes so that one epoch sees the dataset once over all ranks (at least 1)."""
    return max(1, samples // (batch_per_rank * size))


def distributed_sgd(learning_rate: float, momentum: float = 0.0):
    """Horovod's DistributedOptimizer around the legacy Keras SGD (the one Horovod's callbacks work with on TF 2.15)."""
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    return hvd.DistributedOptimizer(tf.keras.optimizers.legacy.SGD(learning_rate=learning_rate, momentum=momentum))


# Two names of this machine: Horovod makes a node of each host name it is given, with local ranks of its own.
HOST_NAMES = ("localhost", "127.0.0.1")


_RENDEZVOUS: list = []  # the Gloo rendezvous servers horovod_nodes started: they serve while this process runs


def horovod_nodes(view: Any, nodes: int = 2) -> str:
    """Make Horovod on the engines of VIEW see them as NODES nodes, as `horovodrun -H localhost:1,127.0.0.1:1` does
    with HOST_NAMES, so that local rank and rank differ as on a cluster; call it before hvd.init() on them. MPI's
    controller asks the operating system which processes share a node (here all), Horovod's Gloo controller takes
    each process's node from its environment: this sets that environment, engine i Horovod's rank i, and serves
    the rendezvous from this process. Engines not all on this machine are on real nodes: left alone. Returns the
    layout in words."""
    import socket

    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.gloo_run import create_slot_env_vars
    from horovod.runner.http.http_server import RendezvousServer

    ranks = len(view.targets)
    if set(view.apply_sync(socket.gethostname)) != {socket.gethostname()}:
        return f"{ranks} engines on the cluster's own nodes (Horovod finds them itself)"
    nodes = max(1, min(nodes, ranks, len(HOST_NAMES)))
    slots = [ranks // nodes + (h < ranks % nodes) for h in range(nodes)]
    plan = get_host_assignments(parse_hosts(",".join(f"{h}:{n}" for h, n in zip(HOST_NAMES, slots))), ranks)
    server = RendezvousServer(0)
    port = server.start()
    server.init(plan)
    _RENDEZVOUS.append(server)
    gloo = {"HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
            "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo"}  # fmt: skip
    for target, slot in zip(view.targets, plan):
        view.client[target].apply_sync(_set_environment, {**gloo, **create_slot_env_vars(slot)})
    per = ", ".join(str(n) for n in sorted(set(slots)))
    return f"{ranks} engines as {nodes} nodes for Horovod ({per} each): ranks 0.. on the first, local ranks from 0"


def _set_environment(variables: dict[str, str]) -> None:
    """On an engine: VARIABLES in its environment, where a library started later reads them."""
    os.environ.update(variables)


def horovodrun(ranks: int, hosts: int = 1) -> list[str]:
    """The start of a `horovodrun -np RANKS` command on this node (Gloo: no MPI launcher needed). With hosts=2 the
    ranks are split over two names of this machine, which Horovod takes for two nodes: ranks 0.. on the first, the
    rest on the second, each node's local ranks from 0, as on a cluster (local rank and rank then differ)."""
    import shutil
    import sys

    path = shutil.which("horovodrun", path=os.path.dirname(sys.executable)) or shutil.which("horovodrun")
    if path is None:
        raise UserError("horovodrun not found: install Horovod in this environment (make setup)")
    if not 1 <= hosts <= min(ranks, len(HOST_NAMES)):
        raise UserError(f"{ranks} rank(s) on {hosts} hosts: from 1 to {min(ranks, len(HOST_NAMES))} hosts")
    slots = [ranks // hosts + (h < ranks % hosts) for h in range(hosts)]
    layout = ",".join(f"{name}:{n}" for name, n in zip(HOST_NAMES, slots))
    return [path, "-np", str(ranks), "-H", layout, "--gloo"]


def run_horovod_mnist(
    ranks: int, *options: str, timeline: str | os.PathLike | None = None, timeout: float = 1800
) -> dict:
    """Run `python -m course.programs.horovod_mnist OPTIONS` on `ranks` processes with horovodrun; return rank 0's SUMMARY.

    With `timeline`, rank 0 writes the Horovod timeline there. A failed run raises UserError with its output's end.
    """
    return _horovod_mnist_summaries(ranks, options, timeline, timeout)[-1]


def compare_scalings(
    ranks: int,
    configurations: list[str],
    *options: str,
    timeline: str | os.PathLike | None = None,
    timeout: float = 1800,
) -> dict[str, dict]:
    """Train one model per learning-rate configuration (e.g. "none", "linear+warmup") on `ranks` processes, in one
    horovodrun launch (start-up paid once); return rank 0's SUMMARY for each configuration, by name."""
    summaries = _horovod_mnist_summaries(ranks, (*options, "--scaling", ",".join(configurations)), timeline, timeout)
    return {summary["scaling"]: summary for summary in summaries}


def _horovod_mnist_summaries(ranks: int, options: tuple, timeline, timeout: float) -> list[dict]:
    import json
    import sys

    from course import launch, mpi

    command = horovodrun(ranks) + (["--timeline-filename", str(timeline)] if timeline else [])
    command += [sys.executable, "-m", "course.programs.horovod_mnist", *options]
    done = launch.run(command, env=mpi.env(), timeout=timeout)
    found = re.findall(r"SUMMARY (\{.*\})", done.stdout)  # horovodrun prefixes each line with [rank]<stdout>:
    if done.returncode != 0 or not found:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise UserError(
            f"horovodrun -np {ranks} python -m course.programs.horovod_mnist failed (exit code "
            f"{done.returncode}); the end of its output:\n{tail}"
        )
    return [json.loads(summary) for summary in found]


CHECKPOINT = "checkpoint-{epoch:03d}.h5"
_CHECKPOINT_RE = re.compile(r"checkpoint-(\d+)\.h5$")


def horovod_callbacks(
    *,
    checkpoint_dir: str | os.PathLike | None = None,
    log_dir: str | os.PathLike | None = None,
    warmup_epochs: int = 0,
    initial_lr: float | None = None,
    verbose: int = 0,
) -> list:
    """The callbacks of the University of Queensland Deep Learning on HPC workshop, in order: broadcast rank 0's
    variables, average metrics, learning-rate warm-up; and on rank 0 only, a checkpoint per epoch and TensorBoard
    logs.

    warmup_epochs > 0 needs `initial_lr`, the SCALED rate (base x size): Horovod's LearningRateWarmupCallback
    ramps from initial_lr / size up to initial_lr and keeps it there.
    """
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback()]
    if warmup_epochs > 0:
        if initial_lr is None:
            raise UserError("warm-up needs initial_lr: the scaled learning rate (base x size) it ramps up to")
        callbacks.append(
            hvd.callbacks.LearningRateWarmupCallback(
                initial_lr=initial_lr, warmup_epochs=warmup_epochs, verbose=verbose
            )
        )
    if hvd.rank() == 0:
        if checkpoint_dir is not None:
            Path(checkpoint_dir).mkdir(parents=True, exist_ok=True)
            callbacks.append(tf.keras.callbacks.ModelCheckpoint(str(Path(checkpoint_dir) / CHECKPOINT)))
        if log_dir is not None:
            callbacks.append(tf.keras.callbacks.TensorBoard(log_dir=str(log_dir), histogram_freq=1))
    return callbacks


def learning_rate_log():
    """A Keras callback recording the learning rate in effect in each epoch, read from the optimizer after every
    step (a warm-up changes it step by step, so `.rates[e]` is the mean over epoch e's steps)."""
    import tensorflow as tf

    class LearningRateLog(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.rates: list[float] = []
            self._steps: list[float] = []

        def on_epoch_begin(self, epoch, logs=None):
            self._steps = []

        def on_train_batch_end(self, batch, logs=None):
            self._steps.append(float(tf.keras.backend.get_value(self.model.optimizer.lr)))

        def on_epoch_end(self, epoch, logs=None):
            self.rates.append(sum(self._steps) / len(self._steps) if self._steps else float("nan"))

    return LearningRateLog()


def latest_checkpoint(checkpoint_dir: str | os.PathLike | None) -> tuple[Path | None, int]:
    """(file, epoch) of the newest `checkpoint-NNN.h5` in `checkpoint_dir`, or (None, 0) when there is none."""
    if checkpoint_dir is None or not Path(checkpoint_dir).is_dir():
        return None, 0
    found = [(int(m.group(1)), p) for p in Path(checkpoint_dir).iterdir() if (m := _CHECKPOINT_RE.search(p.name))]
    if not found:
        return None, 0
    epoch, path = max(found)
    return path, epoch


def resume(model, checkpoint_dir: str | os.PathLike | None) -> tuple[Any, int]:
    """Continue from rank 0's newest checkpoint: weights AND optimizer state (step count, momentum, learning rate).

    Rank 0 reads the checkpoint and sends it to every rank (so the directory need not be shared between nodes);
    each rank loads it with `hvd.load_model`, which wraps the saved optimizer in a DistributedOptimizer. Returns
    (model, epoch to pass as `fit(initial_epoch=...)`): the given model and 0 when there is no checkpoint.
    """
    import tempfile

    import horovod.tensorflow as hvd
    import horovod.tensorflow.keras as hvd_keras

    path, epoch = latest_checkpoint(checkpoint_dir) if hvd.rank() == 0 else (None, 0)
    content = path.read_bytes() if path is not None else None
    epoch, content = hvd.broadcast_object((epoch, content), root_rank=0, name="resume_checkpoint")
    if not epoch:
        return model, 0
    with tempfile.TemporaryDirectory(prefix="course-resume-") as folder:
        copy = Path(folder) / "checkpoint.h5"
        copy.write_bytes(content)
        return hvd_keras.load_model(str(copy), legacy_opts=True), int(epoch)


def broadcast_weights(model) -> None:
    """Give every rank rank 0's weights now (BroadcastGlobalVariablesCallback does it after the first batch)."""
    import horovod.tensorflow as hvd

    hvd.broadcast_variables(model.variables, root_rank=0)


# ==================================================================================== MirroredStrategy


def logical_cpus(n: int) -> list[str]:
    """Split this process's CPU into `n` logical devices (one replica each); must run before TensorFlow starts."""
    import tensorflow as tf

    if n < 1:
        raise UserError(f"the number of logical CPU devices must be at least 1, not {n}")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
    except RuntimeError:
        have = len(tf.config.list_logical_devices("CPU"))
        if have < n:
            raise UserError(
                f"TensorFlow has already started in this process with {have} CPU device(s); logical "
                f"devices must be set before it starts: run this in a fresh process "
                f"(course.training.in_fresh_process) or restart the kernel"
            ) from None
    return [d.name for d in tf.config.list_logical_devices("CPU")][:n]


def replica_devices(n: int) -> list[str]:
    """`n` devices for MirroredStrategy: the first n GPUs, or n logical CPU devices on a machine without GPUs."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        if n > len(gpus):
            raise UserError(f"asked for {n} replicas but this machine has {len(gpus)} GPU(s): one replica per GPU")
        from course import devices

        devices.grow_gpu_memory()
        return [d.name for d in tf.config.list_logical_devices("GPU")][:n]
    return logical_cpus(n)


def mirrored_strategy(n: int):
    """A MirroredStrategy with `n` replicas (GPUs, else logical CPUs); on CPU its all-reduce is done on the host."""
    import tensorflow as tf

    devices = replica_devices(n)
    gpus = tf.config.list_physical_devices("GPU")
    ops = None if gpus else tf.distribute.ReductionToOneDevice(reduce_to_device=devices[0])
    return tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=ops)


@dataclass
class MirroredResult:
    """One MirroredStrategy run: replicas, batches, learning rate and epoch times (see `course.perf.Summary`)."""

    model: str
    replicas: int
    per_replica_batch: int
    global_batch: int
    learning_rate: float
    input_size: int
    epoch_times: list[float]
    images_per_epoch: int
    epoch_time: float
    images_per_second: float
    final_loss: float
    devices: list[str] = field(default_factory=list)
    dataset: str = ""  # the dataset trained on: "digits" where the fallback stood in (course.data.load)


def mirrored_run(
    replicas: int,
    *,
    model: str = "resnet50v2",
    per_replica_batch: int = 32,
    base_lr: float = 0.01,
    input_size: int = 32,
    epochs: int = 2,
    steps: int | None = None,
    limit: int | None = None,
    dataset: str = "cifar10",
    seed: int = 0,
    log_dir: str | os.PathLike | None = None,
) -> MirroredResult:
    """Train `model` (a ResNet of `models.RESNETS`, or "mnist_cnn") with MirroredStrategy on `replicas` devices
    as Jordi Torres's Fundamentals of Deep Learning for Multi-GPUs (BSC) does, and time it.

    Global batch = per-replica batch x replicas; learning rate = base x replicas; variables created in the
    strategy's scope; epoch time excludes the first epoch. Needs a process where TensorFlow has not started
    (logical CPU devices), e.g. `in_fresh_process(mirrored_run, 2, ...)`. With `log_dir`, TensorBoard logs
    (loss per epoch, the graph) go there: `perf.tensorboard(log_dir)` shows them. Over 60 lines, a third of them
    parameters: the BSC notebook's steps stay in one function, in its order.
    """
    import numpy as np
    import tensorflow as tf

    from course import data, models, perf

    strategy = mirrored_strategy(replicas)
    global_batch = per_replica_batch * strategy.num_replicas_in_sync
    lr = base_lr * strategy.num_replicas_in_sync
    loaded = data.load(dataset, limit=limit)
    (x, y), _ = loaded
    if steps is not None:  # exactly `steps` global batches per epoch, repeating the data if there is too little
        index = np.arange(steps * global_batch) % len(x)
        x, y = x[index], y[index]
    x = tf.image.resize(x, (input_size, input_size)).numpy() if x.shape[1] != input_size else x
    if model != "mnist_cnn" and x.shape[-1] == 1:
        x = x.repeat(3, axis=-1)  # the ResNets take colour images
    tf.keras.utils.set_random_seed(seed)
    with strategy.scope():  # variables (weights, optimizer slots) are created mirrored, one copy per replica
        if model == "mnist_cnn":
            net = models.mnist_cnn(x.shape[1:], 10, learning_rate=lr)
        else:
            net = models.resnet(model, input_shape=x.shape[1:], classes=10, learning_rate=lr)
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch, drop_remainder=True).prefetch(2)
    images = (len(x) // global_batch) * global_batch
    if images == 0:
        raise UserError(f"the global batch {global_batch} is larger than the {len(x)} training images: use more data")
    timer = perf.timing_callback(images)
    callbacks = [timer]
    if log_dir is not None:  # one process for all replicas: it alone writes the logs
        callbacks.append(tf.keras.callbacks.TensorBoard(log_dir=str(log_dir)))
    history = net.fit(train, epochs=epochs, verbose=0, callbacks=callbacks)
    summary = timer.summary()
    return MirroredResult(
        model,
        strategy.num_replicas_in_sync,
        per_replica_batch,
        global_batch,
        lr,
        input_size,
        summary.epoch_times,
        images,
        summary.epoch_time,
        summary.images_per_second,
        float(history.history["loss"][-1]),
        list(strategy.extended.worker_devices),
        loaded.dataset,
    )


def in_fresh_process(function: Callable, *args: Any, timeout: float | None = 1800, **kwargs: Any) -> Any:
    """Run `function(*args, **kwargs)` in a new Python process and return its result.

    TensorFlow fixes its devices when it starts, so each MirroredStrategy set-up needs a process of its own.
    Out-of-memory or a crash of that process is reported as `OutOfMemory` / `UserError`, not a dead kernel.
    """
    import concurrent.futures
    import multiprocessing

    import cloudpickle  # by value: also functions defined in a notebook, which a new process cannot import

    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        future = pool.submit(_call_pickled, cloudpickle.dumps((function, args, kwargs)))
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.process.BrokenProcessPool:
            raise OutOfMemory(
                f"the process running {function.__name__} died (killed, most likely out of memory)"
            ) from None


def _call_pickled(payload: bytes) -> Any:
    import cloudpickle

    function, args, kwargs = cloudpickle.loads(payload)
    return function(*args, **kwargs)


class OutOfMemory(UserError):
    """A training run did not fit in memory."""


def _is_oom(exc: BaseException) -> bool:
    try:
        import tensorflow as tf

        if isinstance(exc, tf.errors.ResourceExhaustedError):
            return True
    except ImportError:
        pass
    return isinstance(exc, (MemoryError, OutOfMemory)) or "out of memory" in str(exc).lower() or "OOM" in str(exc)


@dataclass
class BatchSearch:
    """The result of a largest-batch search: what fitted, what did not, and why the search stopped."""

    fits: list[int]
    failed: dict[int, str]
    largest: int | None
    stopped_because: str

    def __str__(self) -> str:
        lines = [f"batch {b}: fits" for b in self.fits] + [f"batch {b}: {why}" for b, why in self.failed.items()]
        lines.append(f"largest batch that fits: {self.largest} ({self.stopped_because})")
        return "\n".join(lines)


def largest_batch(trial: Callable[[int], Any], candidates: Sequence[int]) -> BatchSearch:
    """Try `trial(batch)` for increasing batches (16, 32, 64, ... as Torres's course does) until one runs out of memory.

    Out-of-memory errors (TensorFlow's ResourceExhaustedError, MemoryError, a killed process) end the search
    with a one-line report; any other error is a real bug and is raised.
    """
    fits: list[int] = []
    for batch in sorted(candidates):
        try:
            trial(batch)
        except Exception as exc:  # noqa: BLE001 - only out-of-memory is expected; others are re-raised
            if not _is_oom(exc):
                raise
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return BatchSearch(
                fits,
                {batch: f"out of memory ({type(exc).__name__}: {first[:160]})"},
                fits[-1] if fits else None,
                f"batch {batch} ran out of memory",
            )
        fits.append(batch)
    return BatchSearch(
        fits,
        {},
        fits[-1] if fits else None,
        f"every candidate up to {max(candidates)} fitted: the search was capped there",
    )


def search_batch(
    model: str = "resnet50v2",
    input_size: int = 32,
    candidates: Sequence[int] = (16, 32, 64, 128, 256),
    memory_limit_gb: float | None = None,
    timeout: float | None = 1800,
) -> BatchSearch:
    """Torres's trial and error: one training step of `model` at each batch size until memory runs out.

    Each trial runs in a fresh process, so an out-of-memory error - TensorFlow's, or the process being killed -
    ends the search with a report instead of taking the kernel down. On a GPU the limit is the GPU's memory; on a
    CPU-only machine `memory_limit_gb` caps the memory a trial may add (as a small GPU would), so the error is a
    real one without exhausting the machine.
    """
    return largest_batch(
        lambda batch: in_fresh_process(_batch_trial, model, input_size, batch, memory_limit_gb, timeout=timeout),
        candidates,
    )


def _batch_trial(model: str, input_size: int, batch: int, memory_limit_gb: float | None) -> None:
    """One training step of `model` on `batch` images (in a fresh process, under the memory cap if any)."""
    import resource

    import numpy as np
    import psutil

    from course import models

    net = models.resnet(model, input_shape=(input_size, input_size, 3), classes=10)
    if memory_limit_gb is not None:
        allowed = psutil.Process().memory_info().vms + int(memory_limit_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (allowed, resource.getrlimit(resource.RLIMIT_AS)[1]))
    net.train_on_batch(np.zeros((batch, input_size, input_size, 3), np.float32), np.zeros(batch, np.int64))
