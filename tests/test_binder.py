"""binder/ follows repo2docker's conventions and starts the course where a learner expects it
(what can be checked without Docker: repo2docker's build runs only on Binder's side)."""

import os
import re
import subprocess

from tests.conftest import ROOT

BINDER = ROOT / "binder"
# repo2docker's configuration files; anything else in binder/ would be ignored silently.
REPO2DOCKER_FILES = {"apt.txt", "runtime.txt", "requirements.txt", "postBuild", "start", "environment.yml"}


def test_only_files_repo2docker_reads():
    assert {p.name for p in BINDER.iterdir()} <= REPO2DOCKER_FILES
    # environment.yml in binder/ would make repo2docker ignore requirements.txt: the two must not coexist.
    assert not {"environment.yml", "requirements.txt"} <= {p.name for p in BINDER.iterdir()}


def test_scripts_are_executable_and_fail_fast():
    for name in ("postBuild", "start"):
        script = BINDER / name
        assert os.access(script, os.X_OK), f"binder/{name} must be executable"
        assert script.read_text().startswith("#!/usr/bin/env bash")
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    assert "set -euo pipefail" in (BINDER / "postBuild").read_text()
    assert re.search(r'^exec "\$@"$', (BINDER / "start").read_text(), re.M), "start must hand over to Binder's command"


def test_postbuild_installs_the_course_and_its_kernel():
    text = (BINDER / "postBuild").read_text()
    assert "--no-build-isolation horovod==" in text and "pip install --no-cache-dir --no-deps -e ." in text
    assert "--name ddl-hpc" in text


def test_start_chooses_the_quick_profile():
    out = subprocess.run(
        ["bash", str(BINDER / "start"), "bash", "-c", "echo $COURSE_PROFILE"],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "COURSE_PROFILE"},
    )
    assert out.stdout.strip() == "quick"


def test_readme_binder_link_opens_the_first_notebook():
    links = re.findall(r"https://mybinder\.org/v2/gh/[^)\s]+", (ROOT / "README.md").read_text())
    assert links, "the README has no Binder link"
    for link in links:
        target = re.search(r"urlpath=lab/tree/([^&)]+)", link).group(1)
        assert (ROOT / target).is_file(), f"Binder would open {target}, which does not exist"
        assert target.startswith("notebooks/")  # learners get the student version
