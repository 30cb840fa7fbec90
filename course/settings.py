"""Every COURSE_* environment variable in one table: its default and its meaning (`python -m course.settings`).

The instructor guide's table (docs/guide/01-prepare.md) is printed from this one (tests/test_settings.py keeps them
equal), and a test checks that every COURSE_* variable the course reads or sets is listed here, and nothing else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, its default when unset, and what it changes."""

    name: str
    default: str
    meaning: str
    internal: bool = False  # set by the course for its own processes (engines); users leave it alone
    value: str = ""  # what the course uses when unset, where that is fixed ("" where the reader works it out)


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "COURSE_PROFILE",
        "`full` with an NVIDIA GPU, else `quick`",
        "`quick` (CPU, 2 engines, small data) or `full` (GPU nodes, real datasets, one engine per GPU)",
    ),
    Setting(
        "COURSE_DATA_DIR",
        "unset",
        "a site's preloaded datasets (`course data fetch NAME --to DIR`), searched "
        "before the Keras cache and a download",
    ),
    Setting(
        "COURSE_OFFLINE",
        "unset",
        "`1`: never try to download a dataset (compute nodes without internet; unset, each process waits up to 1.5 s to find out)",
    ),
    Setting(
        "COURSE_CLUSTER_ID",
        "one per notebook, else `course-default`",
        "the engine cluster a notebook or `course cluster` command starts or attaches to",
    ),
    Setting(
        "COURSE_CONTROLLER_HOST", "this host's name", "the address at which engines on other nodes reach the controller"
    ),
    Setting(
        "COURSE_ENGINE_CORES",
        "the host's cores shared by its engines",
        "task slots each engine offers the task runtime (notebooks 01 and 05)",
    ),
    Setting(
        "COURSE_TASKS_BIND",
        "`127.0.0.1` on the notebook's host, else the host's address",
        "where an engine's task-data server listens",
    ),
    Setting("COURSE_RESULTS", "a temporary CSV", "the class's shared results CSV that notebook 05 appends to"),
    Setting(
        "COURSE_JOBS_DIR",
        "`~/.cache/course/jobs`",
        "where `course job` records the jobs it submitted",
        value="~/.cache/course/jobs",
    ),
    Setting("COURSE_NBGRADER_ROOT", "`build/nbgrader` in the checkout", "nbgrader's course directory"),
    Setting(
        "COURSE_NBGRADER_EXCHANGE",
        "nbgrader's own (`/srv/nbgrader/exchange`)",
        "nbgrader's exchange directory",
        value="/srv/nbgrader/exchange",
    ),
    Setting("COURSE_LAB_TOKEN", "a random token", "the token `course lab` starts JupyterLab with"),
    Setting(
        "COURSE_GPU",
        "unset",
        "set-up: `1` installs TensorFlow's CUDA build and builds Horovod with NCCL (as `make setup GPU=1`)",
    ),
    Setting(
        "COURSE_TORCH_CPU_INDEX",
        "`https://download.pytorch.org/whl/cpu`",
        "set-up: the package index PyTorch's CPU build is taken from where it answers (else the default index)",
    ),
    Setting(
        "COURSE_NO_UV_INSTALL",
        "unset",
        "set-up: `1` never installs uv from PyPI to fetch a Python 3.11 (a host with only Python 3.12+ then stops"
        " with one line saying how to get one)",
    ),
    Setting(
        "COURSE_DEVICE",
        "set per engine (`CPU` outside one)",
        "the device an engine was given (a GPU, or CPU threads)",
        internal=True,
        value="CPU",
    ),
    Setting(
        "COURSE_LOCAL_RANK", "set per engine", "an engine's rank on its node (it picks the engine's GPU)", internal=True
    ),
    Setting(
        "COURSE_RESUBMIT",
        "set by the job script",
        "how many times a `--resubmit-on-timeout` job has resubmitted itself (it stops at the limit)",
        internal=True,
    ),
    Setting(
        "COURSE_READY_FILE",
        "set by the job script",
        "the file a program creates once every rank handles the time-limit warning (the script passes it on then)",
        internal=True,
    ),
    Setting(
        "COURSE_TORCHRUN_KILL",
        "set by the resume check",
        "`RANK:DRAWS`: under `course.checks.torchrun_script`, that rank kills itself at that draw in torchrun's first "
        "attempt (a lost rank)",
        internal=True,
    ),
    Setting(
        "COURSE_PROBE_DIR",
        "set by the batch-script check",
        "the folder where each rank of a probed job (`course.checks.sbatch_run`) writes what it got from Slurm",
        internal=True,
    ),
    Setting(
        "COURSE_CHECK_CALLER",
        "set by a check's job",
        "`PID@HOST` of the process that ran a check's MPI, horovodrun or torchrun job: each rank ends once it has "
        "ended (`course.processes.exit_with_caller`)",
        internal=True,
    ),
    Setting(
        "COURSE_TEST_HOLD_AT_EXIT",
        "unset",
        "tests only: seconds rank 0 of course.programs.horovod_mnist waits, after the time-limit stop, before it "
        "says so and joins the other ranks (a rank held up at exit, e.g. by a slow file system)",
        internal=True,
    ),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


def user_cache() -> Path:
    """The folder where the course keeps what it builds once per user and reuses: $XDG_CACHE_HOME/course, or
    ~/.cache/course."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "course"


def get(name: str) -> str:
    """The variable's value, else its listed default (`~` expanded), else "". Only listed names: a typo is a KeyError."""
    return os.environ.get(name) or os.path.expanduser(BY_NAME[name].value)


def table() -> str:
    """The Markdown table of the settings users may set (the instructor guide carries this text)."""
    rows = ["| Variable | Default | Meaning |", "|---|---|---|"]
    rows += [f"| `{s.name}` | {s.default} | {s.meaning} |" for s in SETTINGS if not s.internal]
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
