"""Clusters beside each other: a read-only command never stops one, `stop --all` spares one in use, and a
cluster stopped from outside makes its user's next call fail in seconds with one line (never a hang).

Real ipyparallel clusters in separate processes, as a learner with two notebooks or an instructor grading
beside a terminal would have them. Nothing here is mocked.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from course import cluster
from tests.conftest import MACHINE, ROOT, run_course

# Its `cluster stop --all` ends every course Slurm job of this user: it runs beside no other Slurm test (conftest.py)
pytestmark = pytest.mark.xdist_group(MACHINE)


@pytest.fixture(autouse=True)
def own_ipython_dir(tmp_path, monkeypatch):
    """This test's clusters live in their own profile dir, so `stop --all` here touches no one else's."""
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.delenv("COURSE_CLUSTER_ID", raising=False)


def spawn(script: str) -> subprocess.Popen:
    """A Python process running `script` (text pipes, line-buffered), as a second notebook would be."""
    return subprocess.Popen(
        [sys.executable, "-u", "-c", textwrap.dedent(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
        cwd=ROOT,
        env=dict(os.environ),
    )


def read_line(proc: subprocess.Popen, timeout: float) -> str:
    """The process's next line of output, or a test failure if none comes within `timeout` s (a hang)."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        proc.kill()
        pytest.fail(f"no answer within {timeout:.0f} s (the process hangs); stderr: {proc.stderr.read()[-2000:]}")
    line = proc.stdout.readline()
    assert line, f"the process ended early (exit {proc.wait()}): {proc.stderr.read()[-2000:]}"
    return line.strip()


def test_status_while_a_cluster_starts_stops_nothing():
    # engines that take a few seconds to come up (a startup file every engine runs), so that `cluster status`
    # surely runs while the other process's cluster is still starting
    startup = cluster.profile_dir() / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-slow.py").write_text("import time\ntime.sleep(8)\n")
    starter = spawn("""
        import os
        from course import cluster
        c = cluster.start(2, cluster_id="starting", quiet=True)
        print("ok", len(set(c.view.apply_sync(os.getpid))), flush=True)
        c.stop()
    """)
    cluster_file = cluster.profile_dir() / "security" / "cluster-course-starting.json"
    deadline = time.monotonic() + 120
    while not cluster_file.exists() and starter.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cluster_file.exists(), f"the controller never started: {starter.stderr.read()[-2000:]}"
    status = run_course("cluster", "status")
    assert "course-starting (local): starting" in status.stdout, status.stdout + status.stderr
    assert read_line(starter, 240) == "ok 2", "the starting cluster was harmed by `cluster status`"
    assert starter.wait(timeout=120) == 0, starter.stderr.read()[-2000:]
    assert cluster.running_ids() == []


def test_status_of_a_cluster_whose_engines_are_gone_but_record_says_running_is_one_line():
    # what `cluster status` meets when a cluster's owner stops it between status reading the record ("running")
    # and connecting to its controller: a controller with no engines registered; under load that window is wide
    c = cluster.start(2, cluster_id="engines-gone", quiet=True)
    try:
        c._ipp.stop_engines_sync()
        deadline = time.monotonic() + 60
        while c.client.ids and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not c.client.ids, "the engines never unregistered"
        status = run_course("cluster", "status")
        assert "Traceback" not in status.stderr, status.stderr
        line = next((ln for ln in status.stdout.splitlines() if "course-engines-gone" in ln), "")
        assert "no engines connected" in line, status.stdout + status.stderr
    finally:
        c.stop()
    assert cluster.running_ids() == []


def test_status_of_a_cluster_that_lost_an_engine_writes_none_of_its_files():
    # ipyparallel's Cluster.from_file rewrites a cluster's file when an engine the file lists has exited. `cluster
    # status` run while that cluster stops (its engines already gone, its controller not yet) could so write the
    # file after the stop had removed it: a cluster left on record for good (benchmarks/cluster_load.py saw one).
    c = cluster.start(2, cluster_id="lost-one", quiet=True, persist=False)
    try:
        victim = psutil.Process(c.engines[1]["pid"])
        victim.kill()
        psutil.wait_procs([victim], timeout=30)
        security = cluster.profile_dir() / "security"
        before = {f.name: f.read_bytes() for f in security.iterdir()}
        status = run_course("cluster", "status")
        assert "course-lost-one" in status.stdout + status.stderr, status.stdout + status.stderr
        after = {f.name: f.read_bytes() for f in security.iterdir()}
        assert after == before, "`cluster status` changed the cluster's files"
    finally:
        c.stop()
    assert cluster.running_ids() == []


def test_status_of_a_cluster_whose_controller_is_stopping_answers_at_once():
    # the moment of a stop when the controller has removed its connection file while the record still says running:
    # status waited 30 s for the file and then said the controller "did not answer"
    c = cluster.start(2, cluster_id="controller-stopping", quiet=True)
    try:
        connection = cluster.profile_dir() / "security" / "ipcontroller-course-controller-stopping-client.json"
        assert connection.exists(), sorted(p.name for p in connection.parent.iterdir())
        connection.unlink()
        status = run_course("cluster", "status")
        line = next((ln for ln in status.stdout.splitlines() if "course-controller-stopping" in ln), "")
        assert "being stopped" in line and "did not answer" not in line, status.stdout + status.stderr
    finally:
        c.stop()
    assert cluster.running_ids() == []


USER = """
    import os, sys, time
    from course import cluster
    c = cluster.start(2, cluster_id="in-use", quiet=True, persist=False)
    print("ready", flush=True)
    for line in sys.stdin:                     # each line asks for one call on the cluster
        try:
            if line.strip() == "sleep":
                c.view.apply_sync(time.sleep, 600)
            print("ok", len(set(c.view.apply_sync(os.getpid))), flush=True)
        except Exception as exc:
            print(f"error {type(exc).__name__}: {exc}", flush=True)
"""


def test_stop_all_spares_a_cluster_in_use_and_one_stopped_from_outside_fails_fast():
    user = spawn(USER)
    try:
        assert read_line(user, 240) == "ready"
        spared = run_course("cluster", "stop", "--all")
        assert spared.returncode == 0, spared.stderr
        assert "spared course-in-use" in spared.stdout and "--force" in spared.stdout, spared.stdout
        user.stdin.write("call\n")
        assert read_line(user, 120) == "ok 2", "the cluster in use was stopped by `stop --all`"

        # now stop it from outside anyway while a 10-minute call runs: that call fails within seconds ...
        user.stdin.write("sleep\n")
        time.sleep(1)
        forced = run_course("cluster", "stop", "--all", "--force")
        assert forced.returncode == 0 and "course-in-use" in forced.stdout, forced.stdout + forced.stderr
        in_flight = read_line(user, 120)
        assert in_flight.startswith("error ClusterDown: cluster course-in-use was stopped"), in_flight
        # ... and so does the next one, at once, with one line that says how to start again
        user.stdin.write("call\n")
        answer = read_line(user, 60)
        assert answer.startswith("error ClusterDown: cluster course-in-use was stopped"), answer
        assert "cluster.start(" in answer
    finally:
        user.kill()
        user.wait()


def test_under_load_nothing_is_stopped_that_was_not_asked_every_grade_is_right_nothing_is_left(tmp_path):
    # the short version of benchmarks/cluster_load.py (20 cycles there): four processes start, use, query and
    # stop clusters of their own while `course grade` grades a class and `cluster status` is polled every second
    import importlib.util

    spec = importlib.util.spec_from_file_location("cluster_load", ROOT / "benchmarks" / "cluster_load.py")
    load = importlib.util.module_from_spec(spec)
    path = list(sys.path)
    spec.loader.exec_module(load)
    sys.path[:] = path
    report = load.run(cycles=2, processes=4, home=tmp_path / "load")
    assert report["problems"] == [], "\n".join(report["problems"])
    assert report["polls"] >= 3, report
