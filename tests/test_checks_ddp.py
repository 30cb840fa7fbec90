"""course.checks.ddp, notebook 12's checks, tried directly on every answer the fixtures hold for its exercises
(tests/check_cases.py): on two local engines formed into a gloo group as the notebook forms them, with the quick
profile's sizes; the torchrun script, run with torchrun; and the checks' own helpers, on new gloo groups of 1
and 3 ranks."""

from __future__ import annotations

import pytest

from course import UserError
from course.checks import check, ddp, quiz, torchrun_script
from tests import script_runs
from tests.check_cases import cases, define, judge, solution_answers, torch_engines

pytestmark = pytest.mark.slow

NOTEBOOK = "12_pytorch_ddp"
COVERED = {
    "ex-collectives-answer",
    "ex-ddp-answer",
    "ex-buckets-answer",
    "ex-accumulate-answer",
    "ex-script-answer",
    "ex-resume-answer",
    "ex-side-answer",
}
QUICK = {
    "RANKS": 2,
    "SAMPLES": 96,
    "EPOCHS": 2,
    "BATCH": 16,
    "LR": 0.1,
    "MICRO": 4,
    "K": 3,
    "RESUME_EPOCHS": 3,
}  # the quick profile


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    """Two local engines as one gloo group, as the notebook makes them."""
    with torch_engines(tmp_path_factory, QUICK["RANKS"]) as engines:
        yield engines.view


@pytest.fixture(scope="module")
def seen(view):
    return view.apply_sync(ddp.collectives_seen)


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-collectives-answer"}), ids=str)
def test_collectives(case, seen):
    judge(case, lambda: ddp.collectives(define(case, {})["after"], seen))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-ddp-answer"}), ids=str)
def test_ddp_training(case, view):
    def run():
        names = define(case, {})
        q = QUICK
        runs = view.apply_sync(
            ddp.ddp_run, names["wrap"], names["train"], q["SAMPLES"], q["EPOCHS"], q["BATCH"], q["LR"]
        )
        return ddp.ddp_training(runs, q["SAMPLES"], q["EPOCHS"], q["BATCH"], q["LR"])

    judge(case, run)


@pytest.fixture(scope="module")
def built(view):
    """The buckets DDP built for the visible cases, rank 0's (every rank builds the same)."""
    visible = [c for c in ddp.BUCKET_CASES if not c[3]]
    return visible, view.apply_sync(ddp.bucket_runs, visible)[0]


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-buckets-answer"}), ids=str)
def test_buckets(case, built):
    judge(case, lambda: ddp.buckets(define(case, {})["predict"], *built))


def test_every_rank_builds_the_same_buckets_and_launches_them_during_the_backward_pass(view):
    runs = view.apply_sync(ddp.bucket_run, (256,) * 7, 0.25)
    assert runs[0]["buckets"] == runs[1]["buckets"] and len(runs[0]["buckets"]) == 6
    assert 0 < runs[0]["launched_at"][0] < runs[0]["ready_at"][-1] <= runs[0]["backward_s"]


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-accumulate-answer"}), ids=str)
def test_accumulation(case, view):
    def run():
        names = define(case, {})
        q = QUICK
        runs = view.apply_sync(ddp.accumulation_run, names["accumulate"], q["SAMPLES"], q["MICRO"], q["K"], q["LR"])
        return ddp.accumulation(runs, q["SAMPLES"], q["MICRO"], q["K"], q["LR"])

    judge(case, run)


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-script-answer"}), ids=str)
def test_torchrun_script(case, tmp_path):
    """The script a case's %%writefile cell writes, run with torchrun for real (once per session: tests/script_runs)."""
    q = QUICK
    args = ["--samples", q["SAMPLES"], "--epochs", q["EPOCHS"], "--batch", q["BATCH"], "--lr", q["LR"]]
    define(case, {"OUT": tmp_path})
    run = script_runs.run_torchrun(tmp_path / "train_ddp.py", tmp_path / "ddp", ranks=q["RANKS"], args=args)
    judge(case, lambda: torchrun_script.ddp_script(run, q["SAMPLES"], q["EPOCHS"], q["BATCH"], q["LR"]))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-resume-answer"}), ids=str)
def test_resume_script(case, tmp_path):
    """The resume script run twice with torchrun for real: untouched, and with its last rank killed mid-epoch."""
    q = QUICK
    args = ["--samples", q["SAMPLES"], "--epochs", q["RESUME_EPOCHS"], "--batch", q["BATCH"], "--lr", q["LR"],
            "--checkpoint", "../checkpoint.pt"]  # fmt: skip
    define(case, {"OUT": tmp_path})
    script = tmp_path / "train_resume.py"
    kill = torchrun_script.kill_point(q["SAMPLES"], q["RANKS"], q["BATCH"])
    untouched = script_runs.run_torchrun(script, tmp_path / "untouched", q["RANKS"], args, max_restarts=1)
    lost = script_runs.run_torchrun(script, tmp_path / "lost", q["RANKS"], args, max_restarts=1, kill=kill)
    judge(
        case,
        lambda: torchrun_script.resume_script(untouched, lost, q["SAMPLES"], q["RESUME_EPOCHS"], q["BATCH"], q["LR"]),
    )


def test_a_rank_that_vanishes_before_the_check_loses_one_is_run_again_but_an_error_of_the_script_is_told(tmp_path):
    """A rank of the first attempt that ends from outside (here: os._exit, once) costs a second run, not the verdict;
    a script that raises in the first attempt is told its error, not run again."""
    q = QUICK
    args = ["--samples", q["SAMPLES"], "--epochs", q["RESUME_EPOCHS"], "--batch", q["BATCH"], "--lr", q["LR"],
            "--checkpoint", "../checkpoint.pt"]  # fmt: skip
    solution = solution_answers(NOTEBOOK, {"ex-resume-answer"})["ex-resume-answer"]
    body = solution.split("\n", 1)[1]  # the script, without its %%writefile line
    once, raises = tmp_path / "once.py", tmp_path / "raises.py"
    once.write_text(
        f"import os, pathlib\nmark = pathlib.Path({str(tmp_path / 'vanished')!r})\n"
        "if os.environ['RANK'] == '0' and not mark.exists():\n    mark.touch()\n    os._exit(1)\n" + body
    )
    raises.write_text(f"import os\nif os.environ['RANK'] == '0':\n    raise ValueError('not yet')\n{body}")
    kill = torchrun_script.kill_point(q["SAMPLES"], q["RANKS"], q["BATCH"])
    restarted = check(torchrun_script._restarted)  # the lost run's half of resume_script
    lost = torchrun_script.run_script(once, tmp_path / "lost", q["RANKS"], args, max_restarts=1, kill=kill)
    assert "ran again" in lost.output
    assert restarted(lost, q["SAMPLES"], q["BATCH"], 1) is None
    failed = torchrun_script.run_script(raises, tmp_path / "raised", q["RANKS"], args, max_restarts=1, kill=kill)
    assert "ran again" not in failed.output
    said = restarted(failed, q["SAMPLES"], q["BATCH"], 1)
    assert "first attempt, rank 0 raised ValueError: not yet" in said


def test_once_one_torchrun_agent_failed_the_others_are_ended_as_srun_ends_them():
    """An agent that waits (as at torchrun's exit barrier, 300 s) is killed a grace after another one failed; the
    job's exit code is the failed one's. With none failed, every agent's end is waited for."""
    import subprocess
    import sys
    import time

    def agent(code: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)

    waiting, failing = agent("import time; time.sleep(600)"), agent("raise SystemExit(3)")
    started = time.monotonic()
    assert torchrun_script._wait_for_agents([waiting, failing], started + 120, grace=1) == 3
    assert waiting.poll() is not None and time.monotonic() - started < 60, "the waiting agent was not ended"
    fine = [agent("import time; time.sleep(1)"), agent("pass")]
    assert torchrun_script._wait_for_agents(fine, time.monotonic() + 120) == 0
    assert all(job.returncode == 0 for job in fine)


def test_a_rank_is_lost_half_way_through_the_epoch_after_the_first_saved_one():
    """96 samples on 2 ranks, 8 per rank per step: 48 draws an epoch, 6 steps; lost at the 4th step's first draw."""
    assert torchrun_script.kill_point(96, 2, 16) == (1, 48 + 3 * 8 + 1)
    assert torchrun_script.kill_point(960, 4, 64, epoch=2) == (3, 2 * 240 + 7 * 16 + 1)
    with pytest.raises(UserError, match="1 step per epoch"):
        torchrun_script.kill_point(8, 2, 8)


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-side-answer"}), ids=str)
def test_side_by_side(case):
    judge(case, lambda: quiz.check(define(case, {})["side_by_side"], ddp.SIDE_BY_SIDE_KEY, ddp.SIDE_BY_SIDE_WHY))


def test_the_collectives_seen_on_one_and_three_ranks_are_their_definitions():
    """What the check compares predictions with, from real groups: worked out by hand for 1 and 3 ranks."""
    assert ddp.on_gloo_ranks(ddp.collectives_seen, 1) == [
        {"all_reduce": [0.0], "reduce_scatter": [0.0], "all_gather": [0.0], "broadcast": [0.0]}
    ]
    three = ddp.on_gloo_ranks(ddp.collectives_seen, 3)
    assert [r["all_reduce"] for r in three] == [[30.0, 33.0, 36.0]] * 3
    assert [r["reduce_scatter"] for r in three] == [[30.0], [33.0], [36.0]]
    assert [r["all_gather"] for r in three] == [[0.0, 1.0, 2.0, 10.0, 11.0, 12.0, 20.0, 21.0, 22.0]] * 3
    assert [r["broadcast"] for r in three] == [[0.0, 1.0, 2.0]] * 3


def test_a_rank_that_fails_in_a_gloo_group_is_named():
    def fails_on_rank_1():
        import torch.distributed as dist

        if dist.get_rank() == 1:
            raise ValueError("only rank 1")
        return dist.get_rank()

    fails_on_rank_1.__module__ = "__main__"  # sent by value, as a notebook's function is
    with pytest.raises(AssertionError, match="rank 1.*ValueError: only rank 1"):
        ddp.on_gloo_ranks(fails_on_rank_1, 2)


def test_one_process_follows_the_global_batches_it_is_given():
    """The reference the weights are held to: one SGD step per batch, and the batch's order inside it irrelevant."""
    first = ddp.one_process([[0, 1, 2, 3], [4, 5, 6, 7]], 8, 0.1)
    assert ddp._close(ddp.one_process([[3, 2, 1, 0], [7, 6, 5, 4]], 8, 0.1), first)
    assert not ddp._close(ddp.one_process([[0, 1, 2, 3, 4, 5, 6, 7]], 8, 0.1), first)
    assert not ddp._close(ddp.one_process([[0, 1, 2, 3], [4, 5, 6, 7]], 8, 0.2), first)
