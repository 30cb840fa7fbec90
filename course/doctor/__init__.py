"""`python -m course doctor`: one report of what an instructor needs to know before a workshop (machine.py), or
whether a JupyterHub serves the course safely (`--hub`, hub.py); report.py prints either.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from course.doctor import hub as hub_checks
from course.doctor.machine import run_checks  # the machine's checks, as notebook 00 runs them
from course.doctor.report import Check, all_essentials_ok, report

__all__ = ["Check", "all_essentials_ok", "main", "report", "run_checks"]


def main(as_json: bool = False, hub: str | None = None) -> int:
    """Print the report (or JSON); exit status 0 when the essentials work, else 1. `hub`: the hub's checks instead
    (hub.py), for the shared environment at that prefix ("" for the default)."""
    started = time.perf_counter()
    if hub is not None:
        checks = hub_checks.run_checks(Path(hub) if hub else None)
    else:
        checks = run_checks()
    if as_json:
        print(
            json.dumps(
                {
                    "ok": all_essentials_ok(checks),
                    "seconds": round(time.perf_counter() - started, 1),
                    "checks": {c.name: asdict(c) for c in checks},
                },
                indent=2,
            )
        )
    else:
        print(report(checks))
    return 0 if all_essentials_ok(checks) else 1
