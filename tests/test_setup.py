"""The set-up scripts: a second run is a no-op, and a user who is not root is told exactly what to install."""

import json
import os
import shlex
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.conftest import ROOT

SYSTEM = str(ROOT / "scripts" / "setup-system.sh")
NOT_INSTALLED = "sl"  # a small Debian package the course never needs


def test_installed_packages_need_nothing():
    result = subprocess.run(["bash", SYSTEM, "openmpi-bin"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout == "" and result.stderr == ""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"), reason="needs root to act as another user")
def test_a_user_who_is_not_root_is_told_what_to_install():
    if subprocess.run(["dpkg", "-s", NOT_INSTALLED], capture_output=True).returncode == 0:
        pytest.skip(f"{NOT_INSTALLED} is installed on this machine, so nothing would be missing")
    # The script arrives on stdin: 'nobody' may not be allowed to read this checkout.
    result = subprocess.run(
        ["runuser", "-u", "nobody", "--", "bash", "-s", NOT_INSTALLED],
        cwd="/",
        input=open(SYSTEM).read(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert f"as root:   apt-get install -y {NOT_INSTALLED}" in result.stderr
    assert "module load" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"), reason="needs root to act as another user")
def test_a_missing_compiler_is_named_with_the_packages():
    """Horovod compiles at install time: without g++ on PATH the default set-up names it (checked by what works)."""
    import tempfile

    home = tempfile.TemporaryDirectory(prefix="course-setup-")  # under /tmp: 'nobody' may not enter pytest's
    tools = Path(home.name) / "bin"
    tools.mkdir()
    Path(home.name).chmod(0o755)
    for tool in ("bash", "dpkg", "dpkg-query", "id", "cat", "make", "cmake"):
        (tools / tool).symlink_to(os.path.realpath(shutil.which(tool)))
    (tools / "python3").symlink_to(shutil.which("python3"))
    with home:
        result = subprocess.run(
            ["runuser", "-u", "nobody", "--", "/bin/bash", "-c", f"PATH={tools}; bash -s"],
            cwd="/",
            input=open(SYSTEM).read(),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1, result.stdout + result.stderr
    install = next(line for line in result.stderr.splitlines() if "as root:   apt-get install -y" in line)
    assert "g++" in install.split() and "make" not in install.split(), result.stderr


def test_second_python_setup_changes_nothing():
    before = sorted(p.name for p in (ROOT / ".venv").iterdir())
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup-python.sh")], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "[setup]" not in result.stdout  # every step was skipped
    assert sorted(p.name for p in (ROOT / ".venv").iterdir()) == before


# ---------------------------------------------------------------------------------------- GPU nodes (issue 19)
# One TensorFlow per set: pip resolves the course's own requirements (the metadata setuptools builds from
# pyproject.toml) for `.[gpu,test]` and `.[cpu,test]`. Each set's first-level distributions are resolved with
# --no-deps: a full resolution downloads every nvidia-* wheel here (about 2.3 GB, a minute: this index serves no
# separate metadata), so the nvidia-* wheels are read from the `and-cuda` extra pip reports for tensorflow.

SETUP_PYTHON = str(ROOT / "scripts" / "setup-python.sh")


def _pypi_reachable() -> str:
    try:
        urllib.request.urlopen("https://pypi.org/simple/tensorflow-cpu/", timeout=15).close()
        return ""
    except OSError as exc:
        return f"PyPI is not reachable ({exc}): the resolver dry run needs it"


def _pip_report(tmp: Path, name: str, *args: str) -> list[dict]:
    """`pip install --dry-run --ignore-installed --report` of ARGS; the distributions pip would install."""
    report = tmp / f"{name}.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--dry-run",
            "--ignore-installed",
            "--timeout",
            "30",
            "--retries",
            "1",
            "--report",
            str(report),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(report.read_text())["install"]


@pytest.fixture(scope="module")
def course_requirements(tmp_path_factory):
    """The course's requirements as pip reads them from the metadata setuptools builds from pyproject.toml."""
    if why := _pypi_reachable():
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("resolve")
    project = tmp / "project"  # pyproject.toml with an empty package: pip builds metadata, never touches the checkout
    (project / "course").mkdir(parents=True)
    (project / "course" / "__init__.py").touch()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, project / name)
    (course,) = _pip_report(tmp, "course", "--no-deps", "--no-build-isolation", str(project))
    return tmp, [Requirement(r) for r in course["metadata"]["requires_dist"]]


def _resolve(course_requirements, extras: tuple[str, ...]) -> dict[str, dict]:
    """{name: report item} of the set `.[EXTRAS]`, its first-level distributions resolved by pip."""
    tmp, requirements = course_requirements
    wanted = [r for r in requirements if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in extras)]
    line = [str(r).split(";")[0].strip() for r in wanted]
    return {item["metadata"]["name"].lower(): item for item in _pip_report(tmp, "-".join(extras), "--no-deps", *line)}


def _cuda_wheels(tensorflow: dict) -> set[str]:
    """The nvidia-* wheels that tensorflow's requested extras bring (pip's report: requires_dist, requested_extras)."""
    extras = tensorflow.get("requested_extras") or []
    return {
        Requirement(r).name
        for r in tensorflow["metadata"].get("requires_dist", [])
        if Requirement(r).name.startswith("nvidia-")
        and Requirement(r).marker
        and any(Requirement(r).marker.evaluate({"extra": e}) for e in extras)
    }


def test_plain_pip_install_needs_no_compiler_and_no_tensorflow(course_requirements):
    """`pip install .` works outside make: Horovod (built by the set-up script) and TensorFlow are extras."""
    _, requirements = course_requirements
    unconditional = {r.name for r in requirements if r.marker is None}
    assert not {n for n in unconditional if n.startswith(("horovod", "tensorflow"))}, unconditional
    assert {"horovod", "tensorflow-cpu", "tensorflow"} <= {r.name for r in requirements}


def test_gpu_set_has_the_cuda_tensorflow_and_no_tensorflow_cpu(course_requirements):
    resolved = _resolve(course_requirements, ("gpu", "test"))
    assert "tensorflow" in resolved and "tensorflow-cpu" not in resolved, sorted(resolved)
    assert resolved["tensorflow"]["metadata"]["version"] == "2.15.1"
    cuda = _cuda_wheels(resolved["tensorflow"])
    assert {"nvidia-nccl-cu12", "nvidia-cudnn-cu12", "nvidia-cuda-runtime-cu12"} <= cuda, cuda


def test_cpu_set_has_tensorflow_cpu_and_no_cuda(course_requirements):
    resolved = _resolve(course_requirements, ("cpu", "test"))
    assert "tensorflow-cpu" in resolved and "tensorflow" not in resolved, sorted(resolved)
    assert resolved["tensorflow-cpu"]["metadata"]["version"] == "2.15.1"
    assert not _cuda_wheels(resolved["tensorflow-cpu"]) and not [n for n in resolved if n.startswith("nvidia-")]


# The Horovod build, printed by the set-up script without running it. nvcc is a stand-in on PATH (this machine has
# no CUDA 12 toolkit), NCCL a folder laid out like the nvidia-nccl-cu12 wheel's nvidia/nccl, found on PYTHONPATH.


def _fake_nvcc(folder: Path, release: str) -> Path:
    (folder / "bin").mkdir(parents=True)
    nvcc = folder / "bin" / "nvcc"
    nvcc.write_text(
        '#!/bin/sh\ncase "$*" in *--version*) echo "Cuda compilation tools, release '
        f'{release}, V{release}.140" ;; *) echo "#\\$ _HERE_=$(dirname "$0")" ;; esac\n'
    )
    nvcc.chmod(0o755)
    return folder


def _setup_env(tmp_path: Path, gpu: str | None, cuda: Path | None, nccl: bool) -> dict:
    """The environment of a user on a node: PATH without any real nvcc, plus the stand-ins asked for."""
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "HOROVOD_NCCL_HOME", "COURSE_GPU", "GPU")}
    path = [d for d in env["PATH"].split(os.pathsep) if d and not (Path(d) / "nvcc").exists()]
    env["PATH"] = os.pathsep.join(([str(cuda / "bin")] if cuda else []) + path)
    if gpu:
        env["COURSE_GPU"] = gpu
    if nccl:
        wheel = tmp_path / "site-packages" / "nvidia" / "nccl"
        (wheel / "include").mkdir(parents=True)
        (wheel / "lib").mkdir()
        (wheel / "include" / "nccl.h").write_text("#define NCCL_MAJOR 2\n#define NCCL_MINOR 16\n")
        (wheel / "lib" / "libnccl.so.2").write_bytes(b"")
        env["PYTHONPATH"] = str(tmp_path / "site-packages")
    return env


def _print_build(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", SETUP_PYTHON, "--print-horovod-build"], capture_output=True, text=True, env=env, timeout=60
    )


def _build_environment(line: str) -> tuple[dict, list[str]]:
    """(NAME=VALUE settings, command) of the printed `env NAME=VALUE ... command` line."""
    words = shlex.split(line)
    assert words[0] == "env", line
    settings = [w for w in words[1:] if "=" in w.split("/")[0]]
    return dict(w.split("=", 1) for w in settings), words[1 + len(settings) :]


def test_horovod_gpu_build_uses_nccl_from_the_wheel_and_the_cuda_toolkit(tmp_path):
    cuda = _fake_nvcc(tmp_path / "cuda-12.2", "12.2")
    result = _print_build(_setup_env(tmp_path, "1", cuda, nccl=True))
    assert result.returncode == 0 and result.stderr == "", result.stderr
    env, command = _build_environment(result.stdout)
    wheel = tmp_path / "site-packages" / "nvidia" / "nccl"
    assert env["HOROVOD_GPU_OPERATIONS"] == "NCCL" and env["HOROVOD_CUDA_HOME"] == str(cuda)
    assert env["HOROVOD_NCCL_HOME"] == str(wheel) and env["HOROVOD_NCCL_INCLUDE"] == str(wheel / "include")
    assert env["HOROVOD_NCCL_LINK"] == "SHARED" and f"-rpath,{wheel / 'lib'}" in env["LDFLAGS"]
    assert Path(env["HOROVOD_NCCL_LIB"]).name == "nccl"  # where set-up links libnccl.so to the wheel's libnccl.so.2
    assert {env[k] for k in ("HOROVOD_WITH_TENSORFLOW", "HOROVOD_WITH_MPI", "HOROVOD_WITH_GLOO")} == {"1"}
    assert command[-1] == "horovod==0.28.1" and {"--no-build-isolation", "--no-cache-dir"} <= set(command)


def test_horovod_cpu_build_has_no_gpu_operations(tmp_path):
    result = _print_build(_setup_env(tmp_path, None, _fake_nvcc(tmp_path / "cuda", "12.2"), nccl=True))
    env, command = _build_environment(result.stdout)
    assert result.returncode == 0 and not [k for k in env if "NCCL" in k or "GPU" in k or "CUDA" in k], env
    assert env["HOROVOD_WITH_MPI"] == "1" and command[-1] == "horovod==0.28.1"


@pytest.mark.parametrize(
    "cuda, nccl, said",
    [
        (None, True, "module load cuda"),
        ("13.0", True, "is CUDA 13.0"),
        ("12.2", False, "nvidia-nccl-cu12"),
    ],
)
def test_a_gpu_request_without_cuda_or_nccl_says_what_is_missing(tmp_path, cuda, nccl, said):
    toolkit = _fake_nvcc(tmp_path / "cuda", cuda) if cuda else None
    result = _print_build(_setup_env(tmp_path, "1", toolkit, nccl))
    assert result.returncode == 1 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and said in result.stderr, result.stderr


def test_a_gpu_set_up_without_cuda_stops_before_changing_anything(tmp_path):
    """The real set-up, in a copy whose .venv/bin/python only records its calls: no pip runs, one line says why."""
    (tmp_path / "scripts").mkdir()
    for name in ("scripts/setup-python.sh", "scripts/python-choice.sh", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    calls = tmp_path / "calls"
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexit 1\n')
    python.chmod(0o755)
    result = subprocess.run(
        ["bash", str(tmp_path / "scripts" / "setup-python.sh")],
        capture_output=True,
        text=True,
        env=_setup_env(tmp_path, "1", None, nccl=False),
        timeout=60,
    )
    assert result.returncode == 1 and "module load cuda" in result.stderr and len(result.stderr.splitlines()) == 1
    assert not calls.exists(), calls.read_text()


def test_a_second_checkout_beside_a_shared_venv_runs_its_own_course_in_every_python_it_starts(tmp_path):
    """The environment's editable install names the first checkout; a rank or kernel that a second checkout starts
    imports the second's course, not the first's (which made every mutant of a new exercise 'fail')."""
    second = tmp_path / "second"
    shutil.copytree(ROOT / "course", second / "course", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", second)
    child = "import course; print(course.__file__)"
    parent = f"import course, subprocess, sys; print(course.__file__); subprocess.run([sys.executable, '-c', {child!r}], cwd='/')"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", parent], cwd=second, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(second / "course" / "__init__.py")] * 2, out.stdout
