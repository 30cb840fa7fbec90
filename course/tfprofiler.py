"""The TensorFlow profiler on a few training steps, and its trace as a file a learner can read (notebook 06, part one).

`capture` runs some steps between `tf.profiler.experimental.start` and `stop`, each step marked with
`tf.profiler.experimental.Trace` (so the trace knows where a step begins and ends), and converts the profile
(`*.xplane.pb`, what TensorBoard's Profile tab reads) into the trace viewer's events with TensorBoard's profile
plugin (`tensorboard-plugin-profile`, the version of the pinned TensorFlow), saved as `trace.json.gz`: the
Chrome trace format, the same as Horovod's timeline. Times in it are in microseconds.

    >>> path = capture(step, dataset, "logs/profile", steps=5)
    >>> events = read_trace(path)                     # complete events: name, ts, dur, pid, tid, args
    >>> show_step(events, 2)                          # what step 2 did, nested, in milliseconds

`record` profiles any call (a pass over a dataset, say) and `most_at_once` counts how many of some events the
runtime had in progress at the same instant: how many calls of a `tf.data` map really ran in parallel;
`iterators_built` lists the stages the runtime built a pipeline's iterators for.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Callable

from course import UserError

STEP = "train"  # the name of the step markers


def capture(step: Callable, dataset, logdir: str | Path, steps: int = 5, name: str = STEP) -> Path:
    """Profile `steps` calls of `step(images, labels)` on batches of `dataset` (one warm-up step first, not
    profiled); return the trace file written under `logdir` (trace.json.gz)."""
    import numpy as np
    import tensorflow as tf

    batches = iter(dataset)
    np.asarray(step(*next(batches)))  # traced and compiled before the profile starts
    tf.profiler.experimental.start(str(logdir))
    try:
        for number in range(steps):
            with tf.profiler.experimental.Trace(name, step_num=number, _r=1):
                images, labels = next(batches)
                np.asarray(step(images, labels))
    finally:
        tf.profiler.experimental.stop()
    return convert(newest_profile(logdir))


def record(function: Callable[[], Any], logdir: str | Path) -> tuple[Any, list[dict]]:
    """`function()` with the profiler on: its result and the complete events of its trace (`read_trace`), written
    under `logdir`."""
    import tensorflow as tf

    tf.profiler.experimental.start(str(logdir))
    try:
        result = function()
    finally:
        tf.profiler.experimental.stop()
    return result, read_trace(convert(newest_profile(logdir)))


def ops(events: list[dict], op_type: str) -> list[dict]:
    """The events of TensorFlow ops of type `op_type` (their `long_name` is 'name:type'), on any thread."""
    return [e for e in events if e.get("args", {}).get("long_name", e["name"]).rpartition(":")[2] == op_type]


def iterators_built(events: list[dict]) -> list[str]:
    """The `tf.data` stages the runtime built iterators for, outermost (where the model pulls) first, e.g.
    ['PrefetchDataset', 'BatchDatasetV2', 'CacheDatasetV2', ...]: each iterator's `MakeIterator::` event starts
    inside its consumer's, so time orders them. The root the runtime adds itself is left out."""
    built = sorted((e for e in events if e["name"].startswith("MakeIterator::")), key=lambda e: e["ts"])
    return [e["name"].split("::", 1)[1] for e in built if e["name"] != "MakeIterator::RootDataset"]


def most_at_once(events: list[dict]) -> int:
    """The most of `events` in progress at one instant (one that ends as another starts does not overlap it)."""
    edges = sorted([(e["ts"], 1) for e in events] + [(e["ts"] + e["dur"], -1) for e in events])
    most = running = 0
    for _, change in edges:  # at a tie the ending (-1) sorts before the start
        running += change
        most = max(most, running)
    return most


def newest_profile(logdir: str | Path) -> Path:
    """The most recent `*.xplane.pb` the profiler wrote under `logdir`."""
    found = sorted(Path(logdir).glob("plugins/profile/*/*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise UserError(f"no profile under {logdir}: run the profiler first (tf.profiler.experimental.start/stop)")
    return found[-1]


def convert(xplane: str | Path) -> Path:
    """The trace viewer's events of one profile, written beside it as trace.json.gz (TensorBoard's converter)."""
    try:
        from tensorboard_plugin_profile.convert import raw_to_tool_data
    except ImportError as missing:
        raise UserError("TensorBoard's profile plugin is missing: pip install tensorboard-plugin-profile") from missing
    data, _ = raw_to_tool_data.xspace_to_tool_data([str(xplane)], "trace_viewer^", {})
    out = Path(xplane).with_name("trace.json.gz")
    with gzip.open(out, "wb") as file:
        file.write(data if isinstance(data, bytes) else data.encode())
    return out


def read_trace(path: str | Path) -> list[dict]:
    """The complete events ('ph': 'X') of a trace file, each with its thread's name in 'thread'."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as file:
        events = json.load(file)["traceEvents"]
    threads = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    return [{**e, "thread": threads.get((e["pid"], e.get("tid")), "")} for e in events if e.get("ph") == "X"]


def step_events(events: list[dict], name: str = STEP) -> list[dict]:
    """The step markers, in order of their step number."""
    marks = [e for e in events if e.get("args", {}).get("step_name", "").startswith(name)]
    return sorted(marks, key=lambda e: int(e["args"]["step_num"]))


def show_step(events: list[dict], number: int, longer_than_ms: float = 0.05, name: str = STEP) -> None:
    """Print what happened during step `number`, in milliseconds from the step's start: every event on the step's
    own thread (longer than `longer_than_ms`), then one line per other thread (its events, their time, the
    longest): what TensorBoard's trace viewer draws."""
    marks = {int(e["args"]["step_num"]): e for e in step_events(events, name)}
    if number not in marks:
        raise UserError(f"no step {number} in this trace: it has steps {sorted(marks)}")
    mark = marks[number]
    start, end = mark["ts"], mark["ts"] + mark["dur"]
    inside = [e for e in events if start <= e["ts"] < end and e["dur"] / 1000 >= longer_than_ms]
    print(f"thread {mark['thread']!r}, the step's own (an event repeated: its first time, how often, all its time)")
    print(f"{'start':>8} {'ms':>8} {'times':>5} {'all ms':>8}  event")
    own = sorted((e for e in inside if e["tid"] == mark["tid"]), key=lambda e: (e["ts"], -e["dur"]))
    firsts: dict[str, dict] = {}
    for e in own:
        firsts.setdefault(e["name"], e)
    for first in firsts.values():
        same = [e for e in own if e["name"] == first["name"]]
        print(
            f"{(first['ts'] - start) / 1000:8.3f} {first['dur'] / 1000:8.3f} {len(same):5} "
            f"{sum(e['dur'] for e in same) / 1000:8.3f}  {first['name'][:80]}"
        )
    print("other threads during the step (events, their summed ms: nested ones counted again, the longest):")
    others: dict[str, list[dict]] = {}
    for e in inside:
        if e["tid"] != mark["tid"]:
            others.setdefault(e["thread"], []).append(e)
    for thread, own in sorted(others.items()):
        longest = max(own, key=lambda e: e["dur"])
        print(f"  {thread[:40]:<40} {len(own):5} {sum(e['dur'] for e in own) / 1000:9.2f}  {longest['name'][:40]}")
