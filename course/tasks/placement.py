"""Placement and sending, the part of the task runtime that talks to the engines: set them up, choose the engine
for each call (locality, then where it can start first), and send the engines their tasks in batches.

A mixin of `Runtime` (runtime.py), which holds the state these methods use.
"""

from __future__ import annotations

import hashlib
import itertools
import socket
import sys
import threading
from collections import defaultdict, deque
from typing import Any

import cloudpickle

from course import UserError
from course.tasks import worker
from course.tasks.graph import Future, Task, _Call
from course.tasks.definition import TaskDefinition


SETUP_TIMEOUT = 120.0
BATCH = 16  # at most this many tasks in one message to an engine
AHEAD = 2  # messages sent to an engine and not answered: while it has this many, new tasks wait in the outbox


class Placement:
    """Where each task runs and how it is sent (the engines' side of `Runtime`)."""

    def _setup(self, engines: list[int] | None, paths: list[str]) -> None:
        """Set the engines up for this graph (keys, peers, the program's module paths) and the per-engine queues."""
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
        self.feeder = threading.Thread(target=self._feed, daemon=True, name="course-tasks-feed")
        self.feeder.start()
        self._next_upload = itertools.cycle(ids)

    def _put(self, engine: int, key: str, value: Any) -> None:
        worker.request(self.peers[engine], "put", key, value)

    def _get(self, engine: int, key: str) -> Any:
        return worker.request(self.peers[engine], "get", key)

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
        it can start first (its queue is done and its inputs exist, in tasks), among those the one that holds
        most of its inputs (a chain stays on one engine when moving gains nothing), then the one given fewest
        tasks (short independent tasks share the engines even when each ends before the next is placed)."""
        engines = [e for e in eligible or self.ids if e not in self.lost] or eligible or self.ids
        if call.follow is not None and call.follow.target in engines:
            return call.follow.target
        inputs = max((self._ahead(t) for t in call.deps), default=0)
        start = {e: max(self._load(e), inputs) for e in engines}
        held = call.homes()
        return min(engines, key=lambda e: (start[e], -held[e], self.sent[e]))

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
        task.lost = lambda: self._lost(task)
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

    def _lost(self, task: Task) -> str:
        """Why `task` can never finish ('' while it can): no answer comes to a client that was closed (its cluster
        stopped in this process), and nothing sends a task left in an outbox once the feeding thread has ended."""
        if self.client._closed:
            return "its cluster was stopped before the task finished"
        if not task.sent.is_set() and not self.feeder.is_alive():
            return "the runtime stopped sending tasks (reset, or the program's end) before this one was sent"
        return ""

    def _function(self, tf: TaskDefinition) -> str:
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

    def _eligible(self, tf: TaskDefinition) -> list[int] | None:
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
