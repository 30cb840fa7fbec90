"""Notebook 06's check (part one, 06_input_pipeline_and_profiler) of a learner's reading of a profiler trace: each
profiled step's duration and its wait for data, read straight from the trace file (the JSON TensorBoard's trace
viewer reads), not from the learner's events. The check refuses an answer that calls it (course.shortcuts.Watch).

    steps = read(path)       # {step number: (step ms, wait ms)}
    reading(input_ms, input_share, [(slow_trace, slow_events), (fast_trace, fast_events)])   # None, or what is wrong
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from course.checks import check, expect

WAIT = "IteratorGetNextOp::DoCompute"  # the kernel that hands the training loop its batch


def read(path: str | Path) -> dict[int, tuple[float, float]]:
    """{step number: (the step's milliseconds, the milliseconds its own thread spent in WAIT inside it)}."""
    with gzip.open(path, "rt") as file:
        return steps_of([e for e in json.load(file)["traceEvents"] if e.get("ph") == "X"])


def steps_of(spans: list[dict]) -> dict[int, tuple[float, float]]:
    """`read`'s answer for a list of complete events (the trace file's, or a case made from them)."""
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


@check
def reading(input_ms: Callable, input_share: Callable, traces: Sequence[tuple[str | Path, list[dict]]]) -> None:
    """Exercise `ex2`: for each (trace file, its events), `input_ms(events)` gives every profiled step's wait in
    milliseconds and `input_share(events)` the waits' share of the steps, as `read` finds them in the file, without
    calling `read`; and a wait that starts on the very microsecond of its step's marker (the first trace's step 1,
    moved there) counts."""
    from course.shortcuts import Watch

    for path, events in traces:
        truth = read(path)
        with Watch([read, steps_of, _waited]) as seen:
            mine, their_share = input_ms(events), input_share(events)
        expect(
            not seen.called,
            f"your answer calls {seen.called[0] if seen.called else ''}, the check's own reading: read the events "
            "yourself",
        )
        expect(isinstance(mine, dict), "input_ms should return a dict: step number -> milliseconds")
        expect(sorted(mine) == sorted(truth), f"one entry per profiled step, keyed by its step number: {sorted(truth)}")
        for n, (step, wait) in sorted(truth.items()):
            got = float(mine[n])
            expect(
                not (wait > 0.01 and abs(got - 1000 * wait) <= 1e-3 * wait),
                f"step {n}: {got:.1f} - the trace's times are in microseconds; answer in milliseconds",
            )
            expect(
                got <= step + 1e-6,
                f"step {n}: {got:.2f} ms of waiting in a step of {step:.2f} ms: an event inside another is part of "
                "it, so count one kind of event, not all that mention the iterator",
            )
            expect(
                abs(got - wait) <= 1e-6 + 1e-6 * wait,
                f"step {n}: {got:.3f} ms, the trace says otherwise: only the {WAIT} events inside the step's "
                "marker, on its thread",
            )
        share = sum(w for _, w in truth.values()) / sum(s for s, _ in truth.values())
        expect(
            abs(float(their_share) - share) < 1e-6,
            "input_share: the waits of all profiled steps over the durations of all profiled steps",
        )
    # the first trace with step 1's waits moved to start at the very microsecond its marker starts: still inside it
    path, events = traces[0]
    mark = next(e for e in events if e.get("args", {}).get("step_num") == "1")
    edge = [
        dict(e, ts=mark["ts"])
        if e["name"] == WAIT and e["tid"] == mark["tid"] and mark["ts"] <= e["ts"] < mark["ts"] + mark["dur"]
        else e
        for e in events
    ]
    expect(
        abs(float(input_ms(edge)[1]) - read(path)[1][1]) <= 1e-6,
        "a wait that starts at the same microsecond as its step's marker lies inside the step: count it",
    )
    _made_cases(input_ms, events)


def _made_cases(input_ms: Callable, events: list[dict]) -> None:
    """`input_ms` on each trace of TRACE_CASES made from EVENTS: several waits in a step, none, one on its edge."""
    for case in TRACE_CASES:
        made = case.made(events)
        truth, mine = steps_of(made), input_ms(made)
        expect(
            isinstance(mine, dict) and sorted(mine) == sorted(truth),
            f"{case.name}: input_ms gives the steps {sorted(mine) if isinstance(mine, dict) else mine}, the trace has "
            f"{sorted(truth)}: one entry per profiled step, whatever it holds",
        )
        for n, (_, wait) in sorted(truth.items()):
            expect(
                abs(float(mine[n]) - wait) <= 1e-6 + 1e-6 * wait,
                f"{case.name}: step {n} waited {wait:.3f} ms, your input_ms says {float(mine[n]):.3f}",
            )


@dataclass(frozen=True)
class TraceCase:
    """A trace made from a real one by changing the waits of one step: `kind` is 'split' (its waits cut in three,
    one after the other), 'none' (its waits removed) or 'after' (a wait more, starting the microsecond it ends)."""

    name: str
    step: int
    kind: str

    def made(self, events: list[dict]) -> list[dict]:
        """`events` with this case's change: the step's marker from `args['step_num']`, its waits on its thread."""
        mark = next(e for e in events if "step_num" in e.get("args", {}) and int(e["args"]["step_num"]) == self.step)
        end = mark["ts"] + mark["dur"]

        def own(e: dict) -> bool:
            return (
                e["name"] == WAIT and (e["pid"], e["tid"]) == (mark["pid"], mark["tid"]) and mark["ts"] <= e["ts"] < end
            )

        out = [e for e in events if not own(e)]
        for e in filter(own, events):
            if self.kind == "split":
                third = e["dur"] / 3
                out += [dict(e, ts=e["ts"] + k * third, dur=third) for k in range(3)]
            elif self.kind == "after":
                out += [e, dict(e, ts=end)]
        if self.kind == "after" and not any(map(own, events)):
            raise ValueError(f"step {self.step} of this trace has no wait to copy")
        return out


# Steps holding several waits, none, and a wait that starts just as its step ends (in the first trace given)
TRACE_CASES = (
    TraceCase("a trace whose step 1 waited three times (its wait cut in three)", 1, "split"),
    TraceCase("a trace whose step 2 never waited (its waits removed)", 2, "none"),
    TraceCase("a trace with a wait that starts the microsecond step 1 ends", 1, "after"),
)
