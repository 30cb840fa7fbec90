"""The collectives a piece of PyTorch code runs, seen from outside it: FSDP2's c10d calls and DTensor's functional
collectives alike, forward and backward, whatever Python function called them. The only place that knows their
op names, so a PyTorch upgrade that renames one fails here, in one test.

    with Collectives() as seen:
        loss = model(x).sum()
    seen.count("all_gather"), seen.bytes("all_gather")    # -> 5, 38016
    seen.sent                                             # -> [(destination's global rank, bytes), ...]
"""

from __future__ import annotations

from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

# each kind, and the op names (or parts of them) PyTorch 2.x gives it in c10d and _c10d_functional
KINDS = {
    "all_gather": ("all_gather", "allgather"),
    "reduce_scatter": ("reduce_scatter",),
    "all_reduce": ("all_reduce", "allreduce"),
    "broadcast": ("broadcast",),
    "all_to_all": ("all_to_all", "alltoall"),
    "send": ("send",),
    "recv": ("recv",),
}
NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional")


def kind(op_name: str) -> str:
    """The collective an op is ('all_gather' for 'c10d._allgather_base_'), or the op's own name."""
    return next((k for k, names in KINDS.items() if any(n in op_name for n in names)), op_name)


def _tensors(args: Any) -> list:
    import torch

    if isinstance(args, torch.Tensor):
        return [args]
    if isinstance(args, (list, tuple)):
        return [t for a in args for t in _tensors(a)]
    if isinstance(args, dict):
        return _tensors(list(args.values()))
    return []


def _sent(name: str, args: tuple, ranks: tuple[int, ...] | None) -> list[tuple[int, int]]:
    """What a c10d send or all-to-all sends to each other rank, as (destination's global rank, bytes): a send names
    its peer's rank in its group, an all-to-all its input's rows per rank (even where it names none)."""
    import torch.distributed as dist

    ranks = ranks or tuple(range(dist.get_world_size()))
    me = dist.get_rank()
    if kind(name) == "send":
        return [(ranks[args[2]], sum(t.numel() * t.element_size() for t in _tensors(args[0])))]
    if name.startswith("alltoall_base"):
        source, splits = args[1], list(args[4])
        row = source[0].numel() * source.element_size() if source.dim() and len(source) else 0
        splits = splits or [len(source) // len(ranks)] * len(ranks)
        return [(r, n * row) for r, n in zip(ranks, splits) if r != me and n]
    return []


def _group(args: Any):
    """The process group a collective's arguments name: functional ops pass the group's name, c10d ops pass it
    boxed (a boxed ReduceOp is not a group)."""
    import torch
    import torch.distributed as dist

    for a in args:
        if isinstance(a, str):
            try:
                return dist.distributed_c10d._resolve_process_group(a)
            except Exception:  # noqa: BLE001 - a string that names no group
                continue
        elif isinstance(a, torch.ScriptObject):
            try:
                return dist.ProcessGroup.unbox(a)
            except RuntimeError:
                continue
    return None


class Collectives(TorchDispatchMode):
    """A dispatch mode that writes down each collective run under it as (kind, bytes of its largest tensor: the
    whole gathered tensor of an all-gather, the whole input of a reduce-scatter), in `groups` the global ranks
    of its group and in `names` the group's name (a new group of every rank has the default group's ranks, not its
    name), and in `sent` each send's and all-to-all's (destination's global rank, bytes), in order."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, int]] = []
        self.groups: list[tuple[int, ...] | None] = []
        self.names: list[str | None] = []
        self.sent: list[tuple[int, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        import torch.distributed as dist
        from torch.distributed.tensor import DTensor

        if any(issubclass(t, DTensor) for t in types):
            return NotImplemented  # DTensor first turns the op into collectives on plain tensors, seen next
        kwargs = kwargs or {}
        name = func.__name__.split(".")[0]
        if func.namespace in NAMESPACES and not name.startswith(("wait", "_wrap")):
            largest = max((t.numel() * t.element_size() for t in _tensors([args, kwargs])), default=0)
            self.seen.append((kind(name), largest))
            group = _group([*args, *kwargs.values()])
            self.groups.append(tuple(dist.get_process_group_ranks(group)) if group else None)
            self.names.append(group.group_name if group else None)
            if func.namespace == "c10d":
                self.sent += _sent(name, args, self.groups[-1])
        return func(*args, **kwargs)

    def count(self, kind: str) -> int:
        """How many collectives of this kind ran."""
        return sum(k == kind for k, _ in self.seen)

    def bytes(self, kind: str) -> int:
        """The bytes of their largest tensors, added up."""
        return sum(b for k, b in self.seen if k == kind)
