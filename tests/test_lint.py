"""The code passes ruff's checks as configured in pyproject.toml ([tool.ruff]): no unused or undefined names, no
syntax errors, no function over complexity 15 that does not say why, and one layout (ruff format), in course/,
tests/, benchmarks/ and scripts/."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_finds_nothing():
    done = ruff("check", "--output-format", "concise", ".")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_the_code_is_formatted():
    """`ruff format --check`: run `ruff format .` (or `make format`) before committing."""
    done = ruff("format", "--check", ".")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
