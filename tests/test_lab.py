"""`python -m course lab` (what `make lab` runs) serves JupyterLab with the course kernel as the default."""

import os
import subprocess
import sys
import urllib.error

import pytest

from course import lab
from tests.labserver import running_lab

pytestmark = pytest.mark.slow


def test_lab_serves_the_course_kernel(tmp_path):
    with running_lab(dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path))) as server:
        assert server.url.startswith(f"{server.base}/lab/tree/") and "token=" in server.url
        specs = server.get_json("/api/kernelspecs")
        assert specs["default"] == lab.KERNEL_NAME
        assert specs["kernelspecs"][lab.KERNEL_NAME]["spec"]["display_name"] == "Python (DDL on HPC)"
        with pytest.raises(urllib.error.HTTPError):  # the token is required
            server.get_json("/api/kernelspecs", token="wrong-token")


def test_lab_refuses_a_missing_folder():
    result = subprocess.run(
        [sys.executable, "-m", "course", "lab", "--root", "/no/such/folder"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1 and result.stderr.strip() == "course: error: /no/such/folder is not a folder"
