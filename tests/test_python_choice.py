"""Which Python set-up makes .venv and the hub's environment from (scripts/python-choice.sh), on a host whose only
Python is 3.12 or 3.13: each run sees a PATH of one temporary folder holding the tools the scripts use and the
Pythons asked for (this machine's pyenv builds and Debian's python3.11), every other Python hidden, and runs a copy
of the scripts, so that nothing lands in the checkout (.tools/uv, .venv)."""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

PYENV = Path("/root/.pyenv/versions")
PY311, PY312, PY313 = PYENV / "3.11.7/bin/python", PYENV / "3.12.1/bin/python", PYENV / "3.13.0/bin/python"
PY310 = PYENV / "3.10.13/bin/python"
DEBIAN_311 = Path("/usr/bin/python3.11")
TOOLS = ("bash", "sed", "dirname", "readlink", "stat", "env", "head", "cat", "mkdir", "chmod", "id", "ls", "nproc")


def need(*pythons: Path) -> None:
    for python in pythons:
        if not python.exists():
            pytest.skip(f"{python} is absent: this machine has not that Python to stand for a host's")


def checkout(tmp: Path) -> Path:
    """A copy of what set-up reads: the scripts and pyproject.toml."""
    copy = tmp / "checkout"
    shutil.copytree(ROOT / "scripts", copy / "scripts")
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    return copy


def host(tmp: Path, **pythons: Path) -> dict:
    """The environment of a host with only PYTHONS (name=target) and the tools on PATH; uv is never installed."""
    bin_ = tmp / "bin"
    bin_.mkdir()
    for tool in TOOLS:
        (bin_ / tool).symlink_to(os.path.realpath(shutil.which(tool)))
    for name, target in pythons.items():
        (bin_ / name.replace("_", ".")).symlink_to(target)
    (tmp / "home").mkdir()
    return {"PATH": str(bin_), "HOME": str(tmp / "home"), "SETUP_VENV": str(tmp / "venv"), "COURSE_NO_UV_INSTALL": "1"}


def stub_uv(tmp: Path, env: dict, python: Path) -> Path:
    """A uv that records its calls (and where it would install) and has PYTHON once asked to install 3.11."""
    calls, installed = tmp / "uv-calls", tmp / "uv-installed"
    uv = Path(env["PATH"]) / "uv"
    uv.write_text(
        "#!/bin/bash\n"
        f'echo "$* | ${{UV_PYTHON_INSTALL_DIR:-default}}" >> {calls}\n'
        f'case "$1 $2" in "python install") : > {installed} ;;\n'
        f'  "python find") [ -e {installed} ] || exit 2; echo {python} ;;\n'
        "  *) exit 2 ;; esac\n"
    )
    uv.chmod(0o755)
    return calls


def run(script: Path, env: dict, *args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, env=env, timeout=timeout)


def one_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, result.stdout + result.stderr
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr
    return result.stderr


@pytest.mark.parametrize("python", [PY312, PY313], ids=["3.12", "3.13"])
def test_a_host_with_only_a_newer_python_and_no_uv_is_told_what_to_do(tmp_path, python):
    need(python)
    env = host(tmp_path, python3=python)
    line = one_line(run(checkout(tmp_path) / "scripts/setup-python.sh", env))
    version = python.parent.parent.name
    assert f"{tmp_path}/bin/python3 {version}" in line and "no uv on PATH" in line, line
    assert "Python 3.9-3.11" in line and "uv python install 3.11" in line and "module load python/3.11" in line
    assert "python3.11 package" in line and "PYTHON=" in line
    assert not (tmp_path / "venv").exists()


def test_when_pip_cannot_install_uv_set_up_still_says_so_in_one_line(tmp_path):
    """The same host, uv allowed but out of pip's reach (no index, as offline): it is tried, and still one line."""
    need(PY312)
    env = host(tmp_path, python3=PY312)
    del env["COURSE_NO_UV_INSTALL"]
    env["PIP_NO_INDEX"], env["PIP_FIND_LINKS"] = "1", str(tmp_path / "no-wheels")  # pip finds no uv anywhere
    env["PIP_CONFIG_FILE"] = os.devnull
    copy = checkout(tmp_path)
    result = run(copy / "scripts/setup-python.sh", env)
    line = one_line(result)
    assert "installing uv" in result.stdout and "pip could not install it" in line, result.stdout + line
    assert not (tmp_path / "venv").exists() and not (copy / ".tools/uv/bin/uv").exists()


def test_uv_is_asked_for_a_python_311(tmp_path):
    need(PY311, PY312)
    env = host(tmp_path, python3=PY312)
    calls = stub_uv(tmp_path, env, PY311)
    result = run(checkout(tmp_path) / "scripts/setup-python.sh", env, "--print-python")
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()).resolve() == PY311.resolve()
    assert "asking uv for CPython 3.11" in result.stderr
    # Not found, so installed (into uv's own folder under the user's home), then found.
    assert calls.read_text().splitlines() == [
        "python find --system 3.11 | default",
        "python install 3.11 | default",
        "python find --system 3.11 | default",
    ]


@pytest.mark.skipif(os.geteuid() != 0, reason="setup-hub.sh runs as root only (it writes the shared environment)")
def test_the_hub_asks_uv_for_a_python_every_user_can_run(tmp_path):
    """Root's uv installs its Pythons under /root by default, which learners cannot enter: the hub's goes into
    HUB_PREFIX-python. (The stub answers with Debian's python3.11, which every user can run.)"""
    need(DEBIAN_311, PY312)
    shared = Path(tempfile.mkdtemp(prefix="course-hub-"))  # under /tmp: open to others, unlike pytest's tmp_path
    shared.chmod(0o755)
    try:
        env = host(tmp_path, python3=PY312)
        calls = stub_uv(tmp_path, env, DEBIAN_311)
        env["HUB_PREFIX"] = str(shared / "hub")
        result = run(checkout(tmp_path) / "scripts/setup-hub.sh", env, "--print-python")
        assert result.returncode == 0 and result.stdout.strip() == str(DEBIAN_311), result.stderr
        assert calls.read_text().splitlines()[:2] == [
            f"python find --system 3.11 | {shared}/hub-python",
            f"python install 3.11 | {shared}/hub-python",
        ]
        assert not (shared / "hub").exists()
    finally:
        shutil.rmtree(shared)


@pytest.mark.skipif(os.geteuid() != 0, reason="setup-hub.sh runs as root only (it writes the shared environment)")
def test_the_hub_without_a_python_311_or_uv_says_so_in_one_line(tmp_path):
    """pyenv's 3.11 under /root fits, but learners could not run it: passed over, and said so."""
    need(PY311, PY313)
    env = host(tmp_path, python3=PY313, python3_11=PY311)
    env["HUB_PREFIX"] = str(tmp_path / "hub")
    line = one_line(run(checkout(tmp_path) / "scripts/setup-hub.sh", env))
    assert line.startswith("[setup-hub] no Python 3.11 found") and "HUB_PYTHON=" in line, line
    assert f"{tmp_path}/bin/python3.11 3.11.7 (under /root, closed to other users)" in line, line
    assert not (tmp_path / "hub").exists()


@pytest.mark.parametrize("variable, script", [("PYTHON", "setup-python.sh"), ("HUB_PYTHON", "setup-hub.sh")])
def test_a_named_python_312_is_refused_in_one_line(tmp_path, variable, script):
    need(PY311, PY312)
    if script == "setup-hub.sh" and os.geteuid() != 0:
        pytest.skip("setup-hub.sh runs as root only (it writes the shared environment)")
    env = host(tmp_path, python3_11=PY311)  # a fitting Python is there: the named one is not replaced by it
    env[variable], env["HUB_PREFIX"] = str(PY312), str(tmp_path / "hub")
    line = one_line(run(checkout(tmp_path) / "scripts" / script, env))
    assert f"{PY312} is Python 3.12.1" in line and "name a Python 3.11 instead" in line, line
    assert not (tmp_path / "venv").exists() and not (tmp_path / "hub").exists()


def test_an_environment_made_with_python_312_is_reported_not_reused(tmp_path):
    need(PY311, PY312)
    subprocess.run([str(PY312), "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=60)
    before = sorted(p.name for p in (tmp_path / "venv" / "lib").iterdir())
    env = host(tmp_path, python3_11=PY311)
    line = one_line(run(checkout(tmp_path) / "scripts/setup-python.sh", env))
    assert f"{tmp_path}/venv was made with Python 3.12.1" in line and f"rm -rf {tmp_path}/venv" in line, line
    assert sorted(p.name for p in (tmp_path / "venv" / "lib").iterdir()) == before == ["python3.12"]


@pytest.mark.parametrize(
    "requires, pythons, chosen",
    [
        # python3.11 before python3; every one of a name on PATH is tried (the first python3 here is 3.12)
        (">=3.11,<3.12", {"python3": PY312, "python3_11": PY311}, PY311),
        (">=3.11,<3.12", {"python3": PY311}, PY311),
        # the range is pyproject.toml's requires-python: widened, a Python 3.10 would do
        (">=3.9,<3.12", {"python3_10": PY310, "python3": PY312}, PY310),
    ],
    ids=["python3.11-first", "python3-if-it-fits", "range-from-pyproject"],
)
def test_the_first_fitting_python_on_path_is_chosen(tmp_path, requires, pythons, chosen):
    need(*pythons.values())
    env = host(tmp_path, **pythons)
    copy = checkout(tmp_path)
    pyproject = copy / "pyproject.toml"
    text = pyproject.read_text()
    assert 'requires-python = ">=3.11,<3.12"' in text
    pyproject.write_text(text.replace('requires-python = ">=3.11,<3.12"', f'requires-python = "{requires}"'))
    result = run(copy / "scripts/setup-python.sh", env, "--print-python")
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()).resolve() == chosen.resolve()


def test_python_310_does_not_do_while_the_course_asks_for_311(tmp_path):
    """TensorFlow 2.15 and Horovod would run on 3.10, but pip would refuse the course itself (requires-python)."""
    need(PY310)
    line = one_line(run(checkout(tmp_path) / "scripts/setup-python.sh", host(tmp_path, python3_10=PY310)))
    assert f"{tmp_path}/bin/python3.10 3.10.13" in line and "course on 3.11 (pyproject.toml)" in line, line


@pytest.mark.slow
def test_a_real_uv_installed_by_set_up_gives_the_python_of_a_venv(tmp_path):
    """The uv half for real, on a host whose python3 is 3.12: set-up installs uv from PyPI into the checkout's
    .tools/uv with that Python's pip, asks it for 3.11 and makes the environment (`--venv-only`: the stack itself
    would take minutes more and is what `make setup` already tests). This machine cannot download Pythons (uv's come
    from GitHub), so the 3.11 uv answers with is the machine's own: Debian's python3.11 on PATH as plain `python`,
    a name uv looks at and set-up's own search does not."""
    need(DEBIAN_311, PY312)
    env = host(tmp_path, python3=PY312, python=DEBIAN_311)
    del env["COURSE_NO_UV_INSTALL"]
    copy = checkout(tmp_path)
    result = run(copy / "scripts/setup-python.sh", env, "--venv-only", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "installing uv" in result.stdout and "asking uv for CPython 3.11" in result.stdout, result.stdout
    assert (copy / ".tools/uv/bin/uv").exists()
    venv_python = tmp_path / "venv" / "bin" / "python"
    version = subprocess.run(
        [str(venv_python), "-c", "import sys; print(sys.version_info[:2], sys.base_prefix)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert version.stdout.strip() == "(3, 11) /usr", version.stdout + version.stderr
