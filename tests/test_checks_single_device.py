"""course.checks.single_device and course.checks.trace_waits, notebook 06's checks, tried directly on every answer
the fixtures hold for its exercises (tests/check_cases.py), on a small real run as the notebook's quick profile
makes it: 256 digits stored as JPEG photos, the input-bound pipeline timed, both pipelines profiled for 4 steps,
and the small dense model for the loss-scaling steps."""

from __future__ import annotations

import numpy as np
import pytest

from course import data, input_pipeline, precision, tfprofiler
from course.checks import single_device, trace_waits
from course.input_pipeline import decode
from tests.check_cases import Case, cases, define, judge, solution_answers

NOTEBOOK = "06_single_device_performance"
COVERED = {"ex1-answer", "ex2-answer", "ex3-answer"}  # the answer cells whose fixture answers this module tries
IMAGES, BATCH, EPOCHS, PROFILED_STEPS, WAIT_BOUND = 256, 32, 3, 4, 0.3  # the quick profile's


@pytest.fixture(scope="module")
def notebook(tmp_path_factory) -> dict:
    """What the notebook has when its exercises' checks run: the files, `raw`, the CNN's `train_step`, the
    input-bound pipeline and its timing, the fixed pipeline (the solution's), both profiled, and `build_small`."""
    import tensorflow as tf

    (x_train, y_train), _ = data.load("mnist", limit=IMAGES)
    files = input_pipeline.photos(x_train)
    options = tf.data.Options()
    options.experimental_optimization.map_and_batch_fusion = False
    options.experimental_optimization.inject_prefetch = False
    options.experimental_optimization.map_parallelization = False
    raw = tf.data.Dataset.from_tensor_slices((list(files), y_train)).with_options(options)
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential(
        [
            tf.keras.Input((input_pipeline.SIZE, input_pipeline.SIZE, 3)),
            tf.keras.layers.Conv2D(32, 3, activation="relu"),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Conv2D(64, 3, activation="relu"),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(10),
        ]
    )
    optimizer = tf.keras.optimizers.SGD(0.05)

    @tf.function
    def train_step(images, labels):
        with tf.GradientTape() as tape:
            loss = precision.loss_of(model, images, labels)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    def build_small():
        tf.keras.utils.set_random_seed(0)
        return tf.keras.Sequential(
            [
                tf.keras.Input((input_pipeline.SIZE, input_pipeline.SIZE, 3)),
                tf.keras.layers.Flatten(),
                tf.keras.layers.Dense(32, activation="relu"),
                tf.keras.layers.Dense(10),
            ]
        )

    slow = raw.map(decode).batch(BATCH)
    solution = define(
        Case("the solution", solution_answers(NOTEBOOK, {"ex1-answer"}), True), {"tf": tf, "decode": decode}
    )
    fast = solution["fast_pipeline"](raw, BATCH)
    logdir = tmp_path_factory.mktemp("profile")
    slow_trace = tfprofiler.capture(train_step, slow, logdir / "slow", steps=PROFILED_STEPS)
    for _ in fast:  # the cache filled, as the notebook's section 3 has it
        pass
    fast_trace = tfprofiler.capture(train_step, fast, logdir / "fast", steps=PROFILED_STEPS)
    return {
        "tf": tf,
        "np": np,
        "decode": decode,
        "precision": precision,
        "raw": raw,
        "slow": slow,
        "slow_timing": input_pipeline.measure(slow, train_step, EPOCHS),
        "train_step": train_step,
        "build_small": build_small,
        "batches": list(fast.unbatch().batch(32).take(8)),
        "traces": [(t, tfprofiler.read_trace(t)) for t in (slow_trace, fast_trace)],
    }


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex1-answer"}), ids=str)
def test_pipeline(case, notebook):
    n = notebook
    names = define(case, {"tf": n["tf"], "decode": decode})
    judge(
        case,
        lambda: (
            single_device.pipeline(
                names["fast_pipeline"](n["raw"], BATCH),
                n["slow"],
                n["slow_timing"],
                n["train_step"],
                EPOCHS,
                WAIT_BOUND,
            )
            or single_device.pipeline_cases(names["fast_pipeline"], n["raw"], decode)
        ),
    )


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex2-answer"}), ids=str)
def test_trace_reading(case, notebook):
    names = define(case, {"np": np})
    judge(case, lambda: trace_waits.reading(names["input_ms"], names["input_share"], notebook["traces"]))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex3-answer"}), ids=str)
def test_loss_scaling(case, notebook):
    n = notebook
    names = define(case, {"tf": n["tf"], "np": np, "precision": precision})
    judge(case, lambda: single_device.loss_scaling(names["my_scaled_step"], n["build_small"], n["batches"]))


def test_traces_name_their_threads(notebook):
    """The right answer that matches waits by the thread's name (`thread`, right_answers) is tried on traces whose
    step markers and waits carry their thread's name, so it is not the id-matching solution in disguise."""
    for _, events in notebook["traces"]:
        marks = [e for e in events if "step_num" in e.get("args", {})]
        waits = [e for e in events if e["name"] == "IteratorGetNextOp::DoCompute"]
        assert marks and waits and all(e["thread"] for e in marks + waits), "a step marker or wait without a name"
