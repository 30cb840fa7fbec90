"""Per-cell time limits of `course grade` / `course validate`: a fraction of a second is a limit, not "none"."""

from __future__ import annotations

import nbformat
import pytest

from course.grading.execute import run
from course.cli import main
from tests.grading_support import HOSTILE

NB = "99_fixture"


@pytest.mark.slow
def test_a_sub_second_limit_stops_a_longer_cell(tmp_path):
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("import time\ntime.sleep(4)\nprint('finished')")],
        metadata={"kernelspec": {"name": "ddl-hpc", "display_name": "Python (DDL on HPC)", "language": "python"}},
    )
    outcome = run(nb, str(tmp_path), 0.5, 2**30)
    assert outcome.timed_out == {0}, f"a 4 s cell ran to its end under a 0.5 s limit: {nb.cells[0].outputs}"
    printed = [o.get("text", "") for o in nb.cells[0].outputs if o.get("output_type") == "stream"]
    assert "finished\n" not in printed, "the cell ran to its end"


@pytest.mark.slow
def test_a_cell_stopped_at_its_limit_ends_the_kernels_processes_and_nothing_else(tmp_path):
    """Grading in a process that has other children (a test runner's browser, a server's other kernels): the
    watchdog ends what the graded kernel started, never a process that was there before it."""
    import subprocess

    import psutil

    bystander = subprocess.Popen(["sleep", "600"])
    try:
        nb = nbformat.v4.new_notebook(
            cells=[
                nbformat.v4.new_code_cell(
                    "import subprocess, time\nchild = subprocess.Popen(['sleep', '600'])\n"
                    "print('child', child.pid, flush=True)\ntime.sleep(60)"
                )
            ],
            metadata={"kernelspec": {"name": "ddl-hpc", "display_name": "Python (DDL on HPC)", "language": "python"}},
        )
        outcome = run(nb, str(tmp_path), 3, 2**30)
        assert outcome.timed_out == {0}, nb.cells[0].outputs
        printed = "".join(o.get("text", "") for o in nb.cells[0].outputs if o.get("output_type") == "stream")
        child = int(printed.split("child ", 1)[1].split()[0])
        assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE, (
            "the kernel's own child outlived its grading"
        )
        assert bystander.poll() is None, "grading killed a process its kernel did not start"
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.parametrize("command", ["validate", "grade"])
@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_a_limit_that_is_not_a_positive_number_is_one_line(command, value, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    target = [str(HOSTILE / "good" / f"{NB}.ipynb")] if command == "validate" else [str(HOSTILE), "--out", "x"]
    assert main([command, *target, f"--timeout={value}"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("course: error: --timeout must be a positive number"), lines
    assert not (tmp_path / "x").exists(), "nothing is graded with a limit that is not one"


def _kernel_that_fails_to_start(root, times: int) -> str:
    """A real kernelspec whose first `times` starts exit at once (as when a port is taken), then a real ipykernel."""
    import json
    import sys

    spec_dir = root / "kernels" / "flaky"
    spec_dir.mkdir(parents=True)
    launcher = root / "flaky_kernel.py"
    launcher.write_text(
        "import os, sys\n"
        f"counter = {str(root / 'starts')!r}\n"
        "n = len(open(counter).read()) if os.path.exists(counter) else 0\n"
        "open(counter, 'a').write('x')\n"
        f"if n < {times}:\n"
        "    sys.exit(1)\n"
        "os.execv(sys.executable, [sys.executable, '-m', 'ipykernel_launcher', *sys.argv[1:]])\n"
    )
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, str(launcher), "-f", "{connection_file}"],
                "display_name": "flaky",
                "language": "python",
            }
        )
    )
    return "flaky"


def _two_cells():
    return nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("# two cells"),
            nbformat.v4.new_code_cell("x = 6 * 7"),
            nbformat.v4.new_code_cell("print(x)"),
        ]
    )


@pytest.mark.slow
def test_a_kernel_that_fails_to_start_once_is_started_again(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    nb = _two_cells()
    outcome = run(nb, str(tmp_path), 30, 2**30, kernel_name=_kernel_that_fails_to_start(tmp_path, 1))
    assert outcome.stopped is None, (outcome.stopped, outcome.detail)
    assert (tmp_path / "starts").read_text() == "xx", "the kernel should have been started exactly twice"
    assert [o.get("text") for o in nb.cells[2].outputs] == ["42\n"]
    assert len(nb.cells) == 3 and nb.cells[0].cell_type == "markdown"


@pytest.mark.slow
def test_a_kernel_that_never_starts_is_the_graders_trouble_not_a_crash(tmp_path, monkeypatch):
    from course.grading import explain

    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    outcome = run(_two_cells(), str(tmp_path), 30, 2**30, kernel_name=_kernel_that_fails_to_start(tmp_path, 99))
    assert outcome.stopped == "nostart" and not outcome.executed, (outcome.stopped, outcome.executed)
    words = explain.stop_words(outcome, "", 30, 2**30)
    assert "could not start a kernel" in words and "crash" not in words, words


def _kernel_slow_to_answer(root, seconds: float) -> str:
    """A real kernelspec whose ipykernel starts only after `seconds`, as on a machine busy with other kernels."""
    import json
    import sys

    spec_dir = root / "kernels" / "slow"
    spec_dir.mkdir(parents=True)
    start = (
        f"import os, sys, time; time.sleep({seconds}); "
        "os.execv(sys.executable, [sys.executable, '-m', 'ipykernel_launcher', *sys.argv[1:]])"
    )
    argv = [sys.executable, "-c", start, "-f", "{connection_file}"]
    (spec_dir / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "slow", "language": "python"}))
    return "slow"


@pytest.mark.slow
def test_a_kernel_slower_to_answer_than_nbclients_default_wait_is_graded(tmp_path, monkeypatch):
    from nbclient import NotebookClient

    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    nb = _two_cells()
    late = NotebookClient.startup_timeout.default_value + 5
    outcome = run(nb, str(tmp_path), 30, 2**30, kernel_name=_kernel_slow_to_answer(tmp_path, late))
    assert outcome.stopped is None, (outcome.stopped, outcome.detail)
    assert [o.get("text") for o in nb.cells[2].outputs] == ["42\n"]


def test_nbgrader_waits_longer_for_a_new_kernel_than_nbclients_default(tmp_path):
    """nbgrader_config.py gives nbgrader's Execute a longer wait for a new kernel than nbclient's default."""
    from nbclient import NotebookClient
    from nbgrader.preprocessors import Execute
    from traitlets.config import Config

    from course.grading.nbgrader_course import configure

    config = Config()
    configure(config, tmp_path)
    assert Execute(config=config).startup_timeout > NotebookClient.startup_timeout.default_value
