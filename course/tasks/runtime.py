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

The graph's types (tasks, data and their versions, futures) are in graph.py; the decorators a program writes
(@task, @constraint, @on_failure, TaskGroup) in decorators.py.
"""

from __future__ import annotations

import atexit
import hashlib
import itertools
import os
import pickle
import shutil
import socket
import sys
import threading
import time
import uuid
from collections import defaultdict, deque
from typing import TYPE_CHECKING, Any, Callable

import cloudpickle

from course import UserError
from course.tasks import parameter as P
from course.tasks import worker

from course.tasks.graph import Datum, Future, Group, Task, TaskError, _Call, _immutable

if TYPE_CHECKING:
    from course.tasks.decorators import TaskFunction

SETUP_TIMEOUT = 120.0
MAX_DEPTH = 1 << 30  # PyCOMPSs's default Depth: nested lists are collections all the way down
BATCH = 16  # at most this many tasks in one message to an engine
AHEAD = 2  # messages sent to an engine and not answered: while it has this many, new tasks wait in the outbox
VERSIONS = ".course-tasks"  # beside a file: the versions its tasks wrote, until they are copied back


class Runtime:
    """The task graph of one session on one cluster."""

    def __init__(self, cluster: Any, engines: list[int] | None = None, locality: bool = True):
        self.cluster = cluster
        self.locality = locality
        self.client = cluster.client
        self.session = uuid.uuid4().hex[:8]
        self.authkey = os.urandom(16)
        worker.STATE["authkey"] = self.authkey
        self.counter = itertools.count()
        self.tasks: list[Task] = []
        self.objects: dict[int, Datum] = {}
        self.files: dict[str, Datum] = {}
        self.functions: set[str] = set()
        self.groups: dict[str, list[Task]] = {}  # TaskGroup name -> its tasks
        self.open_groups: list[str] = []
        self.waits = 0  # compss_wait_on calls of the program in this graph
        self.start_time = time.time()
        self._setup(engines)

    # --- engines -----------------------------------------------------------------------------
    def _setup(self, engines: list[int] | None) -> None:
        ids = sorted(self.client.ids)
        if not ids:
            raise UserError("the cluster has no engines; restart it with course.cluster.start()")
        if engines is not None:
            unknown = sorted(set(engines) - set(ids))
            if unknown:
                raise UserError(f"engines {unknown} are not in the cluster (it has {ids})")
            ids = sorted(engines)
        host = socket.gethostname()
        pending = {e: self.client[e].apply_async(worker.setup, e, host, self.authkey) for e in ids}
        infos = {}
        for e, ar in pending.items():
            try:
                infos[e] = ar.get(timeout=SETUP_TIMEOUT)
            except Exception as exc:  # noqa: BLE001
                raise UserError(
                    f"engine {e} did not answer the task runtime's set-up ({type(exc).__name__}: "
                    f"{exc}); restart the cluster"
                ) from None
        per_host = defaultdict(int)
        for info in infos.values():
            per_host[info["host"]] += 1
        for info in infos.values():
            n = per_host[info["host"]]
            info["slots"] = int(info["env_cores"]) if info["env_cores"] else max(1, info["cores"] // n)
            info["gpu_slots"] = info["gpus"] if info["gpus_pinned"] else info["gpus"] // n
            info["memory_gb"] = info["memory"] / n / 2**30
        self.engines = infos
        self.peers = {e: info["address"] for e, info in infos.items()}
        worker.STATE["peers"] = self.peers
        paths = program_paths()
        configured = [self.client[e].apply_async(worker.configure, self.peers, infos[e]["slots"], paths) for e in ids]
        for ar in configured:
            ar.get(timeout=SETUP_TIMEOUT)
        self.ids = ids
        self.home = ids[0]
        self.views = {e: self.client[e] for e in ids}  # one DirectView per engine: the master places each task
        self.queued: dict[int, deque[Task]] = {e: deque() for e in ids}  # unfinished tasks of each engine, in order
        self.sent = {e: 0 for e in ids}  # tasks ever placed on each engine
        self.outbox: dict[int, list[tuple[Task, bytes]]] = {e: [] for e in ids}  # placed, not sent yet
        self.inflight: dict[int, deque] = {e: deque() for e in ids}  # messages sent to each engine, not answered
        self.lock = threading.Lock()  # the outboxes are sent from the program's thread and from `_feed`
        self.answered = threading.Event()  # an engine answered a message: `_feed` may send the next one
        self.lost: set[int] = set()  # engines a message could not be sent to: no more tasks go there
        self.closed = False
        threading.Thread(target=self._feed, daemon=True, name="course-tasks-feed").start()
        self._next_upload = itertools.cycle(ids)

    def _put(self, engine: int, key: str, value: Any) -> None:
        worker.request(self.peers[engine], "put", key, value)

    def _get(self, engine: int, key: str) -> Any:
        return worker.request(self.peers[engine], "get", key)

    # --- calls -------------------------------------------------------------------------------
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

    def submit(self, tf: "TaskFunction", args: tuple, kwargs: dict) -> Any:
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

    def _load(self, engine: int) -> int:
        """Tasks queued on `engine` and not finished (an engine finishes its tasks in the order queued)."""
        queue = self.queued[engine]
        while queue and queue[0].done():
            queue.popleft()
        return len(queue)

    def _ahead(self, task: Task) -> int:
        """How many tasks must finish, `task` included, before its outputs exist (0: they do)."""
        if task.target is None or task.done():
            return 0
        finished = self.sent[task.target] - self._load(task.target)
        return max(task.slot - finished + 1, 0)

    def _place(self, call: "_Call", eligible: list[int] | None) -> int:
        """The engine for a call: where the object it updates is (locality), else the eligible engine where
        it can start first (its queue is done and its inputs exist, in tasks), and among those the one that
        holds most of its inputs (so a chain of tasks stays on one engine when moving gains nothing)."""
        engines = [e for e in eligible or self.ids if e not in self.lost] or eligible or self.ids
        if call.follow is not None and call.follow.target in engines:
            return call.follow.target
        inputs = max((self._ahead(t) for t in call.deps), default=0)
        start = {e: max(self._load(e), inputs) for e in engines}
        held = call.homes()
        return min(engines, key=lambda e: (start[e], -held[e]))

    def _dispatch(self, call: "_Call", futures: list[Future], eligible: list[int] | None) -> None:
        """Put the call in the outbox of the engine `_place` chooses (sent at once if that engine has little to
        do); on the engine it waits for inputs that are not made yet."""
        task, fname = call.task, call.fname
        spec = call.spec(self._function(call.tf), [f.datum.current_key() for f in futures])
        try:
            payload = cloudpickle.dumps(spec, protocol=5)
        except Exception as exc:  # noqa: BLE001 - serialisation of an inline argument
            culprit = next((n for n, r in call.inputs.items() if not _picklable(r)), None)
            where = f"argument {culprit!r}" if culprit else "an argument"
            raise UserError(f"task {fname}: {where} cannot be sent to an engine: {exc}") from None
        task.edges = _unique(call.edges)
        with self.lock:
            task.target = self._place(call, eligible)
            task.slot = self.sent[task.target]
            self.sent[task.target] += 1
            self.queued[task.target].append(task)
            self.outbox[task.target].append((task, payload))
            self._send(task.target)

    def _send(self, engine: int) -> None:
        """Send the engine's outbox, BATCH tasks a message, while it has fewer than AHEAD messages to run (or a
        full batch waits). Called with `self.lock` held."""
        inflight, outbox = self.inflight[engine], self.outbox[engine]
        while inflight and inflight[0].ready():
            inflight.popleft()
        while outbox and (len(inflight) < AHEAD or len(outbox) >= BATCH):
            batch, outbox[:] = outbox[:BATCH], outbox[BATCH:]
            try:
                ar = self.views[engine].apply_async(worker.execute_batch, [payload for _, payload in batch])
            except Exception as exc:  # noqa: BLE001 - the engine or the cluster is gone: its tasks fail
                self.lost.add(engine)
                for task, _ in batch:
                    task.error = exc
                    task.sent.set()
                continue
            ar.add_done_callback(lambda _: self.answered.set())
            for index, (task, _) in enumerate(batch):
                task.ar, task.index = ar, index
                task.sent.set()
            inflight.append(ar)

    def _feed(self) -> None:
        """In the background: when an engine answers a message, send it what waits in its outbox."""
        while not self.closed:
            self.answered.wait(timeout=0.5)
            self.answered.clear()
            with self.lock:
                for engine in self.ids:
                    self._send(engine)

    def _record(self, task: Task) -> None:
        """Add a dispatched task to the graph and to the TaskGroups open now."""
        self.tasks.append(task)
        for group in self.open_groups:
            self.groups[group].append(task)

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

    def _function(self, tf: "TaskFunction") -> str:
        if tf.payload is None:
            target = getattr(tf.function, "func", tf.function)  # @binary/@mpi: a partial of course.tasks.external
            module = sys.modules.get(getattr(target, "__module__", None) or "")
            source = getattr(module, "__file__", None) or ""
            if (
                module is not None
                and module.__name__ not in ("__main__", "builtins")
                and not module.__name__.startswith("course.")
                and "-packages" not in source
            ):
                # the learner's own module may not be importable on the engines: send its functions by value
                cloudpickle.register_pickle_by_value(module)
            try:
                tf.payload = cloudpickle.dumps(tf.function, protocol=5)
            except Exception as exc:  # noqa: BLE001
                raise UserError(f"task {tf.name}: the function cannot be sent to the engines: {exc}") from None
            tf.digest = hashlib.sha1(tf.payload).hexdigest()
        if tf.digest not in self.functions:
            for engine in self.ids:
                self._put(engine, "fn:" + tf.digest, tf.payload)
            self.functions.add(tf.digest)
        return tf.digest

    def _eligible(self, tf: "TaskFunction") -> list[int] | None:
        """Engines that satisfy the task's @constraint (None: any engine)."""
        need = tf.constraints
        if not need:
            return None
        cores, gpus, memory = need.get("cores", 1), need.get("gpus", 0), need.get("memory_gb", 0)
        ok = [
            e
            for e, info in self.engines.items()
            if info["slots"] >= cores and info["gpu_slots"] >= gpus and (not memory or info["memory_gb"] >= memory)
        ]
        if not ok:
            have = ", ".join(
                f"engine {e}: {i['slots']} cores, {i['gpu_slots']} GPUs, {i['memory_gb']:.1f} GB"
                for e, i in sorted(self.engines.items())
            )
            raise UserError(
                f"task {tf.name} needs {cores} cores, {gpus} GPUs"
                f"{f', {memory} GB' if memory else ''} but no engine has that ({have}); "
                "start fewer engines per node (or one per GPU), or relax the @constraint"
            )
        return ok if len(ok) < len(self.engines) else None

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


def _arguments(tf: "TaskFunction", args: tuple, kwargs: dict) -> list[tuple[str, str, Any]]:
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


def _path(value: Any, pname: str, fname: str, label: str) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise UserError(f"task {fname}: parameter {pname!r} is {label} and needs a path, not a {type(value).__name__}")
    return os.fspath(value)


def program_paths() -> list[str]:
    """Where the program's own modules are: the main script's folder (or the notebook's) and the working folder."""
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    paths = [os.path.dirname(os.path.abspath(main))] if main and not _in_kernel() else []
    return list(dict.fromkeys(paths + [os.getcwd()]))


def _holds_data(value: Any, runtime: Runtime) -> bool:
    if isinstance(value, Future) or (not _immutable(value) and id(value) in runtime.objects):
        return True
    if isinstance(value, (list, tuple)):
        return any(_holds_data(v, runtime) for v in value)
    if isinstance(value, dict):
        return any(_holds_data(v, runtime) for v in value.values())
    return False


def _picklable(value: Any) -> bool:
    try:
        cloudpickle.dumps(value)
        return True
    except Exception:  # noqa: BLE001
        return False


def _unique(edges: list) -> list:
    seen, out = set(), []
    for task, label in edges:
        if (task.number, label) not in seen:
            seen.add((task.number, label))
            out.append((task, label))
    return out


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
