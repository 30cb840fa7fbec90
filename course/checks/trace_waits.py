"""Notebook 06's check of a learner's reading of a profiler trace: each profiled step's duration and its wait for
data, read straight from the trace file (the JSON TensorBoard's trace viewer reads), not from the learner's events.
The check refuses an answer that calls it (course.shortcuts.Watch).

    steps = read(path)       # {step number: (step ms, wait ms)}
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

WAIT = "IteratorGetNextOp::DoCompute"  # the kernel that hands the training loop its batch


def read(path: str | Path) -> dict[int, tuple[float, float]]:
    """{step number: (the step's milliseconds, the milliseconds its own thread spent in WAIT inside it)}."""
    with gzip.open(path, "rt") as file:
        spans = [e for e in json.load(file)["traceEvents"] if e.get("ph") == "X"]
    marks = [e for e in spans if "step_num" in e.get("args", {}) and e["name"].startswith("train")]
    return {int(m["args"]["step_num"]): (m["dur"] / 1000, _waited(spans, m)) for m in marks}


def _waited(spans: list[dict], mark: dict) -> float:
    inside = (
        e["dur"]
        for e in spans
        if e["name"] == WAIT
        and (e["pid"], e["tid"]) == (mark["pid"], mark["tid"])
        and mark["ts"] <= e["ts"] < mark["ts"] + mark["dur"]
    )
    return sum(inside) / 1000
