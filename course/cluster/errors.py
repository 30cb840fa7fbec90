"""The errors of engine clusters: each one line for a learner, and one class per thing the caller may handle."""

from __future__ import annotations

import re

from course import UserError
from course.cluster.records import profile_dir


class ClusterError(UserError):
    """A cluster could not start, lost engines, or was asked for something the machine does not have."""


class EngineLost(ClusterError, IndexError):
    """Work was sent to an engine that is no longer running."""


class ControllerBroken(ClusterError):
    """The engines registered but the controller does not pass them work (see `Cluster._configure`)."""


class ClusterDown(ClusterError):
    """The cluster itself failed: engines that could not start, or a controller that died or was stopped from
    outside. Not the work's fault (the grader reports it as a grading-machinery error, not a learner's score)."""


def tail(text: str, lines: int = 3) -> str:
    """The last few non-empty lines of a log, on one line (for an error message)."""
    kept = [line.strip() for line in (text or "").splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "(no output)"


def explain_engine_error(exc: Exception) -> str:
    """ipyparallel's EngineError in words, on one line."""
    text = " ".join(str(exc).split())
    codes = re.findall(r"'exit_code': (-?\d+)", text)
    if text.startswith("Engine set stopped") and codes:
        return f"the engine processes exited as they started (exit code {codes[-1]}); see the engines' log in {profile_dir() / 'log'}"
    return text[:300] or type(exc).__name__
