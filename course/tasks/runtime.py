"""Master side of the task runtime: PyCOMPSs's programming model on the ipyparallel engines.

The notebook (the "master") keeps the data consistent: every object a task touches gets a key and
a version; a call depends on the tasks that wrote the versions it reads. The master also places each
call, at once, on one engine (`_place`): an update of an object runs where that object already is
(locality: a blocked multiply's k-loop of a C block stays on one engine), any other call on the engine
where it can start first, counted in queued tasks, preferring the one that holds most of its inputs.
The call is queued there through an ipyparallel `DirectView`, with no round trip through a scheduler:
while an engine has AHEAD messages to run, the calls placed on it wait in the master's outbox and go
together, up to BATCH in one message (batched submission: each message costs about as much CPU as an
empty task, in the notebook, the controller and the engine). The engine runs its queue in order, and a
task whose input is not made yet waits for the engine that makes it (worker.py). Values stay on the engine
that produced them; a task fetches its inputs from its peers, and the notebook only receives a value when
it asks for it with `compss_wait_on`.

Split by concern: the graph's types (tasks, data, futures) are in graph.py; binding a call's arguments and the
versions of data and files in versions.py; placement and sending in placement.py; what @task declares of a
function in definition.py, and the decorators a program writes (@task, @constraint, @on_failure, TaskGroup) in
decorators.py. Here: `Runtime` (the calls and the waits), the current runtime, and the program's end.
"""

from __future__ import annotations

import atexit
import itertools
import os
import pickle
import shutil
import sys
import time
import uuid
from typing import Any

from course import UserError
from course.tasks import parameter as P
from course.tasks import worker
from course.tasks.graph import Datum, Future, Task, TaskError, _Call, _immutable
from course.tasks.placement import Placement
from course.tasks.versions import VERSIONS, Versions
from course.tasks.definition import TaskDefinition


class Runtime(Versions, Placement):
    """The task graph of one session on one cluster: binding and versions (versions.py), placement and sending
    (placement.py), and here the calls a program makes and the waits for their results."""

    def __init__(self, cluster: Any, engines: list[int] | None = None, locality: bool = True):
        self.cluster = cluster
        self.locality = locality
        self.client = cluster.client
        self.session = uuid.uuid4().hex[:8]
        self.authkey = os.urandom(16)
        worker.use_key(self.authkey)
        self.counter = itertools.count()
        self.tasks: list[Task] = []
        self.objects: dict[int, Datum] = {}
        self.files: dict[str, Datum] = {}
        self.functions: set[str] = set()
        self.groups: dict[str, list[Task]] = {}  # TaskGroup name -> its tasks
        self.open_groups: list[str] = []
        self.waits: list[
            int
        ] = []  # each compss_wait_on call of the program in this graph: the tasks submitted before it
        self.start_time = time.time()
        self._setup(engines, program_paths())

    def submit(self, tf: TaskDefinition, args: tuple, kwargs: dict) -> Any:
        """One call of a task function: bind its parameters, add it to the graph, dispatch it; its Future(s)."""
        arguments = _arguments(tf, args, kwargs)
        eligible = self._eligible(tf)
        call = _Call(tf, Task(len(self.tasks), tf.name, tf.on_failure), [(kind, name) for kind, name, _ in arguments])
        for _, pname, value in arguments:
            direction = tf.directions.get(pname, P.IN)
            self._binder(direction)(call, pname, value, direction)
        futures = self._results(call.task, tf.nreturns)
        self._dispatch(call, futures, eligible)
        self._record(call.task)
        if tf.nreturns == 0:
            return None
        return futures[0] if tf.nreturns == 1 and not tf.returns_sequence else tuple(futures)

    def _record(self, task: Task) -> None:
        """Add a dispatched task to the graph and to the TaskGroups open now."""
        self.tasks.append(task)
        for group in self.open_groups:
            self.groups[group].append(task)

    # --- synchronisation ---------------------------------------------------------------------
    def _check(self, task: Task) -> None:
        """Raise why `task` (or a task it depended on) failed at the ipyparallel level."""
        task.wait()
        if task.error is None:
            return
        for parent, _ in task.edges:
            parent.wait()
            if parent.error is not None or (parent.meta and not parent.meta.get("ok", True)):
                self._check(parent)
        exc = task.error
        if isinstance(exc, TaskError):  # it can no longer finish, and says why (Task.lost)
            raise TaskError(f"task {task} did not finish: {exc}")
        raise TaskError(
            f"task {task} could not run on the cluster: {type(exc).__name__}: {exc} "
            "(an engine may have died: check course.cluster.current().status() and restart it)"
        )

    def value(self, datum: Datum) -> Any:
        """The current value of a datum, fetched from the engine that holds it."""
        if datum.group is not None:
            datum.group.closed = True
            for t in datum.group.tasks:
                self._check(t)
            group = datum.group
            key, engine = worker.request(self.peers[group.home], "resolve", group.gid, len(group.tasks))
        elif datum.writer is not None:
            self._check(datum.writer)
            key, engine = datum.current_key(), datum.writer.engine()
        elif datum.path is not None:
            return datum.path
        else:
            return datum.obj
        value = self._get(engine, key)
        if isinstance(value, str) and value == worker.MISSING:
            raise UserError(f"{datum.label} is no longer on the cluster (deleted with compss_delete_object?)")
        if isinstance(value, worker.Failed):
            number = value.task.rsplit("#", 1)[-1]
            if number.isdigit() and int(number) < len(self.tasks):
                self.tasks[int(number)].reported = True  # the program sees this failure here
            raise_failed(value)
        return value

    def wait_on(self, obj: Any) -> Any:
        if isinstance(obj, Future):
            if not obj.datum.key.startswith(self.session + ":"):
                raise UserError("this Future is from before reset(); call the task that makes it again")
            return self.value(obj.datum)
        datum = self.objects.get(id(obj)) if not _immutable(obj) else None
        if datum is not None and datum.obj is obj:
            return self.value(datum)
        if isinstance(obj, list):
            return [self.wait_on(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self.wait_on(v) for v in obj)
        if isinstance(obj, dict):
            return {k: self.wait_on(v) for k, v in obj.items()}
        return obj

    def wait_file(self, path: str) -> str:
        datum = self.files.get(os.path.abspath(os.fspath(path)))
        if datum is not None:
            self.sync_file(datum)
        return os.fspath(path)

    def forget_file(self, path: str) -> None:
        self.files.pop(os.path.abspath(os.fspath(path)), None)

    def barrier(self, report: bool = True) -> None:
        """Wait for every task, bring every file's newest version back, and report failures (see `failures`)."""
        for task in self.tasks:
            task.wait()
        for datum in list(self.files.values()):
            if datum.writer is not None and not datum.writer.failed():
                self.sync_file(datum)
        if report:
            self.report()

    def report(self) -> None:
        """Raise the first failure whose on_failure stops the application (RETRY, FAIL); warn about the others."""
        for task in self.tasks:
            if task.reported or not task.done():
                continue
            meta = task.meta or {}
            if meta.get("compss_exception") and any(task in g for g in self.groups.values()):
                continue  # raised by its group's barrier
            if task.failed() and task.on_failure in ("RETRY", "FAIL"):
                task.reported = True
                self._check(task)
                raise_failed(meta["failure"])
            elif task.failed() or meta.get("ignored"):
                task.reported = True
                what = (
                    "ignored (on_failure='IGNORE')"
                    if meta.get("ignored")
                    else "its successors are cancelled (on_failure='CANCEL_SUCCESSORS')"
                )
                print(
                    f"course.tasks: task {task} failed with {meta.get('ignored') or meta.get('error')}; {what}",
                    file=sys.stderr,
                )

    def barrier_group(self, name: str) -> None:
        """Wait for a TaskGroup's tasks; raise a COMPSsException one of them raised (the rest of the group is
        cancelled, as in PyCOMPSs), else the first failure that stops the application."""
        if name not in self.groups:
            raise UserError(f"no task group {name!r}; open one with `with TaskGroup({name!r}):`")
        members = self.groups[name]
        raised = None
        for task in members:
            task.wait()
            if raised is None and task.meta and task.meta.get("compss_exception"):
                raised = task
                self.cancel_group(name)
        if raised is not None:
            raised.reported = True
            raise_failed(raised.meta["failure"])
        for task in members:
            if not task.reported and task.failed() and task.on_failure in ("RETRY", "FAIL"):
                task.reported = True
                self._check(task)
                raise_failed(task.meta["failure"])

    def cancel_group(self, name: str) -> None:
        """Cancel the group's tasks that have not started: their engines skip them (their outputs fail)."""
        names = [str(task) for task in self.groups.get(name, []) if not task.done()]
        for engine in self.ids:
            worker.request(self.peers[engine], "cancel", names)

    def cleanup_versions(self) -> None:
        """Remove this session's version files (the user's paths hold the newest versions by now)."""
        for folder in {os.path.join(os.path.dirname(d.path), VERSIONS) for d in self.files.values()}:
            shutil.rmtree(os.path.join(folder, self.session), ignore_errors=True)
            try:
                os.rmdir(folder)
            except OSError:
                pass

    def delete(self, obj: Any) -> bool:
        datum = obj.datum if isinstance(obj, Future) else self.objects.pop(id(obj), None)
        if datum is None:
            return False
        for engine in self.ids:
            worker.request(self.peers[engine], "drop", datum.key + ".", None)
        return True

    def close(self) -> None:
        """Forget this session's data on the engines (after its tasks finish)."""
        try:
            self.barrier(report=False)
            self.cleanup_versions()
            for engine in self.ids:
                worker.request(self.peers[engine], "drop", self.session + ":", None)
        except Exception:  # noqa: BLE001 - the cluster may be gone already
            pass
        finally:
            self.closed = True  # `_feed` stops


def _arguments(tf: TaskDefinition, args: tuple, kwargs: dict) -> list[tuple[str, str, Any]]:
    """(kind, name, value) of each parameter of a call of `tf`, defaults filled in; a wrong call is a UserError."""
    try:
        bound = tf.signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise UserError(f"task {tf.name}: {exc}") from None
    bound.apply_defaults()
    arguments = []
    for pname, param in tf.signature.parameters.items():
        kind = {param.VAR_POSITIONAL: "varpos", param.VAR_KEYWORD: "varkw", param.KEYWORD_ONLY: "kw"}.get(
            param.kind, "pos"
        )
        value = bound.arguments.get(pname, () if kind == "varpos" else {} if kind == "varkw" else None)
        arguments.append((kind, pname, value))
    return arguments


def program_paths() -> list[str]:
    """Where the program's own modules are: the main script's folder (or the notebook's) and the working folder."""
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    paths = [os.path.dirname(os.path.abspath(main))] if main and not _in_kernel() else []
    return list(dict.fromkeys(paths + [os.getcwd()]))


def raise_failed(failed: "worker.Failed") -> None:
    """Raise a task's exception again in the notebook, with its type and the engine's traceback."""
    exc: BaseException | None = None
    if failed.exc_bytes is not None:
        try:
            exc = pickle.loads(failed.exc_bytes)
        except Exception:  # noqa: BLE001
            exc = None
    if not isinstance(exc, BaseException):
        exc = TaskError(f"{failed.exc_type}: {failed.message}")
    exc.add_note(f"(raised in task {failed.task} on an engine; remote traceback:)\n{failed.remote_tb.rstrip()}")
    raise exc


# --- the current runtime ---------------------------------------------------------------------
_RUNTIME: Runtime | None = None


def current(start: bool = True) -> Runtime | None:
    """The runtime on the current cluster; starts a local cluster on first use (it says so)."""
    global _RUNTIME
    from course import cluster as cluster_module

    cluster = cluster_module.current()
    if _RUNTIME is not None and cluster is _RUNTIME.cluster and cluster.client is _RUNTIME.client:
        return _RUNTIME
    if not start:
        return None
    if cluster is None:
        cluster = cluster_module.ensure()
    _RUNTIME = Runtime(cluster)
    atexit.unregister(_at_exit)
    atexit.register(_at_exit)  # after the cluster's own stop was registered: runs before it
    return _RUNTIME


def _at_exit() -> None:
    """The program ends: as PyCOMPSs at the end of an application, run what is pending and bring files back.

    A task whose failure stops the application (on_failure RETRY or FAIL) makes the exit code 1. In a
    Jupyter kernel nothing is waited for (a restart drops the task graph; see notebook 01)."""
    rt = _RUNTIME
    if rt is None or _in_kernel() or getattr(rt.cluster, "stopped", False):
        return  # (a program that stopped its cluster itself has waited for what it needed)
    if getattr(sys, "last_value", None) is not None:  # the program itself failed: do not run its pending tasks
        pending = sum(not t.done() for t in rt.tasks)
        if pending:
            print(f"course.tasks: the program failed; {pending} pending task(s) were not waited for", file=sys.stderr)
        return
    failure = None
    try:
        rt.barrier()
        rt.cleanup_versions()
    except Exception as exc:  # noqa: BLE001 - a task's failure: say which, and fail the program
        notes = "".join(f"\n{note}" for note in getattr(exc, "__notes__", []))
        failure = f"course.tasks: the application failed: {type(exc).__name__}: {exc}{notes}"
    try:
        _end_engines(rt)
    finally:
        if failure:
            print(failure, file=sys.stderr)
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                rt.cluster.stop()
            finally:
                os._exit(1)


def _end_engines(rt: Runtime) -> None:
    """A script's own cluster: its work is done and nothing may outlive the program, so the cluster ends its engines
    at once where their kind allows (`Cluster.end_at_exit`); a cluster kept for others (persist) is left running."""
    cluster = rt.cluster
    if getattr(cluster, "persist", True) or cluster.stopped:
        return
    cluster.end_at_exit()


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return get_ipython() is not None


def reset(engines: list[int] | int | None = None, locality: bool = True) -> None:
    """Start a fresh task graph (and free the old one's data); optionally use only some engines.

    engines: engine ids, or a number n for the first n engines (default: all). locality: an object's INOUT
    updates after its first run where that one ran, so the object stays put; the first goes to the least
    busy engine, so that chains of updates spread over the engines.
    """
    global _RUNTIME
    old = current(start=True)
    old.close()
    if isinstance(engines, int):
        if engines < 1 or engines > len(old.client.ids):
            raise UserError(f"engines={engines}: the cluster has {len(old.client.ids)} engines")
        engines = sorted(old.client.ids)[:engines]
    _RUNTIME = Runtime(old.cluster, engines, locality)


def on_engine() -> bool:
    """True inside a task on an engine (a task called from a task runs there, sequentially)."""
    return worker.STATE.get("engine") is not None
