"""course.checks.horovod_script on real `horovodrun -np 2` runs of the scripts notebook 07's part two shows (its
single-process script and the solution of its conversion exercise): the solution passes; a conversion with four
faults is told each of them by name (what the learner's feedback says)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from course import UserError
from course.checks import horovod_script
from tests.conftest import ROOT

NOTEBOOK = ROOT / "solutions" / "07_horovod_script.ipynb"


def notebook_scripts() -> tuple[str, str]:
    """(the single-process script, the solution of the conversion) as notebook 07 part two writes them."""
    notebook = json.loads(NOTEBOOK.read_text())
    cells = [("".join(c["source"]), c["metadata"].get("nbgrader", {})) for c in notebook["cells"]]
    single = next(s for s, _ in cells if s.startswith("%%writefile {OUT}/train_single.py"))
    answer = next(s for s, meta in cells if meta.get("grade_id") == "ex-script-answer")
    body = answer.split("### BEGIN SOLUTION\n", 1)[1].split("### END SOLUTION", 1)[0]
    return single.split("\n", 1)[1], body


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("horovod-check")
    single_text, solution = notebook_scripts()
    faults = {  # the plain optimizer, checkpoints on every rank, steps of the whole set, no warm-up, rank 1's weights
        "callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),": "callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(1),",
        "optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.legacy.SGD(learning_rate=LR))": "optimizer=tf.keras.optimizers.legacy.SGD(learning_rate=LR)",
        "             hvd.callbacks.LearningRateWarmupCallback(initial_lr=LR, warmup_epochs=WARMUP)]": "             tf.keras.callbacks.ModelCheckpoint('checkpoints/checkpoint-{epoch:03d}.h5')]",
        "steps = len(x_train) // BATCH": "steps = 600 // BATCH",
    }
    faulty = solution
    for old, new in faults.items():
        assert old in faulty, f"the notebook's solution changed: update this test ({old!r})"
        faulty = faulty.replace(old, new)
    shard = "x_train, y_train = data.shard((x_train, y_train), hvd.rank(), hvd.size())"
    steps = "steps = len(x_train) // BATCH"
    assert shard in solution and steps in solution, "the notebook's solution changed: update this test"
    # every rank on the whole data set, the steps divided by the ranks instead: the right counts, no data parallelism
    unsharded = solution.replace(shard, "").replace(steps, "steps = len(x_train) // (BATCH * hvd.size())")
    scripts = {"single": single_text, "solution": solution, "faulty": faulty, "unsharded": unsharded}
    for name, text in scripts.items():
        (folder / f"{name}.py").write_text(text)
    result = {"single": horovod_script.run_script(folder / "single.py", folder / "out-single", ranks=1, horovod=False)}
    for name in ("solution", "faulty", "unsharded"):
        result[name] = horovod_script.run_script(folder / f"{name}.py", folder / f"out-{name}", ranks=2)
    return result


@pytest.mark.slow
def test_the_solution_passes(runs, capsys):
    single, solution = runs["single"], runs["solution"]
    assert single.returncode == 0 and solution.returncode == 0, solution.output[-3000:]
    assert single.records[0].steps_per_epoch == [18] and solution.records[0].steps_per_epoch == [9]
    assert horovod_script.problems(solution, single) == []
    import numpy as np

    zero, one = solution.records[0].first_step, solution.records[1].first_step
    assert not np.allclose(zero["own"], one["own"]), "the ranks' weights differ before the broadcast: it shows"
    assert np.allclose(one["held"], zero["own"]) and np.allclose(zero["held"], zero["own"]), "rank 0's, everywhere"
    horovod_script.check(solution, single)
    assert capsys.readouterr().out.startswith("Correct: 2 ranks, identical weights, 9 steps per epoch each")
    assert solution.records[1].files == [] and "model.h5" in solution.records[0].files


@pytest.mark.slow
def test_each_fault_is_named(runs):
    found = horovod_script.problems(runs["faulty"], runs["single"])
    text = "\n".join(found)
    assert "the optimizer is not Horovod's" in text
    assert "the ranks end with different weights" in text
    assert (
        "rank 1 wrote checkpoints/checkpoint-001.h5, checkpoints/checkpoint-002.h5, checkpoints/checkpoint-003.h5"
        in text
    )
    assert "each rank took 18 steps per epoch; the single process took 18" in text
    assert "no warm-up: the first epoch already ran at 0.1" in text
    assert "after the first step every rank held rank 1's weights (what the broadcast sent)" in text
    with pytest.raises(AssertionError, match=r"problem\(s\) with faulty.py"):
        horovod_script.check(runs["faulty"], runs["single"])


@pytest.mark.slow
def test_the_same_data_on_every_rank_is_named(runs):
    """Sharding is read from what each rank gave fit: the solution's ranks share no image, the unsharded ones all."""
    solution, unsharded = runs["solution"].records, runs["unsharded"].records
    assert len(solution[0].samples) == len(solution[1].samples) == 300
    assert not set(solution[0].samples) & set(solution[1].samples)
    assert len(unsharded[0].samples) == 600 and unsharded[0].samples == unsharded[1].samples
    found = horovod_script.problems(runs["unsharded"], runs["single"])
    assert len(found) == 1 and "the ranks trained on the same images (100% of rank 0's images" in found[0], found


def test_a_missing_script_is_one_clear_error(tmp_path):
    with pytest.raises(UserError, match="write it first"):
        horovod_script.run_script(tmp_path / "train_hvd.py", tmp_path / "out")


def test_a_script_that_fails_is_reported_with_its_error(tmp_path):
    (tmp_path / "broken.py").write_text("raise NotImplementedError()\n")
    single = horovod_script.Run("single.py", 1, 0, "", {0: None})
    run = horovod_script.run_script(tmp_path / "broken.py", tmp_path / "out", ranks=1, horovod=False)
    (problem,) = horovod_script.problems(run, single)
    assert problem.startswith("the Horovod run failed (exit code 1; ranks that trained: none)")
    assert "NotImplementedError" in problem


def test_usage():
    done = subprocess.run(
        [sys.executable, "-m", "course.checks.horovod_script"], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 2 and "usage: python -m course.checks.horovod_script SCRIPT FOLDER" in done.stderr


def test_a_generator_given_to_fit_is_read_as_fit_draws_from_it():
    """A Python generator can be read once: the tap passes each batch on unchanged and notes its input rows, so the
    sharding check compares the ranks' images for a generator as for an array or a dataset."""
    import numpy as np

    x = np.arange(24, dtype=np.float32).reshape(6, 2, 2)
    batches = [(x[k : k + 2], np.arange(2)) for k in range(0, 6, 2)]
    drawn: set[str] = set()
    passed = list(horovod_script.tap((b for b in batches), drawn))
    assert all(p[0] is b[0] for p, b in zip(passed, batches)) and len(passed) == 3
    assert drawn == {horovod_script._digest(row) for row in x} and len(drawn) == 6


def test_whose_weights_the_ranks_hold_after_the_first_step_is_named():
    """The broadcast measured on weights, on made-up records: rank 0's everywhere, rank 1's everywhere, each its own."""

    def ranks(held: list[list[float]]) -> list[horovod_script.Record]:
        own = [[0.5, -1.0], [0.25, 2.0]]  # each rank's weights at the first step's end, before any callback
        return [
            horovod_script.Record(r, 2, True, [9], [0.1], [0.1], [], [], first_step={"own": own[r], "held": held[r]})
            for r in range(2)
        ]

    assert horovod_script._broadcast(ranks([[0.5, -1.0], [0.5, -1.0]])) == []
    (from_one,) = horovod_script._broadcast(ranks([[0.25, 2.0], [0.25, 2.0]]))
    assert from_one.startswith("after the first step every rank held rank 1's weights"), from_one
    (none,) = horovod_script._broadcast(ranks([[0.5, -1.0], [0.25, 2.0]]))
    assert none.startswith("after the first step rank 1 still held weights of its own"), none
    unstepped = ranks([[0.5, -1.0], [0.5, -1.0]])
    unstepped[1].first_step = {}
    assert horovod_script._broadcast(unstepped) == []
