"""Synchronisation calls of PyCOMPSs's API: where the notebook waits for the engines."""

from __future__ import annotations

import os
from typing import Any

from course.tasks import runtime


def compss_wait_on(*objs: Any, **_ignored: Any) -> Any:
    """The value(s) of Futures or task-updated objects, also inside lists, tuples and dicts (waits for them)."""
    rt = runtime.current()
    rt.waits.append(len(rt.tasks))
    values = [rt.wait_on(obj) for obj in objs]
    return values[0] if len(values) == 1 else values


def compss_barrier(no_more_tasks: bool = False) -> None:
    """Wait for every task submitted so far and bring their files back; raise a failure that stops the application
    (on_failure RETRY or FAIL), warn about the others (CANCEL_SUCCESSORS, IGNORE)."""
    rt = runtime.current(start=False)
    if rt is not None:
        rt.barrier()


def compss_delete_object(*objs: Any) -> bool:
    """Forget objects (Futures or objects passed to tasks) and free their copies on the engines."""
    rt = runtime.current(start=False)
    return all(rt.delete(obj) for obj in objs) if rt is not None else False


def compss_wait_on_file(*paths: str) -> Any:
    """Wait until the tasks writing these files have finished; returns the path(s)."""
    rt = runtime.current()
    done = [rt.wait_file(p) for p in paths]
    return done[0] if len(done) == 1 else done


def compss_open(path: str, mode: str = "r") -> Any:
    """Wait for the tasks writing `path`, then open it."""
    compss_wait_on_file(path)
    return open(path, mode)


def compss_file_exists(*paths: str) -> Any:
    """Whether each file exists once its writers have finished."""
    compss_wait_on_file(*paths)
    found = [os.path.exists(p) for p in paths]
    return found[0] if len(found) == 1 else found


def compss_delete_file(*paths: str) -> bool:
    """Wait for the file's writers, then remove it."""
    compss_wait_on_file(*paths)
    rt = runtime.current(start=False)
    for p in paths:
        if rt is not None:
            rt.forget_file(p)
        if os.path.exists(p):
            os.remove(p)
    return True


def compss_start(*_args: Any, **_kwargs: Any) -> None:
    """Start the runtime (PyCOMPSs interactive mode); here: attach to, or start, the cluster."""
    runtime.current()


def compss_stop(*_args: Any, **_kwargs: Any) -> None:
    """Wait for all tasks (PyCOMPSs stops its runtime here; the cluster is stopped with its own .stop())."""
    compss_barrier()


def compss_wait_on_directory(*paths: str) -> Any:
    """Wait until the tasks writing these directories have finished and bring their newest versions back."""
    return compss_wait_on_file(*paths)


def compss_barrier_group(group_name: str) -> None:
    """Wait for the tasks of TaskGroup `group_name`; raise the COMPSsException (or failure) one of them raised."""
    runtime.current().barrier_group(group_name)


def compss_cancel_group(group_name: str) -> None:
    """Cancel the tasks of TaskGroup `group_name` that have not started yet."""
    runtime.current().cancel_group(group_name)


def compss_get_number_of_resources() -> int:
    """How many engines run tasks (PyCOMPSs: worker nodes)."""
    return len(runtime.current().ids)


def synchronised(obj: Any) -> bool:
    """Whether the notebook's `obj` is up to date: False for a Future, or for an object a task has updated
    (its new version is on the engines; `obj = compss_wait_on(obj)` brings it back), also inside lists,
    tuples and dicts. Checks use it to tell a learner that a result of compss_wait_on was not assigned."""
    from course.tasks.runtime import Future, _immutable

    if isinstance(obj, Future):
        return False
    rt = runtime.current(start=False)
    if rt is not None and not _immutable(obj):
        datum = rt.objects.get(id(obj))
        if datum is not None and datum.obj is obj and (datum.writer is not None or datum.group is not None):
            return False
    if isinstance(obj, (list, tuple)):
        return all(synchronised(v) for v in obj)
    if isinstance(obj, dict):
        return all(synchronised(v) for v in obj.values())
    return True
