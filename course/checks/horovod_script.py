"""Check a learner's Horovod training script (notebook 07, part two): run it for real and say what it gets wrong.

The learner converts a single-process Keras script into a Horovod one. Both are run as they would be on a
cluster - the original as one process, the conversion with `horovodrun -np 2` on two nodes (two names of this
machine, one rank each: local rank 0 on both, local size 1, so that local and global rank differ) - each process in
a folder of its own (`rank0/`, `rank1/`: as if every rank were on a node with its own disk), so a file written with
a relative path shows which rank wrote it. Without GPUs, TensorFlow lists one stand-in GPU per rank of the node, and
which one the script pins is noted; a random seed the script sets is each rank's own, so that only a broadcast
starts the ranks from the same weights. Every `Model.fit` gets one more callback that records what the
check needs, read from the model and its optimizer: steps per epoch, the learning rate of each epoch, the
logged loss, the final weights, Horovod's size, whether the optimizer is Horovod's, a digest of every
training image the process could draw from what it gave `fit` (to tell a rank's own shard from the whole set),
and the weights at the end of the first step before and after the script's callbacks (whose weights the
broadcast gave every rank).

    run = horovod_script.run_script("train_hvd.py", "out/hvd", ranks=2)
    single = horovod_script.run_script("train_single.py", "out/single", ranks=1, horovod=False)
    single = horovod_script.reference(18, 0.05, ["model.h5"])   # or what it does, from its constants
    horovod_script.check(run, single)      # prints what is right, fails naming what is wrong

    python -m course.checks.horovod_script SCRIPT FOLDER    # what each process runs (under horovodrun or alone)
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from course import UserError, devices, mpi, processes, training

RANK_VARIABLES = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")  # horovodrun (Gloo), Open MPI, others
TIMEOUT = 600  # seconds for one run: a few seconds of training, but the machine may be shared


@dataclass
class Record:
    """What one process did in `fit`: read from Keras and the optimizer, not from the script's variables."""

    rank: int
    horovod_size: int | None  # None: Horovod was not initialised
    distributed_optimizer: bool
    steps_per_epoch: list[float]  # as fit was given them (whole numbers for a right script)
    learning_rates: list[float]  # mean over each epoch's steps
    losses: list[float]  # as logged at the end of each epoch (after any metric averaging)
    weights: list[np.ndarray]
    files: list[str]  # files the process wrote in its folder, relative to it
    samples: list[str] = field(default_factory=list)  # digests of the training inputs it drew from ([]: unknown)
    # weights sampled at the end of the first step, before the script's own callbacks and after them (where
    # Horovod's broadcast runs): {"own": [...], "held": [...]}, {} if fit took no step
    first_step: dict[str, list[float]] = field(default_factory=dict)
    local_rank: int = 0  # Horovod's, from horovodrun's environment
    # each Keras file it wrote, loaded as the next job would (load_model) and run on the same inputs as the trained
    # model: {name: None if it gives the trained model's outputs, else what went wrong}
    models: dict[str, str | None] = field(default_factory=dict)
    host: str = ""  # the node horovodrun started it on
    pinned: list[int] | None = None  # the stand-in GPUs of its node it made visible (None: not pinned, or real GPUs)


@dataclass
class Run:
    """One run of a script: its exit code and output, and a Record per process that trained."""

    script: str
    ranks: int
    returncode: int
    output: str
    records: dict[int, Record] = field(default_factory=dict)
    hosts: int = 1  # the nodes horovodrun was given

    @property
    def layout(self) -> str:
        """Where the ranks ran, in words: "2 ranks on 2 nodes, 1 each"."""
        per = ", ".join(str(n) for n in sorted({self.ranks // self.hosts, -(-self.ranks // self.hosts)}))
        return f"{self.ranks} rank(s) on {self.hosts} node(s), {per} each"

    def __str__(self) -> str:
        if not self.records:
            return f"{self.script} on {self.ranks} process(es): no process trained (exit code {self.returncode})"
        first = self.records[min(self.records)]
        rates = ", ".join(f"{r:.4g}" for r in first.learning_rates)
        return (
            f"{self.script} on {self.ranks} process(es): {first.steps_per_epoch[0]} steps per epoch, "
            f"learning rate per epoch [{rates}]; files written: "
            + "; ".join(f"rank {r}: {', '.join(rec.files) or 'none'}" for r, rec in sorted(self.records.items()))
        )


def run_script(
    script: str | os.PathLike,
    folder: str | os.PathLike,
    ranks: int = 2,
    horovod: bool = True,
    timeout: float = TIMEOUT,
    hosts: int = 2,
) -> Run:
    """Run `script` with `horovodrun -np ranks` (or as one plain process: horovod=False) in a fresh `folder`, the ranks
    on `hosts` nodes: two names of this machine (training.horovodrun), so that local rank and rank differ as on a
    cluster and an answer that mixes them up is told."""
    script = Path(script).resolve()
    if not script.is_file():
        raise UserError(f"no script {script}: write it first (e.g. with %%writefile)")
    folder = Path(folder)
    if folder.exists():
        shutil.rmtree(folder)  # the check's own output folder: a rerun starts clean
    folder.mkdir(parents=True)
    program = [sys.executable, "-m", "course.checks.horovod_script", str(script), str(folder.resolve())]
    if horovod:
        hosts = min(hosts, ranks)
        program = training.horovodrun(ranks, hosts) + program
    env = processes.as_caller(mpi.env())
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    devices.default_threads(env, 1)  # one thread per process: the ranks share the node's cores
    try:
        done = subprocess.run(program, capture_output=True, text=True, timeout=timeout, env=env, cwd=folder)
        returncode, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        returncode, output = -1, f"stopped after {timeout:.0f} s: {exc}"
    return Run(script.name, ranks, returncode, output, read_records(folder), hosts if horovod else 1)


def reference(steps_per_epoch: int, learning_rate: float, files: list[str]) -> Run:
    """What a single-process script does by its constants, as a Run to check a conversion against unrun."""
    record = Record(0, None, False, [steps_per_epoch], [learning_rate], [], [], sorted(files), [])
    return Run("the single-process script", 1, 0, "", {0: record})


def read_records(folder: str | os.PathLike) -> dict[int, Record]:
    """The Record of every process that ran in `folder` (written by `main`)."""
    records = {}
    for path in sorted(Path(folder).glob("record-*.json")):
        meta = json.loads(path.read_text())
        with np.load(path.with_suffix(".npz")) as npz:
            weights = [npz[f"arr_{i}"] for i in range(len(npz.files))]
        records[meta["rank"]] = Record(weights=weights, **meta)
    return records


def problems(run: Run, single: Run) -> list[str]:
    """What `run` (the Horovod conversion) does wrong, measured against `single` (the original, one process)."""
    if not single.records:
        return [f"the single-process script did not train: run it first ({_tail(single.output)})"]
    if run.returncode != 0 or len(run.records) < run.ranks:
        trained = sorted(run.records) or "none"
        return [
            f"the Horovod run failed (exit code {run.returncode}; ranks that trained: {trained}). "
            f"The end of its output:\n{_tail(run.output)}"
        ]
    base, n = single.records[0], run.ranks
    ranks = [run.records[r] for r in range(n)]
    found = []
    sizes = {r.rank: r.horovod_size for r in ranks}
    if any(s is None for s in sizes.values()):
        found.append("Horovod was not initialised: call hvd.init() at the start of the script")
    elif any(s != n for s in sizes.values()):
        found.append(f"Horovod saw sizes {sizes} (rank: size) instead of {n} on every rank")
    if not all(r.distributed_optimizer for r in ranks):
        found.append(
            "the optimizer is not Horovod's: wrap it in hvd.DistributedOptimizer, or each rank follows "
            "only its own gradients"
        )
    difference = max(float(np.abs(a - b).max()) for r in ranks[1:] for a, b in zip(ranks[0].weights, r.weights))
    if difference > 1e-5:
        found.append(
            f"the ranks end with different weights (largest difference {difference:.3g}): every rank must "
            f"start from rank 0's weights and apply the same averaged update"
        )
    found += _broadcast(ranks) + _pinning(ranks)
    found += _shards(ranks) + _files(ranks, base)
    found += _steps(ranks[0].steps_per_epoch[0], base.steps_per_epoch[0], n)
    scaled = base.learning_rates[-1] * n
    rates = ranks[0].learning_rates
    if abs(rates[-1] - scaled) > 1e-4 * scaled:
        found.append(
            f"after the warm-up the learning rate was {rates[-1]:.4g} (read from the optimizer), not the "
            f"scaled {scaled:.4g} = {base.learning_rates[-1]:.4g} x {n} ranks"
        )
    if len(rates) < 2 or rates[0] >= scaled * (1 - 1e-4):
        found.append(f"no warm-up: the first epoch already ran at {rates[0]:.4g} (the scaled rate is {scaled:.4g})")
    if any(not np.allclose(r.losses, ranks[0].losses, rtol=1e-5, atol=1e-7) for r in ranks[1:]):
        found.append(
            "the ranks logged different losses: average the metrics over the ranks, so that what rank 0 "
            "prints and saves holds for the whole model"
        )
    return found


def _steps(steps: float, single: int, n: int) -> list[str]:
    """Steps per epoch: a whole number, the single script's divided by the ranks (to within one)."""
    if steps != int(steps):
        return [f"fit was given {steps:g} steps per epoch: a number of steps is a whole number (round down)"]
    want = single / n
    if abs(steps - want) >= 1:
        return [
            f"each rank took {steps} steps per epoch; the single process took {single}: "
            f"with {n} ranks one pass over the same data takes about {want:g}"
        ]
    return []


def _files(ranks: list[Record], base: Record) -> list[str]:
    """Rank 0 writes what the single process writes, and no other rank writes anything."""
    found = []
    for r in ranks[1:]:
        if r.files:
            found.append(
                f"rank {r.rank} wrote {', '.join(r.files)}: only rank 0 writes checkpoints and the model "
                f"(the copies are identical, and several writers corrupt one file)"
            )
    missing = sorted(set(base.files) - set(ranks[0].files))
    if missing:
        found.append(f"rank 0 did not write {', '.join(missing)}, which the single-process script writes")
    for name in sorted(set(base.files) & set(ranks[0].models)):
        if ranks[0].models[name]:
            found.append(f"rank 0's {name}, loaded as a model (tf.keras.models.load_model): {ranks[0].models[name]}")
    return found


def _broadcast(ranks: list[Record]) -> list[str]:
    """Every rank starts from rank 0's weights: after the first step, when Horovod's callback broadcasts, every rank
    holds the weights rank 0 had at that step's end. Measured on the weights, not read from the callback."""
    if any(not r.first_step for r in ranks):
        return []  # a rank took no step: the run's other problems say why

    def same(a: list[float], b: list[float]) -> bool:
        return np.allclose(a, b, rtol=1e-6, atol=1e-7)

    zero = ranks[0].first_step["own"]
    for r in ranks:
        if same(r.first_step["held"], zero):
            continue
        source = next((q.rank for q in ranks if same(r.first_step["held"], q.first_step["own"])), None)
        if source not in (None, r.rank):
            return [
                f"after the first step every rank held rank {source}'s weights (what the broadcast sent): every "
                f"rank should start from rank 0's (BroadcastGlobalVariablesCallback(0))"
            ]
        return [
            f"after the first step rank {r.rank} still held weights of its own, not rank 0's: nothing was "
            f"broadcast (BroadcastGlobalVariablesCallback(0) starts every rank from rank 0's weights)"
        ]
    return []


def _pinning(ranks: list[Record]) -> list[str]:
    """A rank that pins a GPU pins its node's GPU of its local rank: GPUs are numbered per node."""
    for r in ranks:
        if r.pinned is not None and r.pinned != [r.local_rank]:
            return [
                f"rank {r.rank} is local rank {r.local_rank} on its node ({r.host}) and made GPU {r.pinned} of that node "
                "visible: a node numbers its GPUs from 0 for the ranks on it, so each rank pins the one of its place "
                "on the node"
            ]
    return []


def _shards(ranks: list[Record]) -> list[str]:
    """Data parallelism: each rank draws from its own part of the data, so two ranks share (almost) no image."""
    first, *others = ranks
    if not first.samples or any(not r.samples for r in others):
        return []  # what fit was given could not be read again (a keras Sequence, a file): nothing to compare
    mine = set(first.samples)
    shared = max(len(mine & set(r.samples)) / min(len(mine), len(set(r.samples))) for r in others)
    if shared <= 0.5:
        return []
    return [
        f"the ranks trained on the same images ({shared:.0%} of rank 0's images are also another rank's): "
        f"give each rank its own part of the training data, so that together they see each image once per epoch "
        f"(taking fewer steps alone does not split the data)"
    ]


def check(run: Run, single: Run) -> None:
    """Print what the conversion does right; raise AssertionError listing every problem found."""
    found = problems(run, single)
    if found:
        raise AssertionError(f"{len(found)} problem(s) with {run.script}:\n" + "\n".join(f"- {p}" for p in found))
    record = run.records[0]
    print(
        f"Correct: {run.layout}, identical weights, {record.steps_per_epoch[0]} steps per epoch each, "
        f"learning rate {record.learning_rates[0]:.4g} -> {record.learning_rates[-1]:.4g}, rank 0 alone wrote "
        f"{', '.join(record.files)}."
    )


def _tail(text: str, lines: int = 12) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


# ------------------------------------------------------------------------- inside each process


def _rank() -> int:
    return next((int(os.environ[v]) for v in RANK_VARIABLES if os.environ.get(v)), 0)


def _recorders():
    """Make every `fit` also run two callbacks: the learning-rate log and a recorder of steps and losses."""
    import tensorflow as tf

    from course import training

    class Recorder(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.steps: list[int] = []
            self.losses: list[float] = []
            self.fitted = None
            self.given = None
            self.drawn: set[str] | None = None  # digests of what a Python generator gave fit, as it gave it
            self.epochs = 1
            self.first_step: dict[str, list[float]] = {}

        def on_train_begin(self, logs=None):
            steps = float(self.params.get("steps") or 0)  # as fit was given it: 9.375 stays 9.375
            self.steps.append(int(steps) if steps.is_integer() else steps)
            self.epochs = int(self.params.get("epochs") or 1)
            self.fitted = self.model

        def on_epoch_end(self, epoch, logs=None):
            self.losses.append(float((logs or {}).get("loss", float("nan"))))

        def on_train_batch_end(self, batch, logs=None):
            if "held" not in self.first_step and "own" in self.first_step:
                self.first_step["held"] = _sample(self.model.get_weights())  # after every callback of the script

    class FirstStep(tf.keras.callbacks.Callback):
        """First in the list: the weights at the end of the first step, before the script's callbacks see it."""

        def on_train_batch_end(self, batch, logs=None):
            if "own" not in recorder.first_step:
                recorder.first_step["own"] = _sample(self.model.get_weights())

    recorder, rates = Recorder(), training.learning_rate_log()
    original = tf.keras.Model.fit

    def fit(self, *args, callbacks=None, **kwargs):
        recorder.given = args[0] if args else kwargs.get("x")
        if inspect.isgenerator(recorder.given):  # read once only: noted as fit draws from it
            recorder.drawn = set()
            tapped = tap(recorder.given, recorder.drawn)
            args, kwargs = ((tapped, *args[1:]), kwargs) if args else (args, {**kwargs, "x": tapped})
        return original(self, *args, callbacks=[FirstStep(), *(callbacks or []), rates, recorder], **kwargs)

    tf.keras.Model.fit = fit
    return recorder, rates


def _stand_in_gpus() -> list[int] | None:
    """Where TensorFlow sees no GPU: it lists one per rank of this rank's node (HOROVOD_LOCAL_SIZE), as a GPU node
    would, and the GPUs the script makes visible are noted in the list returned instead of set. None where real
    GPUs are there: the script pins those."""
    import tensorflow as tf

    real_list, real_visible, real_growth = (
        tf.config.list_physical_devices,
        tf.config.set_visible_devices,
        tf.config.experimental.set_memory_growth,
    )
    if real_list("GPU"):
        return None
    host = os.environ.get("HOROVOD_HOSTNAME", "this node")

    class NodeGpus(list):
        def __getitem__(self, index):
            if isinstance(index, int) and not -len(self) <= index < len(self):
                raise IndexError(f"no GPU {index} on {host}: this node has {len(self)}, numbered from 0")
            return super().__getitem__(index)

    size = int(os.environ.get("HOROVOD_LOCAL_SIZE", "1"))
    gpus = NodeGpus(tf.config.PhysicalDevice(f"/physical_device:GPU:{i}", "GPU") for i in range(size))
    pinned: list[int] = []

    def list_devices(device_type=None):
        return gpus if device_type == "GPU" else real_list(device_type)

    def set_visible(devices, device_type=None):
        one = isinstance(devices, tf.config.PhysicalDevice)  # a named tuple itself
        chosen = [devices] if one or not isinstance(devices, (list, tuple)) else list(devices)
        if chosen and all(d in gpus for d in chosen):
            pinned.extend(gpus.index(d) for d in chosen)
            return None
        return real_visible(devices, device_type)

    def set_growth(device, enable):
        return None if device in gpus else real_growth(device, enable)

    for owner in (tf.config, tf.config.experimental):
        owner.list_physical_devices, owner.set_visible_devices = list_devices, set_visible
    tf.config.experimental.set_memory_growth = set_growth
    return pinned


def _seeds_of_this_rank(rank: int) -> None:
    """A seed the script sets is this rank's own (seed + 1009 x rank), as processes on a cluster would not share a
    starting point by luck: only a broadcast then gives every rank rank 0's weights."""
    import tensorflow as tf

    def offset(set_seed):
        def rank_seed(seed, *args, **kwargs):
            return set_seed(None if seed is None else seed + 1009 * rank, *args, **kwargs)

        return rank_seed

    tf.random.set_seed = offset(tf.random.set_seed)
    tf.keras.utils.set_random_seed = offset(tf.keras.utils.set_random_seed)
    tf.compat.v1.set_random_seed = offset(tf.compat.v1.set_random_seed)


def _sample(weights: list[np.ndarray]) -> list[float]:
    """The first 64 values of every weight array: enough to tell one rank's weights from another's."""
    return [float(v) for w in weights for v in np.ravel(w)[:64]]


def _digest(row) -> str:
    import hashlib

    return hashlib.sha1(np.ascontiguousarray(row).tobytes()).hexdigest()[:16]


def tap(batches: Iterator, drawn: set[str]) -> Iterator:
    """BATCHES (a Python generator given to fit) passed on unchanged; the digest of each input row it yields is
    added to DRAWN: a generator cannot be read again after fit."""
    for batch in batches:
        inputs = batch[0] if isinstance(batch, (tuple, list)) else batch
        inputs = next(iter(inputs.values())) if isinstance(inputs, dict) else inputs
        drawn.update(_digest(row) for row in np.asarray(inputs))
        yield batch


def _samples(given, batches: int) -> list[str]:
    """A short digest of each training input a process could draw from what it gave `fit`: the rows of an array,
    or the inputs of a dataset's first `batches` batches (as many as fit took); [] for what cannot be read again."""
    import tensorflow as tf

    if isinstance(given, tf.data.Dataset):
        rows = []
        for batch in given.take(batches if batches > 0 else 10_000):  # fit ended: the dataset does too
            inputs = batch[0] if isinstance(batch, (tuple, list)) else batch
            inputs = next(iter(inputs.values())) if isinstance(inputs, dict) else inputs
            rows.extend(np.asarray(inputs))
    elif isinstance(given, (np.ndarray, tf.Tensor)):
        rows = list(np.asarray(given))
    else:
        return []
    return sorted({_digest(row) for row in rows})


def _horovod_state(optimizer) -> tuple[int | None, bool]:
    try:
        import horovod.tensorflow.keras as hvd

        size = hvd.size()
    except (ImportError, ValueError):  # not installed, or hvd.init() never called
        size = None
    return size, type(optimizer).__module__.startswith("horovod")


def _saved_models(workdir: Path, files: list[str], trained) -> dict[str, str | None]:
    """Each Keras file at the top of FILES (the saved model; checkpoints sit in a folder) loaded with load_model
    and run on a few inputs: None where it gives TRAINED's outputs, else what went wrong (weights alone, another
    model, saved before training ended)."""
    import tensorflow as tf

    try:
        inputs = np.random.default_rng(0).random((4, *trained.input_shape[1:]), dtype=np.float32)
        expected = np.asarray(trained(inputs, training=False))
    except (AttributeError, TypeError, ValueError):
        return {}  # a model of no fixed input shape: its files are judged by name only
    found = {}
    for name in (f for f in files if f.endswith((".h5", ".keras")) and "/" not in f):
        try:
            loaded = tf.keras.models.load_model(workdir / name, compile=False)
        except Exception as exc:  # noqa: BLE001 - any failure to load is the answer's, and said
            found[name] = f"it does not load ({type(exc).__name__}): save the whole model (model.save), not its weights"
            continue
        same = np.allclose(np.asarray(loaded(inputs, training=False)), expected, rtol=1e-5, atol=1e-6)
        found[name] = None if same else "its outputs are not the trained model's: save the model after fit"
    return found


def main(argv: list[str] | None = None) -> int:
    """Run SCRIPT in FOLDER/rank<r>/ and write FOLDER/record-<r>.json and .npz after it."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m course.checks.horovod_script SCRIPT FOLDER", file=sys.stderr)
        return 2
    import runpy

    processes.exit_with_caller()  # the check's caller killed: this rank ends too
    script, folder = Path(argv[0]).resolve(), Path(argv[1]).resolve()
    rank = _rank()
    workdir = folder / f"rank{rank}"
    workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(workdir)
    sys.argv = [str(script)]
    sys.path.insert(0, str(script.parent))
    recorder, rates = _recorders()
    pinned = _stand_in_gpus()
    _seeds_of_this_rank(rank)
    runpy.run_path(str(script), run_name="__main__")
    if recorder.fitted is None:
        print(f"rank {rank}: the script never called model.fit", file=sys.stderr)
        return 1
    size, distributed = _horovod_state(recorder.fitted.optimizer)
    files = sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*") if p.is_file())
    meta = {
        "rank": rank,
        "horovod_size": size,
        "distributed_optimizer": distributed,
        "steps_per_epoch": recorder.steps,
        "learning_rates": rates.rates,
        "losses": recorder.losses,
        "files": files,
        "first_step": recorder.first_step,
        "local_rank": int(os.environ.get("HOROVOD_LOCAL_RANK", "0")),
        "host": os.environ.get("HOROVOD_HOSTNAME", ""),
        "pinned": pinned if pinned else None,
        "models": _saved_models(workdir, files, recorder.fitted),
        "samples": sorted(recorder.drawn)
        if recorder.drawn is not None
        else _samples(recorder.given, sum(recorder.steps) * recorder.epochs),
    }
    np.savez(folder / f"record-{rank}.npz", *recorder.fitted.get_weights())
    (folder / f"record-{rank}.json").write_text(json.dumps(meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
