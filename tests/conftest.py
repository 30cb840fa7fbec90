"""Shared helpers for the test suite."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from course import rank_pool
from tests import cpu_time, script_runs

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = Path(__file__).resolve().parent / "programs"
T = TypeVar("T")


def wait_until(found: Callable[[], T], seconds: float, what: str, every: float = 0.5) -> T:
    """Ask FOUND again every EVERY seconds until it gives something true, and return that; after SECONDS, fail
    saying WHAT was waited for. SECONDS is a deadline for a state, generous: a passing run never waits it out."""
    deadline = time.monotonic() + seconds
    while True:
        answer = found()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {seconds:.0f} s for {what}; last seen: {answer!r}")
        time.sleep(every)


def started_with(variable: str, value: str) -> list:
    """The processes (not zombies) whose environment has VARIABLE=VALUE: what a test's job started, wherever it went."""
    import contextlib

    import psutil

    from course import processes

    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.environ().get(variable) == value and processes.running(process):
                found.append(process)
    return found


def run_course(
    *args: str, env: dict | None = None, timeout: float = 300, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """Run `python -m course ARGS...` as a user would; returns the finished process (text output)."""
    return subprocess.run(
        [sys.executable, "-m", "course", *args],
        capture_output=True,
        text=True,
        env=env or dict(os.environ),
        timeout=timeout,
        cwd=cwd or ROOT,
    )


# The checks' fast tests call course.comm.on_ranks hundreds of times in this process: its ranks are kept up between
# calls here (course.rank_pool), not in the kernels and notebooks the tests start, which run as a learner's do.
rank_pool.KEEP = True


@pytest.fixture
def offline_home(tmp_path, monkeypatch):
    """A HOME with an empty Keras cache, no COURSE_DATA_DIR and no network: nothing is cached anywhere."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)  # the course's cache (course.settings.user_cache) too
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / ".keras"))
    monkeypatch.delenv("COURSE_DATA_DIR", raising=False)
    monkeypatch.setenv("COURSE_OFFLINE", "1")
    return tmp_path


@pytest.hookimpl(trylast=True)  # after the module's own fixtures have let go of the clusters
def pytest_runtest_teardown(item, nextitem):
    """The shared engine clusters stop as soon as the next test's module does not use them (idle engines still
    take CPU: an MPI engine ~10% of a core through the strength test that follows them in a full run); a later
    module that asks starts them again."""
    shared = sys.modules.get("tests.check_cases")
    if shared is None or not shared._SHARED:
        return
    if nextitem is None or not shared.uses_shared(nextitem.module):
        shared.stop_shared()


# `make test` runs the suite in pytest-xdist's workers side by side (`-n 3 --dist loadgroup`): each xdist group runs
# in one worker, its tests in file order, and a worker takes the next group when it is nearly done.
MACHINE = "machine"  # the group of the modules that share this machine's Slurm, virtual cluster and hub
MACHINE_FIXTURES = {"slurm", "virtual_cluster"}  # a module with a test that asks for one of these is in it


def xdist_group(item: pytest.Item) -> str:
    """The group ITEM runs in: MACHINE for the modules that use the machine's Slurm (or say so with a module mark);
    one group per notebook for the strength test's trials (a notebook's tests share its one run); else its module
    (its module fixtures are made once)."""
    marked = [m.args[0] if m.args else m.kwargs.get("name") for m in item.iter_markers("xdist_group")]
    if marked:
        return marked[0]
    source = getattr(item, "callspec", None) and item.callspec.params.get("source")
    if hasattr(item.module, "trial_cost") and source is not None:
        return f"strength-{source.stem}"
    return item.module.__name__


def start_order(item: pytest.Item) -> tuple:
    """The longest groups first, so that the last ones to end are short: the machine's modules (they mostly wait),
    then the notebooks' trials, the costliest first, then every other module in file order."""
    group = getattr(item, "_xdist_group", "")
    if group == MACHINE:
        return (0,)
    if group.startswith("strength-"):
        return (1, -item.module.trial_cost(item.callspec.params["source"]), group)
    return (2,)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups (it adds them to the test ids)
def pytest_collection_modifyitems(config, items):
    """Each test in its xdist group (the same in every worker: xdist checks they collected alike), longest first."""
    machine = {item.module.__name__ for item in items if MACHINE_FIXTURES & set(getattr(item, "fixturenames", ()))}
    for item in items:
        group = MACHINE if item.module.__name__ in machine else xdist_group(item)
        item._xdist_group = group
        if not any(item.iter_markers("xdist_group")):
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=start_order)  # stable: within a group, file order


def pytest_configure(config):
    """Each test's CPU time in the JUnit XML, the run's in its summary (tests/cpu_time.py); one folder of script
    runs for the whole session (tests/script_runs.py), made before xdist's workers start, so theirs too."""
    config.pluginmanager.register(cpu_time, "cpu-time")
    if not hasattr(config, "workerinput") and script_runs.VARIABLE not in os.environ:
        config._script_runs = tempfile.mkdtemp(prefix="course-script-runs-")
        os.environ[script_runs.VARIABLE] = config._script_runs


def pytest_sessionfinish(session, exitstatus):
    """The engine clusters the fast check tests shared (tests/check_cases.py) end with the session, and so do the
    script runs it kept."""
    if "tests.check_cases" in sys.modules:
        sys.modules["tests.check_cases"].stop_shared()
    kept = getattr(session.config, "_script_runs", None)
    if kept:
        shutil.rmtree(kept, ignore_errors=True)
        os.environ.pop(script_runs.VARIABLE, None)


# Session fixtures any test may ask for by name: a real single-node Slurm, and the two-node virtual cluster beside it
from tests.jupyterlab_ui import chromium  # noqa: E402, F401
from tests.slurm import slurm  # noqa: E402, F401
from tests.virtual_cluster import virtual_cluster  # noqa: E402, F401
