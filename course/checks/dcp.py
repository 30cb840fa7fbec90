"""Notebook 13's check of checkpoints that reshard (ex-dcp): the check's model, sharded by the learner's `shard`
(FSDP2), saved with the learner's `save` on every rank of a gloo group, then loaded with the learner's `load` into
the same model sharded over other numbers of ranks. Measured from outside the answer: which rank wrote each file of
the checkpoint's folder (each rank saves under a umask of its own, which the files' permission bits keep), how many
bytes, which rows of each parameter each file holds (the checkpoint's own `.metadata`), and the weights every rank
holds after the save and after the load (its local shards, put together here).

    emptied(OUT / "checkpoint")      # ex-dcp: the checkpoint's folder, an earlier run's files removed
    save_run(shard, save, folder)    # ex-dcp: on each engine (deadline.gather): the learner's save of the check's model
    written(folder)                  # ex-dcp: each file of the folder, its bytes, the rank that wrote it
    pieces(folder)                   # ex-dcp: what a DCP checkpoint's .metadata says each file holds
    shards_written(saved, files, pieces)  # ex-dcp: every rank wrote a file of the rows it held, none the whole model
    loads(shard, load, folder)       # ex-dcp: the learner's load on new gloo groups of LOAD_RANKS ranks
    reloaded(saved, loaded)          # ex-dcp: on each, every weight put together from the shards is the saved one
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from course.checks import check, expect
from course.checks.ddp import on_gloo_ranks

WIDTHS = (64, 127, 65, 1)  # two blocks (Linear + Tanh) and a head: rows that split unevenly over 2, 3 and 4 ranks
SHIFT = 1.0  # added to every weight of the model a checkpoint is loaded into, so that a load that does nothing shows
LOAD_RANKS = (1, 3)  # the ranks the notebook's checkpoint is loaded on: fewer and more, within Binder's 2 GB
SAVE_SECONDS = 30.0  # s the engines get for the save: a rank left waiting in a collective is told within it
OVERHEAD = 4096  # bytes a rank may write per tensor beyond its shard's values (DCP writes about 1.6 KB)
_RANK_BITS = (0o004, 0o020, 0o040)  # permission bits a rank's umask clears: bit k of the rank clears _RANK_BITS[k]


def model(shift: float = 0.0):
    """The check's model (float64, the same weights on every rank): blocks of Linear and Tanh of WIDTHS, then a
    Linear head; `shift` added to every parameter."""
    import torch

    torch.manual_seed(13)
    blocks = [torch.nn.Sequential(torch.nn.Linear(a, b), torch.nn.Tanh()) for a, b in zip(WIDTHS[:-2], WIDTHS[1:-1])]
    built = torch.nn.Sequential(*blocks, torch.nn.Linear(WIDTHS[-2], WIDTHS[-1])).double()
    with torch.no_grad():
        for p in built.parameters():
            p.add_(shift)
    return built


def emptied(folder: str | os.PathLike) -> str:
    """`folder`, made empty (a checkpoint of an earlier run removed), as a string."""
    shutil.rmtree(folder, ignore_errors=True)
    Path(folder).mkdir(parents=True)
    return str(folder)


def _sharded(shard, shift: float):
    """On every rank of a group: the check's model, sharded by `shard` over a mesh of all ranks."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    built = model(shift)
    returned = shard(built, init_device_mesh("cpu", (dist.get_world_size(),)))
    return built if returned is None else returned


def _held(sharded) -> dict[str, tuple[bool, list]]:
    """What this rank holds of each parameter: (sharded or whole, its values as nested lists)."""
    from torch.distributed.tensor import DTensor

    held = {}
    for name, p in sharded.named_parameters():
        local = p.to_local() if isinstance(p, DTensor) else p
        held[name] = (isinstance(p, DTensor), local.detach().tolist())
    return held


def _bytes(sharded) -> int:
    from torch.distributed.tensor import DTensor

    locals_ = [p.to_local() if isinstance(p, DTensor) else p for p in sharded.parameters()]
    return sum(t.numel() * t.element_size() for t in locals_)


def _umask(rank: int) -> int:
    """The umask rank `rank` saves under: others' write cleared, and the bits of _RANK_BITS that `rank`'s bits name."""
    if not 0 <= rank < 2 ** len(_RANK_BITS):
        raise ValueError(f"the check tells at most {2 ** len(_RANK_BITS)} ranks apart, not rank {rank}")
    return 0o002 | sum(bit for k, bit in enumerate(_RANK_BITS) if rank >> k & 1)


def save_run(shard, save, folder: str) -> dict:
    """On every rank of a group: the check's model sharded by `shard`, saved by `save(model, folder)` under this
    rank's umask. This rank, its tensors and bytes, and what it held."""
    import torch.distributed as dist

    sharded = _sharded(shard, 0.0)
    rank = dist.get_rank()
    before = os.umask(_umask(rank))
    try:
        save(sharded, folder)
    finally:
        os.umask(before)
    return {"rank": rank, "held": _held(sharded), "bytes": _bytes(sharded)}


def written(folder: str | os.PathLike) -> list[dict]:
    """Every file under `folder`: its path in it, its bytes, and the rank that wrote it (read from its permission
    bits, which save_run's umask set)."""
    found = []
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        mode = path.stat().st_mode
        rank = sum(1 << k for k, bit in enumerate(_RANK_BITS) if not mode & bit)
        found.append({"name": str(path.relative_to(folder)), "bytes": path.stat().st_size, "rank": rank})
    return found


def pieces(folder: str | os.PathLike) -> list[dict]:
    """The pieces of tensors a DCP checkpoint in `folder` holds, as its `.metadata` says: each piece's tensor (by
    the checkpoint's key), its rows [first, end) and its file; none where the folder has no `.metadata`."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    if not (Path(folder) / ".metadata").is_file():
        return []
    metadata = FileSystemReader(str(folder)).read_metadata()
    sizes = {
        (key, tuple(chunk.offsets)): tuple(chunk.sizes)
        for key, stored in metadata.state_dict_metadata.items()
        if isinstance(stored, TensorStorageMetadata)
        for chunk in stored.chunks
    }
    found = []
    for index, stored in (metadata.storage_data or {}).items():
        size = sizes.get((index.fqn, tuple(index.offset or ())))
        if size:  # a tensor of one row or more (not a 0-d tensor, nor pickled bytes)
            first = index.offset[0]
            found.append({"tensor": index.fqn, "rows": (first, first + size[0]), "file": stored.relative_path})
    return found


def load_run(shard, load, folder: str) -> dict:
    """On every rank of a group: the check's model with every weight shifted by SHIFT, sharded by `shard`, then
    `load(model, folder)`. This rank, what it raised (or ""), and what it holds after."""
    import torch.distributed as dist

    sharded = _sharded(shard, SHIFT)
    try:
        load(sharded, folder)
        error = ""
    except Exception as exc:  # the learner's load failing: told in words, as the others' are
        error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return {"rank": dist.get_rank(), "error": error, "held": _held(sharded)}


def loads(shard, load, folder: str, ranks: tuple[int, ...] = LOAD_RANKS) -> dict[int, list[dict]]:
    """load_run on a new gloo group of each number of `ranks`: by number of ranks, each rank's. A job that failed
    as a whole (a rank left waiting, a crash) gives one entry that says so."""
    runs = {}
    for n in ranks:
        try:
            runs[n] = on_gloo_ranks(load_run, n, shard, load, folder)
        except AssertionError as failed:
            runs[n] = [{"rank": None, "error": str(failed), "held": {}}]
    return runs


def _full(runs: list[dict]) -> dict[str, list]:
    """Each parameter as a whole: the ranks' shards (dim 0, in rank order) put together, or rank 0's whole one."""
    runs = sorted(runs, key=lambda r: r["rank"])
    full = {}
    for name, (sharded, values) in runs[0]["held"].items():
        full[name] = [v for r in runs for v in r["held"][name][1]] if sharded else values
    return full


def _flat(values) -> list[float]:
    return [x for v in values for x in _flat(v)] if isinstance(values, list) else [values]


def _rows_held(saved: list[dict]) -> dict[str, dict[int, tuple[int, int]]]:
    """For each sharded parameter, the rows [first, end) each rank held (shards in rank order along dim 0)."""
    runs, rows = sorted(saved, key=lambda r: r["rank"]), {}
    for name, (sharded, _) in runs[0]["held"].items():
        if sharded:
            ends = [0]
            for run in runs:
                ends.append(ends[-1] + len(run["held"][name][1]))
            rows[name] = {run["rank"]: (ends[k], ends[k + 1]) for k, run in enumerate(runs)}
    return rows


def _ranks(n: int) -> str:
    return "1 rank" if n == 1 else f"{n} ranks"


def _tensors(runs: list[dict]) -> int:
    return len(runs[0]["held"])


@check
def shards_written(saved: list[dict], files: list[dict], stored: list[dict]) -> None:
    """`saved`: save_run on every rank; `files`: written() of the folder after; `stored`: its pieces(). Every rank
    wrote a file; none wrote more than its shard's bytes and OVERHEAD per tensor, nor rows of a parameter it did
    not hold (so no rank gathered more of the model than its shard)."""
    n = len(saved)
    for run in sorted(saved, key=lambda r: r["rank"]):
        rank, own = run["rank"], [f for f in files if f["rank"] == run["rank"]]
        names = ", ".join(f["name"] for f in files) or "nothing"
        expect(
            own,
            f"saved on {n} ranks, rank {rank} wrote no file (the folder holds {names}): each rank holds only its "
            "shard of the model, and must write it",
        )
        wrote, limit = sum(f["bytes"] for f in own), run["bytes"] + OVERHEAD * _tensors(saved)
        expect(
            wrote <= limit,
            f"saved on {n} ranks, rank {rank} wrote {wrote} bytes, but holds a shard of {run['bytes']} bytes: a "
            "rank should write the part of the model it holds, not gather more of it",
        )
    writer = {f["name"]: f["rank"] for f in files}
    for name, by_rank in _rows_held(saved).items():
        for piece in stored:
            rank, (first, end) = writer.get(piece["file"]), piece["rows"]
            if (piece["tensor"] == name or piece["tensor"].endswith(f".{name}")) and rank in by_rank and end > first:
                held = by_rank[rank]
                expect(
                    held[0] <= first and end <= held[1],
                    f"saved on {n} ranks, rank {rank}'s file {piece['file']} holds rows {first} to {end - 1} of "
                    f"{name}, but rank {rank} held rows {held[0]} to {held[1] - 1}: each rank should write the rows "
                    "it holds, not gather the others'",
                )


@check
def reloaded(saved: list[dict], loaded: dict[int, list[dict]]) -> None:
    """`saved`: save_run on every rank; `loaded`: loads() of the folder. On each number of ranks, every rank's load
    returned, and every parameter, put together from the ranks' shards, is exactly the saved one."""
    expected = _full(saved)
    for n, runs in loaded.items():
        for run in runs:
            who = "the job" if run["rank"] is None else f"rank {run['rank']}"
            expect(not run["error"], f"loading on {_ranks(n)}, {who} failed: {run['error']}")
        got = _full(runs)
        for name, values in expected.items():
            want, have = _flat(values), _flat(got.get(name, []))
            expect(len(have) == len(want), f"loaded on {_ranks(n)}, {name} has {len(have)} values, not {len(want)}")
            differ = max((abs(a - b) for a, b in zip(have, want)), default=0.0)
            unchanged = all(abs(a - b - SHIFT) < 1e-12 for a, b in zip(have, want))
            expect(
                not unchanged,
                f"loaded on {_ranks(n)}, {name} still holds the weights the model had before the load (each saved "
                f"one + {SHIFT:g}): load did not write into the model",
            )
            expect(differ == 0, f"loaded on {_ranks(n)}, {name} differs from the saved one by up to {differ:.3g}")
