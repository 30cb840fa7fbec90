"""`python -m course run`: the dry run reports each notebook's status, duration and key figures, and fails loudly."""

import json
import os
import platform
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tests.conftest import ROOT, run_course

pytestmark = pytest.mark.slow


def notebook(path, *sources):
    nb = new_notebook(cells=[new_code_cell(s) for s in sources])
    nb.metadata.kernelspec = {"name": "ddl-hpc", "display_name": "Python (DDL on HPC)", "language": "python"}
    nbformat.write(nb, path)
    return str(path)


def test_dry_run_reports_figures_failures_and_the_offline_fallback(tmp_path, offline_home):
    # no data anywhere and no network (offline_home): course.data falls back to scikit-learn's digits
    good = notebook(
        tmp_path / "good.ipynb",
        "from course.run import key_figure\nkey_figure('speedup', 1.875, 'x')",
        "from course import data\n(x, y), _ = data.load('mnist', limit=64)",
    )
    bad = notebook(tmp_path / "bad.ipynb", "x = 1", "x / 0", "print('never')")
    out, recorded = tmp_path / "out", tmp_path / "records" / "run.json"
    result = run_course("run", good, bad, "--out", str(out), "--record", str(recorded), timeout=600)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "ok     good" in result.stdout and "FAILED bad" in result.stdout and "ZeroDivisionError" in result.stdout
    index = (out / "index.html").read_text()
    assert "speedup: 1.88 x" in index and "FAILED: ZeroDivisionError" in index
    # peak memory of each run (kernel and children): a kernel alone is tens of MB, far below Binder's 2 GB
    peaks = [int(mb) for mb in re.findall(r"<td>(\d+) MB</td>", index)]
    # the good notebook runs for seconds (sampled once a second); the bad one may fail before the first sample
    assert len(peaks) == 2 and 20 <= peaks[0] < 2048 and 0 <= peaks[1] < 2048, index
    assert re.search(r"ok     good in \d+ s, peak memory \d+ MB", result.stdout), result.stdout
    assert nbformat.read(out / "good.ipynb", 4).cells[0].outputs  # the executed copy keeps its outputs
    assert (out / "bad.html").exists()
    assert "offline fallback data for mnist" in result.stdout, result.stdout
    assert "the offline fallback (scikit-learn's 8x8 digits) stood in for mnist in 1 notebook(s)" in index
    assert "stood in for mnist</td>" in index and index.count("as configured") == 1  # bad.ipynb loaded no data
    # the same as data, beside the index and where --record said (the site reads those: website/results.py)
    record = json.loads((out / "record.json").read_text())
    assert '<a href="record.json">record.json</a>' in index
    assert json.loads(recorded.read_text()) == record and f"record of the run: {recorded}" in result.stdout
    assert (record["schema"], record["kind"], record["profile"]) == (1, "course run", "quick")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert record["commit"] == head and isinstance(record["changed"], bool)
    started = datetime.fromisoformat(record["date"])
    assert started.tzinfo is not None and abs(datetime.now(timezone.utc) - started) < timedelta(minutes=10)
    machine = record["machine"]
    assert machine["cores"] == os.cpu_count() and machine["python"] == platform.python_version() and machine["cpu"]
    assert set(machine) == {"cores", "memory_bytes", "cpu", "gpus", "python", "system", "load_average"}
    first, second = record["notebooks"]
    assert (first["notebook"], first["status"], first["error"], first["fallbacks"]) == ("good", "ok", "", ["mnist"])
    assert first["figures"] == [{"name": "speedup", "value": 1.875, "unit": "x"}]  # the value as published
    assert round(first["peak_memory_bytes"] / 2**20) == peaks[0] and first["seconds"] > 0
    assert (second["status"], second["figures"]) == ("failed", []) and "ZeroDivisionError" in second["error"]
    folder = run_course("run", good, "--record", str(tmp_path))
    assert folder.returncode == 1 and "--record takes a file name" in folder.stderr, folder.stderr


def test_unknown_notebook_is_one_line():
    result = run_course("run", "99_nonexistent")
    assert result.returncode == 1
    assert result.stderr.startswith("course: error: no solution notebook '99_nonexistent'; available: 00_")
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_number_names_every_part_of_a_notebook_in_parts(tmp_path):
    from course.run import find

    parts = [tmp_path / f"{stem}.ipynb" for stem in ("06_one", "07_horovod", "07_horovod_script", "08_other")]
    assert find(["07"], parts) == parts[1:3]  # `course run 07`: both parts, in order
    assert find(["07_horovod"], parts) == [parts[1]] and find(["07_horovod_script"], parts) == [parts[2]]
    assert find(["07", "07_horovod"], parts) == parts[1:3]  # each once


def test_dry_run_benchmark_totals_against_the_goal_and_names_the_slowest_cell(tmp_path):
    # benchmarks/dry_run.py: the total beside issue 17's goal and the machine's own speed, the slow cell first
    path = notebook(tmp_path / "slow.ipynb", "x = 1", "import time\ntime.sleep(3)", "y = 2")
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "dry_run.py"), path],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    slowest = re.findall(r"cell +(\d+): +([\d.]+) s  (.*)", result.stdout)
    assert len(slowest) == 3, result.stdout  # every code cell of a notebook this short
    assert slowest[0][0] == "1" and float(slowest[0][1]) >= 3 and slowest[0][2] == "import time", result.stdout
    assert all(float(seconds) < 3 for _, seconds, _ in slowest[1:]), result.stdout
    assert re.search(r"dry run: median \d+ s over 1 run\(s\), goal < 360 s: met", result.stdout), result.stdout
    assert re.search(r"python loop [\d.]+ s for one process, ceiling x[\d.]+ for two", result.stdout), result.stdout
