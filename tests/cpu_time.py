"""CPU time (core-seconds) of a test process and of everything it starts, read from a cgroup of its own.

On two cores the suite is bound by CPU, not by waiting: a test's wall time says little about what it costs the
others beside it, its CPU time does. A cgroup counts every process started under it, also those that outlive
or leave their parent (engines, daemons, a hub's servers), which rusage does not. The cgroup is made as a child
of the one the process is in, so that a limit set on that one (the flake hunt's one-core quota) still holds.
Where no cgroup can be made (not root, no cpuacct or cpu.stat), there is no account: `Account.join` gives None.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

CGROUPS = Path("/sys/fs/cgroup")


class Account:
    """A cgroup that this process has joined, and the CPU time its members have used since it was made."""

    def __init__(self, group: Path, v2: bool) -> None:
        self.group, self.v2 = group, v2

    @classmethod
    def join(cls, name: str) -> Account | None:
        """Make the cgroup NAME under this process's own (cgroup v1's cpuacct, else v2's) and move this process
        into it; None where that cannot be done."""
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            v2 = controllers == ""
            if "cpuacct" in controllers.split(",") or (v2 and (CGROUPS / "cgroup.controllers").exists()):
                mount = CGROUPS if v2 else next(CGROUPS.glob("*cpuacct*"), None)
                if mount is None:
                    continue
                group = mount / path.lstrip("/") / name
                _remove_stale(group.parent, name.rpartition("-")[0])
                try:
                    group.mkdir(exist_ok=True)
                    (group / "cgroup.procs").write_text(str(os.getpid()))
                except OSError:
                    return None
                return cls(group, v2)
        return None

    def seconds(self) -> float:
        """The CPU time, in core-seconds, of every process that has been in the cgroup."""
        if self.v2:
            stat = dict(line.split() for line in (self.group / "cpu.stat").read_text().splitlines())
            return int(stat["usage_usec"]) / 1e6
        return int((self.group / "cpuacct.usage").read_text()) / 1e9

    def leave(self) -> None:
        """Move what is still in the cgroup (this process, a daemon left running) to the parent; remove it, and the
        cgroups made in it by the processes it started (xdist's workers, which may not have ended yet: the
        controller can end first, and a cgroup that holds another cannot be removed), deepest first."""
        inner = sorted(self.group.glob("**/course-tests-*"), key=lambda path: len(path.parts), reverse=True)
        for group in [*inner, self.group]:
            with contextlib.suppress(OSError):
                for pid in (group / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        (self.group.parent / "cgroup.procs").write_text(pid)
                group.rmdir()


def _remove_stale(parent: Path, prefix: str) -> None:
    """The empty cgroups PREFIX-PID of runs that were killed before they could remove theirs, with the empty ones
    made in them."""
    for stale in parent.glob(f"{prefix}-*"):
        pid = stale.name.rpartition("-")[2]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            inner = sorted(stale.glob(f"**/{prefix}-*"), key=lambda path: len(path.parts), reverse=True)
            for group in [*inner, stale]:
                with contextlib.suppress(OSError):
                    group.rmdir()  # refused while it still holds a process or a cgroup


# As a pytest plugin (tests/conftest.py registers it; `-p tests.cpu_time` elsewhere): each pytest process (the xdist
# controller, each worker) counts in a cgroup of its own, and every process a test starts counts with that test.
ACCOUNT: Account | None = None
STARTED = time.monotonic()


def pytest_configure(config):
    global ACCOUNT
    ACCOUNT = Account.join(f"course-tests-{os.getpid()}")


def pytest_unconfigure(config):
    if ACCOUNT is not None:
        ACCOUNT.leave()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if ACCOUNT is not None:
        item._cpu_started = ACCOUNT.seconds()


@pytest.hookimpl(tryfirst=True)  # before the teardown's report is made: the JUnit XML takes its properties
def pytest_runtest_makereport(item, call):
    if ACCOUNT is not None and call.when == "teardown" and hasattr(item, "_cpu_started"):
        item.user_properties.append(("cpu_seconds", round(ACCOUNT.seconds() - item._cpu_started, 1)))


def pytest_terminal_summary(terminalreporter):
    """The run's CPU time beside its wall time: more cores' worth than the machine has means tests waited for CPU."""
    if ACCOUNT is not None and not hasattr(terminalreporter.config, "workerinput"):
        used, wall = ACCOUNT.seconds(), time.monotonic() - STARTED
        terminalreporter.write_line(f"CPU time of the run: {used:.0f} core-s in {wall:.0f} s ({used / wall:.1f} cores)")
