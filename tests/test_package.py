"""The package imports, and the profile is read in one place."""

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
