"""course.checks.fsdp, notebook 13's FSDP2 check, tried directly on every answer the fixtures hold for its exercise
(tests/check_cases.py): on two local engines formed into a gloo group as the notebook forms them; and the hidden
tests' path, a new gloo job of 3 ranks. course.torch_collectives, which the check counts with, is held to
collectives run by hand."""

from __future__ import annotations

import sys

import pytest

from course.checks import ddp, fsdp
from tests.check_cases import cases, define, judge, torch_engines

pytestmark = pytest.mark.slow

NOTEBOOK = "13_pytorch_sharding"
COVERED: set[str] = {"ex-fsdp-answer"}  # the answer cells whose fixture answers this module tries


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    """Two local engines as one gloo group, as the notebook makes them."""
    with torch_engines(tmp_path_factory) as engines:
        yield engines.view


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-fsdp-answer"}), ids=str)
def test_shard(case, view):
    judge(case, lambda: fsdp.sharded(view.apply_sync(fsdp.shard_run, define(case, {})["shard"])))


def test_the_solution_on_three_ranks_and_what_resharding_trades():
    """The hidden tests' job on 3 ranks (uneven shards: 33 rows in 11s, the head's one row on rank 0 alone), and the
    notebook's measurement: with resharding, forward and backward each gather every group (3 halves of an
    all-reduce), without it backward gathers nothing and the whole model stays held between the two."""
    shard = define(cases(NOTEBOOK, {"ex-fsdp-answer"})[0], {})["shard"]
    assert fsdp.shard_check(shard, ranks=3) is None
    both = ddp.on_gloo_ranks(fsdp.reshard_runs, 2, shard)[0]
    groups, whole = fsdp.LAYERS + 1, fsdp.model_bytes()
    assert (both[True]["gathers forward"], both[True]["gathers backward"]) == (groups, groups)
    assert (both[False]["gathers forward"], both[False]["gathers backward"]) == (groups, 0)
    scattered = both[True]["bytes reduce-scattered"]
    assert whole <= scattered < whole * 1.1  # every gradient once, with the padding of uneven shards
    assert both[True]["bytes gathered"] == 2 * scattered and both[False]["bytes gathered"] == scattered
    assert (both[True]["held after forward"], both[False]["held after forward"]) == (0, whole)


def _collectives_by_hand():
    import torch
    import torch.distributed as dist
    from torch.distributed._functional_collectives import all_reduce as functional_all_reduce

    from course.torch_collectives import Collectives

    t = torch.ones(10, dtype=torch.float64)
    with Collectives() as seen:
        dist.all_reduce(t)
        dist.all_gather_into_tensor(torch.empty(10 * dist.get_world_size(), dtype=torch.float64), t)
        out = torch.empty(5, dtype=torch.float32)
        dist.reduce_scatter_tensor(out, torch.ones(5 * dist.get_world_size()))
        functional_all_reduce(t, "sum", dist.group.WORLD).wait()
        dist.broadcast(t, 0)
        rank, size = dist.get_rank(), dist.get_world_size()
        sending = dist.isend(t[: 2 + rank], (rank + 1) % size)  # 16 bytes from rank 0, 24 from rank 1
        dist.irecv(torch.empty(2 + (rank - 1) % size, dtype=torch.float64), (rank - 1) % size).wait()
        sending.wait()
        rows = torch.ones(3, 2, dtype=torch.float32)  # rank 0 keeps 1 row and sends 2, rank 1 keeps 3
        dist.all_to_all_single(torch.empty(1 + 4 * rank, 2), rows, output_split_sizes=[[1, 0], [2, 3]][rank],
                               input_split_sizes=[[1, 2], [0, 3]][rank])  # fmt: skip
    return seen.seen, seen.sent


def _groups_by_hand():
    import torch
    import torch.distributed as dist
    from torch.distributed._functional_collectives import all_reduce as functional_all_reduce

    from course.torch_collectives import Collectives

    own = dist.new_group(backend="gloo")
    t = torch.ones(4)
    with Collectives() as seen:
        dist.all_reduce(t)
        dist.all_reduce(t, group=own)
        functional_all_reduce(t, "sum", own).wait()
    return seen.groups, seen.names, [dist.group.WORLD.group_name, own.group_name]


def test_the_recorder_tells_a_new_group_of_every_rank_from_the_default_one_by_name():
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    groups, names, (world, own) = ddp.on_gloo_ranks(_groups_by_hand, 2)[0]
    assert groups == [(0, 1)] * 3 and world != own
    assert names == [world, own, own]


def test_the_recorder_names_and_weighs_each_collective_c10d_and_functional():
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the ranks cannot import this test module
    (seen, sent), (_, sent_by_1) = ddp.on_gloo_ranks(_collectives_by_hand, 2)
    assert seen == [
        ("all_reduce", 80),
        ("all_gather", 160),
        ("reduce_scatter", 40),
        ("all_reduce", 80),
        ("broadcast", 80),
        ("send", 16),
        ("recv", 24),
        ("all_to_all", 24),
    ]
    assert sent == [(1, 16), (1, 16)] and sent_by_1 == [(0, 24)]
