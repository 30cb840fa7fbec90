"""Recorded runs as data: a JSON file saying what a command measured, when, on which machine and at which commit.

`course run --record FILE` and `course mutation-report --json FILE` write one; the course's website reads those
committed under docs/guide/records/ to render its reference pages of expected results and of the mutation report
(website/results.py), so their numbers come from a run, never from hand-kept tables.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil

from course import UserError, devices

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = 1  # a record's layout: raise it when a field changes meaning
RUN = "course run"  # a record's `kind`
MUTATION = "mutation report"


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The processor's name as the kernel reports it (Linux), else what Python's platform module knows."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine() -> dict[str, Any]:
    """What a run's numbers depend on: cores, memory, processor, GPUs, Python, and the load when it started."""
    return {
        "cores": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "cpu": cpu_model(),
        "gpus": len(devices.visible_gpus()),
        "python": platform.python_version(),
        "system": platform.platform(terse=True),
        "load_average": round(os.getloadavg()[0], 2),
    }


def commit(root: Path = ROOT) -> dict[str, Any]:
    """The checkout's commit (`git rev-parse HEAD`, or "unknown" outside git) and whether files differ from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=30)
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": "unknown", "changed": None}
    if head.returncode != 0:
        return {"commit": "unknown", "changed": None}
    return {"commit": head.stdout.strip(), "changed": bool(status.stdout.strip()) if status.returncode == 0 else None}


def header(kind: str, profile: str) -> dict[str, Any]:
    """The fields every record begins with, taken when the run starts: its kind, the date (UTC), the commit, the
    profile and the machine."""
    return {
        "schema": SCHEMA,
        "kind": kind,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **commit(),
        "profile": profile,
        "machine": machine(),
    }


def write(path: str | os.PathLike, record: dict[str, Any]) -> Path:
    """Write RECORD as JSON at PATH (its folder made if needed); the path written."""
    target = Path(path).expanduser()
    if target.is_dir():
        raise UserError(f"{target} is a folder; give the record's file name, e.g. {target / 'run.json'}")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return target
