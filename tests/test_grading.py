"""`python -m course grade` and `validate`: real nbgrader, real kernels, the hostile corpus.

The corpus (tests/fixtures/hostile/, described in tests/fixtures/hostile.md) is graded in one run
on 2 workers; every way a submission can go wrong must show up on its own rows while the rest of
the class is graded normally.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT, run_course
from tests.grading_support import FIXTURE_COURSE, HOSTILE, by_cell, copy_tree, grade, rows, tagged_env, tree_digest

NB = "99_fixture"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """Grade a copy of the hostile corpus once: (submissions, out, process, digest before, tag)."""
    base = tmp_path_factory.mktemp("hostile")
    submissions = copy_tree(HOSTILE, base / "class")
    before = tree_digest(submissions)
    tag = uuid.uuid4().hex
    result = grade(
        submissions, base / "out", "--timeout", "10", "--memory", "500M", "--workers", "2", env=tagged_env(tag)
    )
    return submissions, base / "out", result, before, tag


def _cell(table, student, cell):
    key = (student, NB, cell)
    assert key in table, f"no row for {key}; rows: {sorted(table)}"
    return table[key]


def _expect(table, student, cell, points, statuses, words=""):
    row = _cell(table, student, cell)
    statuses = (statuses,) if isinstance(statuses, str) else statuses
    assert float(row["points"]) == points and row["status"] in statuses, f"{student}/{cell}: {row}"
    assert words.lower() in row["message"].lower(), f"{student}/{cell}: expected {words!r} in {row['message']!r}"


def test_the_run_finishes_with_a_summary(hostile):
    _, out, result, _, _ = hostile
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    summary = result.stdout.strip().splitlines()[-1]
    assert summary.startswith("graded 14 submission(s)") and "16 student(s)" in summary, summary
    assert (out / "grades.csv").is_file()


def test_good_and_unanswered_submissions_are_graded_normally(hostile):
    table = by_cell(hostile[1])
    _expect(table, "good", "ex1-check", 2, "passed")
    _expect(table, "good", "ex2-check", 3, "passed")
    _expect(table, "unanswered", "ex1-check", 0, "failed", "not answered yet")
    _expect(table, "unanswered", "ex2-check", 0, "failed", "not answered yet")


def test_an_endless_loop_costs_only_its_cell(hostile):
    table = by_cell(hostile[1])
    _expect(table, "loop", "ex1-check", 0, "timeout", "longer than 10 s")
    _expect(table, "loop", "ex2-check", 3, "passed")


def test_a_loop_that_ignores_the_interrupt_gets_its_kernel_killed(hostile):
    table = by_cell(hostile[1])
    _expect(table, "stubborn_loop", "ex1-check", 0, ("timeout", "not run"))
    _expect(table, "stubborn_loop", "ex2-check", 0, "not run", "ignored the interrupt")
    _expect(table, "stubborn_loop", "*timeout", 0, "timeout", "ignored the interrupt")


@pytest.mark.parametrize("student,dead_cell", [("os_exit", "ex2"), ("kernel_kill", "ex1")])
def test_a_dying_kernel_is_reported_and_earlier_work_counts(hostile, student, dead_cell):
    table = by_cell(hostile[1])
    _expect(table, student, "*crashed", 0, "crashed", "the kernel died while running cell")
    assert f"{dead_cell}-answer" in _cell(table, student, "*crashed")["message"]
    if dead_cell == "ex2":
        _expect(table, student, "ex1-check", 2, "passed")
    _expect(table, student, "ex2-check", 0, "not run", "kernel died")


def test_megabytes_of_output_are_cut_and_the_work_still_counts(hostile):
    table = by_cell(hostile[1])
    _expect(table, "flood", "ex1-check", 2, "passed")
    _expect(table, "flood", "ex2-check", 3, "passed")
    _expect(table, "flood", "*warning", 0, "warning", "output was cut at 1 MB")


def test_a_memory_bomb_hits_the_memory_limit(hostile):
    table = by_cell(hostile[1])
    _expect(table, "memory_bomb", "*memory", 0, "memory", "more than 500 MB of memory")
    _expect(table, "memory_bomb", "ex1-check", 0, "not run")
    _expect(table, "memory_bomb", "ex2-check", 0, "not run")


def test_edited_deleted_or_relabelled_tests_are_reported_and_the_instructors_are_used(hostile):
    table = by_cell(hostile[1])
    _expect(table, "edited_tests", "ex1-check", 0, "failed", "this test cell was edited")
    _expect(table, "edited_tests", "ex2-check", 3, "passed")
    _expect(table, "deleted_tests", "ex1-check", 2, "passed")
    _expect(table, "deleted_tests", "ex2-check", 0, "failed", "had been deleted")
    _expect(table, "metadata_hack", "ex1-check", 0, "failed", "grading metadata was changed")
    assert float(_cell(table, "metadata_hack", "ex1-check")["max_points"]) == 2  # not the 100 it claimed


def test_broken_files_get_rows_that_say_what_is_wrong(hostile):
    table = by_cell(hostile[1])
    for cell in ("ex1-check", "ex2-check"):
        _expect(table, "malformed", cell, 0, "invalid", "not valid notebook JSON")
        _expect(table, "not_a_notebook", cell, 0, "invalid", "not a notebook")
        _expect(table, "empty", cell, 0, "missing", "empty/ is empty")
        _expect(table, "unknown", cell, 0, "missing", f"no {NB}.ipynb in unknown/")
    assert table[("not_a_notebook", "notes.txt", "*not a notebook")]["points"] == "0"
    assert "not a notebook of this course" in table[("unknown", "homework", "*unknown")]["message"]


def test_a_misnamed_notebook_is_graded_under_its_real_name(hostile):
    table = by_cell(hostile[1])
    _expect(table, "misnamed", "ex1-check", 2, "passed")
    _expect(table, "misnamed", "ex2-check", 3, "passed")
    _expect(table, "misnamed", "*warning", 0, "warning", "99_Fixture (1).ipynb")


def test_a_misnamed_notebook_that_runs_out_of_time_keeps_its_name_warning_and_one_stop_row():
    """The whole-notebook rows of a submission that was both recognised under another name and stopped: the stop
    once (its own row), then every note as a warning, the name first; the feedback's notes in the same order."""
    from types import SimpleNamespace

    import nbformat

    from course.grading.autograde import Job, _notebook_rows
    from course.grading.execute import Outcome

    named = "the file was named 'hw.ipynb'; it was graded as 99_fixture.ipynb"
    stop, repaired = "cell 3 ran out of time", "this test cell was edited; the instructor's version was used"
    job = Job("ann", "ann/hw.ipynb", SimpleNamespace(notebook="99_fixture"), b"", 1.0, 2**30, named)
    notes = [repaired]
    rows = _notebook_rows(job, nbformat.v4.new_notebook(), Outcome(stopped="timeout"), stop, notes)
    assert [(r["status"], r["message"]) for r in rows] == [("timeout", stop), ("warning", named), ("warning", repaired)]
    assert notes == [named, stop, repaired]


def test_submissions_are_never_modified_moved_or_deleted(hostile):
    submissions, _, _, before, _ = hostile
    assert tree_digest(submissions) == before


def test_every_graded_submission_gets_a_readable_feedback_file(hostile):
    _, out, _, _, _ = hostile
    for student in ("good", "unanswered", "loop", "memory_bomb", "malformed", "misnamed", "deleted_tests"):
        text = (out / "feedback" / student / f"{NB}.txt").read_text()
        assert text.startswith(f"Feedback for {student} on {NB}") and "Score:" in text
        assert "Traceback" not in text and "\x1b[" not in text
    assert "Score: 5 / 5 points" in (out / "feedback" / "good" / f"{NB}.txt").read_text()
    assert "more than 500 MB" in (out / "feedback" / "memory_bomb" / f"{NB}.txt").read_text()


def test_no_kernel_or_child_process_outlives_the_run(hostile):
    tag = hostile[4]
    deadline = time.monotonic() + 30  # kernels that were killed may take a moment to be reaped
    while True:
        left = []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            try:
                if proc.environ().get("COURSE_TEST_GRADE_TAG") == tag and proc.status() != psutil.STATUS_ZOMBIE:
                    left.append(" ".join(proc.info["cmdline"] or [])[:120])
            except psutil.Error:
                continue
        if not left or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert not left, f"processes left behind by grading: {left}"


def test_a_second_run_grades_only_what_changed(hostile, tmp_path):
    submissions, out, _, _, _ = hostile
    first = (out / "grades.csv").read_text()
    again = grade(submissions, out, "--timeout", "10", "--memory", "500M", "--workers", "2")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip().splitlines()[-1].startswith("graded 0 submission(s)")
    assert "reused 14 unchanged" in again.stdout
    assert (out / "grades.csv").read_text() == first
    # a student hands in a new version: only that one is graded again
    changed = copy_tree(submissions, tmp_path / "class")
    shutil.copyfile(changed / "good" / f"{NB}.ipynb", changed / "unanswered" / f"{NB}.ipynb")
    shutil.copytree(out, tmp_path / "out")
    third = grade(changed, tmp_path / "out", "--timeout", "10", "--memory", "500M", "--workers", "2")
    assert third.returncode == 0, third.stderr
    assert third.stdout.strip().splitlines()[-1].startswith("graded 1 submission(s)"), third.stdout
    _expect(by_cell(tmp_path / "out"), "unanswered", "ex2-check", 3, "passed")


def test_regrade_grades_everything_again(tmp_path):
    submissions = tmp_path / "class"
    for student in ("good", "unanswered"):
        shutil.copytree(HOSTILE / student, submissions / student)
    first = grade(submissions, tmp_path / "out", "--workers", "2")
    assert first.returncode == 0 and first.stdout.startswith("graded 2 submission(s)"), first.stdout + first.stderr
    again = grade(submissions, tmp_path / "out", "--workers", "2", "--regrade")
    assert again.returncode == 0 and again.stdout.startswith("graded 2 submission(s)"), again.stdout
    assert [r["points"] for r in rows(tmp_path / "out")] == ["2", "3", "0", "0"]


def test_validate_says_which_checks_fail_and_why():
    result = run_course("validate", str(HOSTILE / "unanswered" / f"{NB}.ipynb"))
    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"{NB}.ipynb: 0 of 2 checks pass (0 of 5 points)"
    assert "  FAIL  ex1-check (2 points): not answered yet (the answer cell still raises NotImplementedError)" in lines


def test_validate_passes_a_correct_notebook_and_reports_edited_checks():
    good = run_course("validate", str(HOSTILE / "good" / f"{NB}.ipynb"))
    assert good.returncode == 0, good.stdout + good.stderr
    assert good.stdout.splitlines()[0] == f"{NB}.ipynb: 2 of 2 checks pass (5 of 5 points)"
    edited = run_course("validate", str(HOSTILE / "edited_tests" / f"{NB}.ipynb"))
    assert "NOTE  check ex1-check was changed" in edited.stdout


@pytest.mark.parametrize(
    "args,words",
    [
        (["grade", "no/such/folder", "--out", "x", "--solutions", str(FIXTURE_COURSE)], "no submissions folder"),
        (["grade", str(HOSTILE), "--out", str(HOSTILE / "good" / "out")], "inside the submissions folder"),
        (["grade", str(HOSTILE), "--out", "x", "--memory", "lots"], "is not a size"),
        (["grade", str(HOSTILE), "--out", "x", "--timeout", "0"], "--timeout must be"),
        (["grade", str(HOSTILE), "--out", "x", "--solutions", "no/such/solutions"], "no solutions folder"),
        (["validate", "no/such.ipynb"], "no notebook at"),
        (["validate", str(HOSTILE / "malformed" / f"{NB}.ipynb")], "not valid notebook JSON"),
        (["validate", str(HOSTILE / "not_a_notebook" / "notes.txt")], "is not a notebook"),
        (["release", "--solutions", "no/such/solutions"], "no solutions folder"),
    ],
)
def test_user_mistakes_are_one_line(args, words, tmp_path):
    result = run_course(*args, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("course: error:") and words in lines[0], result.stderr
    assert not (tmp_path / "x").exists() and not (HOSTILE / "good" / "out").exists(), "a refused grading wrote"


def test_a_cluster_that_cannot_start_is_an_error_row_not_a_score_and_not_cached(tmp_path):
    # the grading machinery fails, not the learner: every engine of the notebook's cluster exits as it starts
    # (a startup file all engines of this IPYTHONDIR run); then the machine is fixed and grading runs again
    from tests.grading_support import FIXTURES

    solutions = FIXTURES / "cluster_course"
    submissions = tmp_path / "class"
    (submissions / "alice").mkdir(parents=True)
    shutil.copyfile(solutions / "98_cluster.ipynb", submissions / "alice" / "98_cluster.ipynb")  # a correct answer
    startup = tmp_path / "ipython" / "profile_course" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-broken.py").write_text("import os\nos._exit(3)\n")
    env = {**tagged_env(uuid.uuid4().hex), "IPYTHONDIR": str(tmp_path / "ipython")}
    broken = grade(submissions, tmp_path / "out", "--workers", "1", "--timeout", "120", solutions=solutions, env=env)
    assert broken.returncode == 0, broken.stderr
    row = by_cell(tmp_path / "out")[("alice", "98_cluster", "ex1-check")]
    assert row["status"] == "error" and row["points"] == "", row
    assert "grading machinery failed" in row["message"] and "engines did not start" in row["message"], row
    assert "NOT GRADED" in broken.stdout and "0 of 1 notebook(s) with full marks" in broken.stdout, broken.stdout
    feedback = (tmp_path / "out" / "feedback" / "alice" / "98_cluster.txt").read_text()
    assert "Score: not graded yet" in feedback and "0 / 2" not in feedback, feedback

    (startup / "00-broken.py").unlink()  # the machine is fixed: the next run grades alice again (nothing cached)
    fixed = grade(submissions, tmp_path / "out", "--workers", "1", "--timeout", "120", solutions=solutions, env=env)
    assert fixed.returncode == 0 and fixed.stdout.startswith("graded 1 submission(s)"), fixed.stdout + fixed.stderr
    row = by_cell(tmp_path / "out")[("alice", "98_cluster", "ex1-check")]
    assert (row["status"], row["points"]) == ("passed", "2"), row


def test_totals_per_student_and_only_graded_cells_of_solutions_trigger_regrading(tmp_path):
    solutions = copy_tree(FIXTURE_COURSE, tmp_path / "solutions")
    submissions = tmp_path / "class"
    for student in ("good", "unanswered"):
        shutil.copytree(HOSTILE / student, submissions / student)
    first = grade(submissions, tmp_path / "out", "--workers", "2", solutions=solutions)
    assert first.returncode == 0 and first.stdout.startswith("graded 2 submission(s)"), first.stdout + first.stderr
    import csv

    with open(tmp_path / "out" / "totals.csv", newline="") as handle:
        totals = {(r["student"], r["notebook"]): (r["points"], r["max_points"]) for r in csv.DictReader(handle)}
    assert totals == {
        ("good", NB): ("5", "5"),
        ("good", "TOTAL"): ("5", "5"),
        ("unanswered", NB): ("0", "5"),
        ("unanswered", "TOTAL"): ("0", "5"),
    }

    # the instructor rewords the exercise text: nothing is graded again
    path = solutions / f"{NB}.ipynb"
    nb = json.loads(path.read_text())
    text = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "ex1-text")
    text["source"] = "".join(text["source"]) + "\n\nHint: `sum` and `len` help."
    path.write_text(json.dumps(nb, indent=1))
    reworded = grade(submissions, tmp_path / "out", "--workers", "2", solutions=solutions)
    assert reworded.stdout.startswith("graded 0 submission(s)") and "reused 2" in reworded.stdout, reworded.stdout

    # ... but a change to a hidden test changes what the grading state is keyed on, so the class is graded again
    from course.grading.grade import fingerprint

    before = fingerprint(path)
    check = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "ex1-check")
    check["source"] = "".join(check["source"]).replace(
        "### END HIDDEN TESTS", "assert mean_of([2, 4]) == 3\n### END HIDDEN TESTS"
    )
    path.write_text(json.dumps(nb, indent=1))
    assert fingerprint(path) != before


# ------------------------------------------------------------------ grading as a Slurm job array (two nodes)

SLURM_LIMITS = ("--timeout", "10", "--memory", "500M")  # the hostile run's limits, so that rows can be compared


def _same_rows(out) -> list[tuple]:
    """What must not depend on where grading ran: student, notebook, cell, points, status of every row."""
    return sorted((r["student"], r["notebook"], r["cell"], r["points"], r["status"]) for r in rows(out))


def _shared_out(name: str):
    """An output folder on a disk the compute nodes share: in the home folder, as the guide says (not /tmp, which
    is refused, and not the checkout, which may itself be under /tmp)."""
    out = Path.home() / ".cache" / "course" / "test-slurm-grading" / f"{name}-{uuid.uuid4().hex[:8]}"
    out.parent.mkdir(parents=True, exist_ok=True)
    return out


def test_grading_on_slurm_over_two_nodes_gives_the_rows_of_local_grading_and_a_cancelled_task_loses_nothing(
    hostile, virtual_cluster
):
    """The hostile class (honest, wrong, blank, endless, killed, memory-hungry, broken) graded as a job array of two
    tasks, one per node of the virtual cluster, with --no-wait. Task 1 is cancelled once it has graded something:
    `--collect` then leaves the rest of its share "not graded" (no points, naming the cancelled task), and the next
    run grades only those. In the end: the same rows, totals and feedback files as on one machine."""
    submissions, local, _, before, _ = hostile
    out = _shared_out("two-nodes")
    try:
        sent = grade(
            submissions,
            out,
            *SLURM_LIMITS,
            "--slurm",
            "--tasks",
            "2",
            "--time",
            "00:10:00",
            "--no-wait",
            env=virtual_cluster,
        )
        assert sent.returncode == 0, sent.stdout + sent.stderr
        job_id = int(re.search(r"submitted Slurm job (\d+)", sent.stdout).group(1))
        assert f"course grade --collect {out}" in sent.stdout
        # while it runs, a second grading into the same folder is refused in one line
        second = grade(submissions, out, *SLURM_LIMITS, "--workers", "1", env=virtual_cluster)
        assert second.returncode == 1 and "not collected yet" in second.stderr and "Traceback" not in second.stderr
        results = out / ".grading-slurm" / "results"
        deadline = time.monotonic() + 240
        while not any(int(p.stem) % 2 == 1 for p in results.glob("*.pickle")) and time.monotonic() < deadline:
            time.sleep(0.5)
        cancelled = subprocess.run(["scancel", f"{job_id}_1"], env=virtual_cluster, capture_output=True, text=True)
        assert cancelled.returncode == 0, cancelled.stderr
        collected = run_course("grade", "--collect", str(out), env=virtual_cluster, timeout=900)
        assert collected.returncode == 0, collected.stdout + collected.stderr
        assert "(2 array task(s))" in collected.stdout and "NOT GRADED" in collected.stdout, collected.stdout
        not_graded = {(r["student"], r["notebook"]) for r in rows(out) if r["points"] == "" and r["cell"]}
        assert not_graded, f"task 1 finished before it was cancelled: {collected.stdout}"
        assert all(f"{job_id}_1 ended CANCELLED" in r["message"] for r in rows(out) if r["points"] == "" and r["cell"])
        logs = sorted((out / "slurm-logs" / str(job_id)).glob("task-*.out"))
        nodes = {re.search(r"on (\S+) with", log.read_text()).group(1) for log in logs}
        assert len(logs) == 2 and len(nodes) == 2, f"the two tasks ran on {nodes}: {[p.read_text() for p in logs]}"
        assert not (out / ".grading-slurm").exists(), "the run's folder is removed once collected"

        again = grade(
            submissions, out, *SLURM_LIMITS, "--slurm", "--tasks", "2", "--time", "00:10:00", env=virtual_cluster
        )
        assert again.returncode == 0 and "Traceback" not in again.stderr, again.stdout + again.stderr
        summary = again.stdout.strip().splitlines()[-1]
        assert summary.startswith(f"graded {len(not_graded)} submission(s)") and "NOT GRADED" not in summary, summary
        assert _same_rows(out) == _same_rows(local)
        assert (out / "totals.csv").read_text() == (local / "totals.csv").read_text()
        assert sorted(p.relative_to(out) for p in (out / "feedback").rglob("*.txt")) == sorted(
            p.relative_to(local) for p in (local / "feedback").rglob("*.txt")
        )
        assert tree_digest(submissions) == before, "grading changed the submissions"
    finally:
        shutil.rmtree(out, ignore_errors=True)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--out", "/tmp/course-grades"], "a node's own disk"),
        (["--out", "OUT", "--time", "00:01:00"], "ask for at least 00:02:00"),
        (["--out", "OUT", "--partition", "nosuch"], "no partition 'nosuch'"),
        (["--out", "OUT", "--workers", "2"], "--workers is for grading on this machine"),
    ],
)
def test_slurm_grading_mistakes_are_one_line(virtual_cluster, args, words):
    out = _shared_out("refused")
    args = [str(out) if a == "OUT" else a for a in args]
    done = run_course(
        "grade", str(HOSTILE), "--solutions", str(FIXTURE_COURSE), *SLURM_LIMITS, "--slurm", *args, env=virtual_cluster
    )
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and words in done.stderr, done.stderr
    assert not out.exists(), "a refused grading writes nothing"


def test_autograde_names_a_student_from_their_account(tmp_path):
    """nbgrader adds a collected student without a name (Formgrader: "None, None"): autograde's first step gives
    them their account's (root's full name is "root"), and keeps a name the instructor gave."""
    import nbformat
    from nbgrader.api import Gradebook

    from course.grading.autograde import _alembic_in_process
    from course.grading.names import NameStudent, account_name

    _alembic_in_process()  # nbgrader would run the `alembic` command to make the gradebook
    db_url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(db_url) as gradebook:
        gradebook.update_or_create_student("root")
        gradebook.update_or_create_student("named", first_name="Grace", last_name="Hopper")
    for student in ("root", "named"):
        NameStudent().preprocess(nbformat.v4.new_notebook(), {"nbgrader": {"student": student, "db_url": db_url}})
    with Gradebook(db_url) as gradebook:
        names = {s.id: (s.first_name, s.last_name) for s in gradebook.students}
    assert names == {"root": account_name("root"), "named": ("Grace", "Hopper")}, names
    assert account_name("root")[1] and account_name("no-such-account") == ("", "no-such-account")


def test_a_submission_too_large_for_the_exchange_is_refused_in_one_line(tmp_path):
    """`nbgrader submit` with the course's settings, of a folder over nbgrader's 100 MB: one line saying what to do
    (nbgrader alone raises a RuntimeError, whose traceback the Assignment List shows), and nothing submitted. The
    Assignment List's own line: tests/test_hub.py."""
    import nbformat

    from course.grading.exchange import one_line

    exchange, home = tmp_path / "exchange", tmp_path / "home"
    released = exchange / "ddl-hpc" / "outbound" / "02-sgd"
    released.mkdir(parents=True)
    (exchange / "ddl-hpc" / "inbound").mkdir(mode=0o733)
    nbformat.write(nbformat.v4.new_notebook(), str(released / "02_sgd.ipynb"))
    work = home / "02-sgd"
    shutil.copytree(released, work)
    with open(work / "checkpoint.bin", "wb") as handle:
        handle.truncate(101_000_000)  # sparse: counted at its full size, written in no time
    env = {**os.environ, "HOME": str(home), "COURSE_NBGRADER_EXCHANGE": str(exchange)}
    shutil.copy(ROOT / "deploy" / "jupyterhub" / "nbgrader_config_everyone.py", home / "nbgrader_config.py")
    command = [str(Path(sys.executable).parent / "nbgrader"), "submit", "02-sgd"]  # as a learner's terminal on the hub
    done = subprocess.run(command, cwd=home, env=env, capture_output=True, text=True, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in output, output
    assert re.search(r"02-sgd is not submitted: its folder .* holds 101 MB, more than the 100 MB", output), output
    assert not list((exchange / "ddl-hpc" / "inbound").iterdir())
    refusal = "Traceback (most recent call last):\n  ...\nnbgrader.exchange.abc.exchange.ExchangeError: too large"
    assert one_line(refusal) == "too large" and one_line("Traceback\nKeyError: 'x'") == "Traceback\nKeyError: 'x'"
