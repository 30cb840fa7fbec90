"""`python -m course lab` (what `make lab` runs) serves JupyterLab with the course kernel as the default."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest

from course import lab
from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def get_json(url: str, token: str) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def test_lab_serves_the_course_kernel(tmp_path):
    env = dict(os.environ, COURSE_LAB_TOKEN="course-test-token", JUPYTER_RUNTIME_DIR=str(tmp_path))
    port = lab.free_port("127.0.0.1", 18888)
    server = subprocess.Popen([sys.executable, "-m", "course", "lab", "--port", str(port)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        url_line = next(line for line in server.stdout if line.startswith("Open this URL:"))
        assert f"http://127.0.0.1:{port}/lab" in url_line and "token=course-test-token" in url_line
        base = f"http://127.0.0.1:{port}"
        for _ in range(120):
            try:
                specs = get_json(f"{base}/api/kernelspecs", "course-test-token")
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not answer within 60 s")
        assert specs["default"] == lab.KERNEL_NAME
        assert specs["kernelspecs"][lab.KERNEL_NAME]["spec"]["display_name"] == "Python (DDL on HPC)"
        with pytest.raises(urllib.error.HTTPError):  # the token is required
            get_json(f"{base}/api/kernelspecs", "wrong-token")
    finally:
        children = psutil.Process(server.pid).children(recursive=True)
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        gone, alive = psutil.wait_procs(children, timeout=15)
        assert not alive, f"processes left behind: {alive}"


def test_lab_refuses_a_missing_folder():
    result = subprocess.run([sys.executable, "-m", "course", "lab", "--root", "/no/such/folder"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1 and result.stderr.strip() == "course: error: /no/such/folder is not a folder"
