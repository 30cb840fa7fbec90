"""course.torch_group: a cluster's engines as one torch.distributed group, on real engines over gloo."""

import socket
from types import SimpleNamespace

import pytest

from course import UserError, torch_group
from tests.check_cases import shared_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    with shared_cluster(tmp_path_factory, 2, engines="local") as started:
        yield started
        if started.torch_group is not None:
            torch_group.destroy(started)


def on_every_rank():
    """What a rank sees of its group: the all-reduced rank + 1, and what a torchrun script reads of its place."""
    import os

    import torch
    import torch.distributed as dist

    total = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(total)
    return {
        "rank": dist.get_rank(),
        "size": dist.get_world_size(),
        "sum": total.item(),
        "backend": dist.get_backend(),
        "env": {v: os.environ[v] for v in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR")},
    }


def in_a_group() -> bool:
    import torch.distributed as dist

    return dist.is_initialized()


on_every_rank.__module__ = in_a_group.__module__ = "__main__"  # sent to the engines by value: they cannot import tests


def formed(engines) -> list[bool]:
    return engines.view.apply_sync(in_a_group)


def test_the_engines_all_reduce_as_one_group_ranked_in_view_order(engines):
    group = torch_group.form(engines)
    try:
        seen = engines.view.apply_sync(on_every_rank)
    finally:
        torch_group.destroy(engines)
    assert group.backend == "gloo" and group.world_size == 2 and group.address.startswith("127.0.0.1:")
    assert group.ranks == {engines.ids[0]: 0, engines.ids[1]: 1}
    assert [s["rank"] for s in seen] == [0, 1] and {s["sum"] for s in seen} == {3.0}
    assert [s["env"]["RANK"] for s in seen] == ["0", "1"] and [s["env"]["LOCAL_RANK"] for s in seen] == ["0", "1"]
    assert formed(engines) == [False, False] and engines.torch_group is None


def test_a_group_already_formed_is_refused_in_one_line_and_destroyed_when_the_cluster_stops(engines):
    torch_group.form(engines)
    with pytest.raises(UserError, match="already belong to a process group: torch_group.destroy"):
        torch_group.form(engines)
    engines._leave_torch_group()  # what Cluster.stop() does first
    assert formed(engines) == [False, False]
    torch_group.destroy(engines)  # nothing left to destroy: no error
    assert torch_group.form(engines).world_size == 2  # and the engines can form one again
    torch_group.destroy(engines)


def test_a_group_left_by_a_previous_run_is_replaced(engines, capsys):
    """A restarted notebook re-attaches to its cluster, whose engines still hold the old kernel's group."""
    torch_group.form(engines)
    engines.torch_group = None  # what a fresh handle of the same cluster knows
    group = torch_group.form(engines)
    try:
        assert {s["sum"] for s in engines.view.apply_sync(on_every_rank)} == {3.0} and group.world_size == 2
    finally:
        torch_group.destroy(engines)
    assert "previous run destroyed" in capsys.readouterr().out


def test_bad_requests_are_refused_before_any_engine_waits(engines):
    one = SimpleNamespace(view=engines.client.direct_view(engines.ids[:1]), client=engines.client)
    with pytest.raises(UserError, match="needs 2 or more engines; this cluster has 1"):
        torch_group.form(one)
    with pytest.raises(UserError, match="'nccl' needs a GPU on every engine"):
        torch_group.form(engines, backend="nccl")
    with pytest.raises(UserError, match="must be 'gloo' or 'nccl', not 'mpi'"):
        torch_group.form(engines, backend="mpi")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UserError, match=f"port {port} on .* cannot be used"):
            torch_group.form(engines, port=port)
    assert formed(engines) == [False, False]


def test_engines_on_different_torch_versions_are_named():
    facts = [{"torch": "2.13.0+cpu", "initialized": False}, {"torch": "2.9.1", "initialized": False}]
    with pytest.raises(UserError, match=r"different torch versions \(engine 0: 2.13.0\+cpu, engine 3: 2.9.1\)"):
        torch_group._refuse_mixed([0, 3], facts)
