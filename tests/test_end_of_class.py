"""course.hub, the end of a class on a JupyterHub, without a hub: which processes are the course's servers, and which
instructors' copies are removed, kept or forgotten. tests/test_hub.py runs it on a real hub with real accounts."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import psutil
import pytest

from course import UserError, hub, processes
from course.doctor.hub import COPIES_RECORD
from tests.conftest import wait_until

PYTHON = "/usr/bin/python3"  # one that every user may run, as the hub environment's
SERVER = """#!{python}
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # a kernel
print("up", flush=True)
time.sleep(600)
"""


def _start(argv: list[str]) -> psutil.Process:
    """ARGV as nobody: a user's process, not root's."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, user="nobody", group="nogroup", cwd="/")
    return psutil.Process(process.pid)


@pytest.fixture
def open_folder():
    """A folder every user may enter (pytest's tmp_path is root's alone), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="course-end-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_only_the_environments_servers_and_what_they_started_are_ended(open_folder):
    """A server is the environment's jupyterhub-singleuser (with its kernel); a process that only names it (what
    the guide's old `pkill -f` ended too) is not; a running hub is refused in one line."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the servers run as another user, as on a hub")
    prefix = open_folder / "env"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").symlink_to(PYTHON)
    server = prefix / "bin" / "jupyterhub-singleuser"
    server.write_text(SERVER.format(python=prefix / "bin" / "python"))
    server.chmod(0o755)
    started = _start([str(server)])  # as the spawner starts it: the environment's Python runs the script
    decoy = _start([PYTHON, "-c", "import time; time.sleep(600)", str(server)])
    try:
        assert started.cmdline()[:2] == [str(prefix / "bin" / "python"), str(server)], started.cmdline()
        kernel = wait_until(lambda: started.children(), 30, "the server's kernel")[0]
        hub_script = prefix / "bin" / "jupyterhub"
        hub_script.write_text("import time\ntime.sleep(600)\n")  # runs until killed, as a hub does
        hub_process = subprocess.Popen([str(prefix / "bin" / "python"), str(hub_script), "-c", "x"])
        try:
            wait_until(lambda: psutil.Process(hub_process.pid).cmdline()[1:2] == [str(hub_script)], 30, "the hub")
            with pytest.raises(UserError, match=rf"^the hub still runs \(process {hub_process.pid}\): stop it first"):
                hub.end_servers(prefix)
        finally:
            hub_process.kill()
            hub_process.wait()
        lines = hub.end_servers(prefix)
        assert not processes.running(started) and not processes.running(kernel), lines
        assert processes.running(decoy), f"a process that only names the server was ended: {lines}"
        assert len(lines) == 1 and lines[0].startswith("ended 1 server(s) of the course (nobody)"), lines
        assert "and 1 other process(es): what they started" in lines[0], lines
        assert hub.end_servers(prefix) == [f"no server of the course was running (none from {prefix})"]
    finally:
        for process in (started, decoy):
            processes.kill(processes.tree(process))


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_copies_with_nothing_of_their_own_are_removed_the_others_kept_the_gone_forgotten(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _git("init", "-q", "-b", "main", cwd=site)
    (site / "solutions").mkdir()  # what makes a folder a course checkout
    (site / "solutions" / "00.ipynb").write_text("{}\n")
    _git("add", ".", cwd=site)
    _git("-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "-m", "site", cwd=site)
    clean, edited, committed, gone = (tmp_path / name for name in ("clean", "edited", "committed", "gone"))
    linked = tmp_path / "linked"
    linked.symlink_to(site)  # a link where the copy was: to the site's checkout, say
    for copy in (clean, edited, committed):
        _git("clone", "-q", str(site), str(copy), cwd=tmp_path)
    (edited / "grades").mkdir()  # ignored files count too: a gradebook kept in the checkout
    (edited / ".gitignore").write_text("grades/\n")
    (committed / "mine.py").write_text("x = 1\n")
    _git("add", ".", cwd=committed)
    _git("-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "-m", "mine", cwd=committed)
    prefix = tmp_path / "env"
    record = prefix / COPIES_RECORD
    record.parent.mkdir(parents=True)
    record.write_text("".join(f"{c}\n" for c in (clean, edited, committed, gone, linked)))

    lines = hub.remove_copies(prefix)
    assert not clean.exists() and edited.is_dir() and committed.is_dir() and site.is_dir()
    assert lines[0] == f"removed {clean}: an instructor's copy of the course, with nothing of its own", lines
    assert lines[1].startswith(f"kept {edited}: it holds files of its own") and f"rm -rf {edited}" in lines[1], lines
    assert lines[2].startswith(f"kept {committed}: it holds commits of its own"), lines
    assert lines[3] == f"forgot {gone}: it no longer exists", lines
    assert lines[4].startswith(f"kept {linked}: it is no longer a folder of the course") and site.is_dir(), lines
    assert record.read_text() == f"{committed}\n{edited}\n{linked}\n"
    subprocess.run(["rm", "-rf", str(edited)], check=True)
    assert hub.forget_gone(prefix) == [f"forgot {edited}: it no longer exists"]
    assert record.read_text() == f"{committed}\n{linked}\n"
