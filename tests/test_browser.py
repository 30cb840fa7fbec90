"""JupyterLab in a real browser: `make lab`'s server, notebook 00 opened in headless Chromium, its first code
cells run on the course kernel (a real engine cluster answers), and a screenshot kept as a test artifact."""

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.jupyterlab_ui import add_cell_and_run, patient, run_cell
from tests.labserver import running_lab

pytestmark = pytest.mark.slow
NOTEBOOK = "notebooks/00_environment_and_cluster.ipynb"
ARTIFACTS = ROOT / "test-artifacts"


def test_notebook_00_runs_in_jupyterlab(tmp_path, chromium):
    from playwright.sync_api import expect

    cluster_id = f"course-browser-{os.getpid()}"
    env = dict(
        os.environ,
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        IPYTHONDIR=str(tmp_path / "ipython"),
        COURSE_CLUSTER_ID=cluster_id,
        COURSE_PROFILE="quick",
    )
    ARTIFACTS.mkdir(exist_ok=True)
    workspace = tmp_path / "course"  # a learner's copy: the browser may autosave, never into the checkout
    (workspace / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / NOTEBOOK, workspace / NOTEBOOK)
    try:
        with running_lab(env, root=workspace) as server:
            context = chromium.new_context(viewport={"width": 1400, "height": 1000})
            try:
                page = patient(context.new_page())
                page.goto(f"{server.base}/lab/tree/{NOTEBOOK}?token={server.token}")
                expect(page.locator(".jp-NotebookPanel .jp-Cell").first).to_be_visible(timeout=120_000)
                # The notebook opens on the course kernel (the default `course lab` sets), which becomes idle.
                expect(page.locator(".jp-KernelName").first).to_have_text("Python (DDL on HPC)", timeout=120_000)
                expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(
                    1, timeout=120_000
                )

                run_cell(page, "PROFILE = profile.name()")
                run_cell(page, "cluster = course.cluster.start(")
                hello = run_cell(page, 'print(f"hello from process')
                expect(hello.locator(".jp-OutputArea-output").filter(has_text="hello from process")).to_have_count(
                    2, timeout=240_000
                )  # one line from each of the 2 engines
                page.screenshot(path=str(ARTIFACTS / "jupyterlab-notebook-00.png"), full_page=False)

                add_cell_and_run(page, "cluster.stop(); print('stopped')")  # a new cell, as a learner adds one
                expect(page.locator(".jp-OutputArea-output").filter(has_text="stopped")).to_have_count(
                    1, timeout=120_000
                )
            finally:
                context.close()
    finally:  # whatever happened in the browser, leave no engines behind
        subprocess.run(
            [sys.executable, "-m", "course", "cluster", "stop", "--id", cluster_id],
            env=env,
            capture_output=True,
            timeout=120,
        )
