"""course.input_pipeline, course.tfprofiler and course.precision (notebook 06), on real TensorFlow and real profiles."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from course import UserError, input_pipeline, precision, tfprofiler  # noqa: E402
from course.checks import trace_waits  # noqa: E402

AUTOTUNE = tf.data.AUTOTUNE


@pytest.fixture(scope="module")
def raw():
    rng = np.random.default_rng(0)
    images = rng.uniform(0, 1, (12, 28, 28, 1)).astype("float32")
    files = input_pipeline.photos(images)
    return tf.data.Dataset.from_tensor_slices((list(files), np.arange(12) % 10))


def tiny_model():
    tf.keras.utils.set_random_seed(0)
    return tf.keras.Sequential(
        [tf.keras.Input((28, 28, 3)), tf.keras.layers.Flatten(), tf.keras.layers.Dense(8), tf.keras.layers.Dense(10)]
    )


def test_photos_are_jpeg_files_that_decode_to_the_model_input(raw):
    file, label = next(iter(raw))
    assert file.numpy()[:2] == b"\xff\xd8"  # a JPEG's start-of-image marker
    assert len(file.numpy()) > 10_000  # photo-sized, not a thumbnail
    image, _ = input_pipeline.decode(file, label)
    assert image.shape == (28, 28, 3) and image.dtype == tf.float32
    assert 0.0 <= float(tf.reduce_min(image)) and float(tf.reduce_max(image)) <= 1.0


def test_colour_images_are_photos_too():
    colour = np.random.default_rng(1).uniform(0, 1, (2, 32, 32, 3)).astype("float32")
    image, _ = input_pipeline.decode(input_pipeline.photos(colour)[0], 0)
    assert image.shape == (28, 28, 3)


def test_stages_name_each_transformation_from_the_source(raw):
    fast = raw.map(input_pipeline.decode, num_parallel_calls=AUTOTUNE).cache().batch(4).prefetch(AUTOTUNE)
    assert input_pipeline.stages(fast) == ["from_tensor_slices", "parallel map", "cache", "batch", "prefetch"]
    assert input_pipeline.parallel_calls(fast) == [-1]
    wrong = raw.map(input_pipeline.decode).prefetch(2).batch(4)
    assert input_pipeline.stages(wrong) == ["from_tensor_slices", "map", "prefetch", "batch"]
    assert input_pipeline.parallel_calls(wrong) == []


def test_fingerprints_see_the_same_batches_and_a_change_of_order(raw):
    slow = raw.map(input_pipeline.decode).batch(4)
    fast = raw.map(input_pipeline.decode, num_parallel_calls=AUTOTUNE).cache().batch(4).prefetch(AUTOTUNE)
    assert input_pipeline.fingerprints(slow) == input_pipeline.fingerprints(fast)
    shuffled = raw.shuffle(12, seed=1).map(input_pipeline.decode).batch(4)
    assert input_pipeline.fingerprints(shuffled) != input_pipeline.fingerprints(slow)
    assert len(input_pipeline.fingerprints(raw.map(input_pipeline.decode).batch(3))) == 4


def test_measure_counts_the_epochs_after_the_first(raw):
    calls = []

    def step(images, labels):
        calls.append(int(images.shape[0]))
        return tf.constant(0.0)

    timing = input_pipeline.measure(raw.map(input_pipeline.decode).batch(4), step, epochs=3)
    assert len(timing.epoch_s) == 3 and len(calls) == 9 and timing.steps == 6
    assert 0.0 < timing.wait_fraction < 1.0 and timing.step_ms > 0
    with pytest.raises(ValueError, match="at least 2 epochs"):
        input_pipeline.measure(raw, step, epochs=1)


def test_capture_writes_a_trace_with_each_step_and_its_wait(raw, tmp_path, capsys):
    model, optimizer = tiny_model(), tf.keras.optimizers.SGD(0.1)

    @tf.function
    def step(images, labels):
        with tf.GradientTape() as tape:
            loss = precision.loss_of(model, images, labels)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    path = tfprofiler.capture(step, raw.map(input_pipeline.decode).batch(2), tmp_path, steps=3)
    assert path.name == "trace.json.gz" and path.parent.glob("*.xplane.pb")
    with gzip.open(path, "rt") as file:
        assert "traceEvents" in json.load(file)
    events = tfprofiler.read_trace(path)
    marks = tfprofiler.step_events(events)
    assert [int(m["args"]["step_num"]) for m in marks] == [0, 1, 2]
    for mark in marks:  # each step asked for its batch on its own thread, inside its marker
        waits = [
            e
            for e in events
            if e["name"] == "IteratorGetNextOp::DoCompute"
            and e["tid"] == mark["tid"]
            and mark["ts"] <= e["ts"] < mark["ts"] + mark["dur"]
        ]
        assert len(waits) == 1 and 0 < waits[0]["dur"] < mark["dur"]
        assert trace_waits.read(path)[int(mark["args"]["step_num"])] == (mark["dur"] / 1000, waits[0]["dur"] / 1000)
    tfprofiler.show_step(events, 1, longer_than_ms=0)  # every event, however short this machine made the wait
    shown = capsys.readouterr().out
    assert "train 1" in shown and "IteratorGetNextOp::DoCompute" in shown
    with pytest.raises(UserError, match=r"no step 7 .* steps \[0, 1, 2\]"):
        tfprofiler.show_step(events, 7)


def test_most_at_once_counts_the_events_in_progress_at_one_instant():
    def event(ts, dur):
        return {"name": "DecodeJpeg", "ts": ts, "dur": dur}

    assert tfprofiler.most_at_once([]) == 0
    assert tfprofiler.most_at_once([event(0, 5), event(5, 5), event(10, 1)]) == 1  # one ends as the next starts
    assert tfprofiler.most_at_once([event(0, 10), event(2, 3), event(4, 1), event(6, 10)]) == 3
    assert tfprofiler.most_at_once([event(6, 10), event(0, 7)]) == 2  # in any order


def test_record_shows_how_many_files_tf_data_decodes_at_once(raw, tmp_path):
    """The trace of a pass says how many decodes tf.data really ran together: one for a map of one call, two
    for a map of two on a machine of two cores or more (in one of two passes, as the check measures: other work
    on the cores can hold one of tf.data's threads for a pass); `ops` finds every file's decode by its type."""
    from course import devices

    seen = {1: 0, 2: 0}
    for calls, trial in ((1, 0), (1, 1), (2, 0), (2, 1)):
        pipeline = raw.repeat(4).map(input_pipeline.decode, num_parallel_calls=calls).batch(4).prefetch(AUTOTUNE)
        prints, events = tfprofiler.record(lambda: input_pipeline.fingerprints(pipeline), tmp_path / f"{calls}-{trial}")
        decodes = tfprofiler.ops(events, input_pipeline.DECODE_OP)
        assert len(prints) == 12 and len(decodes) == 48
        seen[calls] = max(seen[calls], tfprofiler.most_at_once(decodes))
    assert seen[1] == 1
    assert seen[2] == (2 if devices.cores() > 1 else 1)


def test_no_profile_is_one_clear_error(tmp_path):
    with pytest.raises(UserError, match="no profile under"):
        tfprofiler.newest_profile(tmp_path)


def test_a_policy_halves_the_activations_and_keeps_float32_variables():
    x = np.zeros((4, 28, 28, 3), "float32")
    with precision.policy("mixed_float16"):
        half = tiny_model()
    assert tf.keras.mixed_precision.global_policy().name == "float32"  # restored after the block
    assert half.layers[0].compute_dtype == "float16" and half.layers[0].variable_dtype == "float32"
    assert precision.activation_bytes(half, x) * 2 == precision.activation_bytes(tiny_model(), x)


def test_keras_steps_grow_and_halve_the_scale_and_skip_overflowed_steps():
    rng = np.random.default_rng(0)
    batches = [(rng.uniform(0, 1, (8, 28, 28, 3)).astype("float32"), np.arange(8) % 10) for _ in range(2)]
    overflow = (np.full((8, 28, 28, 3), 1e4, "float32"), np.arange(8) % 10)  # float16 activations overflow
    with precision.policy("mixed_float16"):
        history = precision.keras_steps(tiny_model, [*batches, overflow], initial_scale=64.0, growth_steps=2, lr=0.1)
    assert [h["scale"] for h in history] == [64.0, 128.0, 64.0]
    assert all(np.array_equal(a, b) for a, b in zip(history[1]["weights"], history[2]["weights"]))  # skipped
    assert not all(np.array_equal(a, b) for a, b in zip(history[0]["weights"], history[1]["weights"]))


def test_trace_waits_counts_the_step_thread_inside_the_marker_only(tmp_path):
    def event(name, ts, dur, tid=1, **args):
        return {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": 7, "tid": tid, "args": args}

    events = [
        event("train 0", 0, 10_000, step_num="0", step_name="train 0"),
        event("IteratorGetNextOp::DoCompute", 100, 4_000),
        event("IteratorGetNextOp::DoCompute", 200, 3_000, tid=2),  # another thread's iterator
        event("train 1", 20_000, 5_000, step_num="1", step_name="train 1"),
        event("IteratorGetNextOp::DoCompute", 26_000, 1_000),  # after the step's marker ends
    ]
    path = tmp_path / "trace.json.gz"
    with gzip.open(path, "wt") as file:
        json.dump({"traceEvents": [{"ph": "M", "name": "thread_name", "pid": 7, "tid": 1, "args": {}}, *events]}, file)
    assert trace_waits.read(path) == {0: (10.0, 4.0), 1: (5.0, 0.0)}
