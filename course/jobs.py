"""Slurm batch scripts for the course's workloads: generated, checked, submitted and followed.

    python -m course job horovod --nodes 1 --gpus-per-node 4 --time 00:30:00 --print -- --epochs 5
    python -m course job mirrored --gpus-per-node 2 --submit
    python -m course job horovod --time 04:00:00 --resubmit-on-timeout 600 -- --epochs 90 --checkpoint-dir ckpt
    python -m course job status|wait|output|cancel JOBID

The scripts carry the options of the University of Queensland workshop's job script (job name, output/error
files with %j, nodes, GPUs per node through --gres, tasks per node = GPUs, CPUs per task, memory, time limit,
partition, account) plus a site's own (--qos, --constraint, --exclusive, any other `#SBATCH` line); the
`#SBATCH` lines, job states and sbatch/scontrol/scancel calls come from `course.slurm`. Horovod runs one
process per GPU started by `mpiexec` (flags and Open MPI settings from `course.mpi`) or `srun`;
MirroredStrategy and `course train` run in one process that uses all the node's GPUs. Inconsistent requests,
and requests no node of the partition could run, are refused with one line before anything is submitted.

With --resubmit-on-timeout SECONDS the job asks Slurm for a warning (USR1 to the batch shell, `--signal=B:USR1@S`)
that many seconds before its limit; the script's trap then submits the same script again, to start once this job
has ended (`--dependency=afterany`), and passes the warning on to the program once it is ready for it
(course.programs.horovod_mnist creates $COURSE_READY_FILE when every rank handles USR1), which checkpoints and stops
(course.programs.horovod_mnist with --checkpoint-dir; the next job resumes from rank 0's checkpoint); if the program
finishes in time after all, the script cancels the job it submitted. At most
MAX_RESUBMITS jobs follow the first, so a job that can never finish does not queue forever.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from course import UserError, mpi, settings, slurm
from course.programs.horovod_mnist import STOPPED  # its exit status after checkpointing on the time-limit warning


@dataclass(frozen=True)
class Workload:
    """What a job runs and what that allows: how many processes, a sweep, a restart after the limit's warning."""

    name: str  # as given to `course job` (a .py file is "script")
    title: str  # as messages name it
    module: tuple[str, ...]  # python's arguments before the workload's own: -m MODULE ...
    description: str  # the job script's "# Workload:" line
    one_process: bool = False  # one process on one node that uses every GPU there (else one rank per task)
    rank_per_gpu: bool = False  # tasks per node default to, and must equal, the GPUs per node
    sweep: str | None = None  # --array: "workers" (the program's own --workers) or "ranks" (mpiexec -n)
    resumes: bool = True  # can checkpoint when warned before its limit, and resume in the next job
    checkpoint_option: str | None = None  # the option the program resumes from, which --resubmit-on-timeout needs
    announces_ready: bool = False  # creates $COURSE_READY_FILE once every rank takes the warning
    timeline: bool = False  # records a Horovod timeline even on one rank


WORKLOADS = {
    w.name: w
    for w in (
        Workload(
            "train",
            "course train",
            ("-m", "course", "train"),
            "parameter averaging over engines (python -m course train), one process",
            one_process=True,
            sweep="workers",
            resumes=False,
        ),
        Workload(
            "horovod",
            "Horovod",
            ("-m", "course.programs.horovod_mnist"),
            "Horovod, one process (rank) per GPU",
            rank_per_gpu=True,
            sweep="ranks",
            checkpoint_option="--checkpoint-dir",
            announces_ready=True,
            timeline=True,
        ),
        Workload(
            "mirrored",
            "MirroredStrategy",
            ("-m", "course.programs.mirrored_resnet"),
            "MirroredStrategy, one process with one replica per GPU",
            one_process=True,
            resumes=False,
        ),
    )
}
SCRIPT = Workload("script", "your script", (), "")  # a .py file of the user's: one rank per task, anything goes
LAUNCHERS = ("mpiexec", "srun")
# srun inside a batch job of Slurm 22.05-23.02 does not inherit the job's --cpus-per-task (23.11 does again), so
# without this each rank would get one CPU there whatever the job asked for
SRUN_CPUS = "--cpus-per-task=${SLURM_CPUS_PER_TASK}"
OVERSUBSCRIBE = "OMPI_MCA_rmaps_base_oversubscribe"  # course.mpi sets it for runs here; job scripts only on request
MAX_RESUBMITS = 10  # --resubmit-on-timeout: jobs that may follow the first one
_MEM = re.compile(r"^\d+[KMGT]?$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_LIST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._,-]*$")
_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.\[\]*&|,:()-]+$")


def jobs_dir() -> Path:
    """Where submitted jobs are recorded (their script and output file names): COURSE_JOBS_DIR or ~/.cache/course/jobs."""
    return Path(settings.get("COURSE_JOBS_DIR"))


def parse_time(text: str) -> int:
    """Seconds in a Slurm time limit, read as sbatch reads --time (slurm.TIME_FORMS); UserError for anything else."""
    total = slurm.time_limit_seconds(text)
    if total is None:
        raise UserError(
            f"--time must be a Slurm time limit ({slurm.TIME_FORMS}; e.g. 00:30:00 for half an hour), not {text!r}"
        )
    if total == 0:
        raise UserError(f"--time {text} gives the job no time at all: ask for at least a minute")
    return total


@dataclass
class Request:
    """What a job asks for. `check()` fills the defaults and refuses inconsistent combinations."""

    workload: str
    args: list[str] = field(default_factory=list)
    nodes: int = 1
    gpus_per_node: int = 0
    tasks_per_node: int | None = None
    cpus_per_task: int | None = None
    mem: str | None = None
    time: str = "00:30:00"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    exclusive: bool = False
    sbatch: list[str] = field(default_factory=list)
    job_name: str | None = None
    output_dir: str = "."
    workdir: str = "."
    launcher: str = "mpiexec"
    python: str = sys.executable
    timeline: str | None = None
    oversubscribe: bool = False  # let mpiexec start more ranks than Slurm's slots (else Open MPI refuses: a mistake)
    resubmit_on_timeout: int | None = None  # seconds before the limit: warn the program, submit the script again
    array: list[int] | None = None  # a sweep: one array task per worker count (train --workers N, horovod -n N)

    @property
    def kind(self) -> str:
        """train, horovod, mirrored, or script."""
        return self.program.name

    @property
    def program(self) -> Workload:
        """The workload's entry in WORKLOADS, or SCRIPT for a .py file."""
        return WORKLOADS.get(self.workload, SCRIPT)

    @property
    def total_tasks(self) -> int:
        return self.nodes * (self.tasks_per_node or 1)


def check(request: Request) -> Request:
    """Fill the defaults and refuse what Slurm or the workload could not run; returns the request."""
    r = request
    _check_workload(r)
    _check_options(r)
    _check_tasks(r)
    if r.cpus_per_task is None:
        r.cpus_per_task = _default_cpus(r)
    _check_extras(r)
    if r.job_name is None:
        r.job_name = "course-" + (
            r.kind if r.kind != "script" else re.sub(r"[^A-Za-z0-9._-]", "-", Path(r.workload).stem)
        )
    return r


def _check_workload(r: Request) -> None:
    """A workload is one of WORKLOADS or a .py script that exists (then recorded by its absolute path)."""
    if r.workload not in WORKLOADS:
        path = Path(r.workload)
        if path.suffix != ".py":
            raise UserError(f"unknown workload {r.workload!r}: use train, horovod, mirrored or a path to a .py script")
        if not path.is_file():
            raise UserError(f"no script at {r.workload}: give the path of a Python file that exists")
        r.workload = str(path.resolve())


def _check_options(r: Request) -> None:
    """Each option on its own: counts, time, memory, names, extra #SBATCH lines, launcher."""
    for name in ("nodes", "gpus_per_node", "tasks_per_node", "cpus_per_task"):
        value = getattr(r, name)
        least = 0 if name == "gpus_per_node" else 1
        if value is not None and (not isinstance(value, int) or value < least):
            raise UserError(f"--{name.replace('_', '-')} must be a whole number >= {least}, not {value}")
    parse_time(r.time)
    if r.mem is not None and not _MEM.match(str(r.mem)):
        raise UserError(f"--mem must be a size such as 4G, 500M or 16000 (megabytes), not {r.mem!r}")
    for name, pattern, what in (
        ("job_name", _NAME, "letters, digits, '.', '_' and '-'"),
        ("partition", _LIST, "a partition name (or a comma-separated list)"),
        ("account", _NAME, "an account name"),
        ("qos", _NAME, "a QOS name"),
        ("constraint", _CONSTRAINT, "a feature expression such as a100 or 'v100|a100'"),
    ):
        value = getattr(r, name)
        if value is not None and not pattern.match(value):
            raise UserError(f"--{name.replace('_', '-')} {value!r} is not {what}")
    r.sbatch = [slurm.check_extra(line) for line in r.sbatch]
    if r.launcher not in LAUNCHERS:
        raise UserError(f"--launcher must be one of {', '.join(LAUNCHERS)}, not {r.launcher!r}")


def _check_tasks(r: Request) -> None:
    """Tasks per node as the workload runs: Horovod one per GPU, MirroredStrategy and train one process."""
    gpus, w = r.gpus_per_node, r.program
    if w.one_process:
        if r.tasks_per_node not in (None, 1):
            raise UserError(
                f"{w.title} runs in one process (it uses every GPU of the node itself): "
                f"drop --tasks-per-node {r.tasks_per_node}, or use the horovod workload"
            )
        if r.nodes != 1:
            raise UserError(
                f"{w.title} runs in one process on one node: use --nodes 1, or the horovod workload for several nodes"
            )
        r.tasks_per_node = 1
        return
    if r.tasks_per_node is None:
        r.tasks_per_node = (gpus or 1) if w.rank_per_gpu else 1
    if gpus and r.tasks_per_node > gpus:
        raise UserError(
            f"{w.title} runs one process per GPU: --tasks-per-node {r.tasks_per_node} is more than "
            f"--gpus-per-node {gpus} (leave --tasks-per-node out: it defaults to the GPUs)"
            if w.rank_per_gpu
            else f"--tasks-per-node {r.tasks_per_node} is more than --gpus-per-node {gpus}: "
            f"with GPUs, each task needs its own GPU"
        )
    if w.rank_per_gpu and gpus and r.tasks_per_node < gpus:
        raise UserError(
            f"{w.title} runs one process per GPU: --tasks-per-node {r.tasks_per_node} would leave "
            f"{gpus - r.tasks_per_node} of the {gpus} GPUs per node idle (make them equal)"
        )


def _default_cpus(r: Request) -> int:
    """CPUs per task when not given: a GPU rank needs cores for its input pipeline; one process driving all the
    node's GPUs needs them all; without GPUs, one."""
    per_process_gpus = r.gpus_per_node if r.tasks_per_node == 1 else 1
    return slurm.CPUS_PER_GPU * per_process_gpus if r.gpus_per_node else 1


def _check_extras(r: Request) -> None:
    """--oversubscribe, --timeline and --resubmit-on-timeout only where they mean something."""
    if r.oversubscribe and (r.launcher != "mpiexec" or r.total_tasks < 2):
        raise UserError(
            "--oversubscribe lets mpiexec start more ranks than the slots Slurm gave: it needs several "
            "tasks and --launcher mpiexec (srun starts exactly the tasks allocated)"
        )
    if r.timeline is not None and r.total_tasks < 2 and not r.program.timeline:
        raise UserError("--timeline records a Horovod timeline: it needs the horovod workload or several tasks")
    if r.resubmit_on_timeout is not None:
        _check_resubmit(r)
    if r.array is not None:
        _check_array(r)


def _check_array(r: Request) -> None:
    """--array 1,2,4: worker counts of a scaling sweep, one array task each, for train and horovod."""
    if r.program.sweep is None:
        sweeps = " or ".join(w.name for w in WORKLOADS.values() if w.sweep)
        raise UserError(f"--array sweeps the worker count of the {sweeps} workload, not of {r.kind}")
    if not r.array or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in r.array):
        raise UserError(f"--array takes worker counts, whole numbers >= 1 such as 1,2,4, not {r.array!r}")
    if r.resubmit_on_timeout is not None:
        raise UserError("--array and --resubmit-on-timeout do not go together: resubmit each sweep point on its own")
    if r.program.sweep == "ranks" and max(r.array) > r.total_tasks:
        raise UserError(
            f"--array asks for up to {max(r.array)} {r.program.title} ranks but the job has {r.total_tasks} "
            f"task(s): ask for them with --nodes and --tasks-per-node (each array task uses what it needs)"
        )


def _check_resubmit(r: Request) -> None:
    """--resubmit-on-timeout: a warning before the limit, for a program that checkpoints when warned."""
    warning = r.resubmit_on_timeout
    if not isinstance(warning, int) or isinstance(warning, bool) or warning < 1:
        raise UserError(f"--resubmit-on-timeout must be a whole number of seconds >= 1, not {warning!r}")
    if warning >= parse_time(r.time):
        raise UserError(
            f"--resubmit-on-timeout {warning} s is not before the end of --time {r.time}: warn earlier "
            f"than the limit, e.g. a few minutes before it (more than one epoch takes)"
        )
    if not r.program.resumes:
        raise UserError(
            f"--resubmit-on-timeout needs a program that checkpoints on the warning (SIGUSR1): the "
            f"{r.kind} workload does not; use horovod with --checkpoint-dir, or your own script"
        )
    option = r.program.checkpoint_option
    if option and not any(a == option or a.startswith(option + "=") for a in r.args):
        raise UserError(
            f"--resubmit-on-timeout: the {r.kind} workload resumes only from a checkpoint: add "
            f"-- {option} DIR (the same folder for every job)"
        )


READY_FILE = "COURSE_READY_FILE"  # the variable naming the file a program creates once it can take the warning


def _warning_trap(warning: int) -> list[str]:
    """The top of the script with --resubmit-on-timeout: the trap, set before anything else (USR1 would end
    the shell before it is set, and Slurm may warn up to a minute early, even as the job starts)."""
    return [
        "# Time-limit warning (--resubmit-on-timeout): Slurm sends USR1 to this shell (#SBATCH --signal=B:USR1@"
        f"{warning}).",
        "# The trap submits this script again, to start when this job has ended; the loop at the end passes the",
        "# warning on to the program once it is ready for it. The program trains while the next epoch fits,",
        "# checkpoints and stops, and the next job resumes from the checkpoint (cancelled if the program finishes).",
        "on_warning() {",
        '    echo "time-limit warning: $(date -Iseconds)"',
        '    if [ -n "${warned:-}" ]; then return; fi  # a second warning changes nothing',
        "    warned=1",
        f'    if [ "${{COURSE_RESUBMIT:-0}}" -lt {MAX_RESUBMITS} ]; then',
        "        if next=$(sbatch --parsable --dependency=afterany:${SLURM_JOB_ID} "
        '--export=ALL,COURSE_RESUBMIT=$((${COURSE_RESUBMIT:-0} + 1)) "$0"); then',
        '            echo "resubmitted as job ${next}: it resumes when this one has ended"',
        "        else",
        '            echo "resubmission failed: submit this script again yourself to continue"',
        "        fi",
        "    else",
        f'        echo "not resubmitted: already {MAX_RESUBMITS} resubmissions"',
        "    fi",
        "}",
        "trap on_warning USR1",
    ]


def _passing_the_warning_on(launch: str, announces_ready: bool) -> list[str]:
    """The end of the script with --resubmit-on-timeout: the program in the background, the warning passed on.

    USR1 kills a process that has not yet installed its handler: a program that `announces_ready`
    (course.programs.horovod_mnist) gets the warning only once it has created $COURSE_READY_FILE; a script of your own
    gets it at once, so it should set its handler first thing.
    """
    ready = '[ -e "$COURSE_READY_FILE" ]' if announces_ready else "true"
    return [
        "# bash runs a trap only between commands: the program runs in the background, the shell checks every second",
        f'export {READY_FILE}="$PWD/.course-ready-${{SLURM_JOB_ID}}"  # the program creates it once it can take USR1',
        'rm -f "$COURSE_READY_FILE"',
        f"{launch} &",
        "child=$!",
        'while kill -0 "$child" 2>/dev/null; do',
        f'    if [ -n "${{warned:-}}" ] && [ -z "${{passed_on:-}}" ] && {ready}; then',
        '        kill -USR1 "$child" && passed_on=1 && echo "time-limit warning passed on to the program"',
        "    fi",
        "    sleep 1",
        "done",
        "trap '' USR1  # the program has ended: a warning from now on would queue a job nothing cancels",
        "status=0",
        'wait "$child" || status=$?',
        'rm -f "$COURSE_READY_FILE"',
        'if [ "$status" -eq 0 ] && [ -n "${next:-}" ]; then  # it finished in time after all: nothing to resume',
        '    scancel "$next" && echo "finished: job ${next} is not needed and was cancelled"',
        "fi",
        'exit "$status"',
    ]


def _program(r: Request) -> list[str]:
    return [r.python, *(r.program.module or (r.workload,)), *r.args]


def _launch(r: Request) -> tuple[list[str], str]:
    program = _program(r)
    if r.array and r.program.sweep == "workers":
        return [*program, "--workers", "${WORKERS}"], "one process, ${WORKERS} workers per array task"
    if r.array:  # horovod: each array task starts the ranks it sweeps over, within the tasks the job holds
        return (
            ["mpiexec", "-n", "${WORKERS}", *mpi.JOB_FLAGS, *program],
            "${WORKERS} processes per array task, started by mpiexec",
        )
    if r.total_tasks == 1:
        return program, "one process"
    if r.launcher == "srun":
        # srun's MPI plugin (pmix where this Slurm offers it) makes the ranks one MPI world; unknown: the site default
        plugin = slurm.srun_mpi_plugin()
        # srun of Slurm 22.05-23.02 does not inherit the job's --cpus-per-task: ask for it again
        return (
            ["srun", *([f"--mpi={plugin}"] if plugin else []), SRUN_CPUS, *program],
            f"{r.total_tasks} processes started by srun, {r.cpus_per_task} CPU(s) each",
        )
    return (
        ["mpiexec", "-n", "${SLURM_NTASKS}", *mpi.JOB_FLAGS, *program],
        f"{r.total_tasks} processes started by mpiexec",
    )


def _quote(word: str) -> str:
    return word if word in ("${SLURM_NTASKS}", "${WORKERS}", SRUN_CPUS) else shlex.quote(word)


def script(request: Request, command_line: str | None = None) -> str:
    """The Slurm batch script for a request (checked first): the #SBATCH header, the environment, the launch."""
    r = check(request)
    launch, how = _launch(r)
    lines = _header(r, command_line, how)
    lines += [""] + (_warning_trap(r.resubmit_on_timeout) if r.resubmit_on_timeout is not None else [])
    lines += _environment(r)
    command = " ".join(_quote(w) for w in launch)
    if r.resubmit_on_timeout is None:
        lines += ["", command, ""]
    else:
        lines += ["", *_passing_the_warning_on(command, announces_ready=r.program.announces_ready), ""]
    return "\n".join(lines)


def _header(r: Request, command_line: str | None, how: str) -> list[str]:
    """What the job is (comments a reader of the file sees first) and what it asks Slurm for (#SBATCH lines)."""
    out_dir = Path(r.output_dir).resolve()
    gpus = r.gpus_per_node
    layout = f"{r.nodes} node(s) x {r.tasks_per_node} task(s)" + (f", {gpus} GPU(s) per node" if gpus else ", CPU only")
    description = r.program.description or f"the script {r.workload}"
    files = "%A_%a" if r.array else "%j"  # an array's tasks each write their own files: job id, task index
    return [
        "#!/bin/bash",
        f"# Generated by: {command_line or 'course.jobs.script()'}",
        f"# Workload: {description}; {layout}; {how}.",
        "# Submit: sbatch THIS_FILE   Follow: squeue -j JOBID   Stop: scancel JOBID",
        *slurm.sbatch_lines(
            slurm.Options(
                job_name=r.job_name,
                output=f"{out_dir}/{r.job_name}_{files}.out",
                error=f"{out_dir}/{r.job_name}_{files}.err",
                chdir=str(Path(r.workdir).resolve()),
                nodes=r.nodes,
                tasks_per_node=r.tasks_per_node,
                cpus_per_task=r.cpus_per_task,
                gpus_per_node=gpus or None,
                mem=r.mem,
                time=r.time,
                partition=r.partition,
                account=r.account,
                qos=r.qos,
                constraint=r.constraint,
                signal=f"B:USR1@{r.resubmit_on_timeout}" if r.resubmit_on_timeout is not None else None,
                array=f"0-{len(r.array) - 1}" if r.array else None,
                exclusive=r.exclusive,
                extra=r.sbatch,
            )
        ),
    ]


def _environment(r: Request) -> list[str]:
    """The job's shell set-up before the launch: threads, logs, MPI settings, the timeline and the sweep."""
    gpus = r.gpus_per_node
    lines = [
        "set -eo pipefail",
        "# Site set-up goes here, e.g.: module load openmpi cuda   (or: source /path/to/venv/bin/activate)",
        "echo \"job ${SLURM_JOB_ID} '${SLURM_JOB_NAME}': ${SLURM_JOB_NUM_NODES} node(s) [${SLURM_JOB_NODELIST}],"
        ' ${SLURM_NTASKS} task(s), ${SLURM_CPUS_PER_TASK} CPU(s) per task, started $(date -Iseconds)"',
        "# each rank's lines stay whole in the output",
        "unset PYTHONUNBUFFERED",
        "# threads per process = the CPUs Slurm gave each task (else N processes oversubscribe the cores)",
        "export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}",
        "export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}",
    ]
    if gpus:
        lines += ["export NCCL_DEBUG=WARN", 'echo "GPUs visible: ${CUDA_VISIBLE_DEVICES:-none}"']
    if r.total_tasks > 1 and r.launcher == "mpiexec":
        lines.append("# Open MPI settings (course.mpi)")
        lines += [f"export {k}={v}" for k, v in mpi.SETTINGS.items() if k not in (OVERSUBSCRIBE, mpi.YIELD)]
        lines += [
            "# in a container ranks may not read each other's memory directly (CMA): copy through shared memory",
            f"if {mpi.container_test()}; then",
            *(f"    export {k}={v}" for k, v in mpi.SINGLE_COPY.items()),
            "fi",
        ]
        if r.oversubscribe:  # only when asked: on a cluster more ranks than slots is usually a wrong -n or layout
            lines += [f"export {OVERSUBSCRIBE}=1", f"export {mpi.YIELD}=1  # ranks share cores: waiting ones yield"]
        root = " ".join(f"{k}={v}" for k, v in mpi.ROOT_SETTINGS.items())
        lines.append(f'if [ "$(id -u)" -eq 0 ]; then export {root}; fi')
    if r.timeline:
        lines += [
            "# Horovod timeline, written by rank 0 (open it in chrome://tracing or course.perf)",
            f"export HOROVOD_TIMELINE={shlex.quote(str(Path(r.timeline).resolve()))}",
            "export HOROVOD_TIMELINE_MARK_CYCLES=0",
        ]
    if r.array:
        lines += [
            "# the sweep: array task i runs with the i-th worker count",
            f"SWEEP=({' '.join(str(n) for n in r.array)})",
            "WORKERS=${SWEEP[$SLURM_ARRAY_TASK_ID]}",
            'echo "array task ${SLURM_ARRAY_TASK_ID} of job ${SLURM_ARRAY_JOB_ID}: ${WORKERS} worker(s)"',
        ]
    return lines


# ---------------------------------------------------------------------------------- submit and follow


def slurm_available() -> bool:
    """True when a Slurm controller answers here (`sinfo` works): notebooks then submit for real."""
    return slurm.available()


def submit(request: Request, command_line: str | None = None) -> int:
    """Write the script, submit it with sbatch and return the job id (recorded under `jobs_dir()`)."""
    text = script(request, command_line)
    slurm.tool("sbatch")
    r = request
    slurm.check_fits(r.nodes, r.tasks_per_node, r.cpus_per_task, r.gpus_per_node, r.partition)
    Path(request.output_dir).mkdir(parents=True, exist_ok=True)
    record_dir = jobs_dir()
    record_dir.mkdir(parents=True, exist_ok=True)
    script_file = record_dir / f"{request.job_name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.sbatch"
    script_file.write_text(text)
    job_id = slurm.submit(str(script_file))
    out_dir = Path(request.output_dir).resolve()
    name = f"{request.job_name}_{job_id}" + ("_0" if request.array else "")  # an array: its first task's files
    record = {
        "job_id": job_id,
        "script": str(script_file),
        "request": asdict(request),
        "stdout": str(out_dir / f"{name}.out"),
        "stderr": str(out_dir / f"{name}.err"),
    }
    (record_dir / f"{job_id}.json").write_text(json.dumps(record, indent=1))
    return job_id


class Status(slurm.Job):
    """A job's state as Slurm reports it, with the files its output goes to, in words for a user."""

    def __str__(self) -> str:
        what = slurm.EXPLAIN.get(self.state, "")
        extra = f" ({what})" if what else ""
        reason = f", reason {self.reason}" if self.reason and self.reason != "None" else ""
        times = f", elapsed {self.elapsed} of {self.time_limit}" if self.elapsed else ""
        code = f", exit code {self.exit_code}" if self.ended and self.exit_code else ""
        if self.state == "FAILED" and self.exit_code.split(":")[0] == str(STOPPED):
            extra = " (the program checkpointed and stopped at the time-limit warning: resubmit it to continue)"
        tasks = f"; array tasks: {', '.join(f'{i} {t.state}' for i, t in enumerate(self.tasks))}" if self.tasks else ""
        return f"job {self.job_id}: {self.state}{extra}{reason}{times}{code}{tasks}"


def _job_id(value: str | int) -> int:
    text = str(value).strip()
    if not text.isdigit():
        raise UserError(f"{text!r} is not a Slurm job id (a number, as --submit printed)")
    return int(text)


def _record(job_id: int) -> dict:
    file = jobs_dir() / f"{job_id}.json"
    try:
        return json.loads(file.read_text())
    except (OSError, ValueError):
        return {}


def status(job_id: str | int) -> Status:
    """The job's state from `scontrol show job` (Slurm keeps ended jobs for MinJobAge), else from `sacct`."""
    jid = _job_id(job_id)
    record = _record(jid)
    slurm.tool("scontrol")
    found = slurm.job(jid)
    if found is not None:
        return Status(
            jid,
            found.state,
            found.reason,
            found.exit_code,
            found.elapsed,
            found.time_limit,
            found.stdout or record.get("stdout", ""),
            found.stderr or record.get("stderr", ""),
            found.tasks,
        )
    if record:
        return Status(
            jid,
            "UNKNOWN",
            "Slurm no longer remembers it (and has no accounting)",
            "",
            "",
            "",
            record.get("stdout", ""),
            record.get("stderr", ""),
        )
    raise UserError(f"Slurm knows no job {jid} (finished jobs are forgotten after a few minutes; check the id)")


def wait(job_id: str | int, timeout: float | None = None, poll: float = 2.0) -> Status:
    """Poll until the job has ended (or `timeout` seconds pass: UserError), then return its final status."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        current = status(job_id)
        if current.ended:
            return current
        if deadline is not None and time.monotonic() > deadline:
            raise UserError(
                f"job {current.job_id} is still {current.state} after {timeout:.0f} s; "
                f"follow it with: python -m course job status {current.job_id}"
            )
        time.sleep(poll)


def output(job_id: str | int) -> tuple[str, str]:
    """The text of the job's output and error files so far ('' where a file does not exist yet); an array job's
    tasks one after the other, each under a `==> array task I <==` line."""
    current = status(job_id)
    if not current.tasks:
        return _read(current.stdout), _read(current.stderr)
    heads = [f"==> array task {i} <==\n" for i in range(len(current.tasks))]
    return (
        "".join(h + _read(t.stdout) for h, t in zip(heads, current.tasks)),
        "".join(h + _read(t.stderr) for h, t in zip(heads, current.tasks)),
    )


def _read(name: str) -> str:
    try:
        return Path(name).read_text(errors="replace") if name else ""
    except OSError:
        return ""


def cancel(job_id: str | int) -> Status:
    """scancel the job; returns its status afterwards."""
    jid = _job_id(job_id)
    slurm.cancel(jid, wait=0)
    return status(jid)


def command_line(argv: list[str]) -> str:
    """How a job was asked for, for the script's header comment."""
    return "python -m course " + " ".join(shlex.quote(a) for a in argv)
