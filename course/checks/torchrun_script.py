"""Check a learner's torchrun script (notebook 12, part two): run it with torchrun for real and read what each rank
did from outside the script.

Each rank runs in a folder of its own (`rank0/`, `rank1/`: as if every rank were on a node with its own disk), so a
file written with a relative path shows which rank wrote it. Before the script starts, each rank records the
samples drawn from any `TensorDataset` and counts, with a communication hook put on every
`DistributedDataParallel` the script makes, the gradients DDP all-reduced; and `torch.distributed.all_reduce`
calls of the script's own. After it, the weights of its DDP model and the files in its folder.

    run = torchrun_script.run_script("train_ddp.py", "out/ddp", ranks=2, args=["--epochs", "2"])
    torchrun_script.ddp_script(run, n=96, epochs=2, batch=16, lr=0.1)   # -> what is wrong, or None

    python -m course.checks.torchrun_script SCRIPT FOLDER [ARGS ...]    # what each rank runs, under torchrun
"""

from __future__ import annotations

import json
import os
import runpy
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from course import UserError, devices, processes
from course.checks import check, ddp, expect

TIMEOUT = 300  # seconds for one run: seconds of training, on a machine that may be shared
RANK_FILE = "record-{rank}.json"


@dataclass
class Run:
    """One torchrun: its exit code, output, and what each rank did (rank -> ddp_run's record, plus env and files)."""

    script: str
    ranks: int
    returncode: int
    output: str
    records: dict[int, dict] = field(default_factory=dict)


def run_script(
    script: str | os.PathLike, folder: str | os.PathLike, ranks: int = 2, args: list[str] = (), timeout: float = TIMEOUT
) -> Run:
    """Run `script` with `torchrun --standalone --nproc-per-node ranks` in a fresh `folder`, ARGS after it."""
    script = Path(script).resolve()
    if not script.is_file():
        raise UserError(f"no script {script}: write it first (e.g. with %%writefile)")
    folder = Path(folder).resolve()
    if folder.exists():
        shutil.rmtree(folder)  # the check's own output folder: a rerun starts clean
    folder.mkdir(parents=True)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    program = torchrun + ["-m", "course.checks.torchrun_script", str(script), str(folder), *map(str, args)]
    env = devices.default_threads(dict(os.environ, PYTHONWARNINGS="ignore"), 1)  # the ranks share the cores
    job = subprocess.Popen(program, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                           cwd=folder, start_new_session=True)  # fmt: skip
    try:
        output, _ = job.communicate(timeout=timeout)
        returncode = job.returncode
    except subprocess.TimeoutExpired:
        processes.kill_group(job.pid)  # torchrun and every rank it started
        output, returncode = job.communicate()[0] + f"\nstopped after {timeout:.0f} s", -1
    return Run(script.name, ranks, returncode, output, read_records(folder))


def read_records(folder: str | os.PathLike) -> dict[int, dict]:
    """What each rank that finished in `folder` recorded (written by `main`), by rank."""
    records = [json.loads(p.read_text()) for p in sorted(Path(folder).glob(RANK_FILE.format(rank="*")))]
    return {r["rank"]: r for r in records}


def _tail(output: str, lines: int = 8) -> str:
    return "\n".join(output.strip().splitlines()[-lines:])


@check
def ddp_script(run: Run, n: int, epochs: int, batch: int, lr: float) -> None:
    """The job ran on every rank with torchrun's variables; its training is ddp.ddp_training's right one; rank 0,
    and only rank 0, wrote `model.pt`, which holds the trained weights."""
    expect(
        run.returncode == 0 and len(run.records) == run.ranks,
        f"torchrun on {run.ranks} processes failed (exit code {run.returncode}, ranks that finished: "
        f"{sorted(run.records) or 'none'}); the end of its output:\n{_tail(run.output)}",
    )
    ranks = [run.records[r] for r in range(run.ranks)]
    for r in ranks:
        expect(not r["error"], f"rank {r['rank']} raised {r['error']}")
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


# ---- what each rank runs under torchrun


def _instrument(record: dict) -> None:
    """Record the samples drawn, count DDP's all-reduces and the script's own, keep the DDP models made."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import TensorDataset

    getitem, init, all_reduce = TensorDataset.__getitem__, DistributedDataParallel.__init__, dist.all_reduce

    def drawn(self, index):
        record["draws"].append(int(index))
        return getitem(self, index)

    def made(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.register_comm_hook(record["hook"], ddp._counting_hook)
        record["models"].append(self)

    def own(*args, **kwargs):
        record["own_all_reduces"] += 1
        return all_reduce(*args, **kwargs)

    TensorDataset.__getitem__, DistributedDataParallel.__init__, dist.all_reduce = drawn, made, own


def _saved(path: Path) -> list[float]:
    """The weights in a state_dict file, flat, in the model's order ([] if there is none or it is not one)."""
    import torch

    try:
        state = torch.load(path, weights_only=True)
        return torch.cat([t.reshape(-1) for t in state.values()]).tolist()
    except Exception:  # no file, or not a state_dict of tensors: the check says what it expected
        return []


def main(argv: list[str]) -> None:
    """Under torchrun: run SCRIPT in FOLDER/rank<RANK>/ instrumented, then write the rank's record in FOLDER."""
    import traceback

    import torch.distributed as dist

    script, folder, args = Path(argv[0]), Path(argv[1]), argv[2:]
    rank = int(os.environ["RANK"])
    home = folder / f"rank{rank}"
    home.mkdir(parents=True, exist_ok=True)
    os.chdir(home)
    record = {"rank": rank, "draws": [], "hook": {"buckets": 0, "steps": 0, "bytes": 0}, "own_all_reduces": 0,
              "models": [], "error": "", "initialized": False}  # fmt: skip
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


if __name__ == "__main__":
    main(sys.argv[1:])
