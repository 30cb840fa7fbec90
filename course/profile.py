"""The run profile, read in one place: `quick` (CPU, tiny data, Binder and CI) or `full` (GPU node).

Set COURSE_PROFILE=quick|full; the default is `full` on a machine with an NVIDIA GPU, else `quick`.
Notebooks size their runs with `pick(quick=..., full=...)` so the code is the same in both.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from course import UserError, settings

PROFILES = ("quick", "full")
T = TypeVar("T")


def has_nvidia_gpu() -> bool:
    """True when the NVIDIA driver reports at least one GPU (cheap: no TensorFlow import)."""
    gpus = Path("/proc/driver/nvidia/gpus")
    return gpus.is_dir() and any(gpus.iterdir())


def name() -> str:
    """The active profile: COURSE_PROFILE if set, else `full` with a GPU and `quick` without."""
    chosen = settings.get("COURSE_PROFILE").strip().lower()
    if not chosen:
        return "full" if has_nvidia_gpu() else "quick"
    if chosen not in PROFILES:
        raise UserError(f"COURSE_PROFILE={chosen!r} is not a profile; use one of: {', '.join(PROFILES)}")
    return chosen


def pick(quick: T, full: T) -> T:
    """Return the value for the active profile, e.g. `epochs = pick(quick=1, full=10)`."""
    return full if name() == "full" else quick
