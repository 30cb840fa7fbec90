"""A notebook's engines as one `torch.distributed` process group, formed in one call and destroyed in another.

    group = torch_group.form(cluster)   # gloo on CPUs, NCCL with one GPU per engine; rank = place in cluster.view
    %%px
    torch.distributed.all_reduce(t)     # on every engine, as in a torchrun script (RANK, LOCAL_RANK, ... are set)
    torch_group.destroy(cluster)        # cluster.stop() destroys a group left open

The rendezvous (`tcp://`) is on loopback when every engine runs on one host, else on the first engine's address.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from course import UserError

DEFAULT_TIMEOUT = 120  # seconds to form the group, and then for each collective before it raises instead of hanging


@dataclass
class Group:
    """What `form` made: backend, size, the rendezvous address, and each engine's rank (engine id -> rank)."""

    backend: str
    world_size: int
    address: str
    ranks: dict[int, int]

    def __str__(self) -> str:
        return f"a {self.backend} process group of {self.world_size} ranks (rendezvous tcp://{self.address})"


def form(cluster, backend: str | None = None, port: int | None = None, timeout: float = DEFAULT_TIMEOUT) -> Group:
    """Make `cluster`'s engines one process group: engine `cluster.ids[r]` is rank r. `backend`: "gloo" or
    "nccl" (default: NCCL where every engine sees a GPU, else gloo); `port`: the rendezvous port (default: a free one).
    A group this handle formed is refused; one left by a previous run (a re-attached cluster) is replaced."""
    ids = list(cluster.view.targets)
    if len(ids) < 2:
        raise UserError(
            f"a process group needs 2 or more engines; this cluster has {len(ids)}: start it with 2 or more"
        )
    facts = cluster.view.apply_sync(_engine_facts)
    if getattr(cluster, "torch_group", None) is None and any(f.get("initialized") for f in facts):
        # A re-attached cluster (a restarted notebook): the group is the previous kernel's, which no one uses now.
        print("course.torch_group: the engines' group of the notebook's previous run destroyed; forming a new one")
        cluster.view.apply_sync(_leave)
        facts = cluster.view.apply_sync(_engine_facts)
    _refuse_mixed(ids, facts)
    backend = _backend(backend, facts)
    hosts = [f["host"] for f in facts]
    first = cluster.client[ids[0]]
    address = "127.0.0.1" if len(set(hosts)) == 1 else facts[0]["address"]
    port = first.apply_sync(_open_store, address, port, len(ids), timeout)
    if isinstance(port, str):
        raise UserError(port)
    url = f"tcp://{address}:{port}"
    local = [hosts[:r].count(hosts[r]) for r in range(len(ids))]
    joins = [
        cluster.client[i].apply_async(_join, backend, url, r, len(ids), local[r], hosts.count(hosts[r]), timeout)
        for r, i in enumerate(ids)
    ]
    errors = [_error_of(j, timeout + 30) for j in joins]
    if any(errors):
        cluster.view.apply_sync(_leave)
        rank, why = next((r, e) for r, e in enumerate(errors) if e)
        raise UserError(f"the {backend} group at {url} did not form: rank {rank} (engine {ids[rank]}) said: {why}")
    cluster.torch_group = Group(backend, len(ids), f"{address}:{port}", {i: r for r, i in enumerate(ids)})
    return cluster.torch_group


def destroy(cluster, timeout: float = 30) -> None:
    """Destroy the engines' process group (nothing to do where none is formed)."""
    cluster.view.apply_async(_leave).get(timeout=timeout)
    cluster.torch_group = None


def _refuse_mixed(ids: list[int], facts: list[dict]) -> None:
    broken = [f"engine {i}: {f['error']}" for i, f in zip(ids, facts) if f.get("error")]
    if broken:
        raise UserError(f"torch does not import on every engine ({'; '.join(broken)}): run make setup")
    versions = {f["torch"] for f in facts}
    if len(versions) > 1:
        by = ", ".join(f"engine {i}: {f['torch']}" for i, f in zip(ids, facts))
        raise UserError(f"the engines run different torch versions ({by}): give them one environment")
    formed = [str(i) for i, f in zip(ids, facts) if f["initialized"]]
    if formed:
        raise UserError(
            f"engine(s) {', '.join(formed)} already belong to a process group: torch_group.destroy(cluster) first"
        )


def _backend(backend: str | None, facts: list[dict]) -> str:
    gpus = all(f["gpus"] for f in facts) and all(f["nccl"] for f in facts)
    if backend is None:
        return "nccl" if gpus else "gloo"
    if backend not in ("gloo", "nccl"):
        raise UserError(f"backend must be 'gloo' or 'nccl', not {backend!r}")
    if backend == "nccl" and not gpus:
        raise UserError("backend 'nccl' needs a GPU on every engine (and torch's CUDA build): use 'gloo' here")
    return backend


def _error_of(result, timeout: float) -> str:
    """'' when the engine's call returned, else its error in one line."""
    try:
        result.get(timeout=timeout)
        return ""
    except TimeoutError:
        return f"no answer within {timeout:.0f} s"
    except Exception as exc:  # ipyparallel's RemoteError carries the engine's exception
        name, value = getattr(exc, "ename", type(exc).__name__), getattr(exc, "evalue", str(exc))
        return f"{name}: {str(value).strip().splitlines()[0] if str(value).strip() else ''}"


# ---- run on the engines


def _engine_facts() -> dict:
    import socket

    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        return {"error": str(exc)}
    try:
        address = socket.gethostbyname(socket.gethostname())
    except OSError:
        address = "127.0.0.1"
    return {
        "torch": torch.__version__,
        "initialized": dist.is_initialized(),
        "gpus": torch.cuda.device_count(),
        "nccl": dist.is_nccl_available(),
        "host": socket.gethostname(),
        "address": address,
    }


_STORE = []  # on the first engine: the rendezvous store _open_store opened, until _join forms the group with it


def _open_store(address: str, port: int | None, size: int, timeout: float) -> int | str:
    """Open the group's rendezvous store on this host (on `port`, else one the system picks: no race with other
    groups starting); its port, or why not in words."""
    import datetime
    import socket

    import torch.distributed as dist

    try:
        store = dist.TCPStore(address, port or 0, size, is_master=True, wait_for_workers=False,
                              timeout=datetime.timedelta(seconds=timeout))  # fmt: skip
    except (RuntimeError, OSError) as exc:
        why = "address already in use" if "EADDRINUSE" in str(exc) else str(exc).splitlines()[0]
        return f"port {port} on {socket.gethostname()} cannot be used ({why}): pick another or leave it out"
    _STORE[:] = [store]
    return store.port


def _join(backend: str, url: str, rank: int, size: int, local_rank: int, local_size: int, timeout: float) -> int:
    import datetime

    import torch
    import torch.distributed as dist

    host, port = url.removeprefix("tcp://").rsplit(":", 1)
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(size),
        LOCAL_RANK=str(local_rank),
        LOCAL_WORLD_SIZE=str(local_size),
        MASTER_ADDR=host,
        MASTER_PORT=port,
    )
    if backend == "nccl":
        torch.cuda.set_device(0 if torch.cuda.device_count() == 1 else local_rank)
    wait = datetime.timedelta(seconds=timeout)
    store = _STORE.pop() if rank == 0 else dist.TCPStore(host, int(port), size, is_master=False, timeout=wait)
    dist.init_process_group(backend, store=store, rank=rank, world_size=size, timeout=wait)
    return dist.get_rank()


def _leave() -> bool:
    import sys

    if "torch.distributed" not in sys.modules:
        return False
    import torch.distributed as dist

    if not dist.is_initialized():
        return False
    dist.destroy_process_group()
    return True
