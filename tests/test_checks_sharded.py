"""course.checks.sharded, the checks of notebook 09's part one (09_sharded_data_parallelism), tried directly on every
answer the fixtures hold for its exercises (tests/check_cases.py): on two MPI engines with the quick profile's sizes,
as the notebook runs them. Plain data parallelism's training, what ZeRO's is compared with, is the notebook's own
cell, run once. Part two's exercises (tensor parallelism, the grid, the layout): tests/test_checks_sharded_tensor.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from course import sharding
from course.checks import sharded
from tests.check_cases import cases, define, judge, shared_cluster
from tests.conftest import ROOT

NOTEBOOK = "09_sharded_data_parallelism"
COVERED = {  # the answer cells whose fixture answers this module tries
    "ex-memory-answer",
    "ex-zero-answer",
    "ex-stage3-answer",
}
QUICK = {"RANKS": 2, "SIZES": (8, 20, 4), "STEPS": 5, "WIDTH": 128, "LAYERS": 8}  # the notebook's quick profile


def notebook_cell(marker: str) -> str:
    """The source of the solution notebook's code cell holding `marker`."""
    cells = json.loads((ROOT / "solutions" / f"{NOTEBOOK}.ipynb").read_text())["cells"]
    (source,) = ["".join(c["source"]) for c in cells if c["cell_type"] == "code" and marker in "".join(c["source"])]
    return source


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    """Two MPI engines in a profile of their own, as the notebook starts them."""
    with shared_cluster(tmp_path_factory, QUICK["RANKS"], engines="mpi") as engines:
        yield engines.view


@pytest.fixture(scope="module")
def trained(view):
    """What the notebook defines before exercise 2: its `train`, plain data parallelism's steps and their run."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.user_ns.clear()
    shell.user_ns.update({"np": np, "sharding": sharding, "view": view, **QUICK})
    result = shell.run_cell(notebook_cell("def train("), store_history=False, silent=True)
    assert result.success, result.error_in_exec
    return {k: shell.user_ns[k] for k in ("train", "dp_state", "dp_step", "dp", "n_params")}


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-memory-answer"}), ids=str)
def test_memory(case):
    def run():
        names = define(case, {})
        return sharded.memory(names["zero_bytes"], names["fewest_devices"])

    judge(case, run)


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-zero-answer"}), ids=str)
def test_zero_stage2(case, view, trained):
    def run():
        names = define(case, {"np": np, "sharding": sharding, **trained, **QUICK})
        zero = view.apply_sync(
            sharded.trained, trained["train"], names["zero_state"], names["zero_step"], QUICK["SIZES"], QUICK["STEPS"]
        )
        zero_fns, dp_fns = (names["zero_state"], names["zero_step"]), (trained["dp_state"], trained["dp_step"])
        return sharded.zero_stage2(zero, trained["dp"], trained["n_params"], QUICK["STEPS"]) or sharded.zero_cases(
            trained["train"], zero_fns, dp_fns, view
        )

    judge(case, run)


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-stage3-answer"}), ids=str)
def test_stage3(case, view):
    def run():
        names = define(case, {"np": np, "sharding": sharding})
        results = view.apply_sync(sharded.stage3_run, names["stage3_forward"], QUICK["WIDTH"], QUICK["LAYERS"])
        return sharded.stage3(results, QUICK["LAYERS"])

    judge(case, run)
