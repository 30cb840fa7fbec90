"""The machine's checks of `python -m course doctor`: what an instructor needs to know before a workshop.

Heavy probes (TensorFlow, Horovod, PyTorch, MPI, ipyparallel) run in subprocesses, side by side, so a broken
library is reported rather than crashing the report, and the report also works inside a notebook.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from course import UserError, data, mpi, processes, profile, slurm
from course.doctor.report import Check


TF_PROBE = r"""
import ctypes, importlib.util, json, os
import tensorflow as tf
gpus = tf.config.list_physical_devices("GPU")
names = [tf.config.experimental.get_device_details(g).get("device_name", g.name) for g in gpus]
build = tf.sysconfig.get_build_info()
facts = {"version": tf.__version__, "cpus": len(tf.config.list_physical_devices("CPU")), "gpus": names,
         "cuda_build": bool(build.get("is_cuda_build")), "cuda": build.get("cuda_version"),
         "cudnn": build.get("cudnn_version"), "nccl": None}
# NCCL answers for itself (ncclGetVersion): the nvidia-nccl-cu12 wheel's library first, then the loader's.
spec = importlib.util.find_spec("nvidia.nccl") if importlib.util.find_spec("nvidia") else None
wheel = [os.path.join(p, "lib", "libnccl.so.2") for p in (spec.submodule_search_locations if spec else [])]
for library in wheel + ["libnccl.so.2"]:
    try:
        code = ctypes.c_int()
        if ctypes.CDLL(library).ncclGetVersion(ctypes.byref(code)) == 0:
            n = code.value  # NCCL_VERSION_CODE: X*10000+Y*100+Z since 2.9, X*1000+Y*100+Z before
            major, minor = (n // 10000, n // 100 % 100) if n >= 10000 else (n // 1000, n // 100 % 10)
            facts["nccl"] = f"{major}.{minor}.{n % 100}"
            break
    except (OSError, AttributeError):
        continue
OTHER_OPS = {"torch": "horovod.torch.mpi_lib_v2", "mxnet": "horovod.mxnet.mpi_lib"}  # built only if asked for
try:
    import horovod, horovod.tensorflow as hvd
    facts["horovod"] = {
        "version": horovod.__version__,
        "frameworks": ["tensorflow"] + [fw for fw, ops in OTHER_OPS.items()
                                        if importlib.util.find_spec(fw) and importlib.util.find_spec(ops)],
        "controllers": [n for n, built in (("MPI", hvd.mpi_built()), ("Gloo", hvd.gloo_built())) if built],
        "tensor_operations": [n for n, built in (("NCCL", hvd.nccl_built()), ("DDL", hvd.ddl_built()),
                               ("CCL", hvd.ccl_built()), ("MPI", hvd.mpi_built()), ("Gloo", hvd.gloo_built())) if built],
        "cuda": bool(hvd.cuda_built()),
        "nccl_built": bool(hvd.nccl_built()),
    }
except Exception as exc:
    facts["horovod"] = {"error": f"{type(exc).__name__}: {exc}"}
print("DOCTOR " + json.dumps(facts))
"""

MPI_PROBE = r"""
import json, mpi4py
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.rank + 1)
if comm.rank == 0:
    print("DOCTOR " + json.dumps({"size": comm.size, "sum": total, "mpi4py": mpi4py.__version__,
          "library": MPI.Get_library_version().strip().splitlines()[0].split(",")[0]}), flush=True)
"""

MPI_TIMEOUT = 90  # seconds for a 2-rank job that starts in about one; a loaded node takes longer

IPP_PROBE = r"""
import json, time, ipyparallel as ipp
t0 = time.perf_counter()
cluster = ipp.Cluster(n=1, log_level=40, controller_args=HEARTBEAT)  # the course's clusters' heartbeat
client = cluster.start_and_connect_sync()
client.wait_for_engines(1, timeout=60)
assert client[:].apply_sync(lambda: 42) == [42]
t1 = time.perf_counter()
cluster.stop_cluster_sync()
print("DOCTOR " + json.dumps({"version": ipp.__version__, "start_s": t1 - t0, "stop_s": time.perf_counter() - t1}))
"""

# PyTorch and its collectives: two member processes form a group on loopback and all-reduce rank + 1 (sum 3), over
# gloo, and over NCCL where two GPUs are seen. Members are processes of their own: a group needs one per rank.
TORCH_MEMBER = r"""
import datetime, json, sys
import torch, torch.distributed as dist
backend, port, rank = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                        timeout=datetime.timedelta(seconds=60))
device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
total = torch.tensor([rank + 1.0], device=device)
dist.all_reduce(total)
print("DOCTOR " + json.dumps({"rank": rank, "sum": total.item()}), flush=True)
dist.destroy_process_group()
"""

TORCH_PROBE = r"""
import json, socket, subprocess, sys
import torch, torch.distributed as dist
gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
facts = {"version": torch.__version__, "cuda": torch.version.cuda, "gpus": gpus, "groups": {}}
for backend in ["gloo"] + (["nccl"] if len(gpus) >= 2 and dist.is_nccl_available() else []):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    members = [subprocess.Popen([sys.executable, "-c", MEMBER, backend, str(port), str(r)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for r in range(2)]
    said = [m.communicate(timeout=90) for m in members]
    sums = [json.loads(o.split("DOCTOR ", 1)[1])["sum"] for o, _ in said if "DOCTOR " in o]
    errors = [e.strip().splitlines()[-1] for o, e in said if "DOCTOR " not in o and e.strip()]
    facts["groups"][backend] = {"sums": sums, "error": errors[0] if errors else ""}
print("DOCTOR " + json.dumps(facts))
"""


def _probe(args: list[str], timeout: float, env: dict | None = None) -> dict:
    """Run a probe program; return the JSON it printed after 'DOCTOR ', or {'error': why}. A probe that gives no
    answer within `timeout` s is killed with everything it started (an mpiexec's ranks too) and says so
    ({'error': ..., 'hung': True}), with the last line it printed."""
    run_env = dict(os.environ if env is None else env, TF_CPP_MIN_LOG_LEVEL="2", PYTHONWARNINGS="ignore")
    try:
        process = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=run_env, start_new_session=True
        )
    except OSError as exc:
        return {"error": str(exc)}
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        processes.kill_group(process.pid)
        try:
            stdout, stderr = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a process that left the group still holds the output: do without it
            process.kill()
            stdout, stderr = "", ""
        said = _last_line(stderr) or _last_line(stdout)
        return {
            "error": f"no answer within {timeout:.0f} s" + (f"; it last said: {said}" if said else ""),
            "hung": True,
        }
    for line in stdout.splitlines():
        if line.startswith("DOCTOR "):
            return json.loads(line[len("DOCTOR ") :])
    return {"error": _last_line(stderr) or _last_line(stdout) or f"exit status {process.returncode}"}


def _last_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[-1].strip() if lines else ""


def check_python() -> Check:
    version = platform.python_version()
    ok = sys.version_info[:2] == (3, 11)
    return Check("python", ok, f"{version} ({sys.executable})", "" if ok else "use Python 3.11 (the tested stack)")


def check_tensorflow_and_horovod() -> list[Check]:
    """TensorFlow, Horovod and the GPUs: one probe answers all three."""
    facts = _probe([sys.executable, "-c", TF_PROBE], timeout=180)
    if "error" in facts:
        tf = Check("tensorflow", False, facts["error"], "reinstall the stack: make setup (GPU nodes: make setup GPU=1)")
        return [tf, Check("horovod", False, "not checked: TensorFlow does not import", "make setup"), check_gpus(None)]
    gpus = facts["gpus"]
    devices = f"{len(gpus)} GPU(s): {', '.join(gpus)}" if gpus else "no GPU (CPU only)"
    build = f"CUDA build (CUDA {facts['cuda']}, cuDNN {facts['cudnn']})" if facts["cuda_build"] else "CPU build"
    tf = Check(
        "tensorflow",
        True,
        f"{facts['version']} {build}, {devices}",
        facts={k: facts[k] for k in ("version", "cpus", "gpus", "cuda_build", "cuda", "cudnn")},
    )
    hvd = facts["horovod"]
    if "error" in hvd:
        return [
            tf,
            Check("horovod", False, hvd["error"], "rebuild Horovod against this TensorFlow: make setup"),
            check_gpus(facts),
        ]
    missing = [c for c in ("MPI", "Gloo") if c not in hvd["controllers"]]
    detail = (
        f"{hvd['version']}: frameworks {', '.join(hvd['frameworks'])}; controllers {', '.join(hvd['controllers']) or 'none'}; "
        f"tensor operations {', '.join(hvd['tensor_operations']) or 'none'}"
    )
    fix = (
        f"Horovod was built without {' and '.join(missing)}: install Open MPI, then rebuild with make setup"
        if missing
        else ""
    )
    return [tf, Check("horovod", not missing, detail, fix, facts=hvd), check_gpus(facts)]


def _driver_gpus() -> int | None:
    """How many GPUs the NVIDIA driver lists (nvidia-smi -L), or None without a driver."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else None


def check_gpus(facts: dict | None) -> Check:
    """The GPUs TensorFlow sees, CUDA/cuDNN/NCCL versions and whether Horovod all-reduces with NCCL."""
    driver = _driver_gpus()
    if facts is None:
        return Check(
            "gpu",
            False,
            "not checked: TensorFlow does not import",
            "make setup (GPU nodes: make setup GPU=1)",
            essential=False,
            facts={"gpus": None, "driver_gpus": driver},
        )
    hvd_nccl = facts["horovod"].get("nccl_built")
    gpus = facts["gpus"]
    summary = {
        "gpus": gpus,
        "driver_gpus": driver,
        "cuda_build": facts["cuda_build"],
        "cuda": facts["cuda"],
        "cudnn": facts["cudnn"],
        "nccl": facts["nccl"],
        "horovod_nccl": hvd_nccl,
    }
    if not gpus:
        if driver:
            fix = (
                "TensorFlow is the CPU build: make setup GPU=1"
                if not facts["cuda_build"]
                else "TensorFlow's CUDA build sees none: check CUDA_VISIBLE_DEVICES and that the driver suits CUDA "
                f"{facts['cuda']} (nvidia-smi)"
            )
            return Check(
                "gpu",
                False,
                f"the driver lists {driver} GPU(s) but TensorFlow sees none",
                fix,
                essential=False,
                facts=summary,
            )
        return Check(
            "gpu",
            True,
            "no GPU: TensorFlow sees none, so training runs on the CPUs (on a GPU node: make setup GPU=1)",
            essential=False,
            facts=summary,
        )
    detail = (
        f"{len(gpus)} GPU(s) seen by TensorFlow (CUDA {facts['cuda']}, cuDNN {facts['cudnn']}, "
        f"NCCL {facts['nccl'] or 'not found'}); Horovod {'all-reduces with NCCL' if hvd_nccl else 'has no NCCL'}"
    )
    fix = (
        ""
        if hvd_nccl
        else "Horovod all-reduces GPU tensors through host memory: rebuild it with NCCL, make setup GPU=1"
    )
    return Check("gpu", bool(hvd_nccl), detail, fix, essential=False, facts=summary)


def check_mpi() -> Check:
    try:
        version = mpi.version()
        cmd = mpi.command(2, sys.executable, "-c", MPI_PROBE)
    except UserError as exc:
        return Check("mpi", False, str(exc), mpi.INSTALL_HINT)
    facts, again = _mpi_probe(cmd), ""
    if facts.get("hung"):
        # A 2-rank job that answers in a second was once seen to give no answer in 90 s on a loaded machine (a CI
        # run; 1,300 jobs beside busy processes here did not repeat it): one such job says little about the
        # install, two in a row do. The report keeps what the first one said.
        again = f" (a first mpiexec -n 2 hung: {facts['error']}; the second answered)"
        facts = _mpi_probe(cmd)
    if "error" in facts:
        twice = " (twice in a row)" if again and facts.get("hung") else ""
        return Check(
            "mpi",
            False,
            f"{version}; mpiexec -n 2 failed: {facts['error']}{twice}",
            "check the Open MPI install and mpi4py",
        )
    ok = facts["size"] == 2 and facts["sum"] == 3
    detail = (
        f"{version}; mpiexec started 2 ranks, all-reduce {'correct' if ok else 'WRONG'}; "
        f"mpi4py {facts['mpi4py']} on {facts['library']}{again}"
    )
    return Check(
        "mpi",
        ok,
        detail,
        "" if ok else "mpi4py is built against another MPI: pip install --force-reinstall --no-binary mpi4py mpi4py",
        facts={"version": version, "ranks_started": facts["size"], **facts},
    )


def _mpi_probe(cmd: list[str]) -> dict:
    """MPI_PROBE's answer from one job, its shared-memory files in a folder of their own (gone after it)."""
    segments = mpi.segments_folder()
    try:
        return _probe(cmd, timeout=MPI_TIMEOUT, env=mpi.with_segments(mpi.env(), segments))
    finally:
        shutil.rmtree(segments, ignore_errors=True)


def check_torch() -> Check:
    """PyTorch's version and build, its devices, and a real 2-rank all-reduce over gloo (and NCCL with 2 GPUs)."""
    facts = _probe([sys.executable, "-c", TORCH_PROBE.replace("MEMBER", repr(TORCH_MEMBER), 1)], timeout=240)
    if "error" in facts:
        return Check("torch", False, facts["error"], "reinstall the stack: make setup (GPU nodes: make setup GPU=1)")
    build = f"CUDA build (CUDA {facts['cuda']})" if facts["cuda"] else "CPU build"
    devices = f"{len(facts['gpus'])} GPU(s): {', '.join(facts['gpus'])}" if facts["gpus"] else "no GPU"
    groups, broken = [], []
    for backend, group in facts["groups"].items():
        if group["sums"] == [3.0, 3.0]:
            groups.append(f"a 2-rank {backend} group all-reduced correctly")
        else:
            broken.append(backend)
            why = group["error"] or f"it summed {group['sums']}, not 3 on both ranks"
            groups.append(f"a 2-rank {backend} group failed: {why}")
    if facts["gpus"] and "nccl" not in facts["groups"]:
        groups.append("NCCL not tried (a 2-rank group needs 2 GPUs)")
    fix = (
        f"torch.distributed's {' and '.join(broken)} cannot form a group here: check that 127.0.0.1 is reachable "
        "and that no firewall blocks loopback ports (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME name the interface)"
        if broken
        else ""
    )
    detail = f"{facts['version']} {build}, {devices}; " + "; ".join(groups)
    return Check("torch", not broken, detail, fix, facts=facts)


def check_ipyparallel() -> Check:
    from course.cluster import HEARTBEAT

    facts = _probe([sys.executable, "-c", IPP_PROBE.replace("HEARTBEAT", repr(HEARTBEAT), 1)], timeout=120)
    if "error" in facts:
        return Check("ipyparallel", False, facts["error"], "reinstall the stack: make setup")
    return Check(
        "ipyparallel",
        True,
        f"{facts['version']}; a 1-engine local cluster started in {facts['start_s']:.1f} s "
        f"and stopped in {facts['stop_s']:.1f} s",
        facts=facts,
    )


def check_nbgrader() -> Check:
    try:
        from importlib.metadata import version

        return Check("nbgrader", True, version("nbgrader"))
    except Exception as exc:  # PackageNotFoundError
        return Check("nbgrader", False, str(exc), "reinstall the stack: make setup")


def check_slurm() -> Check:
    sbatch = shutil.which("sbatch")
    if not sbatch:
        return Check(
            "slurm",
            False,
            "sbatch not found (fine on a laptop or Binder)",
            "on an HPC site run the course where Slurm's commands are on PATH",
            essential=False,
        )
    down = slurm.controller_down()
    if down:
        return Check("slurm", False, f"sbatch at {sbatch}, {down}", "check that slurmctld runs", essential=False)
    found = slurm.partitions()  # the default first
    if not found:
        detail = f"sbatch at {sbatch}, but sinfo lists no partition"
        return Check("slurm", False, detail, "check that slurmctld runs and has a partition", essential=False)
    names = [p.name for p in found]
    return Check(
        "slurm",
        True,
        f"sbatch at {sbatch}; partitions: {', '.join([f'{names[0]} (default)', *names[1:]])}",
        essential=False,
        facts={"partitions": names},
    )


def check_datasets() -> Check:
    network = data.network_allows_download()
    where = {}
    for name in data.DATASETS:
        found = data.data_dir_file(name)
        where[name] = (
            str(found)
            if found
            else "keras-cache"
            if data.in_keras_cache(name)
            else "download"
            if network
            else "fallback"
        )
    missing = [n for n, w in where.items() if w == "fallback"]
    detail = "; ".join(f"{n}: {w}" for n, w in where.items())
    fix = (
        (
            f"{', '.join(missing)} will use the small digits fallback: run 'python -m course data fetch NAME --to DIR' "
            "on a machine with internet and set COURSE_DATA_DIR=DIR"
        )
        if missing
        else ""
    )
    return Check("datasets", not missing, detail, fix, essential=False, facts=where)


def check_resources() -> Check:
    memory = psutil.virtual_memory()
    disk = shutil.disk_usage(Path.cwd())
    detail = (
        f"{os.cpu_count()} cores, {memory.total / 2**30:.1f} GiB memory ({memory.available / 2**30:.1f} free), "
        f"{disk.free / 2**30:.1f} GiB free disk; profile {profile.name()}"
    )
    ok = disk.free > 2 * 2**30
    return Check(
        "resources",
        ok,
        detail,
        "" if ok else "free some disk space (2 GiB or more)",
        essential=False,
        facts={
            "cores": os.cpu_count(),
            "memory_bytes": memory.total,
            "disk_free_bytes": disk.free,
            "profile": profile.name(),
        },
    )


def run_checks() -> list[Check]:
    """All checks, the slow ones side by side."""
    with ThreadPoolExecutor(max_workers=5) as pool:
        slow = [
            pool.submit(check) for check in (check_tensorflow_and_horovod, check_torch, check_mpi, check_ipyparallel)
        ]
        quick = [check_python(), check_nbgrader(), check_slurm(), check_datasets(), check_resources()]
        tf_hvd, torch_check, mpi_check, ipp_check = (f.result() for f in slow)
    return [quick[0], *tf_hvd, torch_check, mpi_check, ipp_check, *quick[1:]]
