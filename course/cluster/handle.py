"""The handle on one running cluster: its client and view, what its engines are, status, restart and stop.

Made by `start` (lifecycle.py) or re-attached from the cluster's files; what differs between local, MPI and Slurm
engines is asked of its kind (kinds.py), never compared by name here.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import asdict

import psutil

from course import processes, slurm
from course.cluster import cells, records, warden
from course.cluster.client import client_class
from course.cluster.engine_setup import engine_configure, engine_facts, plan_devices
from course.cluster.errors import (
    PORT_TAKEN,
    ClusterDown,
    ClusterError,
    ControllerBroken,
    ended,
    error_line,
    explain_engine_error,
    output_now,
    tail,
)
from course.cluster.kinds import KIND, LocalEngines, Settings, exit_code
from course.cluster.status import EngineState, Status

OUTPUT_LAG = 5.0  # seconds for a process's last words to reach its launcher's output, at most
FIRST_CALL_TIMEOUT = 60.0  # seconds for registered engines to answer their first call (see ControllerBroken)
ALIVE_FOR = 0.25  # s: how long a controller seen running is taken to be running (Cluster._down_reason)
# %px shows an engine's output only while it waits: for a cell whose results are back within `--progress-after`
# seconds (ipyparallel's default: 2), until that many seconds after it sent the cell; for a longer one, 1 s after
# them. The output travels through the controller's IOPub relay, apart from the results, and on a busy node it can
# come later: that engine's lines are then never shown. A quick cell waits for its output up to this many seconds
# (no wait at all when it is there); a progress bar appears after them.
PX_PROGRESS_AFTER = 10.0


class Cluster:
    """A running cluster: `.client` (ipyparallel.Client), `.view` (DirectView of all engines), `.status()`, `.stop()`."""

    def __init__(self, ipp_cluster, settings: Settings, persist: bool):
        self._ipp = ipp_cluster
        self.settings = settings
        self.persist = persist
        self.client = None
        self.view = None
        self.engines: list[dict] = []  # facts reported by each engine at start: id, host, pid, device
        self.stopped = False
        self._owner = records.me()  # the process that started it (replaced by the record's when re-attached)
        self._controller: list | None = None
        self._seen_alive = -1.0  # time.monotonic() when the controller was last seen running
        self.torch_group = None  # the engines' torch.distributed group, where course.torch_group.form made one

    # ---- properties
    @property
    def cluster_id(self) -> str:
        return self._ipp.cluster_id

    @property
    def kind(self) -> str:
        return self.settings.kind

    @property
    def _engines(self) -> LocalEngines:
        """What this cluster's kind of engines does differently (KIND)."""
        return KIND[self.settings.kind]

    @property
    def n(self) -> int:
        return self.settings.n

    @property
    def ids(self) -> list[int]:
        """Engine ids this cluster started (some may have died: see `status()`)."""
        return [e["id"] for e in self.engines]

    def __repr__(self) -> str:
        state = "stopped" if self.stopped else f"{len(self.engines)} engines"
        return f"<course.cluster.Cluster {self.cluster_id} {self.kind}, {state}>"

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- start-up
    def _launch(self) -> None:
        """Start the controller (if needed) and the engines with ipyparallel's launchers, then wait for them."""
        if not self._ipp.cluster_file:  # loaded from its file, which it never wrote (from_files.load); now it starts
            self._ipp.cluster_file = str(records.cluster_file(self.cluster_id))  # processes: ipyparallel records them
        if self._ipp.controller is None:
            self._ipp.start_controller_sync()
            self._save_record("starting")
        before = set(self.client.ids) if self.client is not None else set()
        self._start_engines()
        self._save_record("starting")  # the engines' launcher (mpiexec, Slurm job) is on record from now on
        if self.client is None:
            # ipyparallel's Client (our subclass words errors about dead engines and a cluster gone), from its files
            self.client = client_class()(
                profile_dir=self._ipp.profile_dir, cluster_id=self.cluster_id, cluster=self._ipp
            )
            self.client.course_cluster = self  # what a check that had to restart stuck engines asks (engine_calls)
            self._watch()
        self._wait_for_engines(before)
        self._configure(exclude=before)

    def _start_engines(self) -> None:
        from ipyparallel.error import EngineError

        s = self.settings
        engine_kwargs = {
            "environment": self._engines.environment(s),
            **self._engines.engine_options(self.cluster_id, s),
        }
        try:
            self._ipp.start_engines_sync(s.n, **engine_kwargs)
        except RuntimeError:  # ipyparallel: "Controller stopped ... while waiting for" its connection files
            if processes.running(getattr(self._ipp.controller, "process", None)):
                raise
            raise self._controller_failed() from None
        except EngineError as exc:  # the engine launcher stopped at once
            raise ClusterDown(f"engines did not start: {self._launch_problem() or explain_engine_error(exc)}") from None
        except subprocess.CalledProcessError as exc:  # sbatch refused the job
            output = exc.output.decode(errors="replace") if isinstance(exc.output, bytes) else str(exc.output or "")
            raise ClusterError(f"Slurm refused the engine job: {tail(output) if output.strip() else exc}") from None

    def _watch(self) -> None:
        """Make calls on this cluster fail at once with ClusterDown once its controller is gone."""
        controller = self._ipp.controller
        process = getattr(controller, "process", None)
        try:
            self._controller = [process.pid, process.create_time()]
        except (AttributeError, psutil.Error):
            return  # no local controller process to watch (started on another host)
        self.client.course_watch(self._down_reason)

    def _down_reason(self) -> str:
        """Why this cluster can no longer run work (its controller is gone), or '' while it can. Asked before
        every message: a controller seen running is looked at again after ALIVE_FOR s, not every time (psutil
        reads 3 files under /proc, ~1 ms on a busy machine; calls in flight are failed by the watcher anyway)."""
        if self.stopped or time.monotonic() - self._seen_alive < ALIVE_FOR:
            return ""
        if records.alive(self._controller):
            self._seen_alive = time.monotonic()
            return ""
        record = records.read_record(self.cluster_id)
        how = (
            "died" if record and record.get("state") != "stopping" else "was stopped from outside (course cluster stop)"
        )
        return (
            f"cluster {self.cluster_id} {how}: its controller (process {self._controller[0]}) is gone, so no work "
            f"can run on it; start a new one with course.cluster.start() "
            f"(in a terminal: python -m course cluster start --id {self.cluster_id})"
        )

    def _engine_set(self):
        """ipyparallel's (first) engine set launcher of this cluster."""
        return next(iter(self._ipp.engines.values()), None)

    def _launch_problem(self) -> str:
        """Why engines cannot come any more (a process or job ended), or '' while they still may."""
        controller = self._ipp.controller
        if controller is not None and not processes.running(getattr(controller, "process", None)):
            return f"the controller {ended(exit_code(controller))}: {tail(output_now(controller))}"
        engine_set = self._engine_set()
        if engine_set is None:
            return "no engines were started"
        return self._engines.launch_problem(engine_set)

    def _controller_part_lost(self) -> str:
        """Which process of the controller's own (a scheduler, its heart monitor) lost its port or ended while the
        controller runs, or ''. ipyparallel picks the controller's free ports in one process and binds them in
        these: with clusters starting side by side one can lose its port to another. Without its heart monitor no
        engine ever completes its registration (each gives up after 75 s of missed heartbeats); without its task
        scheduler the cluster starts but no load-balanced task is ever run."""
        controller = self._ipp.controller
        process = getattr(controller, "process", None)
        if process is None:
            return ""  # a controller on another host: nothing here to look at
        output = output_now(controller)
        try:
            ended_parts = [p.pid for p in process.children() if p.status() == psutil.STATUS_ZOMBIE]
        except psutil.Error:
            ended_parts = []
        if PORT_TAKEN not in output and not ended_parts:
            return ""
        written = time.monotonic() + OUTPUT_LAG  # a part's last words reach the controller's output after it ends
        while not error_line(output) and time.monotonic() < written:
            time.sleep(0.1)
            output = output_now(controller)
        why = error_line(output) or "no error in its output"
        return f"cluster {self.cluster_id}: a process of its controller ended as it started: {why}"

    def _controller_failed(self) -> ClusterError:
        """The error for a controller that ended as it started: ControllerBroken (a new one is tried, with new
        ports) when a port it picked as free was taken by a process starting beside it, else ClusterDown."""
        controller = self._ipp.controller
        output = output_now(controller)
        why = error_line(output) or tail(output)
        if PORT_TAKEN in output:
            return ControllerBroken(f"cluster {self.cluster_id}: its controller lost a port as it started: {why}")
        return ClusterDown(f"the controller {ended(exit_code(controller))} as it started: {why}")

    def _wait_for_engines(self, before: set[int]) -> None:
        from ipyparallel.error import EngineError

        n, timeout = self.settings.n, self.settings.timeout
        deadline = time.monotonic() + timeout
        while True:
            have = len(set(self.client.ids) - before)
            broken = self._controller_part_lost()  # also once the engines are in: a scheduler can have lost its port
            if broken:
                raise ControllerBroken(broken)  # a new controller (new ports) is tried: lifecycle._launch_new
            if have >= n:
                break
            problem = self._launch_problem()
            if problem:
                raise ClusterDown(f"engines did not start: {problem}")
            if time.monotonic() > deadline:
                why, job = "", self._engines.job(self._engine_set())
                if job:
                    state, reason = slurm.job_state(job)
                    why = f"; Slurm job {job} is {state} ({reason})" if state else ""
                raise ClusterDown(
                    f"only {have} of {n} engines connected within {timeout:.0f} s{why}; pass timeout=... to wait longer"
                )
            try:
                self.client.wait_for_engines(n + len(before), timeout=0.5, interactive=False)
            except TimeoutError:
                pass
            except EngineError as exc:  # ipyparallel saw the engine launcher stop
                raise ClusterDown(
                    f"engines did not start: {self._launch_problem() or explain_engine_error(exc)}"
                ) from None

    def _configure(self, exclude: set[int] = frozenset()) -> None:
        """Ask every engine where it runs, pin its device, record it for status() and stop_all()."""
        ids = sorted(set(self.client.ids) - set(exclude))
        view = self.client.direct_view(ids)
        try:
            # A controller whose scheduler lost a race for its port (several clusters starting at once: ipyparallel
            # picks free ports, then binds them in other processes) registers engines but never delivers work.
            facts = view.apply_async(engine_facts, self._engines.launcher_ranks).get(
                timeout=min(self.settings.timeout, FIRST_CALL_TIMEOUT)
            )
        except TimeoutError:
            raise ControllerBroken(
                f"cluster {self.cluster_id}: the engines registered but did not answer a first call "
                f"within {FIRST_CALL_TIMEOUT:.0f} s (the controller cannot reach them)"
            ) from None
        engines = [dict(f, id=i) for i, f in zip(ids, facts)]
        plan = plan_devices(engines, self.settings.threads)
        for engine in engines:
            engine["device"] = self.client[engine["id"]].apply_sync(engine_configure, plan[engine["id"]])
        self.engines = engines
        self.view = self.client.direct_view(ids)
        self.view.block = True
        self._activate()
        self._save_record("running")

    def _join(self) -> None:
        """Put this process on record as a user of the cluster (so `stop --all` spares it) and enable %px."""

        def add_me(record: dict) -> None:
            record["users"] = [u for u in record.get("users", []) if records.alive(u)] + [records.me()]

        record = records.update_record(self.cluster_id, edit=add_me)
        if not warden.watching(record):  # a record from before wardens, or its warden was killed
            warden.start(self.cluster_id)
        self._activate()

    def _activate(self) -> None:
        try:
            from IPython import get_ipython
        except ImportError:
            return
        shell = get_ipython()
        if shell is not None:
            self.view.activate()  # %px, %%px, %autopx run on these engines
            shell.run_line_magic("pxconfig", f"--progress-after {PX_PROGRESS_AFTER}")
            cells.watch(shell, self.client)  # which cell sent which requests: checks judge an answer by its cell

    # ---- records (for re-attach, status and stop --all)
    def _save_record(self, state: str) -> None:
        """Record what this cluster is ("starting" or "running") and every process it has, for other processes."""
        controller = self._ipp.controller
        engine_set = self._engine_set()
        records.update_record(
            self.cluster_id,
            cluster_id=self.cluster_id,
            state=state,
            settings=asdict(self.settings),
            persist=self.persist,
            engines=self.engines,
            controller_pid=getattr(controller, "pid", -1),
            launcher_pid=self._engines.launcher_pid(engine_set) if engine_set is not None else -1,
            slurm_job=self._engines.job(engine_set) if engine_set is not None else "",
            started_by_pid=self._owner[0],
            owner=self._owner,
            host=socket.gethostname(),
        )

    # ---- inspection
    def status(self) -> Status:
        """Controller and engines: which are running, which died (checked by process id where on this host)."""
        live_ids = set(self.client.ids) if self.client is not None and not self.stopped else set()
        here = socket.gethostname()
        states = []
        for e in self.engines:
            alive = e["id"] in live_ids
            if alive and e["host"] == here:
                alive = processes.still(e["pid"], e.get("create_time"))
            states.append(EngineState(e["id"], e["host"], e["pid"], alive, e.get("device", "")))
        controller = self._ipp.controller
        controller_alive = (
            not self.stopped
            and controller is not None
            and (not self._engines.controller_here or processes.running(getattr(controller, "process", None)))
        )
        job = self._engines.job(self._engine_set()) if self._engine_set() is not None else ""
        state = ""
        if job:
            found, reason = slurm.job_state(job)
            state = f"{found} ({reason})" if found and reason and reason != "None" else (found or "")
        return Status(self.cluster_id, self.kind, controller_alive, states, self.n, job, state, self.stopped)

    # ---- restart and stop
    def restart(self) -> "Cluster":
        """Replace all engines with new ones (same kind and number); use `cluster.view` again afterwards."""
        if self.stopped:
            raise ClusterError(f"cluster {self.cluster_id} was stopped; start a new one with course.cluster.start()")
        pids = self._local_pids(include_controller=False)
        self.torch_group = None  # it ends with its engines
        self._ipp.stop_engines_sync()
        processes.wait_gone(pids)
        self._engines.wait_ended(records.recorded_job(self.cluster_id))
        self._launch()
        return self

    def _local_pids(self, include_controller: bool = True) -> list[psutil.Process]:
        here = socket.gethostname()
        procs = []
        for e in self.engines:
            if e["host"] == here and processes.still(e["pid"], e.get("create_time")):
                procs.append(psutil.Process(e["pid"]))
        launchers = self._engines.launchers(self._engine_set()) if self._engine_set() is not None else []
        if include_controller and self._ipp.controller is not None:
            launchers.append(self._ipp.controller)
        for launcher in launchers:
            process = getattr(launcher, "process", None)
            if process is not None and processes.running(process):
                procs.append(process)
        for process in list(procs):  # the controller's schedulers and mpiexec's ranks are child processes
            try:
                procs += [child for child in process.children(recursive=True) if child not in procs]
            except psutil.Error:
                pass
        return procs

    def stop(self) -> None:
        """Stop engines and controller and wait until their processes (and Slurm job) are gone."""
        if self.stopped:
            return
        procs = self._local_pids()
        parents = processes.parents(procs)
        job = records.recorded_job(self.cluster_id)
        guarded_by = (records.read_record(self.cluster_id) or {}).get("warden")
        if records.record_file(self.cluster_id).exists():
            records.update_record(self.cluster_id, state="stopping")
        if self.torch_group is not None:
            self._leave_torch_group()
        if self.client is not None:
            self.client.close()
        # One at a time: ipyparallel's stop_cluster gives up on the controller when stopping the engines fails (a
        # Slurm job that sbatch refused has no id to scancel), and the controller would be left running.
        for part, stop in (("engines", self._ipp.stop_engines_sync), ("controller", self._ipp.stop_controller_sync)):
            try:
                stop()
            except Exception as exc:  # a launcher that already ended: the pid checks below still clean up
                print(f"course.cluster: while stopping the {part} of {self.cluster_id}: {exc}", file=sys.stderr)
        # An engine's nanny (it relays signals, such as a %%px interrupt) outlives its engine by 3 s, trying to tell
        # the controller, stopped above, that the engine exited. Nothing is left to tell: end it now.
        processes.kill([p for p in procs if _is_nanny(p)], timeout=0)
        # A controller stopped while it starts its schedulers dies of the SIGTERM at once and leaves those it had
        # started running, orphaned: nothing will stop them, so end them now rather than after _wait_gone's 30 s.
        processes.kill(processes.orphaned(procs, parents), timeout=0)
        processes.wait_gone(procs)
        # A controller still starting when its cluster is stopped (sbatch refused the engine job within
        # milliseconds) can miss the launcher's stop: end whatever ipyparallel launched for this cluster.
        processes.kill(_launched_for(self.cluster_id, str(self._ipp.profile_dir)))
        self._engines.wait_ended(job)
        records.cluster_file(self.cluster_id).unlink(missing_ok=True)  # by name: a loaded handle has none of its own
        records.remove_record(self.cluster_id)
        warden.end(guarded_by)
        self.stopped = True

    def _leave_torch_group(self) -> None:
        """Destroy the engines' process group before they stop, so no rank waits on peers that are gone."""
        from course import torch_group

        try:
            torch_group.destroy(self, timeout=10)
        except Exception as exc:  # engines already gone or stuck: stopping them ends the group too
            print(
                f"course.cluster: the torch process group of {self.cluster_id} was not destroyed: {exc}",
                file=sys.stderr,
            )
        self.torch_group = None

    def end_at_exit(self) -> None:
        """The program that started this cluster ends with its work done: where the kind allows (local engines), end
        the engines and their nannies at once and stop the cluster (about 0.5 s instead of ~5 s of waiting for
        them); other kinds are left to their own stop. What the task runtime asks at exit, instead of killing them."""
        if not self.stopped and self._engines.end_now(self.engines):
            self.stop()


def _launched_for(cluster_id: str, profile: str) -> list[psutil.Process]:
    """This user's running processes that ipyparallel launched for one cluster (its launchers set IPP_CLUSTER_ID
    and IPP_PROFILE_DIR in their environment)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if process.pid == os.getpid() or "ipyparallel" not in " ".join(process.info["cmdline"] or []):
                continue
            environ = process.environ()
        except psutil.Error:  # ended meanwhile, or another user's
            continue
        if environ.get("IPP_CLUSTER_ID") == cluster_id and environ.get("IPP_PROFILE_DIR") == profile:
            found.append(process)
    return found


def _is_nanny(process: psutil.Process) -> bool:
    """True for ipyparallel's engine nanny (the process beside each engine that relays signals to it)."""
    try:
        return "ipyparallel.engine.nanny" in " ".join(process.cmdline())
    except psutil.Error:
        return False
