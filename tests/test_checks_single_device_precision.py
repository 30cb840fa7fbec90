"""course.checks.single_device's loss-scaling check, the check of notebook 06's part two
(06_mixed_precision_and_xla), tried directly on every answer the fixtures hold for its exercise
(tests/check_cases.py), as the notebook's quick profile runs it: the small dense model, and 8 batches of 32 digits
stored as JPEG photos, read from the plain pipeline (part two builds no fixed one). Part one's exercises (the
pipeline, the trace): tests/test_checks_single_device.py."""

from __future__ import annotations

import numpy as np
import pytest

from course import data, input_pipeline, precision
from course.checks import single_device
from course.input_pipeline import decode
from tests.check_cases import cases, define, judge

NOTEBOOK = "06_mixed_precision_and_xla"
COVERED = {"ex3-answer"}  # the answer cells whose fixture answers this module tries
IMAGES, BATCH = 256, 32  # the quick profile's


@pytest.fixture(scope="module")
def notebook() -> dict:
    """What the notebook has when its exercise's check runs: `build_small` and the batches the check takes."""
    import tensorflow as tf

    (x_train, y_train), _ = data.load("mnist", limit=IMAGES)
    raw = tf.data.Dataset.from_tensor_slices((list(input_pipeline.photos(x_train)), y_train))
    plain = raw.map(decode).batch(BATCH)

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

    return {"tf": tf, "build_small": build_small, "batches": list(plain.unbatch().batch(32).take(8))}


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex3-answer"}), ids=str)
def test_loss_scaling(case, notebook):
    n = notebook
    names = define(case, {"tf": n["tf"], "np": np, "precision": precision})
    judge(case, lambda: single_device.loss_scaling(names["my_scaled_step"], n["build_small"], n["batches"]))
