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


def test_overlap_sums_the_time_two_ranks_calls_ran_at_once():
    rank0 = [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]
    assert data_and_model.overlap(rank0, [(0.5, 1.5), (2.5, 3.5)]) == pytest.approx(1.5)
    assert data_and_model.overlap(rank0, [(3.0, 4.0), (5.0, 6.0)]) == 0.0  # one after the other: none
    assert data_and_model.overlap(rank0, []) == 0.0


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


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="a capped CPU is a cgroup of /sys/fs/cgroup: only root can make one")
def test_a_right_pipeline_overlaps_where_the_cpu_is_capped_and_busy(tmp_path):
    """As on a hub that caps each user at one core while other work fills the cap: the rank waiting in `recv`
    polls, the cap runs out and the other rank's wake-ups wait, so even the right pipeline's batch can take as long
    as without one (the clock the check once read). Its stages still work at the same time, for more than the check
    asks; those of the answer whose stages take turns do not."""
    import importlib.util
    import subprocess
    import sys

    spec = importlib.util.spec_from_file_location("flake_hunt", ROOT / "scripts" / "flake-hunt.py")
    flake_hunt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(flake_hunt)
    pipelines = cases(NOTEBOOK, {"ex-pipeline-answer"})
    turns = next(c for c in pipelines if "take turns" in c.label)
    answers = {"right": pipelines[0].answers["ex-pipeline-answer"], "turns": turns.answers["ex-pipeline-answer"]}
    (tmp_path / "answers.json").write_text(json.dumps(answers))
    with flake_hunt.one_core() as join:
        busy = [subprocess.Popen([sys.executable, "-c", flake_hunt.BUSY], preexec_fn=join) for _ in range(6)]
        try:
            done = subprocess.run(
                [sys.executable, str(ROOT / "tests" / "programs" / "pipeline_overlap.py"), "answers.json"],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=600,
                preexec_fn=join,
            )
        finally:
            for loop in busy:
                loop.kill()
                loop.wait()
    assert done.returncode == 0, done.stdout + done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    least = data_and_model.OVERLAP_SHARE * data_and_model.STAGE_SECONDS
    assert found["right"]["overlap"] >= least and found["turns"]["overlap"] < 0.05, found


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
