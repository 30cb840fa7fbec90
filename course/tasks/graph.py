"""The task graph of the runtime: tasks, their groups, the data they read and write (each with a key and versions)
and the futures a program holds, as the master (runtime.py) builds them from the calls."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Callable

from course import UserError
from course.tasks.definition import TaskDefinition


IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), range, frozenset)
POLL = 1.0  # s between two looks, while a task is waited for, at whether it can still finish (Task.lost)


class TaskError(RuntimeError):
    """A task failed in a way that its own exception cannot be raised again (unpicklable, or lost engine)."""


def _immutable(value: Any) -> bool:
    if isinstance(value, tuple):
        return all(_immutable(v) for v in value)
    return isinstance(value, IMMUTABLE)


class Task:
    """One call of a task function: what it depends on, where and when it ran."""

    def __init__(self, number: int, name: str, on_failure: str = "RETRY"):
        self.number, self.name, self.on_failure = number, name, on_failure
        self.ar = None  # the answer to the message that took it to its engine (with others, see BATCH)
        self.index = 0  # its place in that message
        self.sent = threading.Event()  # set once the message has gone (until then the task is in the outbox)
        self.target: int | None = None  # the engine the master placed it on
        self.slot = 0  # how many tasks had been placed on that engine before it
        self.edges: list[tuple[Task, str]] = []  # (the task whose output this one reads, direction)
        self.files: list[tuple[str, int, str]] = []  # (file name, version, "reads" or "writes")
        self.meta: dict | None = None
        self.error: BaseException | None = None
        self.lost: Callable[[], str] = lambda: ""  # why it can no longer finish ("" while it can): set by placement
        self.reported = False

    def failed(self) -> bool:
        """Its own code failed (not cancelled because an input's task failed; not ignored)."""
        self.wait()
        return self.error is not None or bool(self.meta and not self.meta.get("ok") and not self.meta.get("cancelled"))

    def __repr__(self) -> str:
        return f"{self.name}#{self.number}"

    def done(self) -> bool:
        return self.meta is not None or self.error is not None or (self.ar is not None and self.ar.ready())

    def wait(self) -> dict | None:
        """Wait for the task; its metadata (engine, times) or None when ipyparallel itself failed it, or when it can
        no longer finish (its cluster was stopped under it: no answer would ever come)."""
        while self.meta is None and self.error is None:
            if self.sent.is_set() and self.error is None and self.ar.ready():
                try:
                    self.meta = self.ar.get()[self.index]
                except Exception as exc:  # noqa: BLE001 - lost engine, impossible dependency
                    self.error = exc
            elif why := self.lost():
                self.error = TaskError(why)
            elif self.sent.is_set():
                self.ar.wait(POLL)
            else:
                self.sent.wait(POLL)
        return self.meta

    def engine(self) -> int | None:
        """The engine it ran on (or is queued on)."""
        return self.meta["engine"] if self.meta else self.target


class Group:
    """A run of COMMUTATIVE updates of one object: they run one at a time, in any order."""

    def __init__(self, gid: str, base: tuple, base_writers: list[Task], home: int):
        self.gid, self.base, self.base_writers, self.home = gid, base, base_writers, home
        self.tasks: list[Task] = []
        self.closed = False  # a read or a wait ends the run: later COMMUTATIVE calls start a new group


class Datum:
    """An object the runtime tracks: a task result (Future), a registered object, or a file."""

    def __init__(self, key: str, label: str, obj: Any = None, path: str | None = None):
        self.key, self.label, self.obj, self.path = key, label, obj, path
        self.version = 0
        self.writer: Task | None = None  # the task that wrote the current version
        self.location: int | None = None  # engine holding the current version when written by the master
        self.group: Group | None = None  # open COMMUTATIVE group
        self.readers = 0  # tasks submitted that read the current version (an update then works on a copy)
        self.updated = False  # an INOUT update was submitted: later updates follow its engine (locality)
        self.uploaded = False
        self.vpath = path  # a file: where its current version is (the user's path, or a version file)
        self.path_readers: list[Task] = []  # a file: tasks that read the user's path itself

    def current_key(self) -> str:
        return f"{self.key}.{self.version}"


class Future:
    """What a task call returns: a placeholder for its result. Pass it to tasks, or `compss_wait_on` it."""

    __slots__ = ("datum", "__weakref__")

    def __init__(self, datum: Datum):
        self.datum = datum

    def __repr__(self) -> str:
        return f"<Future: {self.datum.label}; get its value with compss_wait_on(...)>"

    def __bool__(self) -> bool:
        raise UserError(f"{self.datum.label} is a Future, not a value yet: use compss_wait_on(...) on it first")


class _Call:
    """One task call while its parameters are bound: what its engine is sent, and the tasks it waits for."""

    def __init__(self, tf: TaskDefinition, task: Task, layout: list[tuple[str, str]]):
        self.tf, self.task, self.fname = tf, task, tf.name
        self.layout = layout  # (kind, name) of each parameter: how the engine calls the function
        self.inputs: dict[str, Any] = {}
        self.updates: dict[str, str] = {}
        self.collection_updates: dict[str, Any] = {}
        self.groups: dict[str, tuple[str, int]] = {}
        self.copies: list[str] = []  # parameters updated on a copy: earlier readers still read the old version
        self.deps: list[Task] = []
        self.edges: list[tuple[Task, str]] = []  # (the task whose output this call reads, direction)
        self.follow: Task | None = None  # run where this task ran (an update follows its object: locality)

    def homes(self) -> Counter:
        """How many of the call's inputs each engine holds (or will hold: their writers are queued there)."""
        held: Counter = Counter()
        stack = list(self.inputs.values())
        while stack:
            ref = stack.pop()
            if ref[0] == "d" and ref[2] is not None:
                held[ref[2]] += 1
            elif ref[0] == "f" or (ref[0] in ("fw", "dw") and ref[3] is not None):  # a file: its writer's
                stack.append(ref[2] if ref[0] == "f" else ref[3])
            elif ref[0] == "l":
                stack.extend(ref[2])
            elif ref[0] == "m":
                stack.extend(r for _, r in ref[1])
        return held

    def depend(self, writers: list[Task], label: str) -> None:
        """The call reads what `writers` wrote, through a parameter of direction `label`."""
        self.deps += writers
        self.edges += [(w, label) for w in writers]

    def spec(self, digest: str, returns: list[str]) -> dict:
        """What the engine runs: worker.execute's argument."""
        tf = self.tf
        return {
            "name": f"{self.fname}#{self.task.number}",
            "digest": digest,
            "call": self.layout,
            "inputs": self.inputs,
            "groups": self.groups,
            "updates": self.updates,
            "collection_updates": self.collection_updates,
            "copy": self.copies,
            "returns": returns,
            "nreturns": tf.nreturns,
            "on_failure": tf.on_failure,
            "defaults": tf.defaults,
        }
