"""course.checks.horovod, the checks of notebook 07's part one (07_horovod), tried directly on every answer the
fixtures hold for its exercises (tests/check_cases.py). The `%%px` exercises run on two MPI engines with Horovod, as
the notebook's quick profile has them, after what the notebook's cells before them define (the data, the model, rank
0's weights on every rank). Part two's exercises are tried in tests/test_checks_horovod_runs.py."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell

from course import training
from course.checks import horovod
from tests.check_cases import Case, cases, defined, judge, own_cluster, solution_answers

NOTEBOOK = "07_horovod"
COVERED = {"ex1-answer", "ex2-answer", "ex3-answer", "ex4-answer"}
# the quick profile's constants, as the notebook pushes them to the engines (OUT: the test's own folder)
CONSTANTS = {"LIMIT": 600, "BATCH": 50, "BASE_LR": 0.05, "WARMUP": 1}

# What the notebook's cells define on the engines before each exercise (its sections 1-4, shortened).
BEFORE = {
    "ex2-answer": """
import os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
from course import data, models, perf, training
from course.checks import saves
saves.watch()
(x_train, y_train), (x_test, y_test) = data.load("mnist", limit=LIMIT)
x, y = data.shard((x_train, y_train), hvd.rank(), hvd.size())
""",
    "ex3-answer": """
tf.keras.utils.set_random_seed(hvd.rank())
model = models.mnist_cnn(x.shape[1:], 10)
model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.legacy.SGD(learning_rate=lr)),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
""",
    # instead of the fit: rank 0's weights on every rank, as the broadcast callback leaves them (the check reads the
    # accuracy's type and the ranks' agreement, not how well the model learnt; tracing a fit takes long)
    "ex4-answer": """
import horovod.tensorflow
horovod.tensorflow.broadcast_variables(model.variables, root_rank=0)
""",
}
ENGINE_ANSWERS = ["ex1-answer", "ex2-answer", "ex3-answer", "ex4-answer"]
# what each exercise's check reads on the engines: unbound before a case, as in a fresh run of its answer
OUTPUTS = {"ex1-answer": ["me"], "ex2-answer": ["lr", "steps"], "ex3-answer": ["callbacks"]}
OUTPUTS["ex4-answer"] = ["test_loss", "test_accuracy"]


def px_body(source: str) -> str:
    """A %%px cell's code, as the engines run it."""
    first, _, body = source.partition("\n")
    assert first.strip() == "%%px", f"not a %%px cell: {first!r}"
    return body


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """Two MPI engines of their own (Horovod is initialised once per process), seen by Horovod as two nodes as the
    notebook makes them, %%px on them in define's IPython shell, and on them what the notebook defines up to
    exercise 4 (with the solution's answers); yields (the view, OUT)."""
    out = tmp_path_factory.mktemp("out")
    with own_cluster(tmp_path_factory, 2, engines="mpi") as started:
        assert "2 nodes" in training.horovod_nodes(started.view)
        InteractiveShell.instance()
        started.view.activate()  # %%px in the shell define runs cells in
        started.view.push(dict(CONSTANTS, OUT=str(out)))
        solution = solution_answers(NOTEBOOK, set(ENGINE_ANSWERS))
        for grade_id in ENGINE_ANSWERS:
            if grade_id in BEFORE:
                started.view.execute(BEFORE[grade_id], block=True).get()
            started.view.execute(px_body(solution[grade_id]), block=True).get()
        yield started.view, out


def on_engines(case: Case, grade_id: str, view, check) -> None:
    """Run the case's %%px answer on the engines (its exercise's outputs unbound first, the saves forgotten), judge
    it by `check`, then run the solution's answer again: the next case starts where a right answer leaves."""
    view.execute(f"for _name in {OUTPUTS[grade_id]!r}:\n    globals().pop(_name, None)", block=True).get()
    horovod.saves_by_rank(view)  # what the solution saved before: the check judges the case's saves
    try:
        defined(case, {})
        judge(case, check)
    finally:
        view.execute(px_body(solution_answers(NOTEBOOK, {grade_id})[grade_id]), block=True).get()


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex1-answer"}), ids=str)
def test_ranks(case, engines):
    view, _ = engines
    on_engines(case, "ex1-answer", view, lambda: horovod.me_on_every_rank(view))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex2-answer"}), ids=str)
def test_learning_rate_and_steps(case, engines):
    view, _ = engines
    check = lambda: horovod.learning_rate_and_steps(view, CONSTANTS["BASE_LR"], CONSTANTS["BATCH"])  # noqa: E731
    on_engines(case, "ex2-answer", view, check)


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex3-answer"}), ids=str)
def test_callbacks(case, engines):
    view, out = engines
    check = lambda: horovod.callback_lists(view, CONSTANTS["BASE_LR"], out, CONSTANTS["WARMUP"])  # noqa: E731
    on_engines(case, "ex3-answer", view, check)


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex4-answer"}), ids=str)
def test_evaluated_and_saved(case, engines):
    view, out = engines
    (out / "model.h5").unlink(missing_ok=True)  # a fresh run: no model saved yet

    def check() -> str | None:
        saved = horovod.saves_by_rank(view)
        return horovod.evaluated_and_saved(view, out, saved)

    on_engines(case, "ex4-answer", view, check)


def callback_states(view) -> list[list[dict]]:
    """Each engine's callbacks' attributes, as their reprs (a Keras model or writer is no value to send)."""
    view.execute("_states = [{k: repr(v) for k, v in sorted(vars(c).items())} for c in callbacks]", block=True).get()
    return view["_states"]


def test_callback_trial_leaves_the_callbacks_as_it_found_them(engines):
    """The check runs the learner's callbacks in a fit of its own: afterwards they hold what they held before (the
    broadcast not yet done, the warm-up's steps unknown), so the notebook's fit starts them fresh."""
    view, out = engines
    before = callback_states(view)
    assert horovod.callback_lists(view, CONSTANTS["BASE_LR"], out, CONSTANTS["WARMUP"]) is None
    assert callback_states(view) == before
    assert all(s[0]["broadcast_done"] == "False" for s in before)
