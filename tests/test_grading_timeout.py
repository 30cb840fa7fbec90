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
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import time\ntime.sleep(4)\nprint('finished')")],
                                  metadata={"kernelspec": {"name": "ddl-hpc", "display_name": "Python (DDL on HPC)",
                                                           "language": "python"}})
    outcome = run(nb, str(tmp_path), 0.5, 2**30)
    assert outcome.timed_out == {0}, f"a 4 s cell ran to its end under a 0.5 s limit: {nb.cells[0].outputs}"
    printed = [o.get("text", "") for o in nb.cells[0].outputs if o.get("output_type") == "stream"]
    assert "finished\n" not in printed, "the cell ran to its end"


@pytest.mark.parametrize("command", ["validate", "grade"])
@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_a_limit_that_is_not_a_positive_number_is_one_line(command, value, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    target = [str(HOSTILE / "good" / f"{NB}.ipynb")] if command == "validate" else [str(HOSTILE), "--out", "x"]
    assert main([command, *target, f"--timeout={value}"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("course: error: --timeout must be a positive number"), lines
    assert not (tmp_path / "x").exists(), "nothing is graded with a limit that is not one"
