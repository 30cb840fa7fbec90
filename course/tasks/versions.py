"""Binding and versions, the part of the task runtime that builds the graph: each argument of a call becomes a read
or a write of a datum (an object, a file, a collection), and each write a new version, so that a call depends on
the tasks that wrote what it reads. Files get a version file per write.

A mixin of `Runtime` (runtime.py), which holds the state these methods use.
"""

from __future__ import annotations

import os
import pickle
import shutil
from typing import Any, Callable

from course import UserError
from course.tasks import parameter as P
from course.tasks.graph import Datum, Future, Group, Task, _Call, _immutable

MAX_DEPTH = 1 << 30  # PyCOMPSs's default Depth: nested lists are collections all the way down
VERSIONS = ".course-tasks"  # beside a file: the versions its tasks wrote, until they are copied back


class Versions:
    """The task graph's data and their versions (the program's side of `Runtime`)."""

    def _new_datum(self, label: str, obj: Any = None, path: str | None = None) -> Datum:
        return Datum(f"{self.session}:{next(self.counter)}", label, obj, path)

    def _datum_of(self, value: Any, name: str, fname: str, register: bool) -> Datum | None:
        """The tracked datum for `value` (a Future or an object a task already saw), registering it if asked."""
        if isinstance(value, Future):
            if not value.datum.key.startswith(self.session + ":"):
                raise UserError(
                    f"task {fname}: argument {name!r} is a Future from before reset(); "
                    "call the task that makes it again"
                )
            return value.datum
        datum = self.objects.get(id(value))
        if datum is None and register:
            datum = self._new_datum(f"{name} ({type(value).__name__})", obj=value)
            self.objects[id(value)] = datum
        return datum

    def _read(self, datum: Datum, name: str, fname: str) -> tuple[tuple, list[Task]]:
        """The input reference for the datum's current version, and the tasks it depends on."""
        if datum.group is not None:
            group = datum.group
            group.closed = True
            return ("g", group.gid, group.home, len(group.tasks)), list(group.tasks)
        if datum.writer is not None:
            return ("d", datum.current_key(), datum.writer.engine()), [datum.writer]
        if datum.path is not None:
            return ("v", datum.path), []
        if not datum.uploaded:  # an object of the notebook's, used for the first time: send it once
            engine = next(self._next_upload)
            try:
                self._put(engine, datum.current_key(), datum.obj)
            except (pickle.PicklingError, TypeError, AttributeError, ValueError) as exc:
                raise UserError(
                    f"task {fname}: argument {name!r} ({type(datum.obj).__name__}) cannot be sent to an engine: {exc}"
                ) from None
            datum.uploaded, datum.location = True, engine
        return ("d", datum.current_key(), datum.location), []

    def _write(self, datum: Datum, task: Task) -> str:
        datum.group = None
        datum.readers = 0
        datum.version += 1
        datum.writer = task
        return datum.current_key()

    def _input(self, value: Any, name: str, fname: str, collection: int, deps: list, edges: list, label: str):
        """Describe an IN value for the engine: inline, a stored datum, or a collection of those.

        collection: the levels of nested lists still taken apart (PyCOMPSs's Depth; 0: not a collection, but
        lists and dicts that hold Futures are still looked into)."""
        if isinstance(value, Future) or id(value) in self.objects:
            datum = self._datum_of(value, name, fname, register=False)
            ref, writers = self._read(datum, name, fname)
            datum.readers += 1
            deps.extend(writers)
            edges.extend((w, label) for w in writers)
            return ref
        inner = max(collection - 1, 0)
        if isinstance(value, (list, tuple)) and (collection or any(_holds_data(v, self) for v in value)):
            return (
                "l",
                "tuple" if isinstance(value, tuple) else "list",
                [self._input(v, f"{name}[{i}]", fname, inner, deps, edges, label) for i, v in enumerate(value)],
            )
        if isinstance(value, dict) and (collection or any(_holds_data(v, self) for v in value.values())):
            return (
                "m",
                [(k, self._input(v, f"{name}[{k!r}]", fname, inner, deps, edges, label)) for k, v in value.items()],
            )
        if _immutable(value):
            return ("v", value)
        datum = self._datum_of(value, name, fname, register=True)
        ref, writers = self._read(datum, name, fname)
        datum.readers += 1
        return ref

    def _writable(self, value: Any, name: str, fname: str, direction: P.ParameterDirection) -> Datum:
        if _immutable(value) and not isinstance(value, Future):
            raise UserError(
                f"task {fname}: parameter {name!r} is {direction.name} but its value is a "
                f"{type(value).__name__}, which cannot be updated in place; pass a mutable object "
                "(a list, a NumPy array) or return the new value instead"
            )
        return self._datum_of(value, name, fname, register=True)

    def _binder(self, direction: P.ParameterDirection) -> Callable[["_Call", str, Any, P.ParameterDirection], None]:
        """The binder of a parameter direction: it adds the argument to the call and the call's dependencies."""
        if direction.kind in ("file", "directory"):
            return self._bind_file
        if direction.kind == "file_collection":
            return self._bind_file_collection
        if not direction.write:
            return self._bind_in
        if direction.kind == "collection":
            return self._bind_collection_update
        return self._bind_commutative if direction.commutative else self._bind_update

    def _bind_file(self, call: "_Call", pname: str, value: Any, direction: P.ParameterDirection) -> None:
        """FILE_* and DIRECTORY_*: a path, read after its writer; a write makes the file's next version."""
        path = _path(value, pname, call.fname, direction.name)
        call.inputs[pname] = self._file(path, pname, direction, call.task, call.deps, call.edges)
        if direction.write:
            call.updates[pname] = self.files[os.path.abspath(os.fspath(value))].current_key()

    def _bind_file_collection(self, call: "_Call", pname: str, value: Any, direction: P.ParameterDirection) -> None:
        """COLLECTION_FILE_*: a list of paths, each a file of this direction."""
        label = direction.name
        if not isinstance(value, (list, tuple)):
            raise UserError(
                f"task {call.fname}: parameter {pname!r} is {label} and needs a list of paths, "
                f"not a {type(value).__name__}"
            )
        paths = [_path(v, f"{pname}[{i}]", call.fname, label) for i, v in enumerate(value)]
        call.inputs[pname] = (
            "l",
            "list",
            [self._file(p, pname, direction, call.task, call.deps, call.edges) for p in paths],
        )
        if direction.write:
            call.collection_updates[pname] = [self.files[os.path.abspath(p)].current_key() for p in paths]

    def _bind_in(self, call: "_Call", pname: str, value: Any, direction: P.ParameterDirection) -> None:
        """IN, IN_DELETE and the COLLECTION_/DICTIONARY_ IN ones: read the value (or its elements) as it is now."""
        depth = call.tf.depths.get(pname, MAX_DEPTH) if direction.kind == "collection" else 0
        call.inputs[pname] = self._input(value, pname, call.fname, depth, call.deps, call.edges, direction.name)
        if direction.delete and not isinstance(value, Future):  # IN_DELETE: the program is done with it
            self.objects.pop(id(value), None)

    def _bind_collection_update(self, call: "_Call", pname: str, value: Any, direction: P.ParameterDirection) -> None:
        """COLLECTION_OUT/INOUT and DICTIONARY_OUT/INOUT: each element is updated in place."""
        label = direction.name
        wanted = dict if label.startswith("DICTIONARY") else (list, tuple)
        if not isinstance(value, wanted):
            raise UserError(
                f"task {call.fname}: parameter {pname!r} is {label} and needs a "
                f"{'dict' if wanted is dict else 'list'}, not a {type(value).__name__}"
            )
        refs, keys, shared = self._collection_write(
            value, pname, call.fname, call.task, call.deps, call.edges, label, call.tf.depths.get(pname, MAX_DEPTH)
        )
        if shared:
            call.copies.append(pname)
        call.inputs[pname] = refs
        call.collection_updates[pname] = keys

    def _bind_commutative(self, call: "_Call", pname: str, value: Any, direction: P.ParameterDirection) -> None:
        """COMMUTATIVE and CONCURRENT: join the object's open group of updates (or open one), run in any order."""
        datum = self._writable(value, pname, call.fname, direction)
        group = datum.group
        if group is None or group.closed:
            ref, writers = self._read(datum, pname, call.fname)
            if datum.readers:
                call.copies.append(pname)
            group = Group(f"{datum.key}.g{datum.version}", ref, writers, self.home)
            datum.version += 1
            datum.writer = None
            datum.group = group
        group.tasks.append(call.task)
        call.depend(group.base_writers, direction.name)
        call.inputs[pname] = group.base
        call.groups[pname] = (group.gid, group.home)
        call.updates[pname] = f"{datum.key}.{datum.version}c{len(group.tasks)}"

    def _bind_update(self, call: "_Call", pname: str, value: Any, direction: P.ParameterDirection) -> None:
        """OUT and INOUT objects: read the current version (after its writer), write the next one."""
        datum = self._writable(value, pname, call.fname, direction)
        ref, writers = self._read(datum, pname, call.fname)
        call.depend(writers, direction.name)
        if datum.readers:
            call.copies.append(pname)
        if self.locality and call.follow is None and datum.updated and datum.writer is not None and datum.group is None:
            call.follow = datum.writer  # an update runs where the version it updates is: the object stays put
        datum.updated = True  # (not the first update: the scheduler places it, so that where the tasks
        # that made the objects happened to run does not pin every later chain of updates to one engine)
        call.inputs[pname] = ref
        call.updates[pname] = self._write(datum, call.task)

    def _results(self, task: Task, nreturns: int) -> list[Future]:
        """The Futures of the call's results, each the first version of a datum that `task` writes."""
        futures = [Future(self._new_datum(f"result of {task.name}#{task.number}")) for _ in range(nreturns)]
        for future in futures:
            future.datum.version = 1
            future.datum.writer = task
        return futures

    def _file(
        self, path: str, pname: str, direction: P.ParameterDirection, task: Task, deps: list, edges: list
    ) -> tuple:
        """A file parameter. Each write makes a new version in its own file (PyCOMPSs renames them too), so a
        task that reads an earlier version keeps reading it while later tasks write; the user's path gets
        the newest version back at compss_wait_on_file/compss_open, compss_barrier and the program's end."""
        path, label = os.path.abspath(path), direction.name
        datum = self.files.get(path)
        if datum is None:
            datum = self.files[path] = self._new_datum(os.path.basename(path), path=path)
        source, ref = None, None
        if direction.read:
            if datum.writer is None and not os.path.exists(path):
                raise UserError(
                    f"task {task.name}: parameter {pname!r} is {label} but {path} does not exist "
                    "and no earlier task writes it"
                )
            ref, writers = self._read(datum, datum.label, task.name)
            ref = ref if ref[0] == "d" else None
            deps += writers
            edges += [(w, label) for w in writers]
            source = datum.vpath
            task.files.append((datum.label, datum.version, "reads"))
            if source == path:
                datum.path_readers.append(task)
        if not direction.write:
            return ("f", source, ref) if ref else ("v", source)
        self._write(datum, task)
        datum.vpath = os.path.join(
            os.path.dirname(path),
            VERSIONS,
            self.session,
            f"v{datum.version}-{datum.key.rsplit(':', 1)[1]}-{datum.label}",
        )
        task.files.append((datum.label, datum.version, "writes"))
        return ("dw" if direction.kind == "directory" else "fw", datum.vpath, source, ref)

    def sync_file(self, datum: Datum) -> None:
        """Wait for the file's newest version and copy it to the user's path (after that version's readers)."""
        self.value(datum)
        if datum.vpath != datum.path:
            for reader in datum.path_readers:
                reader.wait()
            if os.path.isdir(datum.vpath):  # a DIRECTORY_OUT/INOUT: the folder becomes the new version's
                shutil.rmtree(datum.path, ignore_errors=True)
                shutil.copytree(datum.vpath, datum.path)
            else:
                shutil.copyfile(datum.vpath, datum.path)
            datum.vpath, datum.path_readers = datum.path, []

    def _collection_write(self, value, name, fname, task, deps, edges, label, depth):
        """A COLLECTION_OUT/INOUT: its elements are updated in place, nested lists taken apart `depth` levels
        deep (PyCOMPSs's Depth); deeper lists are single objects, and basic values (numbers, strings) travel
        by value and are not updated, as in PyCOMPSs. Keys mirror the nesting."""
        if isinstance(value, dict):  # DICTIONARY_*: the values are the elements (keys travel as they are)
            refs, keys, shared = self._collection_write(
                list(value.values()), name, fname, task, deps, edges, label, depth
            )
            return ("m", list(zip(value, refs[2]))), ("m", list(zip(value, keys))), shared
        refs, keys, shared = [], [], False
        for i, item in enumerate(value):
            iname = f"{name}[{i}]"
            if isinstance(item, (list, tuple, dict)) and not isinstance(item, Future) and depth > 1:
                sub_refs, sub_keys, sub_shared = self._collection_write(
                    item, iname, fname, task, deps, edges, label, depth - 1
                )
                refs.append(sub_refs)
                keys.append(sub_keys)
                shared = shared or sub_shared
                continue
            if _immutable(item) and not isinstance(item, Future):
                refs.append(("v", item))
                keys.append(None)
                continue
            datum = self._writable(item, iname, fname, P.COLLECTION_INOUT)
            ref, writers = self._read(datum, iname, fname)
            shared = shared or datum.readers > 0
            deps += writers
            edges += [(w, label) for w in writers]
            refs.append(ref)
            keys.append(self._write(datum, task))
        return ("l", "tuple" if isinstance(value, tuple) else "list", refs), keys, shared


def _path(value: Any, pname: str, fname: str, label: str) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise UserError(f"task {fname}: parameter {pname!r} is {label} and needs a path, not a {type(value).__name__}")
    return os.fspath(value)


def _holds_data(value: Any, runtime: Any) -> bool:
    if isinstance(value, Future) or (not _immutable(value) and id(value) in runtime.objects):
        return True
    if isinstance(value, (list, tuple)):
        return any(_holds_data(v, runtime) for v in value)
    if isinstance(value, dict):
        return any(_holds_data(v, runtime) for v in value.values())
    return False
