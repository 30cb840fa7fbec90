"""course.checks.single_device's pipeline checks and course.checks.trace_waits, the checks of notebook 06's part one
(06_input_pipeline_and_profiler), tried directly on every answer the fixtures hold for its exercises
(tests/check_cases.py), on a small real run as the notebook's quick profile makes it: 256 digits stored as JPEG
photos, the input-bound pipeline timed, both pipelines profiled for 4 steps. Part two's exercise (loss scaling):
tests/test_checks_single_device_precision.py."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from course import data, input_pipeline, precision, tfprofiler
from course.checks import check, single_device, trace_waits
from course.input_pipeline import decode
from tests.check_cases import Case, cases, define, judge, solution_answers

NOTEBOOK = "06_input_pipeline_and_profiler"
COVERED = {"ex1-answer", "ex2-answer"}  # the answer cells whose fixture answers this module tries
IMAGES, BATCH, EPOCHS, PROFILED_STEPS, WAIT_BOUND = 256, 32, 3, 4, 0.3  # the quick profile's


@pytest.fixture(scope="module")
def notebook(tmp_path_factory) -> dict:
    """What the notebook has when its exercises' checks run: the files, `raw`, the CNN's `train_step`, the
    input-bound pipeline and its timing, the fixed pipeline (the solution's), both profiled."""
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
        "raw": raw,
        "slow": slow,
        "slow_timing": input_pipeline.measure(slow, train_step, EPOCHS),
        "train_step": train_step,
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
                names["fast_pipeline"],
                n["raw"],
                BATCH,
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


def test_traces_name_their_threads(notebook):
    """The right answer that matches waits by the thread's name (`thread`, right_answers) is tried on traces whose
    step markers and waits carry their thread's name, so it is not the id-matching solution in disguise."""
    for _, events in notebook["traces"]:
        marks = [e for e in events if "step_num" in e.get("args", {})]
        waits = [e for e in events if e["name"] == "IteratorGetNextOp::DoCompute"]
        assert marks and waits and all(e["thread"] for e in marks + waits), "a step marker or wait without a name"


# On one core, as a small Binder gives: the check's verdict on a map of AUTOTUNE calls and on a map of one
ONE_CORE = """
import os, sys, time
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # before TensorFlow sizes its thread pools
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np
import tensorflow as tf
from course import input_pipeline
from course.checks import single_device
from course.input_pipeline import decode

images = np.random.default_rng(0).uniform(0, 1, (64, 28, 28, 1)).astype("float32")
options = tf.data.Options()
options.experimental_optimization.map_parallelization = False
raw = tf.data.Dataset.from_tensor_slices((list(input_pipeline.photos(images)), np.arange(64) % 10))
raw = raw.with_options(options)
slow = raw.map(decode).batch(16)


def step(images, labels):
    time.sleep(0.01)  # a model's step: longer than taking a cached batch
    return np.float32(0)


before = input_pipeline.measure(slow, step, 2)
for calls in (tf.data.AUTOTUNE, 1):
    def fast_pipeline(raw, batch_size):
        return raw.map(decode, num_parallel_calls=calls).cache().batch(batch_size).prefetch(tf.data.AUTOTUNE)

    print("verdict:", single_device.pipeline(fast_pipeline, raw, 16, slow, before, step, 3, 0.3), flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs a system that pins a process to a core")
def test_on_one_core_the_map_is_read_from_its_configuration():
    """Where tf.data has one core, no two decodes ever run at once whatever the map asks (the trace shows one at a
    time for AUTOTUNE too): the check reads the map's configuration instead, so a map of AUTOTUNE calls keeps its
    marks and a map of one call still loses them. Run in a process pinned to one core."""
    run = subprocess.run(
        [sys.executable, "-c", ONE_CORE], capture_output=True, text=True, timeout=300, env={**os.environ}
    )
    assert run.returncode == 0, run.stderr[-2000:]
    passes = [line for line in run.stdout.splitlines() if line.startswith(("first pass", "verdict"))]
    assert passes[0::2] == ["first pass: 64 files decoded, at most 1 at once"] * 2, run.stdout
    assert passes[1] == "verdict: None", run.stdout
    assert passes[3].startswith("verdict: the decoding map decodes one file at a time"), run.stdout


def test_the_second_pass_measures_the_cache_and_the_stage_the_model_pulls_from(notebook):
    """What the runtime did, not what the dataset says of itself: a pass after a complete first one decodes no file
    where decoded images are cached (all of them where nothing is, or where the cache holds the files), and the
    iterator built outermost is the stage written last."""
    tf, raw = notebook["tf"], notebook["raw"]
    decoded = raw.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    pipelines = {
        "cached, prefetched": decoded.cache().batch(BATCH).prefetch(tf.data.AUTOTUNE),
        "no cache": decoded.batch(BATCH).prefetch(tf.data.AUTOTUNE),
        "files cached": raw.cache().map(decode).batch(BATCH).prefetch(tf.data.AUTOTUNE),
        "prefetch before batch": decoded.cache().prefetch(tf.data.AUTOTUNE).batch(BATCH),
    }
    measured = {}
    for name, fast in pipelines.items():
        single_device.decoding(fast)  # the check's first pass
        measured[name] = single_device.second_pass(fast)
    assert {name: again for name, (again, _) in measured.items()} == {
        "cached, prefetched": 0,
        "no cache": IMAGES,
        "files cached": IMAGES,
        "prefetch before batch": 0,
    }
    outermost = {name: built[0] for name, (_, built) in measured.items()}
    assert [outermost[n].startswith("Prefetch") for n in pipelines] == [True, True, True, False], outermost
    assert outermost["prefetch before batch"].startswith("Batch"), outermost
    verdicts = {
        name: check(single_device.expect_cached_and_prefetched)(input_pipeline.stages(pipelines[name]), *measured[name])
        for name in pipelines
    }
    assert verdicts["cached, prefetched"] is None
    assert "every epoch decodes every file again" in verdicts["no cache"]
    assert "the cache holds the files before decoding" in verdicts["files cached"]
    assert "the last stage is 'batch'" in verdicts["prefetch before batch"]
