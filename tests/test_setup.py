"""The set-up scripts: a second run is a no-op, and a user who is not root is told exactly what to install."""

import os
import shutil
import subprocess

import pytest

from tests.conftest import ROOT

SYSTEM = str(ROOT / "scripts" / "setup-system.sh")
NOT_INSTALLED = "sl"  # a small Debian package the course never needs


def test_installed_packages_need_nothing():
    result = subprocess.run(["bash", SYSTEM, "openmpi-bin"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout == "" and result.stderr == ""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"), reason="needs root to act as another user")
def test_a_user_who_is_not_root_is_told_what_to_install():
    if subprocess.run(["dpkg", "-s", NOT_INSTALLED], capture_output=True).returncode == 0:
        pytest.skip(f"{NOT_INSTALLED} is installed on this machine, so nothing would be missing")
    # The script arrives on stdin: 'nobody' may not be allowed to read this checkout.
    result = subprocess.run(["runuser", "-u", "nobody", "--", "bash", "-s", NOT_INSTALLED], cwd="/",
                            input=open(SYSTEM).read(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"sudo apt-get install -y {NOT_INSTALLED}" in result.stderr
    assert "module load" in result.stderr and "Traceback" not in result.stderr


def test_second_python_setup_changes_nothing():
    before = sorted(p.name for p in (ROOT / ".venv").iterdir())
    result = subprocess.run(["bash", str(ROOT / "scripts" / "setup-python.sh")], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "[setup]" not in result.stdout  # every step was skipped
    assert sorted(p.name for p in (ROOT / ".venv").iterdir()) == before
