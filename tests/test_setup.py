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


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"), reason="needs root to act as another user")
def test_a_missing_compiler_is_named_with_the_packages():
    """Horovod compiles at install time: without g++ on PATH the default set-up names it (checked by what works)."""
    import tempfile
    from pathlib import Path

    home = tempfile.TemporaryDirectory(prefix="course-setup-")  # under /tmp: 'nobody' may not enter pytest's
    tools = Path(home.name) / "bin"
    tools.mkdir()
    Path(home.name).chmod(0o755)
    for tool in ("bash", "dpkg", "dpkg-query", "id", "cat", "make", "cmake"):
        (tools / tool).symlink_to(os.path.realpath(shutil.which(tool)))
    (tools / "python3").symlink_to(shutil.which("python3"))
    with home:
        result = subprocess.run(["runuser", "-u", "nobody", "--", "/bin/bash", "-c", f"PATH={tools}; bash -s"],
                                cwd="/", input=open(SYSTEM).read(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    install = next(line for line in result.stderr.splitlines() if "sudo apt-get install -y" in line)
    assert "g++" in install.split() and "make" not in install.split(), result.stderr


def test_second_python_setup_changes_nothing():
    before = sorted(p.name for p in (ROOT / ".venv").iterdir())
    result = subprocess.run(["bash", str(ROOT / "scripts" / "setup-python.sh")], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "[setup]" not in result.stdout  # every step was skipped
    assert sorted(p.name for p in (ROOT / ".venv").iterdir()) == before
