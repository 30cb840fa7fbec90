"""course.checks.saves: the model files a process saved, noted as Keras saves them (a real model, real files)."""

from __future__ import annotations

import subprocess
import sys

from course.checks import saves
from tests.conftest import ROOT

PROGRAM = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
from course.checks import saves
model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])
model.save("before.h5")                   # not watched yet
saves.watch()
saves.watch()                             # twice: each save still noted once
model.save("model.h5")
model.save_weights("weights.h5")
tf.keras.models.save_model(model, "other.h5")
print("SAVED", [os.path.basename(p) for p in saves.saved()], all(os.path.isabs(p) for p in saves.saved()))
saves.saved(forget=True)
model.save("again.h5")
print("AGAIN", [os.path.basename(p) for p in saves.saved()])
"""


def test_each_save_after_watch_is_noted_once(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert "SAVED" in done.stdout, done.stderr[-2000:]
    assert done.stdout.split("SAVED ", 1)[1].splitlines()[0] == "['model.h5', 'weights.h5', 'other.h5'] True"
    assert done.stdout.split("AGAIN ", 1)[1].strip() == "['again.h5']"  # after forget: the later saves only
    assert (tmp_path / "model.h5").is_file() and (tmp_path / "other.h5").is_file()


def test_savers_names_the_engines_that_saved_a_path(tmp_path):
    path = tmp_path / "model.h5"
    assert saves.savers([[str(path)], [], [str(tmp_path / "x.h5")]], path) == [0]
    assert saves.savers([[str(path)], [str(path)]], str(path)) == [0, 1]
    assert saves.savers([[], []], path) == []
