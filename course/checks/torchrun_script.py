"""Check a learner's torchrun script (notebook 12, part two): run it with torchrun for real and read what each rank
did from outside the script.

The ranks run as on two nodes: one torchrun per node (`--nnodes 2`, all on this machine) meeting at a c10d
rendezvous, so that LOCAL_RANK is not RANK and a script that confuses them is seen to. Each rank runs in a folder
of its own (`rank0/`, `rank1/`: as if every rank were on a node with its own disk), so a file written with a
relative path shows which rank wrote it. Before the script starts, each rank records the
samples drawn from any `TensorDataset` and counts, with a communication hook put on every
`DistributedDataParallel` the script makes, the gradients DDP all-reduced; and `torch.distributed.all_reduce`
calls of the script's own. After it, the weights of its DDP model and the files in its folder.

    run = torchrun_script.run_script("train_ddp.py", "out/ddp", ranks=2, args=["--epochs", "2"])
    torchrun_script.ddp_script(run, n=96, epochs=2, batch=16, lr=0.1)   # -> what is wrong, or None
    lost = torchrun_script.run_script("train_resume.py", "out/lost", max_restarts=1, kill=(1, 75))  # rank 1 killed

    python -m course.checks.torchrun_script SCRIPT FOLDER [ARGS ...]    # what each rank runs, under torchrun
"""

from __future__ import annotations

import json
import math
import os
import random
import runpy
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from course import UserError, devices, lab, processes
from course.checks import check, ddp, expect

TIMEOUT = 300  # seconds for one run: seconds of training, on a machine that may be shared
RANK_FILE = "record-{rank}.json"
FIRST_FILE = "first-attempt-{rank}.json"  # a rank's record in torchrun's first attempt, kept after a restart
MOMENTUM = 0.9  # the resume exercise's SGD: momentum buffers are the optimizer state a resume must carry
KILLED_FILE = "killed.json"  # written by the rank the check kills, just before it dies
# torch 2.13's restarted ranks can read the failed attempt's addresses from the store torchrun shares with the
# training's process group (pytorch/pytorch#135712); half of the restarts failed so here, none with this set
UNSHARED_STORE = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
KILL = "COURSE_TORCHRUN_KILL"  # "RANK:DRAWS": that rank kills itself at that draw, in torchrun's first attempt only


@dataclass
class Run:
    """One torchrun: its exit code, output, and what each rank did (rank -> ddp_run's record, plus env and files)."""

    script: str
    ranks: int
    returncode: int
    output: str
    records: dict[int, dict] = field(default_factory=dict)
    folder: str = ""  # where it ran: each rank's folder and what the job shares
    nodes: int = 1  # torchrun agents, one per (simulated) node

    @property
    def layout(self) -> str:
        """Where the ranks ran, in words: "2 ranks on 2 nodes (one torchrun each), 1 per node"."""
        return f"{self.ranks} rank(s) on {self.nodes} node(s) (one torchrun each), {self.ranks // self.nodes} per node"


def run_script(
    script: str | os.PathLike,
    folder: str | os.PathLike,
    ranks: int = 2,
    args: list[str] = (),
    timeout: float = TIMEOUT,
    max_restarts: int = 0,
    kill: tuple[int, int] | None = None,
    nodes: int = 2,
) -> Run:
    """Run `script` with torchrun in a fresh `folder`, ARGS after it: `nodes` agents (`--nnodes`, one per node as
    on a cluster, here all on this machine) meeting at a c10d rendezvous, ranks/nodes processes each, so LOCAL_RANK
    and RANK differ; `--max-restarts max_restarts`; with `kill=(rank, draws)` that rank dies by SIGKILL at its
    draws-th sample, once. One node where ranks do not divide evenly among `nodes`."""
    script = Path(script).resolve()
    if not script.is_file():
        raise UserError(f"no script {script}: write it first (e.g. with %%writefile)")
    nodes = nodes if ranks % nodes == 0 else 1
    folder = Path(folder).resolve()
    if folder.exists():
        shutil.rmtree(folder)  # the check's own output folder: a rerun starts clean
    folder.mkdir(parents=True)
    env = devices.default_threads(processes.as_caller(dict(os.environ, PYTHONWARNINGS="ignore")), 1)  # share the cores
    env.pop(KILL, None)
    if max_restarts:
        env[UNSHARED_STORE] = "1"
    if kill:
        env[KILL] = f"{kill[0]}:{kill[1]}"
    launch = lambda: _agents(script, folder, args, ranks, nodes, max_restarts)  # noqa: E731
    returncode, output = _torchrun(launch(), env, folder, timeout)
    if kill and returncode != -1 and _vanished_before_kill(folder, ranks):
        # a rank of the first attempt ended with no record and no error of the script's own before the rank the
        # check loses was lost (a machine's hiccup, not the answer's): the job once more, from a fresh folder
        shutil.rmtree(folder)
        folder.mkdir()
        returncode, again = _torchrun(launch(), env, folder, timeout)
        output = f"{output}\n(a rank ended early in the first attempt with no error of its own: ran again)\n{again}"
    return Run(script.name, ranks, returncode, output, read_records(folder), str(folder), nodes)


def _agents(script: Path, folder: Path, args: list, ranks: int, nodes: int, max_restarts: int) -> list[list[str]]:
    """One torchrun command per node. Their rendezvous is on the first node, as `srun torchrun --rdzv-backend c10d`
    on a cluster: a port below Linux's ephemeral range, so no connection of another program takes it meanwhile."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks // nodes}",
                f"--max-restarts={max_restarts}"]  # fmt: skip
    program = ["-m", "course.checks.torchrun_script", str(script), str(folder), *map(str, args)]
    if nodes == 1:
        return [torchrun + ["--standalone"] + program]
    port = lab.free_port("127.0.0.1", random.randrange(20000, 32000))
    rendezvous = ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={uuid.uuid4().hex}"]
    return [
        torchrun + [f"--nnodes={nodes}", *rendezvous, f"--rdzv-conf=is_host={int(n == 0)}"] + program
        for n in range(nodes)
    ]


def _torchrun(commands: list[list[str]], env: dict[str, str], folder: Path, timeout: float) -> tuple[int, str]:
    """The first failing exit code of COMMANDS (one torchrun agent each, run at once in FOLDER; 0 if none failed)
    and their outputs, one after the other; -1 if they were stopped at TIMEOUT."""
    logs, jobs = [folder / f"torchrun-{n}.log" for n in range(len(commands))], []
    for command, log in zip(commands, logs):
        with open(log, "w") as out:
            jobs.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=folder,
                                         start_new_session=True))  # fmt: skip
    returncode = _wait_for_agents(jobs, time.monotonic() + timeout)
    heads = len(logs) > 1
    output = "".join((f"--- node {n}\n" if heads else "") + log.read_text() for n, log in enumerate(logs))
    for log in logs:
        log.unlink()
    return returncode, output + (f"\nstopped after {timeout:.0f} s" if returncode == -1 else "")


def _wait_for_agents(jobs: list[subprocess.Popen], deadline: float, grace: float = 5) -> int:
    """The first failing exit code of JOBS, 0 if none failed, -1 at DEADLINE. Once one agent has failed the job is
    over, as `srun --kill-on-bad-exit` ends it: the others get GRACE seconds, then are killed (an agent whose ranks
    finished would otherwise wait 300 s at torchrun's exit barrier for the failed one)."""
    failed_at = None
    while True:
        codes = [job.poll() for job in jobs]
        failure = next((c for c in codes if c), 0)
        if None not in codes:
            return failure
        now = time.monotonic()
        if failure and failed_at is None:
            failed_at = now
        if now > deadline or (failed_at is not None and now > failed_at + grace):
            for job in jobs:
                processes.kill_group(job.pid)  # torchrun and every rank it started
                job.wait()
            return failure or -1
        time.sleep(0.2)


def _vanished_before_kill(folder: Path, ranks: int) -> bool:
    """Whether, in a job told to lose a rank, that rank was never lost, a rank of the first attempt ended without
    writing its record (killed from outside) and the others raised at most errors of a peer gone (gloo's, or
    torch.distributed's own)."""
    first = [folder / FIRST_FILE.format(rank=r) for r in range(ranks)]
    errors = [json.loads(f.read_text())["error"] for f in first if f.is_file()]
    return (
        not (folder / KILLED_FILE).is_file()
        and len(errors) < ranks
        and all(not e or e.startswith("Dist") or "gloo" in e for e in errors)
    )


def read_records(folder: str | os.PathLike) -> dict[int, dict]:
    """What each rank that finished in `folder` recorded (written by `main`), by rank."""
    records = [json.loads(p.read_text()) for p in sorted(Path(folder).glob(RANK_FILE.format(rank="*")))]
    return {r["rank"]: r for r in records}


def _tail(output: str, lines: int = 8) -> str:
    return "\n".join(output.strip().splitlines()[-lines:])


def _raised(run: Run, when: str = "", attempt: int = 0) -> None:
    """Fail with the first error a rank of RUN recorded in torchrun's ATTEMPT (its script raised), if any."""
    for r in sorted(run.records.values(), key=lambda r: r["rank"]):
        expect(r.get("attempt", 0) != attempt or not r["error"], f"{when}rank {r['rank']} raised {r['error']}")


@check
def ddp_script(run: Run, n: int, epochs: int, batch: int, lr: float) -> None:
    """The job ran on every rank with torchrun's variables; its training is ddp.ddp_training's right one; rank 0,
    and only rank 0, wrote `model.pt`, which holds the trained weights."""
    _raised(run)
    expect(
        run.returncode == 0 and len(run.records) == run.ranks,
        f"torchrun on {run.ranks} processes failed (exit code {run.returncode}, ranks that finished: "
        f"{sorted(run.records) or 'none'}); the end of its output:\n{_tail(run.output)}",
    )
    ranks = [run.records[r] for r in range(run.ranks)]
    for r in ranks:
        expect(r["initialized"], f"rank {r['rank']} never formed the process group (init_process_group)")
        expect(not r["wrapped"], f"rank {r['rank']} never wrapped its model in DistributedDataParallel")
    problem = ddp.ddp_training(ranks, n, epochs, batch, lr)
    expect(problem is None, problem or "")
    writers = [r["rank"] for r in ranks if "model.pt" in r["files"]]
    expect(writers == [0], f"model.pt was written by rank(s) {writers or 'none'}: rank 0 alone saves the model")
    expect(
        ddp._close(ranks[0]["saved"], ranks[0]["weights"]),
        "rank 0's model.pt does not hold the trained weights (save the module's state_dict after training)",
    )


def kill_point(n: int, ranks: int, batch: int, epoch: int = 1) -> tuple[int, int]:
    """Where resume_script's run loses a rank: the last rank, at a draw half-way through `epoch` (0-based), at
    least one step in, so that rank 0 has saved the epoch before (its step's all-reduce needed rank 0)."""
    share, local = math.ceil(n / ranks), batch // ranks
    steps = math.ceil(share / local)
    if steps < 2:
        raise UserError(f"{steps} step per epoch: a rank is lost in the middle of an epoch of at least 2 steps")
    return ranks - 1, epoch * share + (steps // 2) * local + 1


def _state_has(saved: object, key: str) -> bool:
    """Whether `key` is a key anywhere in the nested dicts and lists `saved`."""
    if isinstance(saved, dict):
        return key in saved or any(_state_has(v, key) for v in saved.values())
    return isinstance(saved, (list, tuple)) and any(_state_has(v, key) for v in saved)


def _checkpoint_of(run: Run) -> object:
    """What rank 0 saved last besides model.pt, loaded from the job's folder (None if it saved nothing else)."""
    from torch.serialization import load

    paths = [p for p in run.records[0]["saves"] if p != "rank0/model.pt"]
    try:
        return load(Path(run.folder) / paths[-1], weights_only=True) if paths else None
    except Exception:  # not a file of tensors and plain values: say nothing about what is in it
        return {}


@check
def resume_script(untouched: Run, lost: Run, n: int, epochs: int, batch: int, lr: float, killed_epoch: int = 1) -> None:
    """`untouched` trained as one process would with SGD(lr, momentum=MOMENTUM); `lost` lost its last rank in the
    middle of epoch `killed_epoch` and torchrun restarted every rank; the restarted ranks trained the epochs left
    only, on the same samples, to `untouched`'s weights. Rank 0 alone writes; its checkpoint holds the momentum."""
    first = _uninterrupted(untouched, n, epochs, batch, lr)
    again = _restarted(lost, n, batch, killed_epoch)
    share, left = math.ceil(n / untouched.ranks), epochs - killed_epoch
    for r in again:
        done = len(r["draws"]) / share
        expect(
            len(r["draws"]) == left * share,
            f"after the restart rank {r['rank']} trained {done:g} epoch(s), not the {left} left of {epochs}: "
            + ("it started again from the first (resume from the checkpoint)" if done == epochs else
               "it resumes at the epoch after the last one the checkpoint holds"),
        )  # fmt: skip
        expect(
            r["draws"] == first[r["rank"]]["draws"][killed_epoch * share :],
            f"after the restart rank {r['rank']} drew other samples than the uninterrupted run in the same epochs: "
            "the sampler's epoch is the epoch's own number (set_epoch)",
        )
    writers = sorted({r["rank"] for r in first + again if r["saves"]} - {0})
    expect(not writers, f"rank(s) {writers} wrote files too: one rank (rank 0) writes, every rank reads")
    saved = _checkpoint_of(lost)
    expect(
        not isinstance(saved, dict) or not saved or _state_has(saved, "momentum_buffer"),
        "the checkpoint holds no optimizer state (the momentum buffers of SGD with momentum=0.9): save and load "
        "optimizer.state_dict() too, or the resumed steps start without momentum",
    )
    for r in again:
        expect(
            ddp._close(r["weights"], first[0]["weights"]),
            f"after the restart rank {r['rank']}'s weights differ from the uninterrupted run's: every rank "
            "continues from the checkpoint (the model's and the optimizer's state)",
        )
    expect(
        ddp._close(again[0]["saved"], again[0]["weights"]),
        "rank 0's model.pt does not hold the trained weights (save the module's state_dict after training)",
    )


def _uninterrupted(run: Run, n: int, epochs: int, batch: int, lr: float) -> list[dict]:
    """RUN's records by rank, once it ended well, every rank drew its share of every epoch and holds one process's
    weights on the same global batches with SGD(lr, momentum=MOMENTUM)."""
    _raised(run, "uninterrupted, ")
    expect(
        run.returncode == 0 and len(run.records) == run.ranks,
        f"the uninterrupted torchrun failed (exit code {run.returncode}); the end of its output:\n{_tail(run.output)}",
    )
    share = math.ceil(n / run.ranks)
    for r in run.records.values():
        expect(
            len(r["draws"]) == epochs * share,
            f"uninterrupted, rank {r['rank']} drew {len(r['draws'])} samples, not {epochs} epochs of {share}",
        )
    ranks = [run.records[r] for r in range(run.ranks)]
    drawn = [[r["draws"][e * share : (e + 1) * share] for r in ranks] for e in range(epochs)]
    batches = [b for epoch in drawn for b in ddp._batches(epoch, batch // run.ranks)]
    expect(
        ddp._close(ranks[0]["weights"], ddp.one_process(batches, n, lr, MOMENTUM)),
        f"uninterrupted, rank 0's weights differ from one process's on the same global batches with "
        f"SGD(lr={lr}, momentum={MOMENTUM}): the optimizer is the exercise's, the loss the single script's",
    )
    return ranks


def _restarted(run: Run, n: int, batch: int, killed_epoch: int) -> list[dict]:
    """RUN's records by rank, once its rank was killed, every rank ran again (attempt 1) alike, and it ended well."""
    victim, _ = kill_point(n, run.ranks, batch, killed_epoch)
    for r in range(run.ranks):
        first = Path(run.folder) / FIRST_FILE.format(rank=r)
        error = json.loads(first.read_text())["error"] if first.is_file() else ""
        expect(
            (Path(run.folder) / KILLED_FILE).is_file() or not error,
            f"before rank {victim} was lost, in torchrun's first attempt, rank {r} raised {error}",
        )
    expect(
        (Path(run.folder) / KILLED_FILE).is_file(),
        f"rank {victim} was to be lost half-way through epoch {killed_epoch + 1}, but the job "
        f"{'ended' if run.returncode == 0 else 'failed'} before (exit code {run.returncode}); the end of its "
        f"output:\n{_tail(run.output)}",
    )
    counts = {r["rank"]: len(r["draws"]) for r in run.records.values() if r["attempt"] == 1}
    expect(
        len(set(counts.values())) <= 1,
        f"after the restart the ranks drew different numbers of samples (rank: samples {counts}): they did not "
        "resume from the same epoch (every rank reads the checkpoint)",
    )
    _raised(run, "after the restart, ", attempt=1)
    expect(
        run.returncode == 0 and len(run.records) == run.ranks and all(r["attempt"] == 1 for r in run.records.values()),
        f"rank {victim} was killed in epoch {killed_epoch + 1} and torchrun started every rank again, but the job "
        f"did not end well (exit code {run.returncode}); the end of its output:\n{_tail(run.output)}",
    )
    return [run.records[r] for r in range(run.ranks)]


# ---- what each rank runs under torchrun


def _instrument(record: dict) -> None:
    """Record the samples drawn, count DDP's all-reduces and the script's own, keep the DDP models made, record
    where torch.save and torch.load went; kill the rank KILL names at its draw, in the first attempt only."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import TensorDataset

    getitem, init, all_reduce = TensorDataset.__getitem__, DistributedDataParallel.__init__, dist.all_reduce
    save, load = torch.save, torch.load
    victim, at = map(int, os.environ.get(KILL, "-1:0").split(":"))

    def drawn(self, index):
        record["draws"].append(int(index))
        if record["rank"] == victim and record["attempt"] == 0 and len(record["draws"]) == at:
            (Path(record["folder"]) / KILLED_FILE).write_text(json.dumps({"rank": victim, "draws": at}))
            os.kill(os.getpid(), signal.SIGKILL)  # as a node that fails: no exception, no clean-up
        return getitem(self, index)

    def saved(obj, f, *args, **kwargs):
        record["saves"].append(_where(f, record["folder"]))
        return save(obj, f, *args, **kwargs)

    def loaded(f, *args, **kwargs):
        record["loads"].append(_where(f, record["folder"]))
        return load(f, *args, **kwargs)

    def made(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.register_comm_hook(record["hook"], ddp._counting_hook)
        record["models"].append(self)

    def own(*args, **kwargs):
        record["own_all_reduces"] += 1
        return all_reduce(*args, **kwargs)

    TensorDataset.__getitem__, DistributedDataParallel.__init__, dist.all_reduce = drawn, made, own
    torch.save, torch.load = saved, loaded


def _where(f, folder: str) -> str:
    """Where a torch.save/load went: its path relative to the job's FOLDER where it is inside it ("" if not a path)."""
    if not isinstance(f, (str, os.PathLike)):
        return ""
    path = Path(f).resolve()
    return str(path.relative_to(folder)) if path.is_relative_to(folder) else str(path)


def _saved(path: Path) -> list[float]:
    """The weights in a state_dict file, flat, in the model's order ([] if there is none or it is not one)."""
    import torch
    from torch.serialization import load  # torch.load itself is watched: this load is the check's, not the script's

    try:
        state = load(path, weights_only=True)
        return torch.cat([t.reshape(-1) for t in state.values()]).tolist()
    except Exception:  # no file, or not a state_dict of tensors: the check says what it expected
        return []


def _attempt(folder: Path, rank: int) -> int:
    """How many times RANK started in this job before: its attempt. Not TORCHELASTIC_RESTART_COUNT, which counts
    only its own agent's restarts (an agent restarted because another one's rank failed keeps its count)."""
    n = 0
    while (folder / f"started-{rank}-{n}").exists():
        n += 1
    (folder / f"started-{rank}-{n}").touch()  # a rank's attempts never overlap: no other writer of this name
    return n


def main(argv: list[str]) -> None:
    """Under torchrun: run SCRIPT in FOLDER/rank<RANK>/ instrumented, then write the rank's record in FOLDER."""
    import traceback

    import torch.distributed as dist

    processes.exit_with_caller()  # the check's caller killed: this rank ends too
    script, folder, args = Path(argv[0]), Path(argv[1]).resolve(), argv[2:]
    rank = int(os.environ["RANK"])
    home = folder / f"rank{rank}"
    home.mkdir(parents=True, exist_ok=True)
    os.chdir(home)
    record = {"rank": rank, "draws": [], "hook": {"buckets": 0, "steps": 0, "bytes": 0}, "own_all_reduces": 0,
              "models": [], "error": "", "initialized": False, "saves": [], "loads": [], "folder": str(folder),
              "attempt": _attempt(folder, rank)}  # fmt: skip
    record["env"] = {v: os.environ.get(v) for v in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")}
    _instrument(record)
    init = dist.init_process_group

    def formed(*a, **k):
        record["initialized"] = True
        return init(*a, **k)

    dist.init_process_group = formed
    sys.argv = [str(script), *args]
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            record["error"] = f"SystemExit({exit_.code})"
    except Exception as exc:
        record["error"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    models = record.pop("models")
    record["wrapped"] = "" if models else "model never wrapped"
    record["weights"] = ddp._flat(models[-1]) if models else []
    record["files"] = sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())
    record["saved"] = _saved(home / "model.pt")
    (folder / RANK_FILE.format(rank=rank)).write_text(json.dumps(record))
    if record["attempt"] == 0:
        (folder / FIRST_FILE.format(rank=rank)).write_text(json.dumps(record))
    if record["error"]:
        sys.exit(1)  # torchrun sees the rank fail: it stops the others (or restarts them all) instead of waiting


if __name__ == "__main__":
    main(sys.argv[1:])
