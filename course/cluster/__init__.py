"""Engine clusters for the notebooks: local, MPI and Slurm engines behind one small API, on ipyparallel's launchers.

    cluster = course.cluster.start(2)                  # local engines (default), %px works afterwards
    cluster = course.cluster.start(4, engines="mpi")   # engine id = MPI rank; mpi4py/Horovod see one world
    cluster = course.cluster.start(8, engines="slurm", partition="gpu", gpus_per_node=4, tasks_per_node=4)
    cluster.view.apply_sync(f); cluster.status(); cluster.stop()

The controller is the master, the engines are the workers. Each engine is pinned to one GPU by its local
rank (with TensorFlow memory growth on); on a machine without GPUs each engine is limited to `threads`
intra-op threads (default 1) so that N engines do not oversubscribe N cores. A cluster has a stable id per
notebook (or COURSE_CLUSTER_ID), so a restarted notebook re-attaches to its running cluster instead of
starting a second one; `stop_all()` (`python -m course cluster stop --all`) ends every course cluster of
this user whose owner process has ended (a notebook that died), and spares those still in use unless forced.

Clusters live beside each other: looking at one (`inspect`, `cluster status`) never stops it, and its files
are removed only once every process it recorded (starter, users, controller, engines) has ended. A cluster
stopped from outside makes the next call on it fail at once with `ClusterDown`, never hang.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from course import UserError, devices, mpi, slurm
from course.processes import kill, kill_tree
from course.devices import thread_env, visible_gpus

PREFIX = "course-"  # every course cluster id (and Slurm job name ipengine-<id>) starts with this
FIRST_CALL_TIMEOUT = 60.0  # seconds for registered engines to answer their first call (see ControllerBroken)
SLURM_HINT = (
    "install Slurm's client commands (Debian/Ubuntu: apt-get install slurm-wlm munge; on a cluster: "
    "module load slurm), or use engines='local' or 'mpi'"
)


class ClusterError(UserError):
    """A cluster could not start, lost engines, or was asked for something the machine does not have."""


class EngineLost(ClusterError, IndexError):
    """Work was sent to an engine that is no longer running."""


class ControllerBroken(ClusterError):
    """The engines registered but the controller does not pass them work (see `Cluster._configure`)."""


class ClusterDown(ClusterError):
    """The cluster itself failed: engines that could not start, or a controller that died or was stopped from
    outside. Not the work's fault (the grader reports it as a grading-machinery error, not a learner's score)."""


# ------------------------------------------------------------------------------------ the kinds of engines
# One small class per system, as ipyparallel's cluster/launcher.py has one launcher class per system: what differs
# between engines as local processes, in one mpiexec, or in one Slurm job. KIND is the table that start(), the
# records and the command line choose from; the name is also the ipyparallel launcher's.


class LocalEngines:
    """Engines as processes on this machine, one per GPU or a few CPU threads each."""

    name = "local"
    default_timeout = 120.0  # seconds for all engines to connect
    controller_ip = "127.0.0.1"  # engines on this machine reach the controller on localhost
    controller_here = True  # the controller is a process of this host, which status() can check
    batch_options = False  # takes a batch system's options (partition, time limit, ...)

    def check_tools(self) -> None:
        """Raise ClusterError naming what to install when engines of this kind cannot start here."""

    def host_gpus(self) -> list[str]:
        """The GPUs of this machine the engines would use (one engine each)."""
        return visible_gpus()

    def check_request(self, n: int, slurm_options: dict) -> None:
        """Refuse `n` engines this kind cannot run, before anything starts."""
        gpus = self.host_gpus()
        if gpus and n > len(gpus):
            raise ClusterError(
                f"more engines than GPUs: asked for {n} engines, this machine has {len(gpus)} GPU(s) "
                f"({', '.join(gpus)}); start at most {len(gpus)} (one per GPU)"
            )

    def engine_options(self, cluster: "Cluster") -> dict[str, Any]:
        """Keyword arguments for ipyparallel's start_engines (the launcher's own settings)."""
        return {}

    def environment(self, settings: "_Settings") -> dict[str, str]:
        """The engines' environment: thread limits without GPUs (OpenMP and BLAS read them once, at start)."""
        return {} if self.host_gpus() else thread_env(settings.threads)

    def launch_problem(self, engine_set) -> str:
        """Why engines of this launcher cannot come any more, or '' while they still may."""
        for name, launcher in list(engine_set.launchers.items()):
            if not _process_alive(launcher.process):
                return f"engine process {name} exited: {_tail(launcher.get_output())}"
        return ""

    def launchers(self, engine_set) -> list:
        """The launchers whose processes run on this host (stopped with the cluster)."""
        return list(engine_set.launchers.values())

    def launcher_pid(self, engine_set) -> int:
        """The one process that started all engines (recorded for stop --all), or -1."""
        return -1

    def job(self, engine_set) -> str:
        """The batch job the engines run in, or ''."""
        return ""


class MpiEngines(LocalEngines):
    """Engines as the ranks of one mpiexec: engine id = MPI rank."""

    name = "mpi"

    def check_tools(self) -> None:
        mpi.mpiexec()  # UserError naming what to install
        try:
            import mpi4py  # noqa: F401
        except ImportError:
            raise ClusterError("mpi4py is not installed: pip install mpi4py (MPI engines need it)") from None

    def engine_options(self, cluster: "Cluster") -> dict[str, Any]:
        command = mpi.command(cluster.settings.n)  # [mpiexec, -n, N, *flags]: the course's MPI flags, in one place
        return dict(mpi_cmd=[command[0]], mpi_args=command[3:])

    def environment(self, settings: "_Settings") -> dict[str, str]:
        changed = {k: v for k, v in mpi.env().items() if os.environ.get(k) != v}
        return {**changed, **super().environment(settings)}

    def launch_problem(self, engine_set) -> str:
        return "" if _process_alive(engine_set.process) else f"mpiexec exited: {_tail(engine_set.get_output())}"

    def launchers(self, engine_set) -> list:
        return [engine_set]

    def launcher_pid(self, engine_set) -> int:
        return getattr(engine_set, "pid", -1)


class SlurmEngines(LocalEngines):
    """Engines as the tasks of one Slurm job, maybe on other nodes."""

    name = "slurm"
    default_timeout = 300.0  # the job may wait in the queue
    controller_ip = "*"  # all interfaces: engines on other nodes connect to this host's name (controller_location)
    controller_here = False
    batch_options = True

    def check_tools(self) -> None:
        missing = [tool for tool in ("sbatch", "squeue", "scancel") if shutil.which(tool) is None]
        if missing:
            raise ClusterError(f"Slurm not found ({', '.join(missing)} missing): {SLURM_HINT}")

    def host_gpus(self) -> list[str]:
        return []  # the job's nodes have their own

    def check_request(self, n: int, slurm_options: dict) -> None:
        per_node = slurm_options.get("tasks_per_node")
        nodes = -(-n // per_node) if per_node else 1
        try:
            slurm.check_fits(
                nodes,
                per_node or 1,
                gpus_per_node=slurm_options.get("gpus_per_node") or 0,
                partition=slurm_options.get("partition"),
                ntasks=n,
            )
        except UserError as refused:
            raise ClusterError(str(refused)) from None

    def engine_options(self, cluster: "Cluster") -> dict[str, Any]:
        s = cluster.settings
        script = slurm_script(cluster.cluster_id, s.n, srun_mpi=slurm.srun_mpi_plugin(), **s.slurm)
        # an absolute name keeps the script out of the notebook's folder (ipyparallel joins it to work_dir)
        return dict(
            batch_template=script,
            batch_file_name=str(profile_dir() / "log" / f"slurm-engines-{cluster.cluster_id}.sbatch"),
        )

    def environment(self, settings: "_Settings") -> dict[str, str]:
        return {} if settings.slurm.get("gpus_per_node") else thread_env(settings.threads)

    def launch_problem(self, engine_set) -> str:
        state, _ = slurm_job_state(engine_set.job_id)
        if state is None or state in slurm.ENDED:
            output = _tail(_read(engine_set.output_file))
            return f"Slurm job {engine_set.job_id} {'ended' if state is None else state}" + (
                f": {output}" if output else ""
            )
        return ""

    def launchers(self, engine_set) -> list:
        return [engine_set]

    def job(self, engine_set) -> str:
        return getattr(engine_set, "job_id", "") or ""


KIND = {kind.name: kind for kind in (LocalEngines(), MpiEngines(), SlurmEngines())}
KINDS = tuple(KIND)


_current: "Cluster | None" = None


# --------------------------------------------------------------------------------------------- pure logic


def local_ranks(engines: list[dict]) -> dict[int, int]:
    """Local rank of each engine id: the launcher's (MPI/Slurm) where known, else its place among its host's engines."""
    ranks: dict[int, int] = {}
    by_host: dict[str, list[dict]] = {}
    for engine in engines:
        by_host.setdefault(engine["host"], []).append(engine)
    for host_engines in by_host.values():
        for position, engine in enumerate(sorted(host_engines, key=lambda e: e["id"])):
            given = engine.get("local_rank")
            ranks[engine["id"]] = position if given is None else int(given)
    return ranks


def plan_devices(engines: list[dict], threads: int = 1) -> dict[int, dict[str, str]]:
    """The environment each engine needs, from what it reported: {"id", "host", "gpus": [...], "local_rank"}.

    With GPUs on its host, an engine sees exactly the GPU at its local rank and TensorFlow grows GPU memory
    as needed; without GPUs it uses `threads` intra-op threads. More engines on a host than it has GPUs is an error.
    """
    if threads < 1:
        raise ClusterError(f"threads must be at least 1, not {threads}")
    ranks = local_ranks(engines)
    per_host: dict[str, int] = {}
    for engine in engines:
        per_host[engine["host"]] = per_host.get(engine["host"], 0) + 1
    plan: dict[int, dict[str, str]] = {}
    for engine in engines:
        gpus, host, rank = list(engine.get("gpus") or []), engine["host"], ranks[engine["id"]]
        env = {"COURSE_LOCAL_RANK": str(rank)}
        if gpus:
            if per_host[host] > len(gpus) or rank >= len(gpus):
                raise ClusterError(
                    f"more engines than GPUs: {per_host[host]} engine(s) on {host}, which has {len(gpus)} GPU(s) "
                    f"({', '.join(gpus)}); start at most {len(gpus)} engine(s) per node (one per GPU)"
                )
            env.update(
                CUDA_VISIBLE_DEVICES=gpus[rank], TF_FORCE_GPU_ALLOW_GROWTH="true", COURSE_DEVICE=f"GPU {gpus[rank]}"
            )
        else:
            env.update(thread_env(threads), COURSE_DEVICE=f"CPU ({threads} thread{'s' if threads > 1 else ''})")
        plan[engine["id"]] = env
    return plan


# The options of a Slurm engine job, as `start` and `slurm_script` take them (and `cluster start` passes them on)
SLURM_OPTIONS = tuple(
    "partition time_limit account gpus_per_node tasks_per_node qos constraint exclusive sbatch".split()
)


def slurm_script(cluster_id: str, n: int, *, srun_mpi: str | None = None, **options: Any) -> str:
    """The batch template for ipyparallel's SlurmEngineSetLauncher ({program_and_args}, {output_file} are its own).

    options: those of SLURM_OPTIONS (see `start`); None leaves one out.
    srun_mpi: srun's --mpi plugin, so that mpi4py/Horovod in the engines see one MPI world (e.g. "pmix").
    """
    unknown = sorted(set(options) - set(SLURM_OPTIONS))
    if unknown:
        raise TypeError(f"slurm_script() got unexpected keyword arguments: {', '.join(unknown)}")
    renamed = ("time_limit", "exclusive", "sbatch")  # sbatch's --time, a flag, and extra #SBATCH lines
    header = slurm.Options(
        export_all=True,
        job_name=f"ipengine-{cluster_id}",
        ntasks=n,
        output="{output_file}",
        time=options.get("time_limit"),
        exclusive=bool(options.get("exclusive")),
        extra=list(options.get("sbatch") or []),
        **{name: value for name, value in options.items() if name not in renamed},
    )
    lines = ["#!/bin/sh", *slurm.sbatch_lines(header)]
    lines.append(f"srun{' --mpi=' + srun_mpi if srun_mpi else ''} {{program_and_args}}")
    return "\n".join(lines) + "\n"


def default_cluster_id() -> str:
    """COURSE_CLUSTER_ID, else one per notebook (Jupyter's JPY_SESSION_NAME), else 'course-default'."""
    name = os.environ.get("COURSE_CLUSTER_ID") or Path(os.environ.get("JPY_SESSION_NAME", "")).stem or "default"
    return normalise_id(name)


def normalise_id(name: str) -> str:
    """A cluster id safe in file and job names, starting with 'course-' (how stop --all recognises ours)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "default"
    return slug if slug.startswith(PREFIX) else PREFIX + slug


def profile_dir() -> Path:
    """ipyparallel profile directory of the course's clusters: $IPYTHONDIR/profile_course."""
    from IPython.paths import get_ipython_dir

    path = Path(get_ipython_dir()) / "profile_course"
    (path / "security").mkdir(parents=True, exist_ok=True)
    return path


def _record_file(cluster_id: str) -> Path:
    return profile_dir() / "security" / f"course-record-{cluster_id}.json"


def _me() -> list:
    """This process as a record holds it: [pid, create time] (a pid alone may be reused)."""
    return [os.getpid(), psutil.Process().create_time()]


def _read_record(cluster_id: str) -> dict | None:
    """The course's record of a cluster (written whole, atomically), or None if there is none."""
    try:
        return json.loads(_record_file(cluster_id).read_text())
    except (OSError, ValueError):
        return None


def _update_record(cluster_id: str, /, edit=None, **changes) -> dict:
    """Change a cluster's record under a lock (several processes may use one cluster) and write it atomically;
    `edit(record)`, if given, changes it in place under the same lock."""
    path = _record_file(cluster_id)
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = _read_record(cluster_id) or {}
        record.update(changes)
        if edit is not None:
            edit(record)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record, indent=1))
        tmp.replace(path)
    return record


def _alive(entry) -> bool:
    """Whether a recorded [pid, create time] (or a bare pid) is still that process."""
    if isinstance(entry, (list, tuple)):
        return bool(entry) and entry[0] > 0 and _pid_matches(int(entry[0]), entry[1])
    return bool(entry) and int(entry) > 0 and _pid_matches(int(entry), None)


def _holders(record: dict) -> list:
    """The processes that started or use a cluster, other than this one, that are still running."""
    me = os.getpid()
    if record.get("host", socket.gethostname()) != socket.gethostname():
        return []
    entries = [record.get("owner") or record.get("started_by_pid", -1), *record.get("users", [])]
    return [e for e in entries if _alive(e) and (e[0] if isinstance(e, (list, tuple)) else e) != me]


def _recorded_alive(cluster_id: str, record: dict | None) -> bool:
    """True while any process the cluster recorded (owner, users, controller, launcher, engines) runs."""
    if record and record.get("host", socket.gethostname()) != socket.gethostname():
        return True  # started on another host: nothing here can tell, so never clean it up from here
    entries: list = []
    if record:
        entries += [record.get("owner") or record.get("started_by_pid", -1), *record.get("users", [])]
        entries += [[e["pid"], e.get("create_time")] for e in record.get("engines", [])]
        entries += [record.get(k, -1) for k in ("controller_pid", "launcher_pid")]
    cluster_file = profile_dir() / "security" / f"cluster-{cluster_id}.json"
    try:
        data = json.loads(cluster_file.read_text())
        entries.append(data.get("controller", {}).get("state", {}).get("pid", -1))
        for engine_set in data.get("engines", {}).get("sets", {}).values():  # ipyparallel's launchers' state
            entries.append(engine_set.get("pid", -1))
            entries += [
                launcher.get("pid", -1)
                for launcher in engine_set.get("engines", {}).values()
                if isinstance(launcher, dict)
            ]
    except (OSError, ValueError, AttributeError):
        pass
    return any(_alive(e) for e in entries if e not in (None, -1))


# ------------------------------------------------------------------------------------- engine-side code


def _engine_facts() -> dict:
    """Runs on an engine: where it runs and what it may use."""
    import os
    import socket

    import psutil

    from course.cluster import visible_gpus

    env = os.environ
    local_rank = next(
        (
            int(env[v])
            for v in ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")
            if env.get(v, "").isdigit()
        ),
        None,
    )
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "create_time": psutil.Process().create_time(),
        "local_rank": local_rank,
        "gpus": visible_gpus(),
    }


def _engine_configure(env: dict) -> str:
    """Runs on an engine: apply its device plan before TensorFlow starts (and to TensorFlow if already imported)."""
    import os
    import sys

    from course import devices

    os.environ.update(env)
    if "tensorflow" in sys.modules and "TF_NUM_INTRAOP_THREADS" in env:
        devices.set_tensorflow_threads(int(env["TF_NUM_INTRAOP_THREADS"]), int(env["TF_NUM_INTEROP_THREADS"]))
    return env.get("COURSE_DEVICE", "")


def configure_tensorflow() -> str:
    """Call on an engine after importing TensorFlow: memory growth on its GPU; returns the device it uses."""
    devices.grow_gpu_memory()
    return os.environ.get("COURSE_DEVICE", "CPU")


# ----------------------------------------------------------------------------------------- the client


def _client_class():
    import ipyparallel as ipp
    from ipyparallel.client.view import DirectView
    from ipyparallel.error import CompositeError

    class View(DirectView):
        """ipyparallel's DirectView; a call that several engines answer with ClusterDown raises it once."""

        def _really_apply(self, *args, **kwargs):
            try:
                return super()._really_apply(*args, **kwargs)
            except CompositeError as exc:
                reasons = {str(e[1]) for e in exc.elist if e[0] == "ClusterDown"}
                if len(reasons) == 1 and all(e[0] == "ClusterDown" for e in exc.elist):
                    raise ClusterDown(reasons.pop()) from None
                raise

    class Client(ipp.Client):
        """ipyparallel's Client, with a clear error when work is sent to an engine that died, and calls that fail
        at once (ClusterDown) instead of waiting for ever once the cluster's controller is gone."""

        _course_down = None  # set by Cluster._watch: why the cluster can no longer run work, or ""

        def direct_view(self, targets="all", **kwargs):
            view = super().direct_view(targets, **kwargs)
            if type(view) is DirectView:
                view.__class__ = View
            return view

        def _send(self, *args, **kwargs):
            why = self._course_down() if self._course_down is not None and not self._closed else ""
            if why:
                raise ClusterDown(why)
            return super()._send(*args, **kwargs)

        def course_watch(self, down, interval: float = 1.0) -> None:
            """Check every `interval` s, while calls wait, that the cluster still runs; fail them if not."""
            import threading

            self._course_down = down

            def watch():
                while not self._closed:
                    time.sleep(interval)
                    if self.outstanding and not self._closed:
                        why = down()
                        if why:
                            self._io_loop.add_callback(self._course_fail, why)
                            time.sleep(interval)

            threading.Thread(target=watch, daemon=True, name="course-cluster-watch").start()

        def _course_fail(self, why: str) -> None:
            """Answer every waiting call with a ClusterDown error (runs in the client's IO thread), the way
            ipyparallel answers calls that were on an engine that died."""
            for msg_id in list(self.outstanding):
                content = {
                    "status": "error",
                    "ename": "ClusterDown",
                    "evalue": why,
                    "traceback": [f"ClusterDown: {why}"],
                    "engine_info": {},
                }
                msg = self.session.msg("apply_reply", content=content)
                msg["parent_header"]["msg_id"] = msg_id
                self._handle_apply_reply(msg)

        def _build_targets(self, targets):
            try:
                return super()._build_targets(targets)
            except (KeyError, IndexError) as exc:
                live = self.ids
                wanted = (
                    [targets]
                    if isinstance(targets, int)
                    else list(targets)
                    if isinstance(targets, (list, tuple, range))
                    else []
                )
                gone = [t for t in wanted if t not in live] or [exc.args[0] if exc.args else "?"]
                raise EngineLost(
                    f"engine(s) {', '.join(map(str, gone))} no longer running (killed or crashed); live engines: "
                    f"{live or 'none'}. See cluster.status(); restart the engines with cluster.restart()"
                ) from None

    return Client


@dataclass
class EngineState:
    """One engine as `status()` sees it."""

    id: int
    host: str
    pid: int
    alive: bool
    device: str = ""


@dataclass
class Status:
    """What `Cluster.status()` reports."""

    cluster_id: str
    kind: str
    controller_alive: bool
    engines: list[EngineState]
    expected: int
    slurm_job: str = ""
    slurm_state: str = ""
    stopped: bool = False
    state: str = ""  # "starting", "ended" or why it cannot be asked, as another process sees it (`inspect`)
    holders: str = ""  # processes that started or use it and are still running

    @property
    def dead(self) -> list[int]:
        return [e.id for e in self.engines if not e.alive]

    @property
    def alive(self) -> int:
        return sum(e.alive for e in self.engines)

    @property
    def ok(self) -> bool:
        return self.state == "starting" or (not self.state and self.controller_alive and self.alive == self.expected)

    def __str__(self) -> str:
        if self.stopped:
            return f"cluster {self.cluster_id} ({self.kind}): stopped"
        if self.state == "starting":
            return f"cluster {self.cluster_id} ({self.kind}): starting {self.expected} engine(s)" + (
                f" (process {self.holders})" if self.holders else ""
            )
        if self.state == "stopping":
            return f"cluster {self.cluster_id} ({self.kind}): being stopped"
        if self.state == "ended":
            return f"cluster {self.cluster_id} ({self.kind}): ended (none of its processes is running)"
        if self.state:
            return f"cluster {self.cluster_id} ({self.kind}): {self.state}"
        head = (
            f"cluster {self.cluster_id} ({self.kind}): controller {'running' if self.controller_alive else 'DOWN'}, "
            f"{self.alive} of {self.expected} engines running"
        )
        if self.slurm_job:
            head += f"; Slurm job {self.slurm_job} {self.slurm_state or 'gone'}"
        rows = [
            f"  engine {e.id:>3}  {'running' if e.alive else 'DEAD   '}  {e.host}:{e.pid}  {e.device}"
            for e in self.engines
        ]
        tail = (
            [f"  engine(s) {', '.join(map(str, self.dead))} died: restart with cluster.restart()"] if self.dead else []
        )
        if not self.controller_alive and self.holders:
            tail.append(
                f"  its controller is gone while process {self.holders} uses it; stop it with: "
                f"python -m course cluster stop --id {self.cluster_id}"
            )
        return "\n".join([head, *rows, *tail])

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self))


@dataclass
class _Settings:
    kind: str
    n: int
    threads: int = 1
    timeout: float = 120.0
    controller_ip: str = "127.0.0.1"
    slurm: dict = field(default_factory=dict)


class Cluster:
    """A running cluster: `.client` (ipyparallel.Client), `.view` (DirectView of all engines), `.status()`, `.stop()`."""

    def __init__(self, ipp_cluster, settings: _Settings, persist: bool):
        self._ipp = ipp_cluster
        self.settings = settings
        self.persist = persist
        self.client = None
        self.view = None
        self.engines: list[dict] = []  # facts reported by each engine at start: id, host, pid, device
        self.stopped = False
        self._owner = _me()  # the process that started it (replaced by the record's when re-attached)
        self._controller: list | None = None
        self._seen_alive = -1.0  # time.monotonic() when the controller was last seen running

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
        if self._ipp.controller is None:
            self._ipp.start_controller_sync()
            self._save_record("starting")
        before = set(self.client.ids) if self.client is not None else set()
        self._start_engines()
        self._save_record("starting")  # the engines' launcher (mpiexec, Slurm job) is on record from now on
        if self.client is None:
            # ipyparallel's Client (our subclass words errors about dead engines and a cluster gone), from its files
            self.client = _client_class()(
                profile_dir=self._ipp.profile_dir, cluster_id=self.cluster_id, cluster=self._ipp
            )
            self._watch()
        self._wait_for_engines(before)
        self._configure(exclude=before)

    def _start_engines(self) -> None:
        from ipyparallel.error import EngineError

        s = self.settings
        engine_kwargs = {"environment": self._engines.environment(s), **self._engines.engine_options(self)}
        try:
            self._ipp.start_engines_sync(s.n, **engine_kwargs)
        except EngineError as exc:  # the engine launcher stopped at once
            raise ClusterDown(f"engines did not start: {self._launch_problem() or explain_engine_error(exc)}") from None
        except subprocess.CalledProcessError as exc:  # sbatch refused the job
            output = exc.output.decode(errors="replace") if isinstance(exc.output, bytes) else str(exc.output or "")
            raise ClusterError(f"Slurm refused the engine job: {_tail(output) if output.strip() else exc}") from None

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
        if _alive(self._controller):
            self._seen_alive = time.monotonic()
            return ""
        record = _read_record(self.cluster_id)
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
        if controller is not None and not _process_alive(getattr(controller, "process", None)):
            return f"the controller exited: {_tail(controller.get_output())}"
        engine_set = self._engine_set()
        if engine_set is None:
            return "no engines were started"
        return self._engines.launch_problem(engine_set)

    def _wait_for_engines(self, before: set[int]) -> None:
        from ipyparallel.error import EngineError

        n, timeout = self.settings.n, self.settings.timeout
        deadline = time.monotonic() + timeout
        while True:
            have = len(set(self.client.ids) - before)
            if have >= n:
                break
            problem = self._launch_problem()
            if problem:
                raise ClusterDown(f"engines did not start: {problem}")
            if time.monotonic() > deadline:
                why, job = "", self._engines.job(self._engine_set())
                if job:
                    state, reason = slurm_job_state(job)
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
            facts = view.apply_async(_engine_facts).get(timeout=min(self.settings.timeout, FIRST_CALL_TIMEOUT))
        except TimeoutError:
            raise ControllerBroken(
                f"cluster {self.cluster_id}: the engines registered but did not answer a first call "
                f"within {FIRST_CALL_TIMEOUT:.0f} s (the controller cannot reach them)"
            ) from None
        engines = [dict(f, id=i) for i, f in zip(ids, facts)]
        plan = plan_devices(engines, self.settings.threads)
        for engine in engines:
            engine["device"] = self.client[engine["id"]].apply_sync(_engine_configure, plan[engine["id"]])
        self.engines = engines
        self.view = self.client.direct_view(ids)
        self.view.block = True
        self._activate()
        self._save_record("running")

    def _join(self) -> None:
        """Put this process on record as a user of the cluster (so `stop --all` spares it) and enable %px."""

        def add_me(record: dict) -> None:
            record["users"] = [u for u in record.get("users", []) if _alive(u)] + [_me()]

        _update_record(self.cluster_id, edit=add_me)
        self._activate()

    def _activate(self) -> None:
        try:
            from IPython import get_ipython
        except ImportError:
            return
        if get_ipython() is not None:
            self.view.activate()  # %px, %%px, %autopx run on these engines

    # ---- records (for re-attach, status and stop --all)
    def _save_record(self, state: str) -> None:
        """Record what this cluster is ("starting" or "running") and every process it has, for other processes."""
        controller = self._ipp.controller
        engine_set = self._engine_set()
        _update_record(
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
                alive = _pid_matches(e["pid"], e.get("create_time"))
            states.append(EngineState(e["id"], e["host"], e["pid"], alive, e.get("device", "")))
        controller = self._ipp.controller
        controller_alive = (
            not self.stopped
            and controller is not None
            and (not self._engines.controller_here or _process_alive(getattr(controller, "process", None)))
        )
        job = self._engines.job(self._engine_set()) if self._engine_set() is not None else ""
        state = ""
        if job:
            found, reason = slurm_job_state(job)
            state = f"{found} ({reason})" if found and reason and reason != "None" else (found or "")
        return Status(self.cluster_id, self.kind, controller_alive, states, self.n, job, state, self.stopped)

    # ---- restart and stop
    def restart(self) -> "Cluster":
        """Replace all engines with new ones (same kind and number); use `cluster.view` again afterwards."""
        if self.stopped:
            raise ClusterError(f"cluster {self.cluster_id} was stopped; start a new one with course.cluster.start()")
        pids = self._local_pids(include_controller=False)
        self._ipp.stop_engines_sync()
        _wait_gone(pids)
        self._wait_slurm_gone(self._record_slurm_job())
        self._launch()
        return self

    def _record_slurm_job(self) -> str:
        try:
            return json.loads(_record_file(self.cluster_id).read_text()).get("slurm_job", "")
        except (OSError, ValueError):
            return ""

    def _local_pids(self, include_controller: bool = True) -> list[psutil.Process]:
        here = socket.gethostname()
        procs = []
        for e in self.engines:
            if e["host"] == here and _pid_matches(e["pid"], e.get("create_time")):
                procs.append(psutil.Process(e["pid"]))
        launchers = self._engines.launchers(self._engine_set()) if self._engine_set() is not None else []
        if include_controller and self._ipp.controller is not None:
            launchers.append(self._ipp.controller)
        for launcher in launchers:
            process = getattr(launcher, "process", None)
            if process is not None and _process_alive(process):
                procs.append(process)
        for process in list(procs):  # the controller's schedulers and mpiexec's ranks are child processes
            try:
                procs += [child for child in process.children(recursive=True) if child not in procs]
            except psutil.Error:
                pass
        return procs

    def _wait_slurm_gone(self, job: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while job and time.monotonic() < deadline:
            state, _ = slurm_job_state(job)
            if state is None or state in slurm.ENDED:
                return
            time.sleep(0.3)

    def stop(self) -> None:
        """Stop engines and controller and wait until their processes (and Slurm job) are gone."""
        global _current
        if self.stopped:
            return
        procs = self._local_pids()
        parents = _parents(procs)
        job = self._record_slurm_job()
        if _record_file(self.cluster_id).exists():
            _update_record(self.cluster_id, state="stopping")
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
        kill([p for p in procs if _is_nanny(p)], timeout=0)
        # A controller stopped while it starts its schedulers dies of the SIGTERM at once and leaves those it had
        # started running, orphaned: nothing will stop them, so end them now rather than after _wait_gone's 30 s.
        kill(_orphaned(procs, parents), timeout=0)
        _wait_gone(procs)
        # A controller still starting when its cluster is stopped (sbatch refused the engine job within
        # milliseconds) can miss the launcher's stop: end whatever ipyparallel launched for this cluster.
        kill(_launched_for(self.cluster_id, str(self._ipp.profile_dir)))
        self._wait_slurm_gone(job)
        self._ipp.remove_cluster_file()
        _record_file(self.cluster_id).unlink(missing_ok=True)
        _record_file(self.cluster_id).with_suffix(".lock").unlink(missing_ok=True)
        self.stopped = True
        if _current is self:
            _current = None


# ------------------------------------------------------------------------------------------- helpers


def explain_engine_error(exc: Exception) -> str:
    """ipyparallel's EngineError in words, on one line."""
    text = " ".join(str(exc).split())
    codes = re.findall(r"'exit_code': (-?\d+)", text)
    if text.startswith("Engine set stopped") and codes:
        return f"the engine processes exited as they started (exit code {codes[-1]}); see the engines' log in {profile_dir() / 'log'}"
    return text[:300] or type(exc).__name__


def _process_alive(process) -> bool:
    if process is None:
        return False
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


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


def _parents(procs: list[psutil.Process]) -> dict[int, int | None]:
    """Each process's parent pid now (None if it ended), to tell later which lost their parent."""
    found = {}
    for process in procs:
        try:
            found[process.pid] = process.ppid()
        except psutil.Error:
            found[process.pid] = None
    return found


def _orphaned(procs: list[psutil.Process], parents: dict[int, int | None]) -> list[psutil.Process]:
    """Those of `procs` still running whose parent ended since `parents` was taken (they were re-parented)."""
    left = []
    for process in procs:
        try:
            if _process_alive(process) and parents.get(process.pid) not in (None, process.ppid()):
                left.append(process)
        except psutil.Error:
            pass
    return left


def _is_nanny(process: psutil.Process) -> bool:
    """True for ipyparallel's engine nanny (the process beside each engine that relays signals to it)."""
    try:
        return "ipyparallel.engine.nanny" in " ".join(process.cmdline())
    except psutil.Error:
        return False


def _pid_matches(pid: int, create_time: float | None) -> bool:
    """True when `pid` is still the process we recorded (not a reused number) and not a zombie."""
    try:
        process = psutil.Process(pid)
        if create_time is not None and abs(process.create_time() - create_time) > 1:
            return False
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_gone(procs: list[psutil.Process], timeout: float = 30) -> None:
    """Wait for processes to end; kill any left after `timeout` (and their children)."""
    procs = [p for p in procs if _process_alive(p)]
    if not procs:
        return
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for process in alive:
        kill_tree(process)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def _tail(text: str, lines: int = 3) -> str:
    """The last few non-empty lines of a log, on one line."""
    kept = [line.strip() for line in (text or "").splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "(no output)"


def slurm_job_state(job_id: str) -> tuple[str | None, str]:
    """(state, reason) of a Slurm job (course.slurm), or (None, '') once Slurm no longer knows it."""
    if not job_id or not shutil.which("scontrol"):
        return None, ""
    try:
        found = slurm.job(job_id)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return "UNKNOWN", "Slurm did not answer"
    return (found.state, found.reason) if found else (None, "")


def default_engines(kind: str = "local") -> int:
    """Engines to start when none are asked for: one per GPU on a GPU machine, else the cores (at least 2)."""
    gpus = KIND[kind].host_gpus()
    return len(gpus) if gpus else max(2, os.cpu_count() or 2)


def _check_n(n: int | None, kind: str = "local") -> int:
    if n is None:
        return default_engines(kind)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ClusterError(f"the number of engines must be a positive whole number, not {n!r}")
    return n


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def start(
    n: int | None = None,
    engines: str = "local",
    *,
    cluster_id: str | None = None,
    threads: int = 1,
    timeout: float | None = None,
    controller_ip: str | None = None,
    persist: bool | None = None,
    partition: str | None = None,
    time_limit: str | None = None,
    account: str | None = None,
    gpus_per_node: int | None = None,
    tasks_per_node: int | None = None,
    qos: str | None = None,
    constraint: str | None = None,
    exclusive: bool | None = None,
    sbatch: list[str] | None = None,
    quiet: bool = False,
) -> Cluster:
    """Start (or re-attach to) a cluster of `n` engines and return its handle.

    n: default one engine per GPU on a GPU machine, otherwise the cores (at least 2).

    engines: "local" (processes on this machine), "mpi" (one `mpiexec`: engine id = MPI rank) or "slurm"
    (one Slurm job; options partition, time_limit, account, gpus_per_node, tasks_per_node and a site's qos,
    constraint, exclusive and any other `#SBATCH` lines in sbatch; a request no node could run is refused).
    threads: intra-op threads per engine on machines without GPUs (default 1: N engines on N cores).
    controller_ip: where the controller listens; default 127.0.0.1 for local/MPI and all interfaces ("*",
    reached through this host's name) for Slurm, whose engines may run on other nodes.
    persist: keep running when this process exits (default: yes inside Jupyter, so a restarted notebook
    re-attaches; no in scripts). cluster_id: default one per notebook (see `default_cluster_id`).
    """
    global _current
    batch = (partition, time_limit, account, gpus_per_node, tasks_per_node, qos, constraint, exclusive or None, sbatch)
    settings = _checked_settings(n, engines, threads, timeout, controller_ip, dict(zip(SLURM_OPTIONS, batch)))
    cid = normalise_id(cluster_id) if cluster_id else default_cluster_id()
    persist = _in_kernel() if persist is None else bool(persist)
    existing = _running(cid, settings)
    if existing is not None:
        if not quiet:
            print(
                f"Re-attached to running cluster {cid}: {existing.status().alive} of {existing.n} "
                f"{existing.kind} engines."
            )
        _current = existing
        return existing

    cluster = _launch_new(cid, settings, persist)
    if not persist:
        atexit.register(cluster.stop)
    _current = cluster
    if not quiet:
        print(
            f"Started cluster {cid}: {settings.n} {settings.kind} engine(s), ids {cluster.ids}; "
            f"devices: {', '.join(sorted({e['device'] for e in cluster.engines}))}."
        )
    return cluster


def _checked_settings(
    n: int | None, engines: str, threads: int, timeout: float | None, controller_ip: str | None, batch: dict
) -> _Settings:
    """What `start` was asked for, checked (kind, engine count, threads, the batch options' kind and values) before
    anything starts: a wrong argument is one ClusterError line."""
    kind = str(engines).strip().lower()
    if kind not in KINDS:
        raise ClusterError(f"unknown engines {engines!r}; use one of: {', '.join(KINDS)}")
    n = _check_n(n, kind)
    if threads is None or isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ClusterError(f"threads must be a positive whole number, not {threads!r}")
    engines_kind = KIND[kind]
    if batch.get("sbatch"):
        batch["sbatch"] = [slurm.check_extra(line) for line in batch["sbatch"]]
    batch = {k: v for k, v in batch.items() if v is not None}
    if batch and not engines_kind.batch_options:
        raise ClusterError(f"{', '.join(batch)} only apply to engines='slurm'")
    engines_kind.check_tools()
    engines_kind.check_request(n, batch)
    gpus, tasks = batch.get("gpus_per_node"), batch.get("tasks_per_node")
    if gpus and tasks and tasks > gpus:
        raise ClusterError(
            f"more engines than GPUs: tasks_per_node={tasks} but gpus_per_node={gpus}; use one engine per GPU"
        )
    timeout = engines_kind.default_timeout if timeout is None else float(timeout)
    return _Settings(kind, n, threads, timeout, controller_ip or engines_kind.controller_ip, batch)


def _running(cid: str, settings: _Settings) -> "Cluster | None":
    """The running cluster `cid` (this process's own, or one to re-attach to), or None; refused if it runs another
    kind or number of engines than asked for."""
    if _current is not None and not _current.stopped and _current.cluster_id == cid:
        existing = _current
    else:
        existing = _attach(cid)
    if existing is None:
        return None
    if (existing.kind, existing.n) != (settings.kind, settings.n):
        raise ClusterError(
            f"cluster {cid} is already running with {existing.n} {existing.kind} engine(s); stop it "
            f"first (cluster.stop() or python -m course cluster stop --id {cid}) or pass another cluster_id"
        )
    if existing is not _current:
        existing._join()
    return existing


def _launch_new(cid: str, settings: _Settings, persist: bool, attempts: int = 2) -> "Cluster":
    """A new cluster with its engines up; a controller that came up broken is replaced (new ports), once."""
    for attempt in range(1, attempts + 1):
        cluster = Cluster(_new_ipp_cluster(cid, settings), settings, persist)
        try:
            cluster._save_record("starting")  # before any process starts: others see it starting, and who starts it
            cluster._launch()
            return cluster
        except BaseException as exc:
            cluster.stop()
            if not isinstance(exc, ControllerBroken) or attempt == attempts:
                raise
    raise ValueError(f"attempts must be at least 1, not {attempts}")


# The controller completes an engine's registration at its next heartbeat: beating every second instead of
# ipyparallel's 3 s makes a cluster ready in about 3 s instead of 7 (benchmarks/cluster_start.py). 30 missed beats
# in a row, as before 30 s, still mark an engine dead, so a busy machine is not taken for a dead engine sooner.
ALIVE_FOR = 0.25  # s: how long a controller seen running is taken to be running (Cluster._down_reason)
HEARTBEAT = ["--HeartMonitor.period=1000", "--HeartMonitor.max_heartmonitor_misses=30"]


def _new_ipp_cluster(cluster_id: str, settings: _Settings):
    import ipyparallel as ipp

    # engines on other nodes reach the controller at this host's name, or where COURSE_CONTROLLER_HOST says
    # (e.g. the bridge address of scripts/virtual-cluster.sh, where the host's name resolves to 127.0.0.1)
    host = os.environ.get("COURSE_CONTROLLER_HOST") or socket.gethostname()
    location = {"controller_location": host} if settings.controller_ip in ("*", "0.0.0.0") else {}
    return ipp.Cluster(
        engines=settings.kind,
        n=settings.n,
        cluster_id=cluster_id,
        profile_dir=str(profile_dir()),
        controller_ip=settings.controller_ip,
        shutdown_atexit=False,
        log_level=40,
        engine_timeout=int(settings.timeout),
        delay=0,  # start_engines already waits for the controller's connection info: no fixed pause needed
        controller_args=HEARTBEAT,
        **location,
    )


def _attach(cluster_id: str) -> Cluster | None:
    """The running cluster `cluster_id` from its files, or None if there is none (or only what is left of a
    cluster whose every process has ended, which is then cleaned up). Never stops a cluster in use: one that
    is starting, or has lost its controller while a process still holds it, is a ClusterError saying so."""
    record = _read_record(cluster_id)
    cluster_file = profile_dir() / "security" / f"cluster-{cluster_id}.json"
    if record is None and not cluster_file.exists():
        return None
    if not _recorded_alive(cluster_id, record):
        _stop_from_files(cluster_id)  # every process it had has ended: only its files are left
        return None
    holders = _holders(record or {})
    state = record.get("state", "running") if record else "starting"
    if state == "stopping":
        raise ClusterError(
            f"cluster {cluster_id} is being stopped; start it again when that has finished, or pass another cluster_id"
        )
    if state != "running":
        if holders or record is None:
            raise ClusterError(
                f"cluster {cluster_id} is still starting (process "
                f"{_pids(holders) or 'unknown'}); wait for it, or pass another cluster_id"
            )
        _stop_from_files(cluster_id)  # half-started by a process that has ended: no one can be using it
        return None
    cluster = _connect(cluster_id, record)
    if cluster is None:
        if holders:
            raise ClusterError(
                f"cluster {cluster_id} has lost its controller, and process {_pids(holders)} still "
                f"uses it; stop it with: python -m course cluster stop --id {cluster_id}"
            )
        _stop_from_files(cluster_id)  # no controller and no one using it: nothing to re-attach to
    return cluster


def _pids(entries: list) -> str:
    return ", ".join(str(e[0] if isinstance(e, (list, tuple)) else e) for e in entries)


def _connect(cluster_id: str, record: dict) -> Cluster | None:
    """A handle on a running cluster from its files (a Client connected to its controller), or None if its
    controller is not running. Connecting changes nothing in the cluster."""
    import ipyparallel as ipp

    cluster_file = profile_dir() / "security" / f"cluster-{cluster_id}.json"
    try:
        ipp_cluster = ipp.Cluster.from_file(str(cluster_file), log_level=50)
        cluster = Cluster(ipp_cluster, _Settings(**record["settings"]), record.get("persist", True))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    cluster.engines = record.get("engines", [])
    cluster._owner = record.get("owner") or [record.get("started_by_pid", -1), None]
    if ipp_cluster.controller is None or not _process_alive(getattr(ipp_cluster.controller, "process", None)):
        return None
    try:
        cluster.client = _client_class()(
            profile_dir=ipp_cluster.profile_dir, cluster_id=cluster_id, cluster=ipp_cluster, timeout=30
        )
    except Exception as exc:  # the controller runs but did not answer (a busy machine): leave it alone
        raise ClusterError(
            f"cluster {cluster_id}'s controller is running but did not answer within 30 s "
            f"({type(exc).__name__}); try again in a moment"
        ) from None
    cluster._watch()
    cluster.view = cluster.client.direct_view(cluster.ids)
    cluster.view.block = True
    return cluster


def inspect(cluster_id: str) -> Status:
    """The status of cluster `cluster_id` as another process sees it: read only, it never stops anything."""
    record = _read_record(cluster_id)
    settings = (record or {}).get("settings", {})
    kind, n = settings.get("kind", "?"), settings.get("n", 0)
    if not _recorded_alive(cluster_id, record):
        return Status(cluster_id, kind, False, [], n, state="ended")
    state = record.get("state", "running") if record else "starting"
    if state != "running":
        return Status(cluster_id, kind, False, [], n, state=state, holders=_pids(_holders(record or {})))
    try:
        cluster = _connect(cluster_id, record)
    except ClusterError as exc:
        return Status(cluster_id, kind, True, [], n, state=f"not answering: {exc}")
    if cluster is None:  # controller gone, something else still running: say so, touch nothing
        here = socket.gethostname()
        engines = [
            EngineState(
                e["id"],
                e["host"],
                e["pid"],
                e["host"] == here and _pid_matches(e["pid"], e.get("create_time")),
                e.get("device", ""),
            )
            for e in record.get("engines", [])
        ]
        return Status(cluster_id, kind, False, engines, n, holders=_pids(_holders(record)))
    try:
        return cluster.status()
    finally:
        cluster.client.close()


def attach(cluster_id: str | None = None) -> Cluster:
    """Re-attach to a running cluster (default: this notebook's), e.g. after a kernel restart."""
    global _current
    cid = normalise_id(cluster_id) if cluster_id else default_cluster_id()
    cluster = _attach(cid)
    if cluster is None:
        raise ClusterError(
            f"no running cluster {cid}; start one with course.cluster.start() "
            f"(running: {', '.join(running_ids()) or 'none'})"
        )
    cluster._join()
    _current = cluster
    return cluster


def current() -> Cluster | None:
    """The cluster this process started or re-attached, if not stopped."""
    return _current if _current is not None and not _current.stopped else None


def ensure(n: int | None = None) -> Cluster:
    """`current()`, or a new local cluster of `n` engines (saying so)."""
    cluster = current()
    if cluster is not None:
        return cluster
    print(f"No cluster running in this session: starting {_check_n(n)} local engines.")
    return start(n)


def running_ids() -> list[str]:
    """Ids of the course clusters this user has on record (running, or left by a process that died)."""
    security = profile_dir() / "security"
    ids = {p.name[len("course-record-") : -len(".json")] for p in security.glob("course-record-*.json")}
    ids |= {p.name[len("cluster-") : -len(".json")] for p in security.glob(f"cluster-{PREFIX}*.json")}
    return sorted(ids)


def stop(cluster_id: str | None = None) -> bool:
    """Stop cluster `cluster_id` (default: this process's, else this notebook's); False if none was running."""
    global _current
    if cluster_id is None and current() is not None:
        current().stop()
        return True
    cid = normalise_id(cluster_id) if cluster_id else default_cluster_id()
    if _current is not None and _current.cluster_id == cid and not _current.stopped:
        _current.stop()
        return True
    return _stop_from_files(cid)


def _stop_from_files(cluster_id: str) -> bool:
    """End everything on record for one cluster: ipyparallel's launchers, then recorded processes and Slurm job."""
    import ipyparallel as ipp

    security = profile_dir() / "security"
    cluster_file = security / f"cluster-{cluster_id}.json"
    record_file = _record_file(cluster_id)
    found = cluster_file.exists() or record_file.exists()
    if record_file.exists():
        _update_record(cluster_id, state="stopping")  # its users' calls then say it was stopped, not that it died
    pids: list[tuple[int, float | None]] = []
    jobs: set[str] = set()
    try:
        record = json.loads(record_file.read_text())
        if record.get("host", socket.gethostname()) == socket.gethostname():
            pids += [(e["pid"], e.get("create_time")) for e in record.get("engines", [])]
            pids += [(record[k], None) for k in ("controller_pid", "launcher_pid") if record.get(k, -1) > 0]
        if record.get("slurm_job"):
            jobs.add(str(record["slurm_job"]))
    except (OSError, ValueError, KeyError):
        pass
    procs = []
    for pid, created in pids:
        if _pid_matches(pid, created):
            try:
                process = psutil.Process(pid)
                procs += [process, *process.children(recursive=True)]
            except psutil.Error:
                pass
    if cluster_file.exists():
        try:
            ipp_cluster = ipp.Cluster.from_file(str(cluster_file), log_level=50)
            for engine_set in ipp_cluster.engines.values():
                if getattr(engine_set, "job_id", ""):
                    jobs.add(engine_set.job_id)
            ipp_cluster.stop_cluster_sync()
        except Exception:
            pass  # launchers whose processes are gone; the pid and job clean-up below covers the rest
    for process in procs:
        try:
            process.terminate()
        except psutil.Error:
            pass
    _wait_gone(procs, timeout=10)
    for job in jobs:
        _scancel(job)
    cluster_file.unlink(missing_ok=True)
    record_file.unlink(missing_ok=True)
    record_file.with_suffix(".lock").unlink(missing_ok=True)
    for leftover in [
        *security.glob(f"ipcontroller-{cluster_id}-*.json"),
        profile_dir() / "log" / f"engines{cluster_id}.json",
    ]:
        leftover.unlink(missing_ok=True)
    return found


def _scancel(job: str) -> None:
    """Cancel a Slurm engine job and wait until Slurm reports it ended."""
    if shutil.which("scancel"):
        try:
            slurm.cancel(job, wait=60)
        except (UserError, OSError, subprocess.TimeoutExpired):
            pass  # already gone, or Slurm does not answer: stop() goes on with what it can end


def _course_slurm_jobs() -> list[str]:
    """This user's Slurm jobs whose name marks them as course engines (ipengine-course-...)."""
    return slurm.my_jobs(name_prefix=f"ipengine-{PREFIX}")


def stop_all(force: bool = False) -> tuple[list[str], list[str]]:
    """End the course clusters of this user: engines, controllers, mpiexec and Slurm jobs. A cluster whose
    owner (or a process that re-attached to it) still runs is spared unless `force`. Returns (ended, spared),
    the spared ones with the processes that hold them."""
    global _current
    ended, spared, spared_jobs = [], [], set()
    if current() is not None:
        ended.append(current().cluster_id)
        current().stop()
    for cid in running_ids():
        record = _read_record(cid) or {}
        holders = _holders(record)
        if holders and not force:
            spared.append(f"{cid} (in use by process {_pids(holders)})")
            spared_jobs.add(str(record.get("slurm_job") or ""))
            continue
        if _stop_from_files(cid):
            ended.append(cid)
    for job in _course_slurm_jobs():
        if job not in spared_jobs:
            _scancel(job)
            ended.append(f"Slurm job {job}")
    _current = None
    return ended, spared
