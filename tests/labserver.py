"""Start `python -m course lab` (what `make lab` runs) for a test, and stop it leaving no process behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from typing import Iterator

import psutil

from course import lab
from tests.conftest import ROOT

TOKEN = "course-test-token"
# Ctrl-C reaches the server as in a terminal. A test run started in the background (`make test &`, a CI runner)
# ignores SIGINT, and its children inherit that: the server would sit out the 30 s below and be killed.
# (SIG_DFL survives exec; the exec'd Python then turns SIGINT into KeyboardInterrupt as usual.)
AS_IN_A_TERMINAL = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


@dataclass
class LabServer:
    base: str
    url: str  # the URL `course lab` printed for the user
    token: str = TOKEN

    def get_json(self, path: str, token: str | None = None) -> dict:
        request = urllib.request.Request(
            f"{self.base}{path}", headers={"Authorization": f"token {token or self.token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)


@contextlib.contextmanager
def running_lab(env: dict[str, str], root: str | os.PathLike = ROOT, first_port: int = 18888) -> Iterator[LabServer]:
    """Yield a server on `root` once its API answers; on exit stop it and check its processes are gone."""
    port = lab.free_port("127.0.0.1", first_port)
    env = dict(env, COURSE_LAB_TOKEN=TOKEN)
    server = subprocess.Popen(
        [sys.executable, "-c", AS_IN_A_TERMINAL, "-m", "course", "lab", "--port", str(port), "--root", str(root)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    descendants: list[psutil.Process] = []
    try:
        url = next(line.split(": ", 1)[1].strip() for line in server.stdout if line.startswith("Open this URL:"))
        handle = LabServer(base=f"http://127.0.0.1:{port}", url=url)
        for _ in range(240):
            try:
                handle.get_json("/api/status")
                break
            except OSError:
                time.sleep(0.5)
        else:
            raise AssertionError("JupyterLab did not answer within 120 s")
        yield handle
    finally:
        descendants = psutil.Process(server.pid).children(recursive=True)
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=30)
            stopped = True
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
            stopped = False
        _, alive = psutil.wait_procs(descendants, timeout=20)
        assert not alive, f"processes left behind: {alive}"
        assert stopped, "course lab did not stop within 30 s of Ctrl-C (SIGINT): it was killed"
