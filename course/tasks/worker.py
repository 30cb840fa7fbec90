"""Engine side of the task runtime: the object store, the peer data server and the task executor.

Every engine keeps the values its tasks produced in `STORE` and serves them to its peers from a
small thread (a `multiprocessing.connection` listener with an auth key), so a task's inputs move
engine to engine, never through the notebook. The master queues each task on the engine it chose
(an ipyparallel DirectView), without waiting for the task's inputs: a task that needs a value not
made yet asks the engine that will make it and waits ("wait" below). The same thread holds the
locks that make COMMUTATIVE updates run one at a time.

Why this cannot deadlock: every engine runs its queue in order, and a task only waits for tasks
submitted before it. The earliest unfinished task has all its inputs and is first in its queue.
"""

from __future__ import annotations

import copy
import os
import pickle
import shutil
import socket
import struct
import threading
import time
import traceback
from multiprocessing.connection import Client, Listener
from typing import Any

import cloudpickle

from course import settings


class Store(dict):
    """The values this engine holds, by key; `wait_for` blocks until a key arrives (or is deleted)."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived = threading.Condition()
        self.dropped: list[str] = []  # prefixes deleted by the master: those keys will never arrive

    def __setitem__(self, key: str, value: Any) -> None:
        """Store a value and wake whoever waits for it."""
        with self.arrived:
            super().__setitem__(key, value)
            self.arrived.notify_all()

    def wait_for(self, key: str) -> Any:
        """The value of `key` once a task here has stored it; MISSING if it was deleted."""
        with self.arrived:
            while key not in self:
                if any(key.startswith(prefix) for prefix in self.dropped):
                    return MISSING
                self.arrived.wait()
            return self[key]

    def drop(self, prefix: str) -> None:
        """Keys starting with `prefix` will never arrive: wake their waiters (they get MISSING)."""
        with self.arrived:
            self.dropped.append(prefix)
            self.arrived.notify_all()


STORE = Store()
CANCELLED: set[str] = set()  # tasks the master cancelled (compss_cancel_group): they do not run
STATE: dict[str, Any] = {"engine": None, "peers": {}, "authkey": None, "address": None, "functions": {}}
_CONNECTIONS: dict[tuple, Any] = {}
_CONN_LOCK = threading.Lock()
MISSING = "__course_tasks_missing__"


class Failed:
    """Stored in place of a value that a failed task should have produced; carries the failure along."""

    def __init__(self, task: str, exc_type: str, message: str, remote_tb: str, exc_bytes: bytes | None):
        self.task, self.exc_type, self.message, self.remote_tb, self.exc_bytes = (
            task,
            exc_type,
            message,
            remote_tb,
            exc_bytes,
        )


class _Locks:
    """COMMUTATIVE groups: a lock per group and the key of the group's latest value."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.held: set[str] = set()
        self.latest: dict[str, tuple] = {}
        self.done: dict[str, int] = {}  # updates of each group finished so far

    def acquire(self, group: str, base: tuple) -> tuple:
        """Wait for the group's lock; return (key, engine, first) of its latest value (the base at first)."""
        with self.cond:
            while group in self.held:
                self.cond.wait()
            self.held.add(group)
        first = group not in self.latest  # (we hold the group: nobody else changes its entry)
        if first:  # base: ("d", key, engine) or ("g", an earlier group, home, its size): wait for that group
            self.latest[group] = (base[1], base[2]) if base[0] == "d" else self.resolve(base[1], base[3])
        return (*self.latest[group], first)

    def release(self, group: str, latest: tuple) -> None:
        with self.cond:
            self.latest[group] = latest
            self.done[group] = self.done.get(group, 0) + 1
            self.held.discard(group)
            self.cond.notify_all()

    def resolve(self, group: str, size: int) -> tuple | None:
        """(key, engine) of the group's value once all its `size` updates have finished."""
        with self.cond:
            while self.done.get(group, 0) < size:
                self.cond.wait()
            return self.latest.get(group)


LOCKS = _Locks()


class Channel:
    """A connection to or from a data server, once `multiprocessing.connection` has checked the auth key.

    A message is a pickle (protocol 5) whose large buffers, a NumPy array's data, travel out of band: sent
    straight from the array's memory and received straight into a new writable buffer. (Connection.recv_bytes
    reads a 2 MB block in chunks, allocating 2 MB for each, and in-band pickling copies it twice more: about
    10 ms a block instead of 2 on this course's machines.)"""

    HEAD = struct.Struct("!QI")  # the pickle's size, how many buffers follow it

    def __init__(self, conn: Any):
        self.conn = conn
        self.sock = socket.socket(fileno=os.dup(conn.fileno()))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small answers must not wait ~40 ms

    def send(self, message: Any) -> None:
        """Send one message: a header (sizes), the pickle, then each large buffer as it is in memory."""
        buffers: list = []
        data = cloudpickle.dumps(message, protocol=5, buffer_callback=buffers.append)
        raws = [b.raw() for b in buffers]
        sizes = struct.pack(f"!{len(raws)}Q", *(r.nbytes for r in raws))
        self.sock.sendall(self.HEAD.pack(len(data), len(raws)) + sizes + data)
        for raw in raws:
            self.sock.sendall(raw)

    def recv(self) -> Any:
        """Receive one message sent by `send`."""
        size, count = self.HEAD.unpack(self._exactly(self.HEAD.size))
        sizes = struct.unpack(f"!{count}Q", self._exactly(8 * count))
        data = self._exactly(size)
        return pickle.loads(data, buffers=[self._exactly(n) for n in sizes])

    def _exactly(self, n: int) -> bytearray:
        """The next `n` bytes from the socket, in a new writable buffer."""
        buffer = bytearray(n)
        view, got = memoryview(buffer), 0
        while got < n:
            chunk = self.sock.recv_into(view[got:])
            if not chunk:
                raise EOFError("the peer closed the connection")
            got += chunk
        return buffer

    def close(self) -> None:
        """Close the socket and the connection it was taken from."""
        self.sock.close()
        self.conn.close()


def _serve_connection(conn) -> None:
    conn = Channel(conn)
    try:
        while True:
            request = conn.recv()
            op = request[0]
            if op == "get":
                conn.send(STORE.get(request[1], MISSING))
            elif op == "wait":  # a value a task queued here will make: answer once it has
                conn.send(STORE.wait_for(request[1]))
            elif op == "put":
                STORE[request[1]] = request[2]
                conn.send(True)
            elif op == "drop":
                conn.send(drop(request[1], request[2]))
            elif op == "lock":
                conn.send(LOCKS.acquire(request[1], request[2]))
            elif op == "unlock":
                LOCKS.release(request[1], request[2])
                conn.send(True)
            elif op == "resolve":
                conn.send(LOCKS.resolve(request[1], request[2]))
            elif op == "cancel":
                CANCELLED.update(request[1])
                conn.send(True)
            elif op == "ping":
                conn.send("pong")
            elif op == "error":  # what ended another connection of this server (see `request`)
                conn.send(STATE.get("server_error"))
            else:  # no answer would come: end the connection, and say why to whoever asks
                raise ValueError(f"unknown request {op!r}")
    except (EOFError, OSError):
        pass
    except BaseException:  # noqa: BLE001 - kept for the "error" request: the client's EOFError then says why
        STATE["server_error"] = traceback.format_exc()
    finally:
        conn.close()


def _serve(listener) -> None:
    while True:
        try:
            conn = listener.accept()
        except Exception:  # a peer that failed authentication, or the listener closed
            if listener._listener is None:  # closed
                return
            continue
        threading.Thread(target=_serve_connection, args=(conn,), daemon=True).start()


def setup(engine: int, master_host: str, authkey: bytes, bind: str | None = None) -> dict:
    """Start (once) this engine's data server; returns where it listens and what the engine has."""
    if STATE["address"] is None or STATE["authkey"] != authkey:
        host = (
            bind
            or settings.get("COURSE_TASKS_BIND")
            or ("127.0.0.1" if socket.gethostname() == master_host else socket.gethostbyname(socket.gethostname()))
        )
        listener = Listener((host, 0), authkey=authkey)
        threading.Thread(target=_serve, args=(listener,), daemon=True, name="course-tasks-data").start()
        STATE["address"] = listener.address
        use_key(authkey)  # a new task graph: the peers' servers are new too
    STATE["engine"] = engine
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    from course.devices import visible_gpus

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = len(visible_gpus())
    try:
        import psutil

        memory = psutil.virtual_memory().total
    except ImportError:
        memory = 0
    return {
        "engine": engine,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "address": STATE["address"],
        "cores": cores,
        "gpus": gpus,
        "gpus_pinned": visible is not None,
        "memory": memory,
        "env_cores": settings.get("COURSE_ENGINE_CORES") or None,
    }


def configure(peers: dict, threads: int, paths: list | tuple = ()) -> None:
    """Learn the peers' data-server addresses, give BLAS/OpenMP `threads` threads per task, and import
    modules from `paths` (the program's own folder, as runcompss puts it on the workers' path)."""
    STATE["peers"] = dict(peers)
    import sys

    for path in reversed(paths):
        if path not in sys.path:
            sys.path.insert(0, path)
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():  # the cluster's thread plan wins (course.cluster)
        threads = int(os.environ["OMP_NUM_THREADS"])
    if STATE.get("threads") != threads:
        from course.devices import limit_threads

        limit_threads(threads)
        STATE["threads"] = threads


def use_key(authkey: bytes) -> None:
    """Talk to data servers with `authkey` from now on (a new task graph), closing every connection kept for
    the last one: its server may be gone and a new server listen on the same port (a full run failed on that,
    a request sent down a connection to a server that had stopped)."""
    STATE["authkey"] = authkey
    with _CONN_LOCK:
        kept = list(_CONNECTIONS.values())
        _CONNECTIONS.clear()
    for conn in kept:
        conn.close()


def _connection_key(address) -> tuple:
    address = tuple(address) if isinstance(address, (list, tuple)) else address
    return (address, STATE["authkey"], threading.get_ident())


def _connection(address) -> Any:
    key = _connection_key(address)
    with _CONN_LOCK:
        conn = _CONNECTIONS.get(key)
    if conn is None:
        conn = Channel(Client(tuple(address) if isinstance(address, list) else address, authkey=STATE["authkey"]))
        with _CONN_LOCK:
            _CONNECTIONS[key] = conn
    return conn


def request(address, *message) -> Any:
    """Send one request to a data server (this engine's or a peer's) and return the answer."""
    conn = _connection(address)
    try:
        conn.send(message)
        return conn.recv()
    except (OSError, EOFError) as exc:  # forget the connection, so a next request connects anew, and say why
        with _CONN_LOCK:
            _CONNECTIONS.pop(_connection_key(address), None)
        conn.close()
        exc.add_note(f"(a request {message[0]!r} to the data server at {address}: {_server_said(address)})")
        raise


def _server_said(address) -> str:
    """Why a data server may have closed a connection: what it recorded, asked on a new connection."""
    try:
        probe = Channel(Client(tuple(address) if isinstance(address, list) else address, authkey=STATE["authkey"]))
    except Exception as exc:  # noqa: BLE001 - a server that is gone, or started with another key
        return f"it does not answer ({type(exc).__name__}: {exc}): its engine may be gone"
    try:
        probe.send(("error",))
        said = probe.recv()
    except Exception as exc:  # noqa: BLE001
        return f"it does not answer ({type(exc).__name__}: {exc})"
    finally:
        probe.close()
    return f"it recorded: {said.strip().splitlines()[-1]}" if said else "it is up and recorded no error"


def _fetch(key: str, hint: int | None, keep: bool = True) -> Any:
    """The value of `key`: from this engine's store, else from engine `hint` (which makes it: wait for it)."""
    if key in STORE:
        return STORE[key]
    peers = STATE["peers"]
    if hint == STATE["engine"]:
        value = STORE.wait_for(key)  # an earlier task in this engine's queue made it (or its writer was cancelled)
        if not (isinstance(value, str) and value == MISSING):
            return value
    STATE["fetched"] = STATE.get("fetched", 0) + 1
    order = ([hint] if hint in peers and hint != STATE["engine"] else []) + [
        e for e in peers if e != hint and e != STATE["engine"]
    ]
    for engine in order:
        try:
            value = request(peers[engine], "wait" if engine == hint else "get", key)
        except (OSError, EOFError):  # that engine is gone: another may still hold a copy
            continue
        if not (isinstance(value, str) and value == MISSING):
            if keep and not isinstance(value, Failed):
                STORE[key] = value  # versions never change: keep the copy for this engine's next tasks
            return value
    raise LookupError(f"data {key} is on no engine (deleted, or its engine was lost)")


class _InputFailed(Exception):
    def __init__(self, failed: Failed):
        self.failed = failed


def _resolve(ref: Any, cache: dict, keep: bool = True) -> Any:
    """Turn an input description from the master into a value (fetching it from a peer if needed).

    keep=False for a value the task will update: a copy fetched from a peer is not kept as that version.
    """
    kind = ref[0]
    if kind == "v":  # inline value
        return ref[1]
    if kind == "d":  # stored datum: ("d", key, hint)
        if ref[1] not in cache:
            value = _fetch(ref[1], ref[2], keep)
            if isinstance(value, Failed):
                raise _InputFailed(value)
            cache[ref[1]] = value
        return cache[ref[1]]
    if kind == "g":  # the value of a COMMUTATIVE group once its updates are done: ("g", group, home, size)
        latest = request(STATE["peers"][ref[2]], "resolve", ref[1], ref[3])
        return _resolve(("d", latest[0], latest[1]), cache, keep)
    if kind == "f":  # a file version another task wrote: ("f", path, ("d", key, hint)); fails if the writer did
        _resolve(ref[2], cache)
        return ref[1]
    if kind in ("fw", "dw"):  # a new file (directory) version: (kind, path, version it starts from, writer's ref)
        if ref[3] is not None:
            _resolve(ref[3], cache)
        _new_version(ref)
        return ref[1]
    if kind == "l":  # collection: ("l", type, [refs])
        items = [_resolve(r, cache, keep) for r in ref[2]]
        return tuple(items) if ref[1] == "tuple" else items
    if kind == "m":  # dict collection: ("m", [(key, ref)])
        return {k: _resolve(r, cache, keep) for k, r in ref[1]}
    raise ValueError(f"unknown input kind {kind!r}")


def _new_version(ref: tuple) -> None:
    """Create the file of a new version: a copy of the version it updates (FILE_INOUT), or nothing (FILE_OUT)."""
    os.makedirs(os.path.dirname(ref[1]), exist_ok=True)
    if ref[0] == "dw":
        shutil.rmtree(ref[1], ignore_errors=True)
        if ref[2] is not None:
            shutil.copytree(ref[2], ref[1])
        else:
            os.makedirs(ref[1])
    elif ref[2] is not None:
        shutil.copyfile(ref[2], ref[1])
    elif os.path.exists(ref[1]):
        os.remove(ref[1])


def _function(digest: str):
    functions = STATE["functions"]
    if digest not in functions:
        functions[digest] = pickle.loads(STORE["fn:" + digest])
    return functions[digest]


def _store_outputs(spec: dict, args: dict, result: Any) -> None:
    nret = spec["nreturns"]
    keys = spec["returns"]
    if nret == 1:
        STORE[keys[0]] = result
    elif nret > 1:
        if not isinstance(result, (tuple, list)) or len(result) != nret:
            got = (
                f"{type(result).__name__} of length {len(result)}"
                if isinstance(result, (tuple, list))
                else type(result).__name__
            )
            raise TypeError(f"task {spec['name']} declares returns={nret} but returned {got}")
        for key, value in zip(keys, result):
            STORE[key] = value
    for name, key in spec["updates"].items():  # INOUT / OUT / COMMUTATIVE parameters
        STORE[key] = args[name]
    for name, keys_ in spec["collection_updates"].items():  # COLLECTION_INOUT elements
        _store_elements(keys_, args[name])


def _store_elements(keys: list, value: Any) -> None:
    """Store a collection's elements under their keys, level by level (None: a basic value, not updated)."""
    if isinstance(keys, tuple) and keys[0] == "m":  # a dict: ("m", [(dict key, element key)])
        for name, key in keys[1]:
            if isinstance(value, dict) and name in value:
                _store_elements([key], [value[name]])
        return
    if not isinstance(value, (list, tuple)):
        return
    for key, item in zip(keys, value):
        if isinstance(key, (list, tuple)):  # a nested list, or a dict ("m", pairs)
            _store_elements(key, item)
        elif key is not None:
            STORE[key] = item


def _flatten(keys: Any) -> list:
    if isinstance(keys, tuple) and keys[0] == "m":
        return _flatten([key for _, key in keys[1]])
    out = []
    for key in keys:
        out.extend(_flatten(key) if isinstance(key, (list, tuple)) else [key])
    return out


def _all_output_keys(spec: dict) -> list[str]:
    keys = list(spec["returns"]) + list(spec["updates"].values())
    for keys_ in spec["collection_updates"].values():
        keys.extend(k for k in _flatten(keys_) if k is not None)
    return keys


def _call(spec: dict, args: dict) -> tuple[list, dict]:
    positional, keywords = [], {}
    for kind, name in spec["call"]:
        if kind == "pos":
            positional.append(args[name])
        elif kind == "varpos":
            positional.extend(args[name])
        elif kind == "kw":
            keywords[name] = args[name]
        else:  # varkw
            keywords.update(args[name])
    return positional, keywords


def execute(spec: dict) -> dict:
    """Run one task: resolve its inputs, call the function, keep its outputs here; return timings."""
    t0 = time.time()
    meta = {"engine": STATE["engine"], "fetch": t0}
    STATE["fetched"] = 0
    groups = spec["groups"]  # COMMUTATIVE params: name -> (group, home engine)
    locked = []
    try:
        if spec["name"] in CANCELLED:  # compss_cancel_group: this task does not run, its outputs fail
            raise _InputFailed(Failed(spec["name"], "TaskCancelled", "cancelled by compss_cancel_group", "", None))
        cache: dict = {}
        args = {}
        written = set(spec["updates"]) | set(spec["collection_updates"])
        for name, ref in spec["inputs"].items():
            if name not in groups:
                args[name] = _resolve(ref, cache, keep=name not in written)
                if name in spec["copy"]:  # other tasks still read this version: update a copy of it
                    args[name] = copy.deepcopy(args[name])
        for name in sorted(groups):  # sorted: two COMMUTATIVE params never deadlock
            group, home = groups[name]
            base = spec["inputs"][name]
            latest = request(STATE["peers"][home], "lock", group, base)
            locked.append(name)
            args[name] = _resolve(("d", latest[0], latest[1]), cache, keep=False)
            if latest[2] and name in spec["copy"]:  # the first update of the run starts from a shared version
                args[name] = copy.deepcopy(args[name])
        function = _function(spec["digest"])
        meta["start"] = time.time()
        result = _run(function, spec, args, meta)
        meta["end"] = time.time()
        _store_outputs(spec, args, result)
        meta["ok"] = True
        meta["fetched"] = STATE["fetched"]
    except BaseException as exc:  # noqa: BLE001 - everything a task raises goes back to the master
        meta["end"] = time.time()
        if isinstance(exc, _InputFailed):  # an input's task failed: this one is cancelled, its outputs fail too
            failed = exc.failed
            meta["cancelled"] = True
        else:
            failed = meta["failure"] = _failure(spec["name"], exc, in_function="start" in meta)
            meta["compss_exception"] = type(exc).__name__ == "COMPSsException"  # for its TaskGroup
        meta.setdefault("start", meta["end"])
        meta["error"] = f"{failed.exc_type}: {failed.message}"
        meta["root"] = failed.task
        if spec["on_failure"] == "IGNORE" and not meta.get("cancelled") and _ignore(spec, args, meta):
            meta["ignored"], meta["ok"] = meta.pop("error"), True
            meta["remote_tb"] = failed.remote_tb
        else:
            for key in _all_output_keys(spec):
                STORE[key] = failed
            meta["ok"] = False
    finally:
        for name in sorted(groups):  # every update counts, so that the group's readers know when it is complete
            group, home = groups[name]
            if name in locked:
                request(STATE["peers"][home], "unlock", group, (spec["updates"][name], STATE["engine"]))
            else:  # it did not run (cancelled, or an input failed): the group's value stays as it was
                latest = request(STATE["peers"][home], "lock", group, spec["inputs"][name])
                request(STATE["peers"][home], "unlock", group, latest[:2])
    return meta


def execute_batch(payloads: list[bytes]) -> list[dict]:
    """Run the tasks of one message from the master, in order (each a pickled `execute` spec)."""
    return [execute(pickle.loads(payload)) for payload in payloads]


def _run(function, spec: dict, args: dict, meta: dict) -> Any:
    """Call the task function; under on_failure=RETRY a failed call runs once more from the same inputs."""
    retry = spec["on_failure"] == "RETRY"
    written = [
        n
        for n in (*spec["updates"], *spec["collection_updates"])
        if spec["inputs"].get(n, ("",))[0] not in ("fw", "dw")
    ]
    snapshot = _snapshot({n: args[n] for n in written if n in args}) if retry else None
    while True:
        positional, keywords = _call(spec, args)
        try:
            return function(*positional, **keywords)
        except Exception as exc:
            if not retry or snapshot is None or type(exc).__name__ == "COMPSsException":
                raise
            retry = False
            meta["retried"] = True
            args.update(pickle.loads(snapshot))  # the first attempt may have changed its INOUT arguments
            for ref in spec["inputs"].values():
                if ref[0] in ("fw", "dw"):
                    _new_version(ref)


def _snapshot(values: dict) -> bytes | None:
    try:
        return pickle.dumps(values, protocol=5)
    except Exception:  # noqa: BLE001 - cannot be copied: no second attempt
        return None


def _ignore(spec: dict, args: dict, meta: dict) -> bool:
    """on_failure=IGNORE: store the declared defaults (else None) as the task's outputs; False if impossible."""
    defaults = spec["defaults"]
    result = defaults.get("returns")
    if spec["nreturns"] > 1 and not (isinstance(result, (tuple, list)) and len(result) == spec["nreturns"]):
        result = (result,) * spec["nreturns"]
    for name, value in defaults.items():
        if name in args:
            args[name] = value
    try:
        _store_outputs(spec, args, result)
    except Exception:  # noqa: BLE001
        return False
    return True


def _failure(name: str, exc: BaseException, in_function: bool) -> Failed:
    """The failure of task `name`, with the traceback from the task function down (not the runtime's frames)."""
    try:
        exc_bytes = pickle.dumps(exc)
        pickle.loads(exc_bytes)
    except Exception:
        exc_bytes = None
    tb = exc.__traceback__
    if in_function:
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
    remote_tb = "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))
    return Failed(name, type(exc).__name__, str(exc), remote_tb, exc_bytes)


def drop(prefix: str = "", keys: list | None = None) -> int:
    """Forget stored values: all keys starting with `prefix`, or the given keys."""
    doomed = [k for k in STORE if k.startswith(prefix)] if prefix else list(keys or [])
    for key in doomed:
        STORE.pop(key, None)
    if prefix:
        STORE.drop(prefix)
    return len(doomed)
