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


def _functions(path):
    import ast

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node, node.end_lineno - node.lineno + 1, ast.get_docstring(node) or ""


def test_course_modules_and_functions_stay_small_enough_to_read():
    """A module of course/ under about 600 lines (650 at most); a function over 60 lines says why in its
    docstring (e.g. "one add_argument per option, hence over 60 lines")."""
    modules = {p: len(p.read_text().splitlines()) for p in (ROOT / "course").rglob("*.py")}
    large = {str(p.relative_to(ROOT)): n for p, n in modules.items() if n > 650}
    assert not large, f"split these by concern: {large}"
    unexplained = [
        f"{p.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)"
        for p in modules
        for node, n, doc in _functions(p)
        if n > 60 and "60" not in doc
    ]
    assert not unexplained, f"over 60 lines, and the docstring does not say why: {unexplained}"
