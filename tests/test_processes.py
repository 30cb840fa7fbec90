"""course.processes: a process and everything it started end together, on real processes."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from course import processes

# A parent that starts a child and a grandchild, then waits: a tree of three real processes.
FAMILY = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {inner!r}]); time.sleep(600)"
INNER = "import subprocess, time; subprocess.Popen(['sleep', '600']); time.sleep(600)"


def _family() -> tuple[subprocess.Popen, list[psutil.Process]]:
    parent = subprocess.Popen([sys.executable, "-c", FAMILY.format(inner=INNER)])
    root = psutil.Process(parent.pid)
    for _ in range(100):  # until the grandchild has started
        if len(root.children(recursive=True)) == 2:
            break
        time.sleep(0.1)
    return parent, processes.tree(root)


def test_kill_tree_ends_a_process_and_everything_it_started():
    parent, family = _family()
    assert len(family) == 3 and family[-1].pid == parent.pid, family
    processes.kill_tree(psutil.Process(parent.pid), timeout=10)
    parent.wait(timeout=10)
    assert not [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_a_process_already_gone_is_skipped():
    done = subprocess.Popen(["true"])
    gone = psutil.Process(done.pid)
    done.wait()
    processes.kill([gone], timeout=1)  # no error: it has ended
    assert processes.tree(gone) == []


def test_processes_whose_parent_ended_are_told_apart_for_stop_to_end_them_at_once():
    # what a controller that dies of SIGTERM while it starts its schedulers leaves: children re-parented, that
    # nothing will stop (Cluster.stop ends them at once instead of waiting 30 s for them)
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    parent = subprocess.Popen([sys.executable, "-c", code])
    process, children = psutil.Process(parent.pid), []
    try:
        for _ in range(200):
            children = process.children()
            if children:
                break
            time.sleep(0.05)
        assert len(children) == 1, "the parent did not start its child"
        procs = [process, children[0]]
        parents = processes.parents(procs)
        assert processes.orphaned(procs, parents) == []  # both still where they were started
        parent.kill()
        parent.wait()
        assert processes.orphaned(procs, parents) == children
    finally:
        parent.kill()
        processes.kill(children, timeout=5)


def test_kill_group_ends_a_launcher_and_the_ranks_that_lost_it():
    """What a learner's collective on more ranks leaves when it hangs: a session whose leader may be gone, its
    ranks each in a process group of their own (as Open MPI starts them)."""
    own_group = "import os; os.setpgid(0, 0); " + INNER
    leader = subprocess.Popen([sys.executable, "-c", FAMILY.format(inner=own_group)], start_new_session=True)
    root = psutil.Process(leader.pid)
    for _ in range(100):
        if len(root.children(recursive=True)) == 2:
            break
        time.sleep(0.1)
    family = processes.tree(root)
    assert len(family) == 3, family
    processes.kill_group(leader.pid)
    leader.wait(timeout=10)
    psutil.wait_procs(family, timeout=10)
    assert not [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    processes.kill_group(leader.pid)  # gone: no error


def test_end_lets_a_process_clean_up_and_kills_one_that_ignores_it(tmp_path):
    cleaned = tmp_path / "cleaned"
    polite = (
        "import signal, sys, time, pathlib\n"
        f"signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path({str(cleaned)!r}).touch(), sys.exit(0)))\n"
        "print('ready', flush=True); time.sleep(600)\n"
    )
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"
    started = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for code in (polite, stubborn)
    ]
    for process in started:
        assert process.stdout.readline().strip() == "ready"  # its handler is set
    watched = [psutil.Process(p.pid) for p in started]
    began = time.monotonic()
    processes.end(watched, timeout=2)
    waited = time.monotonic() - began
    assert not [p for p in watched if processes.running(p)], "a process outlived end()"
    assert waited >= 2, f"end() returned after {waited:.1f} s: the process ignoring SIGTERM was not given its time"
    assert cleaned.exists(), "the process that handles SIGTERM did not get to clean up"
