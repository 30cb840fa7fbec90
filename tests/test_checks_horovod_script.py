"""course.checks.horovod_script, the check of notebook 07's script exercise (ex-script), on real `horovodrun -np 2`
runs: of the solution and of every answer the fixtures hold for it (tests/check_cases.py), each written by its own
`%%writefile` cell; of one conversion with five faults at once, each of which the feedback must name; and of the
notebook's single-process script, which must do what the notebook's reference for it says. A run takes about 25 s:
each is made once, by the first test that needs it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from course import UserError
from course.checks import horovod_script
from tests import script_runs
from tests.check_cases import Case, cases, defined, judge
from tests.conftest import ROOT

NOTEBOOK = "07_horovod_script"
COVERED = {"ex-script-answer"}
CASES = cases(NOTEBOOK, COVERED)
SOLUTION = CASES[0]


def notebook_cell(start: str) -> str:
    """The source of the solution notebook's code cell that starts with START."""
    cells = json.loads((ROOT / "solutions" / f"{NOTEBOOK}.ipynb").read_text())["cells"]
    return next("".join(c["source"]) for c in cells if "".join(c["source"]).startswith(start))


def reference() -> horovod_script.Run:
    """What the notebook's cell says the single-process script does (its `single`), from that cell itself."""
    names: dict = {}
    exec(notebook_cell("from course.checks import horovod_script\n"), names)
    return names["single"]


_RUNS: dict[str, horovod_script.Run] = {}  # each script's run, made once for the tests that read it


def run_of(case: Case, tmp_path_factory: pytest.TempPathFactory) -> horovod_script.Run:
    """CASE's script, written by its own `%%writefile {OUT}/train_hvd.py` cell, run as the notebook runs it (once
    per session: the strength test's notebook run reads the same run, tests/script_runs.py)."""
    if case.label not in _RUNS:
        out = tmp_path_factory.mktemp("horovod-script")
        defined(case, {"OUT": out})
        _RUNS[case.label] = script_runs.run_script(out / "train_hvd.py", out / "hvd", ranks=2)
    return _RUNS[case.label]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=str)
def test_every_answer(case, tmp_path_factory):
    run = run_of(case, tmp_path_factory)
    judge(case, lambda: "\n".join(horovod_script.problems(run, reference())) or None)


@pytest.mark.slow
def test_the_solution_is_told_what_it_did(tmp_path_factory, capsys):
    solution = run_of(SOLUTION, tmp_path_factory)
    import numpy as np

    zero, one = solution.records[0].first_step, solution.records[1].first_step
    assert not np.allclose(zero["own"], one["own"]), "the ranks' weights differ before the broadcast: it shows"
    assert np.allclose(one["held"], zero["own"]) and np.allclose(zero["held"], zero["own"]), "rank 0's, everywhere"
    single = reference()
    capsys.readouterr()  # what writing the script and the reference printed
    horovod_script.check(solution, single)
    said = capsys.readouterr().out
    assert said.startswith("Correct: 2 rank(s) on 2 node(s), 1 each, identical weights, 9 steps per epoch each"), said
    assert [(r.local_rank, r.host, r.pinned) for r in solution.records.values()] == [
        (0, "localhost", [0]),
        (0, "127.0.0.1", [0]),
    ], "rank 1 is local rank 0 of the second node, and pins the one stand-in GPU of that node"
    assert solution.records[1].files == [] and "model.h5" in solution.records[0].files


@pytest.mark.slow
def test_the_same_data_on_every_rank_is_named(tmp_path_factory):
    """Sharding is read from what each rank gave fit: the solution's ranks share no image, an unsharded answer's
    ranks all of them."""
    unsharded = next(c for c in CASES if not c.right and "data.shard(" not in c.answers["ex-script-answer"])
    solution, same = run_of(SOLUTION, tmp_path_factory).records, run_of(unsharded, tmp_path_factory)
    assert len(solution[0].samples) == len(solution[1].samples) == 300
    assert not set(solution[0].samples) & set(solution[1].samples)
    assert len(same.records[0].samples) == 600 and same.records[0].samples == same.records[1].samples
    found = horovod_script.problems(same, reference())
    assert len(found) == 1 and "the ranks trained on the same images (100% of rank 0's images" in found[0], found


@pytest.mark.slow
def test_each_fault_is_named(tmp_path):
    """Five faults in one script: the feedback names every one, not only the first it meets."""
    faults = {  # the plain optimizer, checkpoints on every rank, steps of the whole set, no warm-up, rank 1's weights
        "callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),": "callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(1),",
        "optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.legacy.SGD(learning_rate=LR))": "optimizer=tf.keras.optimizers.legacy.SGD(learning_rate=LR)",
        "             hvd.callbacks.LearningRateWarmupCallback(initial_lr=LR, warmup_epochs=WARMUP)]": "             tf.keras.callbacks.ModelCheckpoint('checkpoints/checkpoint-{epoch:03d}.h5')]",
        "steps = len(x_train) // BATCH": "steps = 600 // BATCH",
    }
    faulty = SOLUTION.answers["ex-script-answer"]
    for old, new in faults.items():
        assert old in faulty, f"the notebook's solution changed: update this test ({old!r})"
        faulty = faulty.replace(old, new)
    defined(Case("five faults", {"ex-script-answer": faulty}, right=False), {"OUT": tmp_path})
    run = horovod_script.run_script(tmp_path / "train_hvd.py", tmp_path / "hvd", ranks=2)
    text = "\n".join(horovod_script.problems(run, reference()))
    assert "the optimizer is not Horovod's" in text
    assert "the ranks end with different weights" in text
    assert (
        "rank 1 wrote checkpoints/checkpoint-001.h5, checkpoints/checkpoint-002.h5, checkpoints/checkpoint-003.h5"
        in text
    )
    assert "each rank took 18 steps per epoch; the single process took 18" in text
    assert "no warm-up: the first epoch already ran at 0.1" in text
    assert "after the first step every rank held rank 1's weights (what the broadcast sent)" in text
    with pytest.raises(AssertionError, match=r"problem\(s\) with train_hvd.py"):
        horovod_script.check(run, reference())


@pytest.mark.slow
def test_the_single_process_script_does_what_the_notebook_says(tmp_path):
    """The notebook checks conversions against a reference it writes down instead of running the single-process
    script (half a minute): that script, run, takes the reference's steps and rate and writes its files."""
    (tmp_path / "train_single.py").write_text(notebook_cell("%%writefile {OUT}/train_single.py").split("\n", 1)[1])
    run = horovod_script.run_script(tmp_path / "train_single.py", tmp_path / "single", ranks=1, horovod=False)
    assert run.returncode == 0, run.output[-3000:]
    (done,), (said,) = run.records.values(), reference().records.values()
    assert done.steps_per_epoch == said.steps_per_epoch * len(done.steps_per_epoch)
    assert done.learning_rates == pytest.approx(said.learning_rates * len(done.learning_rates))
    assert sorted(done.files) == sorted(said.files)


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
