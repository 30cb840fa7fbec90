"""The code passes ruff's checks as configured in pyproject.toml ([tool.ruff]): no unused or undefined names, no
syntax errors, in course/, tests/, benchmarks/ and scripts/."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_ruff_finds_nothing():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", "."], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
