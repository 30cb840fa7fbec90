"""course/settings.py lists every COURSE_* variable the course reads or sets, and the instructor guide shows it."""

import re
from pathlib import Path

import pytest

from course import settings
from tests.conftest import ROOT

# Where the course reads or sets its variables: the package, the set-up and cluster scripts, Binder and the
# instructor notebooks (the tests' own variables are not the course's).
SOURCES = [
    *ROOT.glob("course/**/*.py"),
    *ROOT.glob("scripts/*.sh"),
    *ROOT.glob("binder/*"),
    ROOT / "Makefile",
    *ROOT.glob("solutions/*.ipynb"),
]
NAME = re.compile(r"\bCOURSE_[A-Z][A-Z0-9_]*\b")


def used() -> dict[str, set[str]]:
    """{variable: files that name it} over SOURCES, settings.py itself left out."""
    found: dict[str, set[str]] = {}
    for path in SOURCES:
        if path.is_file() and path.name != "settings.py":
            for name in NAME.findall(path.read_text()):
                found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_variable_the_course_uses_is_listed_and_nothing_else():
    names = used()
    assert {"COURSE_PROFILE", "COURSE_DATA_DIR", "COURSE_GPU"} <= set(names)  # the scan sees the course
    unlisted = {n: sorted(files) for n, files in names.items() if n not in settings.BY_NAME}
    assert not unlisted, f"add these to course/settings.py: {unlisted}"
    assert not set(settings.BY_NAME) - set(names), "listed but used nowhere: remove them from course/settings.py"


def test_every_setting_says_its_default_and_meaning():
    assert len(settings.BY_NAME) == len(settings.SETTINGS)
    for s in settings.SETTINGS:
        assert s.default.strip() and len(s.meaning.split()) >= 3, s


def test_the_instructor_guide_carries_the_table():
    guide = (ROOT / "docs" / "guide" / "01-prepare.md").read_text()
    table = settings.table()
    assert table in guide, "regenerate the guide's table: .venv/bin/python -m course.settings"
    rows = table.splitlines()[2:]
    assert len(rows) == sum(not s.internal for s in settings.SETTINGS)
    assert not [s.name for s in settings.SETTINGS if s.internal and f"`{s.name}`" in table]


def test_a_setting_is_read_through_the_table_with_the_default_the_guide_shows(monkeypatch, tmp_path):
    """settings.get: the environment's value when set, else the fixed default, which the table's column shows;
    the readers (jobs_dir here) take it from there; a name not in the table is a KeyError, not a silent None."""
    from course import jobs

    fixed = [s for s in settings.SETTINGS if s.value]
    assert fixed, "some settings have a fixed default"
    for s in fixed:
        assert f"`{s.value}`" in s.default, f"{s.name}: the guide shows {s.default!r}, the course uses {s.value!r}"
        monkeypatch.delenv(s.name, raising=False)
        assert settings.get(s.name) == str(Path(s.value).expanduser())
    monkeypatch.setenv("COURSE_JOBS_DIR", "")  # set but empty counts as unset, as a shell's VAR= leaves it
    assert jobs.jobs_dir() == Path.home() / ".cache" / "course" / "jobs"
    monkeypatch.setenv("COURSE_JOBS_DIR", str(tmp_path))
    assert settings.get("COURSE_JOBS_DIR") == str(tmp_path) and jobs.jobs_dir() == tmp_path
    with pytest.raises(KeyError):
        settings.get("COURSE_NOT_A_SETTING")
