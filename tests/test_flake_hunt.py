"""The flake hunt's own parts (scripts/flake-hunt.py): the one-core quota really throttles what runs in it, the busy
processes run beside a block and are gone after it, and a run's junit XML is read into the report as pytest wrote it."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests import cpu_time
from tests.conftest import ROOT, wait_until

spec = importlib.util.spec_from_file_location("flake_hunt", ROOT / "scripts" / "flake-hunt.py")
flake_hunt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(flake_hunt)

CASES = """
import pytest

def test_passes():
    assert True

def test_fails():
    assert 1 == 2, "one is not two"

@pytest.fixture
def broken():
    raise RuntimeError("the fixture broke")

def test_errors(broken):
    pass

@pytest.mark.skip(reason="not here")
def test_skipped():
    pass
"""


def test_a_runs_junit_xml_is_read_with_each_outcome_and_its_first_line(tmp_path):
    (tmp_path / "test_cases.py").write_text(CASES)
    junit = tmp_path / "run.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", "test_cases.py"],
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
    )
    cases = {c["id"].split("::")[1]: c for c in flake_hunt.results(junit)}
    assert {name: c["outcome"] for name, c in cases.items()} == {
        "test_passes": "passed",
        "test_fails": "failure",
        "test_errors": "error",
        "test_skipped": "skipped",
    }
    assert "one is not two" in cases["test_fails"]["message"]
    assert "the fixture broke" in cases["test_errors"]["message"]
    run = {"condition": "plain", "k": 1, "code": 1, "seconds": 60, "cases": list(cases.values())}
    text = flake_hunt.report([run], tmp_path)
    assert "| plain | 1 | 1 | 1 | 1 | 1 | 1 | 1.0 min |" in text, text
    assert "test_cases.py::test_fails (plain, 1 of 1)" in text and "one is not two" in text, text
    assert (tmp_path / "report.md").read_text() == text


BURNING = '''
import os, subprocess, sys, time

BURN = """
import os, sys, time
if os.fork():
    sys.exit()  # the parent ends at once: the child burns on alone, reparented away from the test
end = time.process_time() + 1.5
while time.process_time() < end:
    pass
open(sys.argv[1], "w").close()
"""

def test_burns(tmp_path):
    done = tmp_path / "done"
    subprocess.run([sys.executable, "-c", BURN, str(done)], check=True)
    while not done.exists():
        time.sleep(0.05)

def test_sleeps():
    time.sleep(1.5)
'''


@pytest.mark.skipif(cpu_time.ACCOUNT is None, reason="no cgroup for a CPU account here: not root, or none writable")
def test_each_tests_cpu_time_counts_what_it_started_also_after_its_parent_ended(tmp_path):
    """In pytest-xdist's workers, as `make test` runs: a test whose orphaned grandchild burns 1.5 s of CPU is
    charged for it (rusage would not see it), one that sleeps 1.5 s is not; the report sums them by file; no
    cgroup is left, not even an empty one a killed run left."""
    (tmp_path / "test_cpu.py").write_text(BURNING)
    junit = tmp_path / "run.xml"
    ended = subprocess.Popen(["true"])
    ended.wait()
    stale = cpu_time.ACCOUNT.group / f"course-tests-{ended.pid}"  # as a killed run (of this pid) would leave it
    (stale / f"course-tests-{ended.pid}").mkdir(parents=True)  # with its worker's inside, as a killed run leaves them
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-p", "tests.cpu_time", "-p", "no:cacheprovider"]
        + [f"--junitxml={junit}", "test_cpu.py"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "CPU time of the run: " in done.stdout, done.stdout
    cases = flake_hunt.results(junit)
    cpu = {c["id"].split("::")[1]: c["cpu"] for c in cases}
    assert cpu["test_burns"] >= 1.4 and cpu["test_sleeps"] < 0.5, cpu
    text = flake_hunt.report([{"condition": "plain", "k": 1, "code": 0, "seconds": 60, "cases": cases}], tmp_path)
    assert "core-s of CPU test_cpu.py" in text, text
    assert f"CPU time of the tests, plain run 1: {sum(cpu.values()):.0f} core-s" in text, text
    left = [p for p in cpu_time.ACCOUNT.group.glob("**/course-tests-*") if p.is_dir()]  # the run's, made in ours
    assert not left, f"the accounts' cgroups (or a killed run's) are left behind: {left}"


@pytest.mark.skipif(os.geteuid() != 0, reason="the quota is a cgroup of /sys/fs/cgroup: only root can make one")
def test_the_one_core_quota_throttles_two_busy_processes_and_is_removed_after():
    with flake_hunt.one_core() as join:
        loops = [subprocess.Popen([sys.executable, "-c", flake_hunt.BUSY], preexec_fn=join) for _ in range(2)]
        try:
            group = next(
                line.split(":", 2)[2]
                for line in Path(f"/proc/{loops[0].pid}/cgroup").read_text().splitlines()
                if ":cpu:" in line or ":cpu," in line or line.startswith("0::")
            )
            stat = Path(
                "/sys/fs/cgroup/cpu" + group if Path("/sys/fs/cgroup/cpu").is_dir() else "/sys/fs/cgroup" + group
            )
            assert group.strip("/").startswith("ddl-flake-hunt-"), group

            def throttled() -> int:
                fields = dict(line.split() for line in (stat / "cpu.stat").read_text().splitlines())
                return int(fields["nr_throttled"])

            wait_until(throttled, 60, "the kernel to throttle two busy processes held to one core")
        finally:
            for loop in loops:
                loop.kill()
                loop.wait()
    assert not stat.exists(), f"{stat} is left behind"


def _busy_children() -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):  # a child an earlier test left as a zombie has no command line
            if flake_hunt.BUSY in " ".join(child.cmdline()):
                found.append(child)
    return found


def test_busy_processes_run_beside_the_block_only():
    with flake_hunt.busy_beside(2):
        mine = _busy_children()
        assert len(mine) == 2 and all(p.is_running() for p in mine)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in mine)


def test_a_fresh_clones_run_does_not_import_this_checkout(monkeypatch):
    """A shell working on the checkout exports PYTHONPATH=$PWD; a fresh clone's run that inherited it imported this
    checkout's course/ in its kernels and engines (a run of CI's command that did not test the clone)."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("COURSE_PROFILE", "full")
    fresh, here = flake_hunt.run_env(ci=True), flake_hunt.run_env(ci=False)
    assert fresh["CI"] == "true" and "PYTHONPATH" not in fresh and "COURSE_PROFILE" not in fresh
    assert here["PYTHONPATH"] == str(ROOT), "a run in this checkout keeps the shell's environment"
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('PYTHONPATH', 'unset'))"],
        env=fresh,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "unset"


def test_forget_removes_every_account_and_group_the_hub_tests_make():
    from tests import test_hub

    made = {*test_hub.LEARNERS, test_hub.INSTRUCTOR, test_hub.SECOND_INSTRUCTOR}
    assert made <= set(flake_hunt.TEST_ACCOUNTS), made - set(flake_hunt.TEST_ACCOUNTS)
    assert set(test_hub.GROUPS.values()) <= set(flake_hunt.TEST_GROUPS)
