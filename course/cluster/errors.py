"""The errors of engine clusters: each one line for a learner, and one class per thing the caller may handle."""

from __future__ import annotations

import re
import signal
from pathlib import Path

from course import UserError
from course.cluster.records import profile_dir


class ClusterError(UserError):
    """A cluster could not start, lost engines, or was asked for something the machine does not have."""


class EngineLost(ClusterError, IndexError):
    """Work was sent to an engine that is no longer running."""


class ControllerBroken(ClusterError):
    """A controller that came up without one of its parts (a port lost to a cluster starting beside it): engines
    cannot register, or register and are never passed work (see `Cluster._wait_for_engines`, `Cluster._configure`)."""


class ClusterDown(ClusterError):
    """The cluster itself failed: engines that could not start, or a controller that died or was stopped from
    outside. Not the work's fault (the grader reports it as a grading-machinery error, not a learner's score)."""


# ipyparallel's engine nanny (started once the engine has registered) logs into its engine's output: when the engine
# dies, the nanny's last words ("Pipe closed, parent ... has status", "Notifying Hub ...") come after the engine's own
NANNY = "[KernelNanny"


def tail(text: str, lines: int = 3) -> str:
    """The last few non-empty lines of a log, on one line (for an error message)."""
    kept = [line.strip() for line in (text or "").splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "(no output)"


def engine_tail(text: str, lines: int = 3) -> str:
    """The last few lines an engine wrote itself, on one line: its output without its nanny's log lines, which only
    say that the engine is gone, not why."""
    return tail("\n".join(line for line in (text or "").splitlines() if NANNY not in line), lines)


def output_now(launcher) -> str:
    """What an ipyparallel launcher's process has written so far (its `get_output()` keeps its first reading)."""
    try:
        return Path(launcher.output_file).read_text(errors="replace")
    except (AttributeError, TypeError, OSError):
        return launcher.get_output() or ""


def error_line(output: str) -> str:
    """The last line of a process's output that names an exception ('zmq.error.ZMQError: Address already in
    use ...'), or ''."""
    errors = re.findall(r"^[\w.]*(?:Error|Exception): .*$", output or "", re.MULTILINE)
    return errors[-1] if errors else ""


PORT_TAKEN = "Address already in use"  # what ZeroMQ says when a port picked as free was bound by another process


def ended(exit_code: int | None) -> str:
    """How a process ended, in words, from its exit status (negative: the signal that ended it, as psutil and
    subprocess give it), e.g. 'exited with status 255' or 'was killed by SIGKILL'."""
    if exit_code is None:
        return "exited (its exit status is unknown)"
    if exit_code >= 0:
        return f"exited with status {exit_code}"
    try:
        name = signal.Signals(-exit_code).name
    except ValueError:
        return f"was killed by signal {-exit_code}"
    if name == "SIGKILL":  # the process cannot catch it, so its log never says why
        return "was killed by SIGKILL (which leaves no word in its log: sent by a process, or the out-of-memory killer)"
    return f"was killed by {name}"


def explain_engine_error(exc: Exception) -> str:
    """ipyparallel's EngineError in words, on one line."""
    text = " ".join(str(exc).split())
    codes = re.findall(r"'exit_code': (-?\d+)", text)
    if text.startswith("Engine set stopped") and codes:
        return f"the engine processes exited as they started (exit code {codes[-1]}); see the engines' log in {profile_dir() / 'log'}"
    return text[:300] or type(exc).__name__
