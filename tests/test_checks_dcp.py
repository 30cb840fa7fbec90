"""course.checks.dcp, notebook 13's check of checkpoints that reshard, tried directly on every answer the fixtures
hold for it (tests/check_cases.py): saved on two local engines formed into a gloo group as the notebook forms them
(the quick profile), loaded on new gloo groups of 1 and 3 ranks, every answer's loads in one job per rank count;
and the check's own helpers."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest

from course import torch_group
from course.checks import dcp, deadline
from course.checks.ddp import on_gloo_ranks
from tests.check_cases import Case, cases, define, judge, solution_answers, torch_engines

pytestmark = pytest.mark.slow

NOTEBOOK = "13_pytorch_sharding"
COVERED = {"ex-dcp-answer"}  # the answer cells whose fixture answers this module tries
RANKS = 2  # the quick profile's engines
CASES = cases(NOTEBOOK, COVERED)


def shard(model, mesh):
    """The FSDP exercise's solution (`shard`), as the brief of this exercise gives it: what the notebook defines
    before this exercise, while its own answer cell is still a stub (`before`)."""
    from torch.distributed.fsdp import fully_shard

    for layer in model[:-1]:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def load_each(shard, pairs: list) -> list[dict]:
    """On every rank of a group: dcp.load_run for each (load, folder) of `pairs`, in turn (one job for many)."""
    return [dcp.load_run(shard, load, folder) for load, folder in pairs]


shard.__module__ = load_each.__module__ = "__main__"  # sent by value, as the notebook's functions are


def before() -> dict:
    """What the notebook defines before this exercise that it uses: the FSDP exercise's solution cell, run as a
    learner's cell is, or this module's copy of it while that cell is still a stub."""
    source = solution_answers(NOTEBOOK, {"ex-fsdp-answer"})["ex-fsdp-answer"]
    if "NotImplementedError" in source:
        return {"shard": shard}
    names = define(Case("the FSDP exercise's solution", {"ex-fsdp-answer": source}, right=True), {})
    return {k: v for k, v in names.items() if not k.startswith("_")}


@dataclass
class Tried:
    """One answer run as the check cell runs it: what went wrong before the loads, the save on each rank, the
    folder's files after it, and the loads by number of ranks."""

    problem: str | None = None
    saved: list = field(default_factory=list)
    files: list = field(default_factory=list)
    loaded: dict = field(default_factory=dict)


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """Two local engines as one gloo group, as the notebook makes them."""
    with torch_engines(tmp_path_factory, RANKS) as started:
        yield started


@pytest.fixture(scope="module")
def tried(engines, tmp_path_factory) -> dict[str, Tried]:
    """Every case run as the check cell runs it; the loads of those whose save passed, in one job per rank count."""
    work, context = tmp_path_factory.mktemp("dcp"), before()
    runs: dict[str, Tried] = {}
    loading: list[tuple[Tried, object, str]] = []
    for k, case in enumerate(CASES):
        names = define(case, context)
        folder = dcp.emptied(work / f"case-{k}")
        saved, problem = deadline.gather(
            engines.view, dcp.save_run, names["shard"], names["save"], folder, seconds=dcp.SAVE_SECONDS
        )
        if problem:  # the engines were restarted: the next case needs the group again
            torch_group.destroy(engines)
            torch_group.form(engines)
            runs[case.label] = Tried(problem)
            continue
        run = runs[case.label] = Tried(None, saved, dcp.written(folder))
        run.problem = dcp.shards_written(run.saved, run.files, dcp.pieces(folder))
        if run.problem is None:
            loading.append((run, names["load"], folder))
    for n in dcp.LOAD_RANKS:
        by_rank = on_gloo_ranks(load_each, n, context["shard"], [(load, folder) for _, load, folder in loading])
        for j, (run, _, _) in enumerate(loading):
            run.loaded[n] = [results[j] for results in by_rank]
    return runs


@pytest.mark.parametrize("case", CASES, ids=str)
def test_dcp(case: Case, tried: dict[str, Tried]):
    run = tried[case.label]
    judge(case, lambda: run.problem or dcp.reloaded(run.saved, run.loaded))


def _parameters() -> int:
    return sum(a * b + b for a, b in zip(dcp.WIDTHS, dcp.WIDTHS[1:]))


def test_the_solution_leaves_a_file_of_about_its_shards_bytes_per_rank_and_the_metadata(tried):
    run = tried[CASES[0].label]
    assert sorted(f["name"] for f in run.files) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    held = {r["rank"]: r["bytes"] for r in run.saved}
    assert held[0] > held[1] and sum(held.values()) == 8 * _parameters()  # uneven shards of the whole model
    for f in run.files:
        if f["name"] != ".metadata":
            assert f["name"] == f"__{f['rank']}_0.distcp"
            assert held[f["rank"]] < f["bytes"] <= held[f["rank"]] + dcp.OVERHEAD * 6


def test_a_file_tells_the_rank_that_wrote_it_by_its_permission_bits(tmp_path):
    before = os.umask(0o022)
    try:
        for rank in range(8):
            os.umask(dcp._umask(rank))
            (tmp_path / f"by-{rank}").write_text("x")
    finally:
        os.umask(before)
    assert [(f["name"], f["rank"]) for f in dcp.written(tmp_path)] == [(f"by-{r}", r) for r in range(8)]
    with pytest.raises(ValueError, match="at most 8 ranks"):
        dcp._umask(8)


def test_the_model_splits_unevenly_over_2_3_and_4_ranks():
    assert all(rows % n for rows in dcp.WIDTHS[1:-1] for n in (2, 3, 4)), "a layer's rows split evenly"


def test_shards_are_put_together_in_rank_order_and_a_load_that_does_nothing_is_told():
    """Made-up runs: a weight of 3 rows sharded 2 + 1, a bias held whole."""
    saved = [
        {"rank": 1, "held": {"w": (True, [[3.0]]), "b": (False, [0.5])}, "bytes": 16},
        {"rank": 0, "held": {"w": (True, [[1.0], [2.0]]), "b": (False, [0.5])}, "bytes": 24},
    ]
    assert dcp._full(saved) == {"w": [[1.0], [2.0], [3.0]], "b": [0.5]}
    same = {"rank": 0, "error": "", "held": {"w": (False, [[1.0], [2.0], [3.0]]), "b": (False, [0.5])}}
    assert dcp.reloaded(saved, {1: [same]}) is None
    shifted = {**same, "held": {"w": (False, [[2.0], [3.0], [4.0]]), "b": (False, [1.5])}}
    assert "w still holds the weights the model had before the load" in dcp.reloaded(saved, {1: [shifted]})
    off = {**same, "held": {"w": (False, [[1.0], [2.0], [3.5]]), "b": (False, [0.5])}}
    assert "w differs from the saved one by up to 0.5" in dcp.reloaded(saved, {1: [off]})
    failed = {"rank": None, "error": "rank 2 did not return", "held": {}}
    assert "loading on 4 ranks, the job failed: rank 2" in dcp.reloaded(saved, {4: [failed]})


def test_a_rank_that_wrote_nothing_or_more_than_its_shard_is_told():
    saved = [
        {"rank": 0, "held": {"w": (True, [[1.0]])}, "bytes": 8},
        {"rank": 1, "held": {"w": (True, [[2.0]])}, "bytes": 8},
    ]
    assert "rank 1 wrote no file (the folder holds model.pt)" in dcp.shards_written(
        saved, [{"name": "model.pt", "bytes": 16, "rank": 0}], []
    )
    fair = [{"name": "a", "bytes": 8 + dcp.OVERHEAD, "rank": 0}, {"name": "b", "bytes": 8, "rank": 1}]
    assert dcp.shards_written(saved, fair, []) is None
    fair[0]["bytes"] += 1
    assert "rank 0 wrote 4105 bytes, but holds a shard of 8 bytes" in dcp.shards_written(saved, fair, [])


def test_a_rank_whose_file_holds_rows_it_did_not_hold_is_told():
    """Made-up runs: a weight of 3 rows sharded 2 + 1; the checkpoint's key prefixed, as {"model": ...} makes it."""
    saved = [
        {"rank": 0, "held": {"w": (True, [[1.0], [2.0]])}, "bytes": 16},
        {"rank": 1, "held": {"w": (True, [[3.0]])}, "bytes": 8},
    ]
    files = [{"name": "f0", "bytes": 16, "rank": 0}, {"name": "f1", "bytes": 8, "rank": 1}]
    own = [{"tensor": "model.w", "rows": (0, 2), "file": "f0"}, {"tensor": "model.w", "rows": (2, 3), "file": "f1"}]
    assert dcp.shards_written(saved, files, own) is None
    assert dcp.shards_written(saved, files, own + [{"tensor": "model.v", "rows": (0, 3), "file": "f1"}]) is None
    whole = [{"tensor": "model.w", "rows": (0, 3), "file": "f1"}]
    assert "rank 1's file f1 holds rows 0 to 2 of w, but rank 1 held rows 2 to 2" in dcp.shards_written(
        saved, files, whole
    )
