"""Open MPI start-up settings, in one place: every `mpiexec` the course runs takes them from here.

As root, Open MPI refuses to start unless told it may; in containers its shared-memory
single-copy mechanism may be refused; a class often asks for more ranks than the node has cores; and on a shared
login node, nothing of a run on one machine should listen on the network: not the ranks, not mpiexec.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

from course import UserError, settings

INSTALL_HINT = (
    "install Open MPI (Debian/Ubuntu: apt-get install openmpi-bin libopenmpi-dev; on a cluster: module load openmpi)"
)


ROOT_SETTINGS = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
# Ranks on this machine share its few cores with their own helper threads (Horovod's background thread beside
# TensorFlow's), and a rank waiting in a collective busy-polls the core they need: waiting ranks yield it instead
# (benchmarks/horovod.py, 2 ranks on 2 cores: weak-scaling efficiency 0.51 -> 0.76). Batch jobs give each rank
# cores of its own, so job scripts leave it out unless asked to oversubscribe (course.jobs).
YIELD = "OMPI_MCA_mpi_yield_when_idle"
# Open MPI's shared-memory transport copies a large message straight from one rank's memory into another's (CMA:
# process_vm_readv), which needs permission to ptrace the other rank. Containers often withhold it (Docker without
# CAP_SYS_PTRACE, user namespaces: open-mpi/ompi#4948, hpc/charliecloud#128) and every large message then fails
# ("Read -1, expected ..., errno = 1"). `none` copies through a shared buffer instead, twice: slower for large
# messages on a real node, so it is set only inside a container. The markers, for Python and for job scripts:
SINGLE_COPY = {"OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
CONTAINER_FILES = ("/.dockerenv", "/run/.containerenv")  # Docker; Podman
CONTAINER_VARIABLES = ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER", "KUBERNETES_SERVICE_HOST")  # Binder: a pod
SETTINGS = {
    # Allow more ranks than cores (a class on a small node) without every user passing --oversubscribe.
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    YIELD: "1",
}
# Ranks on one machine talk through shared memory, but Open MPI's TCP transport would still listen in each rank on
# every interface (0.0.0.0 and [::], random ports), where other users' processes on a shared login node can reach
# it; left to choose, Open MPI may also pick a transport that listens on the machine's address (UCX's). On one node
# the ranks use shared memory (vader) and themselves (self), nothing else. In an allocation of several nodes Open
# MPI chooses as usual: there OMPI_MCA_btl_tcp_if_include /
# OMPI_MCA_oob_tcp_if_include choose the cluster's internal network (docs/guide/06-slurm.md, "What changes on a real
# cluster").
ONE_NODE = {"OMPI_MCA_btl": "self,vader"}
# mpiexec's own out-of-band listener (Open MPI 4.1's runtime, ORTE's oob/tcp) is bound to 0.0.0.0 and [::] whatever
# is set: its create_listen binds INADDR_ANY, and oob_tcp_if_include only chooses the addresses it tells other nodes.
# On one node no other machine has anything to say to it (the ranks reach mpiexec through PMIx, on 127.0.0.1), so
# mpiexec runs with this library preloaded: its bind() turns an any-address into loopback (127.0.0.1, ::1). The ranks
# inherit the library and bind as they ask (it acts only in a process named as Open MPI's launchers are), and so does
# an mpiexec that finds itself in an allocation of several nodes (an environment made here, then `salloc -N2`): there
# the other nodes' daemons must reach it. Built once per user with the machine's C compiler (the one Horovod's build
# needs); without one, mpiexec listens as before.
LOOPBACK_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static int launcher_on_one_node(void) {
    static const char *names[] = {"mpiexec", "mpirun", "orterun", "prterun"};
    const char *nodes = getenv("SLURM_JOB_NUM_NODES");
    if (nodes && strcmp(nodes, "1")) return 0;
    for (unsigned i = 0; i < sizeof names / sizeof *names; i++)
        if (!strncmp(program_invocation_short_name, names[i], strlen(names[i]))) return 1;
    return 0;
}

int bind(int fd, const struct sockaddr *address, socklen_t length) {
    int (*real)(int, const struct sockaddr *, socklen_t) = dlsym(RTLD_NEXT, "bind");
    struct sockaddr_storage local;
    if (!address || length > sizeof local || !launcher_on_one_node()) return real(fd, address, length);
    memcpy(&local, address, length);
    if (local.ss_family == AF_INET && ((struct sockaddr_in *)&local)->sin_addr.s_addr == htonl(INADDR_ANY))
        ((struct sockaddr_in *)&local)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    else if (local.ss_family == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)&local)->sin6_addr))
        ((struct sockaddr_in6 *)&local)->sin6_addr = in6addr_loopback;
    return real(fd, (struct sockaddr *)&local, length);
}
"""
SITE_TRANSPORT = {"OMPI_MCA_btl", "OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_btl_tcp_if_exclude"}
# Placement: ranks share the node's cores freely (as the University of Queensland workshop's job script does).
BIND_FLAGS = ("--bind-to", "none")
# In a batch job, fill each node's slots in order (the UQ workshop: -bind-to none -map-by slot).
JOB_FLAGS = (*BIND_FLAGS, "--map-by", "slot")


def env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for `mpiexec`: `base` (default os.environ) plus the settings Open MPI needs here, ranks that
    write whole lines (not PYTHONUNBUFFERED), and on one node LOOPBACK_C preloaded (mpiexec listens on loopback)."""
    result = dict(os.environ if base is None else base)
    # Unbuffered, Python writes a print's text and its newline separately, and mpiexec can put another rank's line
    # between the two; buffered, a print with flush=True is one write of a whole line.
    result.pop("PYTHONUNBUFFERED", None)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        for key, value in ROOT_SETTINGS.items():
            result.setdefault(key, value)
    for key, value in {**SETTINGS, **(SINGLE_COPY if in_container(result) else {})}.items():
        result.setdefault(key, value)
    one_node = result.get("SLURM_JOB_NUM_NODES", "1") == "1"
    if one_node and not SITE_TRANSPORT & set(result):
        result.update(ONE_NODE)  # a site's own choice of transport or network is kept as it is
    library = loopback_library() if one_node else None
    preloaded = result.get("LD_PRELOAD", "").split()
    if library and str(library) not in preloaded:
        result["LD_PRELOAD"] = " ".join([str(library), *preloaded])
    return result


# Each rank's shared-memory file (Open MPI 4.1's vader segment, 4 MB) goes to /dev/shm, named by the job's id, which
# comes from mpiexec's process id. A job that ends normally removes its files; one that aborts or is killed (a wrong
# answer's check, a hung collective) leaves them, for good, in the node's memory, under names a later mpiexec with
# the same process id will use again. A job of the checks gets a folder of its own instead, removed after it.
SEGMENTS = "OMPI_MCA_btl_vader_backing_directory"


def segments_folder() -> Path:
    """A new private folder for one job's shared-memory files: on /dev/shm (memory) where the machine has it."""
    shm = Path("/dev/shm")
    where = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="course-mpi-", dir=where))


def with_segments(environment: dict[str, str], folder: Path) -> dict[str, str]:
    """ENVIRONMENT with its jobs' shared-memory files in FOLDER, unless it already names a place for them."""
    return environment if SEGMENTS in environment else {**environment, SEGMENTS: str(folder)}


def loopback_library() -> Path | None:
    """LOOPBACK_C built into the user's cache (once per version of it), or None where no C compiler builds it."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    key = hashlib.sha256(f"{LOOPBACK_C}{platform.machine()}".encode()).hexdigest()[:16]
    folder = settings.user_cache()
    library = folder / f"mpiexec-loopback-{key}.so"
    if library.is_file() or compiler is None:
        return library if library.is_file() else None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder) as building:  # then moved in whole: never half-written
            built = Path(building) / library.name
            done = subprocess.run(
                [compiler, "-shared", "-fPIC", "-O2", "-x", "c", "-", "-o", str(built), "-ldl"],
                input=LOOPBACK_C,
                capture_output=True,
                text=True,
                timeout=120,
            )
            if done.returncode != 0:
                return None
            built.replace(library)
    except (OSError, subprocess.SubprocessError):
        return None
    return library


def in_container(environ: dict[str, str] | None = None) -> bool:
    """True inside a Docker, Podman or Apptainer container or a Kubernetes pod (where CMA may be refused)."""
    environ = os.environ if environ is None else environ
    return any(os.path.exists(f) for f in CONTAINER_FILES) or any(environ.get(v) for v in CONTAINER_VARIABLES)


def container_test() -> str:
    """The shell condition true where `in_container` is, for a job script (which may run on another node)."""
    files = [f"[ -e {f} ]" for f in CONTAINER_FILES]
    variables = "".join(f"${{{v}:-}}" for v in CONTAINER_VARIABLES)
    return " || ".join([*files, f'[ -n "{variables}" ]'])


def mpiexec() -> str:
    """Path of `mpiexec`, or a UserError naming what to install."""
    path = shutil.which("mpiexec")
    if path is None:
        raise UserError(f"mpiexec not found: {INSTALL_HINT}")
    return path


def command(n: int, *program: str) -> list[str]:
    """An `mpiexec -n N PROGRAM...` command line with the course's placement flags."""
    if n < 1:
        raise UserError(f"the number of MPI ranks must be at least 1, not {n}")
    return [mpiexec(), "-n", str(n), *BIND_FLAGS, *program]


def version() -> str:
    """The first line `mpiexec --version` prints, e.g. 'mpiexec (OpenRTE) 4.1.4'."""
    out = subprocess.run([mpiexec(), "--version"], capture_output=True, text=True, env=env(), timeout=30)
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else "unknown"
