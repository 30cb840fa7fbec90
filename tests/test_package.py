"""The package imports (and no layer imports one above it), and the profile is read in one place."""

import ast
import importlib
import re
from pathlib import Path

import pytest

from course import UserError, profile


@pytest.mark.parametrize(
    "module",
    [
        "course",
        "course.cli",
        "course.data",
        "course.doctor",
        "course.mpi",
        "course.profile",
        "course.lab",
        "course.cluster",
        "course.models",
        "course.comm",
        "course.grading",
    ],
)
def test_modules_import(module):
    assert importlib.import_module(module).__doc__


def test_profile_from_environment(monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "full")
    assert profile.name() == "full" and profile.pick(quick=1, full=10) == 10
    monkeypatch.setenv("COURSE_PROFILE", "quick")
    assert profile.pick(quick=1, full=10) == 1


@pytest.mark.parametrize("gpu, expected", [(True, "full"), (False, "quick")])
def test_profile_default_follows_gpu(monkeypatch, gpu, expected):
    """Unset (or empty, as `COURSE_PROFILE=` leaves it), the profile is `full` on a GPU node, else `quick`."""
    monkeypatch.setattr(profile, "has_nvidia_gpu", lambda: gpu)
    monkeypatch.delenv("COURSE_PROFILE", raising=False)
    assert profile.name() == expected
    monkeypatch.setenv("COURSE_PROFILE", "")
    assert profile.name() == expected


def test_unknown_profile_is_a_user_error(monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "turbo")
    with pytest.raises(UserError, match="quick, full"):
        profile.name()


def test_the_package_map_names_every_module_and_folder():
    """course/__init__.py's map (by role) stays current: every top-level module and folder of course/ is on it."""
    import course

    here = Path(course.__file__).parent
    names = {p.stem for p in here.glob("*.py")} | {p.name for p in here.iterdir() if (p / "__init__.py").exists()}
    missing = sorted(n for n in names - {"__init__", "__main__"} if not re.search(rf"\b{n}\b", course.__doc__))
    assert not missing, f"add these to the map in course/__init__.py: {missing}"


def _imported(path: Path) -> set[str]:
    """The modules a Python file imports, at its top or inside functions (relative imports left out)."""
    tree = ast.parse(path.read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    return names | {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level}


def test_grading_does_not_import_the_mutation_report_above_it():
    """course/mutation/ builds on grading (and is left out of the student copy): grading never imports it, not even
    lazily; mutation-report is wired in by course/cli.py from course/mutation/cli.py."""
    import course

    grading = Path(course.__file__).parent / "grading"
    upward = {
        f"{p.relative_to(grading.parent.parent)}: {name}"
        for p in grading.rglob("*.py")
        for name in _imported(p)
        if name == "course.mutation" or name.startswith("course.mutation.")
    }
    assert not upward, f"course/grading imports course/mutation, which sits above it: {sorted(upward)}"
