"""The one place that speaks Slurm: job states, `#SBATCH` lines, submit, follow and cancel, srun's MPI plugin,
and what a partition offers. course.cluster (engine jobs) and course.jobs (batch jobs) both use it.

    lines = slurm.sbatch_lines(slurm.Options(nodes=2, tasks_per_node=4, gpus_per_node=4, time="01:00:00"))
    slurm.check_fits(nodes=2, tasks_per_node=4, cpus_per_task=8)      # refused in one line if it cannot fit
"""

from __future__ import annotations

import functools
import getpass
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields

from course import UserError

# States a job is in once it has ended (scontrol's JobState, sacct's State), and what each means to a user.
ENDED = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)
EXPLAIN = {
    "COMPLETED": "finished with exit code 0",
    "FAILED": "the program ended with a non-zero exit code: read the .err file",
    "CANCELLED": "cancelled (scancel, or by an administrator)",
    "TIMEOUT": "killed by Slurm at its time limit (--time): ask for more time or do less work",
    "OUT_OF_MEMORY": "killed for using more memory than --mem",
    "NODE_FAIL": "a node it ran on failed",
    "PENDING": "waiting in the queue for resources",
    "RUNNING": "running",
}
# CPU cores per GPU rank when nothing else is said: enough for an input pipeline, and what many GPU nodes offer
# (e.g. 32-64 cores for 4-8 GPUs).
CPUS_PER_GPU = 4
_OPTION = re.compile(r"^--?[A-Za-z][A-Za-z0-9-]*(=\S.*)?$|^-[A-Za-z] \S+$")


@dataclass
class Options:
    """What an `#SBATCH` header asks for, in the order sbatch_lines writes it; None (or False) leaves an option out."""

    job_name: str | None = None
    output: str | None = None
    error: str | None = None
    chdir: str | None = None
    nodes: int | None = None
    ntasks: int | None = None
    tasks_per_node: int | None = None
    cpus_per_task: int | None = None
    gpus_per_node: int | None = None
    mem: str | None = None
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    signal: str | None = None  # e.g. B:USR1@300, a warning to the batch shell 300 s before the time limit
    array: str | None = None  # e.g. 0-3, one task per index
    exclusive: bool = False
    export_all: bool = False
    extra: list[str] = field(default_factory=list)


_FLAGS = ("exclusive", "export_all", "extra")  # not written as --name=value
_SBATCH_NAMES = {"tasks_per_node": "ntasks-per-node", "gpus_per_node": "gres"}  # others: the field, - for _


# sbatch's time limits (man sbatch, --time): minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
_TIME_LIMIT = re.compile(r"^(?:(\d+)-(\d+)(?::(\d+)(?::(\d+))?)?|(\d+)(?::(\d+)(?::(\d+))?)?)$")
TIME_FORMS = "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"


def time_limit_seconds(limit: str) -> int | None:
    """Seconds in a Slurm time limit, read as sbatch reads --time (TIME_FORMS); None if it is not one."""
    match = _TIME_LIMIT.match(limit.strip()) if isinstance(limit, str) else None
    if not match:
        return None
    d, dh, dm, ds, a, b, c = (int(g) if g else None for g in match.groups())
    if d is not None:
        return ((d * 24 + dh) * 60 + (dm or 0)) * 60 + (ds or 0)
    if c is not None:  # HH:MM:SS
        return (a * 60 + b) * 60 + c
    if b is not None:  # MM:SS
        return a * 60 + b
    return a * 60  # minutes


def sbatch_lines(options: Options) -> list[str]:
    """The `#SBATCH` lines for `options`, in the order of its fields (the order a reader expects); site lines
    (`extra`) come last."""
    o = options
    values = {f.name: getattr(o, f.name) for f in dataclass_fields(o) if f.name not in _FLAGS}
    values["gpus_per_node"] = f"gpu:{o.gpus_per_node}" if o.gpus_per_node else None
    lines = ["#SBATCH --export=ALL"] if o.export_all else []
    for name, value in values.items():
        if value is not None:
            lines.append(f"#SBATCH --{_SBATCH_NAMES.get(name, name.replace('_', '-'))}={value}")
    if o.exclusive:
        lines.append("#SBATCH --exclusive")
    lines += [f"#SBATCH {check_extra(line)}" for line in o.extra]
    return lines


def check_extra(option: str) -> str:
    """An extra `#SBATCH` option as given (e.g. '--reservation=workshop'), or a UserError saying the form."""
    text = str(option).strip().removeprefix("#SBATCH").strip()
    if not _OPTION.match(text) or "\n" in text:
        raise UserError(
            f"--sbatch {option!r} is not an sbatch option: give it as sbatch takes it, e.g. "
            f"--sbatch=--reservation=workshop or --sbatch='--mail-type=END'"
        )
    return text


def tool(name: str) -> str:
    """Path of a Slurm command, or a UserError saying this machine has no Slurm client."""
    path = shutil.which(name)
    if path is None:
        raise UserError(
            f"{name} not found: this machine has no Slurm client (use --print to see the job script, "
            f"and submit it on a cluster's login node with sbatch)"
        )
    return path


def run(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    """A Slurm command's finished process (text output); the command must exist (see `tool`)."""
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


# scontrol ping's bound: a slurmctld answers in milliseconds, but a host that drops packets holds scontrol for
# MessageTimeout (10 s) and a missing slurm.conf for 60 s; every Slurm command after it would wait as long again.
PING_SECONDS = 3.0
PING_KEPT = 30.0  # seconds an answer stands for, so that one `stop --all` pings once, not once per job
PINGED: dict[str, tuple[float, str | None]] = {}  # SLURM_CONF -> (when, what ping said)


def controller_down() -> str | None:
    """What `scontrol ping` says when no Slurm controller answers here, else None (one is up, or ping cannot
    tell). Ping knows at once, where sinfo and squeue retry for about 10 s before they fail; its answer is kept
    for PING_KEPT s."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return None
    conf = os.environ.get("SLURM_CONF", "")
    when, said = PINGED.get(conf, (-PING_KEPT, None))
    if time.monotonic() - when >= PING_KEPT:
        said = _ping(scontrol)
        PINGED[conf] = (time.monotonic(), said)
    return said


def _ping(scontrol: str) -> str | None:
    try:
        done = run([scontrol, "ping"], timeout=PING_SECONDS)
    except subprocess.TimeoutExpired:
        return f"scontrol ping got no answer within {PING_SECONDS:g} s"
    except OSError:
        return None
    if done.returncode == 0 or re.search(r"\bUP\b", done.stdout):  # a backup controller may answer alone
        return None
    said = [line.strip() for line in done.stdout.splitlines() if "Slurmctld" in line]  # not its banner of stars
    return "; ".join(said) or (done.stderr.strip().splitlines() or [f"scontrol ping: exit code {done.returncode}"])[-1]


def available() -> bool:
    """True when a Slurm controller answers here (`sinfo` works)."""
    sinfo = shutil.which("sinfo")
    if sinfo is None or controller_down():
        return False
    try:
        done = run([sinfo, "-h", "-o", "%P"], timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and bool(done.stdout.strip())


@dataclass
class Partition:
    """What one partition offers: its name, its nodes and the smallest node's CPUs and GPUs."""

    name: str
    nodes: int
    cpus_per_node: int
    gpus_per_node: int = 0


# One GRES entry naming GPUs: gpu, gpu:N, gpu:TYPE or gpu:TYPE:N, with sinfo's socket note, e.g. (S:0-1), after it
_GPU_GRES = re.compile(r"(?:^|,)gpu(?::([^:,(]+))?(?::(\d+))?(?=\(|,|$)")


def gres_gpus(gres: str) -> int:
    """GPUs per node in a GRES value, as sbatch's --gres or sinfo's GRES column gives it: 'gpu' or 'gpu:a100' 1,
    'gpu:4' or 'gpu:a100:4(S:0-1)' 4; 0 where it names no GPU ('(null)', 'mps:100')."""
    total = 0
    for kind, count in _GPU_GRES.findall(gres):
        total += int(count or (kind if kind.isdigit() else 1))  # gpu:4 names a count, gpu:a100 a type
    return total


def partitions() -> list[Partition]:
    """The partitions Slurm answers with here, the default first ([] when Slurm does not answer)."""
    if not available():
        return []
    done = run([tool("sinfo"), "-h", "-o", "%P|%D|%c|%G"], timeout=30)
    found: dict[str, Partition] = {}
    default = None
    for line in done.stdout.splitlines():
        try:
            name, nodes, cpus, gres = line.strip().split("|")
            part = Partition(name.rstrip("*"), int(nodes), int(cpus.rstrip("+")), gres_gpus(gres))
        except ValueError:
            continue
        if name.endswith("*"):
            default = part.name
        known = found.get(part.name)
        if known is None:  # sinfo prints a line per node configuration: add nodes, keep the smallest node
            found[part.name] = part
        else:
            found[part.name] = Partition(
                part.name,
                known.nodes + part.nodes,
                min(known.cpus_per_node, part.cpus_per_node),
                min(known.gpus_per_node, part.gpus_per_node),
            )
    ordered = sorted(found.values(), key=lambda p: p.name != default)
    return ordered


def check_fits(
    nodes: int,
    tasks_per_node: int,
    cpus_per_task: int = 1,
    gpus_per_node: int = 0,
    partition: str | None = None,
    ntasks: int | None = None,
) -> None:
    """Refuse, in one line and before anything is submitted, a request no node of the partition could run.

    ntasks: tasks in all, where Slurm may spread them over nodes as it likes (checked against the partition's cores).

    Where Slurm does not answer here (a laptop), nothing is checked: the script may be meant for another machine.
    """
    known = partitions()
    if not known:
        return
    part = next((p for p in known if p.name == partition), None) if partition else known[0]
    if part is None:
        raise UserError(f"no partition {partition!r} here: Slurm offers {', '.join(p.name for p in known)}")
    if nodes > part.nodes:
        raise UserError(
            f"--nodes {nodes} is more than partition {part.name} has ({part.nodes} node(s)): "
            f"ask for at most {part.nodes}"
        )
    cores = tasks_per_node * cpus_per_task
    if cores > part.cpus_per_node:
        raise UserError(
            f"{tasks_per_node} task(s) per node x {cpus_per_task} CPU(s) per task = {cores} CPUs, "
            f"but a node of partition {part.name} has {part.cpus_per_node}: ask for fewer tasks per node "
            f"or CPUs per task"
        )
    if ntasks is not None and ntasks * cpus_per_task > part.nodes * part.cpus_per_node:
        raise UserError(
            f"{ntasks} task(s) x {cpus_per_task} CPU(s) is more than partition {part.name} has "
            f"({part.nodes} node(s) x {part.cpus_per_node} CPUs): ask for at most "
            f"{part.nodes * part.cpus_per_node // cpus_per_task} task(s)"
        )
    if gpus_per_node > part.gpus_per_node:
        raise UserError(
            f"--gpus-per-node {gpus_per_node} is more than a node of partition {part.name} has "
            f"({part.gpus_per_node} GPU(s))"
        )


def submit(script_file: str) -> int:
    """`sbatch --parsable SCRIPT`; returns the job id, or a UserError with sbatch's own reason."""
    done = run([tool("sbatch"), "--parsable", str(script_file)])
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        raise UserError(f"sbatch refused the job: {why[-1] if why else 'no reason given'} (script: {script_file})")
    return int(done.stdout.strip().split(";")[0])


@dataclass
class Job:
    """A job as Slurm reports it: state, why it waits, exit code, times and output files."""

    job_id: int
    state: str
    reason: str = ""
    exit_code: str = ""
    elapsed: str = ""
    time_limit: str = ""
    stdout: str = ""
    stderr: str = ""
    tasks: list["Job"] = field(default_factory=list)  # an array job's tasks, by index (empty for other jobs)
    array_task: str = ""  # an array task's index (or the indices still pending, e.g. 2-3); "" for other jobs

    @property
    def ended(self) -> bool:
        return self.state in ENDED


def _array(job_id: int, tasks: list[Job]) -> Job:
    """One job standing for an array's tasks: still going while any task is, COMPLETED only if every task
    completed, else the state of the first task that did not; the longest elapsed time."""
    going = [t for t in tasks if not t.ended]
    failed = [t for t in tasks if t.ended and t.state != "COMPLETED"]
    first = (going or failed or tasks)[0]
    return Job(
        job_id,
        first.state,
        first.reason,
        first.exit_code,
        max((t.elapsed for t in tasks), key=lambda e: (len(e), e)),
        first.time_limit,
        tasks[0].stdout,
        tasks[0].stderr,
        tasks,
    )


def array_task_state(job: Job, index: int) -> str:
    """The state of one task of an array job, as scontrol last reported it ("UNKNOWN" once Slurm forgot it)."""
    for task in job.tasks or [job]:
        first, _, last = task.array_task.split("%")[0].partition("-")
        if first.isdigit() and int(first) <= index <= int(last or first):
            return task.state
    return "UNKNOWN"


def job(job_id: int | str) -> Job | None:
    """The job from `scontrol show job` (Slurm keeps ended jobs for MinJobAge), else `sacct`; None if unknown."""
    jid = int(job_id)
    done = run([tool("scontrol"), "show", "job", "-o", str(jid)], timeout=30)
    found = []
    if done.returncode == 0:  # one line per job, or per task of an array
        for line in done.stdout.strip().splitlines():
            fields = dict(re.findall(r"(\w+(?::\w+)?)=(\S*)", line))
            found.append(
                Job(
                    jid,
                    fields.get("JobState", "UNKNOWN"),
                    fields.get("Reason", ""),
                    fields.get("ExitCode", ""),
                    fields.get("RunTime", ""),
                    fields.get("TimeLimit", ""),
                    fields.get("StdOut", ""),
                    fields.get("StdErr", ""),
                    array_task=fields.get("ArrayTaskId", ""),
                )
            )
    sacct = shutil.which("sacct")
    if not found and sacct:
        acct = run([sacct, "-n", "-X", "-P", "-j", str(jid), "-o", "State,ExitCode,Elapsed,Timelimit"], timeout=30)
        for line in acct.stdout.strip().splitlines() if acct.returncode == 0 else []:
            state, code, elapsed, limit = (line.split("|") + ["", "", "", ""])[:4]
            found.append(Job(jid, state.split()[0] if state else "UNKNOWN", "", code, elapsed, limit))
    if len(found) > 1:
        return _array(jid, found)
    return found[0] if found else None


def job_state(job_id: int | str) -> tuple[str | None, str]:
    """(state, reason) of a job, or (None, "") once Slurm no longer knows it (or there is no Slurm here); a Slurm
    that does not answer is ("UNKNOWN", why), never an exception: callers are following or stopping a job."""
    if not job_id or not shutil.which("scontrol"):
        return None, ""
    down = controller_down()
    if down:
        return "UNKNOWN", down
    try:
        found = job(job_id)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return "UNKNOWN", "Slurm did not answer"
    return (found.state, found.reason) if found else (None, "")


def cancel_quietly(job_id: int | str) -> None:
    """Cancel a job and wait until Slurm reports it ended; a job already gone, or no Slurm answering, is no error
    (whoever stops it goes on with what it can end)."""
    if shutil.which("scancel") and not controller_down():
        try:
            cancel(job_id, wait=60)
        except (UserError, OSError, subprocess.TimeoutExpired):
            pass


def seconds_left(job_id: int | str) -> float | None:
    """Seconds until a running job's EndTime (its start + --time; Slurm kills it at its next check after that),
    or None where Slurm does not say (no Slurm, unknown job, no end time)."""
    import datetime

    try:
        done = run([tool("scontrol"), "show", "job", "-o", str(int(job_id))], timeout=30)
    except (UserError, OSError, ValueError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"\bEndTime=(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)", done.stdout)
    if done.returncode != 0 or not found:
        return None
    end = datetime.datetime.fromisoformat(found.group(1))  # slurmctld's local time, as this node's
    return (end - datetime.datetime.now()).total_seconds()


def cancel(job_id: int | str, wait: float = 60) -> Job | None:
    """scancel the job and wait (up to `wait` s) until Slurm reports it ended or forgets it; its last state."""
    done = run([tool("scancel"), str(job_id)], timeout=30)
    if done.returncode != 0 and "Invalid job id" not in done.stderr:
        raise UserError(f"scancel {job_id} failed: {(done.stderr or done.stdout).strip()}")
    deadline = time.monotonic() + wait
    current = job(job_id)
    while current is not None and not current.ended and time.monotonic() < deadline:
        time.sleep(0.5)
        current = job(job_id)
    return current


def my_jobs(name_prefix: str = "") -> list[str]:
    """Ids of this user's queued and running jobs whose name starts with `name_prefix` ([] without Slurm, or with a
    controller that does not answer)."""
    squeue = shutil.which("squeue")
    if squeue is None or controller_down():
        return []
    try:
        out = run([squeue, "-h", "-u", getpass.getuser(), "-o", "%i|%j"], timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    pairs = [line.split("|", 1) for line in out.stdout.splitlines() if "|" in line]
    return [job for job, name in pairs if name.startswith(name_prefix)]


def srun_mpi_plugin() -> str | None:
    """srun's MPI plugin for one MPI world across the tasks (pmix, else pmi2), or None if srun offers neither."""
    srun = shutil.which("srun")
    if srun is None:
        return None
    try:
        listed = run([srun, "--mpi=list"], timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = listed.stdout + listed.stderr
    for plugin in ("pmix", "pmi2"):
        if re.search(rf"\b{plugin}\b", text):
            return plugin
    return None


@functools.cache
def version() -> tuple[int, int] | None:
    """This machine's Slurm as (major, minor), e.g. (22, 5) from `srun --version`; None without a Slurm client."""
    srun = shutil.which("srun")
    if srun is None:
        return None
    try:
        said = run([srun, "--version"], timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"(\d+)\.(\d+)", said)
    return (int(found[1]), int(found[2])) if found else None
