"""course.checks.mirrored_loop, notebook 08's checks of a MirroredStrategy loop the learner writes, on 2 real logical CPU
devices: a right build and step pass (the right loop passes in notebook 08's execution test: 2 replicas = 1 device to
1e-5), and each plausible wrong one fails with a message that names its mistake (per-replica mean, no
strategy.reduce, variables outside the scope or in another strategy's, the forward pass outside the tape, an
undistributed dataset, the replicas' parts gathered and the step run once outside strategy.run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import PROGRAMS, ROOT


@pytest.mark.slow
def test_checks_pass_right_answers_and_name_each_mistake():
    done = subprocess.run(
        [sys.executable, str(PROGRAMS / "mirrored_checks.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ, COURSE_OFFLINE="1"),
    )
    assert "RESULT " in done.stdout, done.stderr[-3000:]
    found = json.loads(done.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert found["build right"] == ["pass", "MirroredVariable"]
    assert found["step right"][0] == "pass", found["step right"]
    assert "not MirroredVariable" in found["model outside scope"]
    assert "create the optimizer inside" in found["optimizer outside scope"]
    assert "mean over the replica's own 8 images" in found["step per-replica mean"]
    assert "per-replica mean" in found["loop per-replica mean"], found["loop per-replica mean"]
    assert "strategy.reduce" in found["loop no reduce"] and "about 1/2" in found["loop no reduce"]
    assert "another strategy" in found["build in a new strategy"], found["build in a new strategy"]
    assert "inside `with tf.GradientTape()" in found["step forward outside tape"], found["step forward outside tape"]
    assert found["loop right"][0] == "pass", found["loop right"]
    assert "never called strategy.run" in found["loop gathered, no strategy.run"], found[
        "loop gathered, no strategy.run"
    ]
    undistributed = found["loop undistributed dataset"]
    assert "never distributed its dataset" in undistributed and "per-replica mean" not in undistributed, undistributed
