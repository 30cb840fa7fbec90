"""course.checks.data_and_model, notebook 04's checks, tried directly on every answer the fixtures hold for its
four exercises (tests/check_cases.py): on two MPI engines as the notebook's quick profile has, holding the halves
of the notebook's CNN, and with the notebook's own K-Means run (its %%px cell) for each answer."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from course.checks import data_and_model
from tests.check_cases import cases, define, judge, shared_cluster
from tests.conftest import ROOT

NOTEBOOK = "04_data_and_model_parallelism"
COVERED = {"ex-cuts-answer", "ex-pipeline-answer", "ex-layout-answer", "ex-kmeans-answer"}
BATCH, CUT, KMEANS_POINTS = 100, 4, 3000  # the notebook's quick profile


def px_cell(marker: str) -> str:
    """The body of the solution notebook's %%px cell that holds `marker`."""
    cells = json.loads((ROOT / "solutions" / f"{NOTEBOOK}.ipynb").read_text())["cells"]
    found = [
        "".join(c["source"]).partition("\n")[2]
        for c in cells
        if "".join(c["source"]).startswith("%%px") and marker in "".join(c["source"])
    ]
    assert len(found) == 1, f"{NOTEBOOK} should have one %%px cell with {marker!r}"
    return found[0]


@pytest.fixture(scope="module")
def model():
    """The notebook's CNN, its rows at BATCH, a small input and the unsplit model's output for it."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from course import models, parallelism

    tf.keras.utils.set_random_seed(0)
    cnn = models.mnist_cnn()
    x_in = np.random.default_rng(0).random((8, 28, 28, 1)).astype(np.float32)
    return {
        "cnn": cnn,
        "rows": parallelism.layer_volumes(cnn, BATCH),
        "x_in": x_in,
        "expected": cnn(x_in, training=False).numpy(),
    }


@pytest.fixture(scope="module")
def view(tmp_path_factory, model):
    """Two MPI engines in a profile of their own, as the notebook starts them, holding `comm`, `rank`, `size` and
    the two halves of the CNN (`front`, `back`)."""
    with shared_cluster(tmp_path_factory, 2, engines="mpi") as engines:
        engines.view.execute(px_cell("comm = MPI.COMM_WORLD"), block=True)
        shipped = {"CONFIG": model["cnn"].to_json(), "WEIGHTS": model["cnn"].get_weights(), "CUT": CUT}
        engines.view.push({**shipped, "KMEANS_POINTS": KMEANS_POINTS}, block=True)
        engines.view.execute(
            "from course import parallelism\n"
            "front, back = parallelism.split_sequential(parallelism.rebuild(CONFIG, WEIGHTS), CUT)",
            block=True,
        )
        yield engines.view


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-cuts-answer"}), ids=str)
def test_cuts(case, model):
    names = define(case, {"BATCH": BATCH, "rows": model["rows"]})
    judge(case, lambda: data_and_model.cuts(names["cheaper_cuts"], names["choose"], model["rows"]))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-pipeline-answer"}), ids=str)
def test_pipeline(case, view, model):
    names = define(case, {"np": np})
    # a pipeline that hangs on 3 ranks is told so `timeout` s after its ranks started (RUN_TIMEOUT in the notebook)
    judge(
        case,
        lambda: data_and_model.pipeline(names["pipeline"], view, model["x_in"], model["expected"], timeout=5),
    )


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-layout-answer"}), ids=str)
def test_layout(case):
    names = define(case, {})
    judge(case, lambda: data_and_model.layout(names["layout"]))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-kmeans-answer"}), ids=str)
def test_kmeans(case, view):
    names = define(case, {"np": np})

    def run_then_check():
        view.push({"kmeans_step": names["kmeans_step"]}, block=True)
        view.execute(px_cell("kmeans_step(comm, my_points"), block=True)  # the notebook's 10 steps on the engines
        points, initial, centroids = view.pull(["all_points", "initial", "centroids"], block=True)[0]
        return data_and_model.kmeans(names["kmeans_step"], view, points, initial, centroids)

    judge(case, run_then_check)
