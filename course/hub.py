"""The end of a class on a JupyterHub (docs/guide/02-deploy.md, 07-clean-up.md): as root, once the hub is stopped,

    /opt/ddl-hpc/bin/course hub end-of-class     # ends the course's servers, removes the instructors' copies
    /opt/ddl-hpc/bin/course hub stop-servers     # only ends the servers (before the Slurm-spawned hub, say)
    /opt/ddl-hpc/bin/course hub forget-gone      # drops copies that no longer exist from the record

A server is the course's when it runs the shared environment's `jupyterhub-singleuser`; with it end everything it
started (kernels, terminals, engines) and every other process a user runs from that environment (a cluster started
in a terminal outlives it). The course made the instructors' copies (scripts/instructor-copy.sh records them): a copy
that is still the clone it was made as is removed; one holding files or commits of its own is kept and named.
Nothing else is removed: accounts, homes (learners' work, the gradebooks) and the exchange are named as kept.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import psutil

from course import UserError, processes, settings
from course.doctor.hub import CHECKOUT_RECORD, COPIES_RECORD, is_checkout, recorded_copies


def _argv(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def runs(program: Path, process: psutil.Process) -> bool:
    """Whether PROCESS runs PROGRAM: as its command, or as the script its interpreter was started with."""
    return str(program) in _argv(process)[:2]


def from_environment(prefix: Path) -> list[psutil.Process]:
    """Processes that users other than root run from the environment PREFIX (its Python, its commands)."""
    found = []
    for process in psutil.process_iter(["uids", "username"]):
        argv = _argv(process)
        if process.info["uids"] and process.info["uids"].real != 0 and argv and argv[0].startswith(f"{prefix}/bin/"):
            found.append(process)
    return found


def end_servers(prefix: Path) -> list[str]:
    """End the course's servers and what they and their users started from PREFIX; one line saying what ended."""
    hubs = [p for p in psutil.process_iter() if runs(prefix / "bin" / "jupyterhub", p)]
    if hubs:
        pids = ", ".join(str(p.pid) for p in hubs)
        raise UserError(
            f"the hub still runs (process {pids}): stop it first (Ctrl-C in its terminal, or kill {pids}), "
            "else learners start their servers again"
        )
    ours = from_environment(prefix)
    servers = [p for p in ours if runs(prefix / "bin" / "jupyterhub-singleuser", p)]
    started = [child for server in servers for child in processes.tree(server)]
    everything = list({p.pid: p for p in [*started, *ours]}.values())
    users = sorted({p.info["username"] for p in servers})
    processes.end(everything, timeout=10)
    if not everything:
        return [f"no server of the course was running (none from {prefix})"]
    return [
        f"ended {len(servers)} server(s) of the course ({', '.join(users) or 'none'}) and "
        f"{len(everything) - len(servers)} other process(es): what they started, and what users ran from {prefix}"
    ]


def own_work(copy: Path) -> str:
    """What in an instructor's copy is not in the site's checkout it was cloned from ("" when nothing is)."""
    git = ["git", "-c", f"safe.directory={copy}", "-C", str(copy)]  # root, in a repository the instructor owns
    status = subprocess.run([*git, "status", "--porcelain", "--ignored"], capture_output=True, text=True)
    if status.returncode != 0:
        return f"not a git checkout ({(status.stderr.strip().splitlines() or ['git status failed'])[-1]})"
    if status.stdout.strip():
        return f"files of its own (git -C {copy} status --ignored lists them)"
    commits = subprocess.run([*git, "rev-list", "--all", "--not", "--remotes"], capture_output=True, text=True)
    if commits.returncode != 0 or commits.stdout.strip():
        return f"commits of its own (git -C {copy} log --branches --not --remotes)"
    return ""


def _write_record(prefix: Path, copies: list[Path]) -> None:
    """The record of instructors' copies, as instructor-copy.sh writes it (sorted, readable by all)."""
    record = prefix / COPIES_RECORD
    if record.is_file():
        record.write_text("".join(f"{c}\n" for c in sorted(set(map(str, copies)))))


def forget_gone(prefix: Path) -> list[str]:
    """Drop from the record the instructors' copies that no longer exist; one line for each."""
    copies = recorded_copies(prefix)
    _write_record(prefix, [c for c in copies if c.exists()])
    return [_forgot(c) for c in copies if not c.exists()] or [f"every copy on record exists ({prefix / COPIES_RECORD})"]


def _forgot(copy: Path) -> str:
    return f"forgot {copy}: it no longer exists"


def remove_copies(prefix: Path) -> list[str]:
    """Remove each recorded instructor's copy that is still the plain clone it was made as; name those kept."""
    lines, kept = [], []
    for copy in recorded_copies(prefix):
        if not copy.exists():
            lines.append(_forgot(copy))
            continue
        if copy.is_symlink() or not copy.is_dir() or not is_checkout(copy):
            kept.append(copy)
            lines.append(f"kept {copy}: it is no longer a folder of the course's checkout (a link, or another thing)")
            continue
        work = own_work(copy)
        if work:
            kept.append(copy)
            lines.append(f"kept {copy}: it holds {work}; once saved elsewhere: rm -rf {copy}")
        else:
            shutil.rmtree(copy)
            lines.append(f"removed {copy}: an instructor's copy of the course, with nothing of its own")
    _write_record(prefix, kept)
    return lines


def end_of_class(prefix: Path) -> list[str]:
    """Everything the end of a class does, as lines to print: what ended, what was removed, what was kept."""
    checkout = prefix / CHECKOUT_RECORD
    site = checkout.read_text().strip() if checkout.is_file() else "the site's checkout"
    exchange = settings.get("COURSE_NBGRADER_EXCHANGE")
    return [
        *end_servers(prefix),
        *remove_copies(prefix),
        "kept the accounts and their homes: learners' ~/ddl-hpc and assignments, instructors' ~/ddl-hpc-grading "
        "(gradebook, submissions, feedback); the site made the accounts: userdel -r NAME once marks are entered",
        f"kept nbgrader's exchange {exchange}: the class's submissions and feedback",
        f"kept the shared environment {prefix} and {site}, for the next class",
    ]


def main(command: str, prefix: str | None = None) -> int:
    """`course hub end-of-class|stop-servers|forget-gone`, as root."""
    from course.doctor.hub import hub_prefix

    if os.geteuid() != 0:
        raise UserError(f"course hub {command} needs root: it ends and removes what other users own")
    where = hub_prefix(Path(prefix) if prefix else None)
    if not (where / "bin" / "jupyterhub-singleuser").exists():
        raise UserError(f"no hub environment at {where}: name it with --prefix DIR (or HUB_PREFIX)")
    steps = {"end-of-class": end_of_class, "stop-servers": end_servers, "forget-gone": forget_gone}
    for line in steps[command](where):
        print(line)
    return 0
