"""Shared helpers for the test suite."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from course import rank_pool

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
    if nextitem is None or getattr(nextitem.module, "shared_cluster", None) is not shared.shared_cluster:
        shared.stop_shared()


def _strength_module(session):
    """tests/test_strength.py's module, if the session collected any of its tests (pytest names it by file)."""
    return next(
        (item.module for item in session.items if hasattr(getattr(item, "module", None), "start_course_trials")), None
    )


def pytest_collection_finish(session):
    """The strength test's notebook runs start now, beside the tests before it (tests/test_strength.py)."""
    strength = _strength_module(session)
    if strength is not None and not session.config.option.collectonly:
        strength.start_course_trials(session)


def pytest_sessionfinish(session, exitstatus):
    """The engine clusters the fast check tests shared (tests/check_cases.py) end with the session, and so do the
    strength test's notebook runs if the session ends before their tests."""
    if "tests.check_cases" in sys.modules:
        sys.modules["tests.check_cases"].stop_shared()
    strength = _strength_module(session)
    if strength is not None:
        strength.stop_course_trials()


# Session fixtures any test may ask for by name: a real single-node Slurm, and the two-node virtual cluster beside it
from tests.jupyterlab_ui import chromium  # noqa: E402, F401
from tests.slurm import slurm  # noqa: E402, F401
from tests.virtual_cluster import virtual_cluster  # noqa: E402, F401
