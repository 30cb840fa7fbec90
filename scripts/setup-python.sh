#!/usr/bin/env bash
# Install the course's Python stack into .venv. Idempotent: every step is skipped when already done.
# Horovod compiles against the TensorFlow that is already installed, so the order matters:
# TensorFlow and the build tools first, then Horovod with --no-build-isolation, then the rest.
#
# GPU nodes: `make setup GPU=1` (or COURSE_GPU=1 make setup) installs the CUDA build of TensorFlow instead of
# tensorflow-cpu (pyproject.toml's extras `gpu` and `cpu`: one or the other, never both) and builds Horovod with
# NCCL, from the nvidia-nccl-cu12 wheel that the CUDA build brings, which needs the CUDA toolkit's nvcc.
# `bash scripts/setup-python.sh --print-horovod-build` prints the Horovod build (environment and command), runs nothing.
# `SETUP_VENV=DIR bash scripts/setup-python.sh --stack-only` installs only TensorFlow and Horovod into the
# environment DIR (made beforehand): scripts/setup-hub.sh uses it for a hub's shared environment.
#
# The Python .venv is made from (scripts/python-choice.sh): `make setup PYTHON=/path/to/python3.11`, else a Python
# 3.11 on PATH, else one uv fetches; an existing .venv of another Python is reported, never reused.
# `bash scripts/setup-python.sh --print-python` prints that Python (fetching it if need be) and stops;
# `--venv-only` makes the environment (SETUP_VENV, else .venv) and stops: scripts/setup-hub.sh makes its own with it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python-choice.sh
VENV=${SETUP_VENV:-.venv}
PY=$VENV/bin/python
PIP="$PY -m pip --disable-pip-version-check -q"

# A requirement of pyproject.toml: "name==x" of `dependencies`, or the one requirement of an extra (extra NAME).
pin() { sed -n "s/^ *\"\($1[=<>][^\"]*\)\",*$/\1/p" pyproject.toml | head -n 1; }
extra() { sed -n "s/^$1 = \[\"\([^\"]*\)\"\]$/\1/p" pyproject.toml | head -n 1; }

have() { $PY - "$1" <<'PYEOF' 2>/dev/null
import sys
from importlib.metadata import version
from packaging.requirements import Requirement
req = Requirement(sys.argv[1])
sys.exit(0 if req.specifier.contains(version(req.name), prereleases=True) else 1)
PYEOF
}

gpu_requested() { case "${COURSE_GPU:-${GPU:-}}" in "" | 0 | no | false) return 1 ;; *) return 0 ;; esac; }

# The CUDA toolkit Horovod's NCCL operations compile with: CUDA_HOME, else the one of the nvcc on PATH (asked
# where it lives: sites often put a wrapper script on PATH). TensorFlow 2.15's CUDA build uses CUDA 12.
cuda_home() {
  if [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ]; then echo "$CUDA_HOME"; return; fi
  local nvcc here
  nvcc=$(command -v nvcc) || return 1
  here=$("$nvcc" --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ _HERE_=//p' | head -n 1) || true
  dirname "${here:-$(dirname "$(readlink -f "$nvcc")")}"
}
cuda_version() { "$1/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9.]*\),.*/\1/p' | head -n 1; }
CUDA_MAJOR=12

# NCCL: the site's (HOROVOD_NCCL_HOME already set) or the nvidia-nccl-cu12 wheel's nvidia/nccl folder.
nccl_home() {
  if [ -n "${HOROVOD_NCCL_HOME:-}" ]; then echo "$HOROVOD_NCCL_HOME"; return; fi
  $PY -c 'import importlib.util as u; s = u.find_spec("nvidia.nccl"); print(list(s.submodule_search_locations)[0])' \
    2>/dev/null
}

# Prints the CUDA 12 toolkit's folder; 1 with what is missing (and how to get it) on stderr.
need_cuda() {
  local cuda cuda_v
  if ! cuda=$(cuda_home); then
    echo "[setup] GPU set-up needs the CUDA toolkit to build Horovod's NCCL operations: no nvcc on PATH and no" \
      "CUDA_HOME. Load it (e.g. 'module load cuda', CUDA 12.2 matches TensorFlow 2.15) or set CUDA_HOME," \
      "then run 'make setup GPU=1' again." >&2
    return 1
  fi
  cuda_v=$(cuda_version "$cuda")
  if [ "${cuda_v%%.*}" != "$CUDA_MAJOR" ]; then
    echo "[setup] GPU set-up: the nvcc in $cuda is CUDA ${cuda_v:-of unknown version}, but $(extra gpu) uses" \
      "CUDA $CUDA_MAJOR. Load a CUDA $CUDA_MAJOR toolkit (e.g. 'module load cuda/12.2') or set CUDA_HOME to one," \
      "then run 'make setup GPU=1' again." >&2
    return 1
  fi
  echo "$cuda"
}

# Prints the Horovod build as one `env NAME=VALUE ... pip install` command (a shell line); 1 with the reason
# on stderr when a GPU build lacks CUDA or NCCL.
horovod_build() {
  local hvd env=(HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITH_MPI=1
    HOROVOD_WITH_GLOO=1 CMAKE_POLICY_VERSION_MINIMUM=3.5 MAKEFLAGS=-j"$(nproc)")
  local options=(--no-build-isolation)
  hvd=$(extra horovod)
  if gpu_requested; then
    local cuda nccl
    cuda=$(need_cuda) || return 1
    nccl=$(nccl_home) || true
    if [ -z "$nccl" ] || [ ! -f "$nccl/include/nccl.h" ] || ! ls "$nccl"/lib/libnccl.so* >/dev/null 2>&1; then
      echo "[setup] GPU set-up found no NCCL (nccl.h and libnccl.so): install $(extra gpu), which brings the" \
        "nvidia-nccl-cu12 wheel, or set HOROVOD_NCCL_HOME to your site's NCCL." >&2
      return 1
    fi
    # The wheel ships lib/libnccl.so.2 only; CMake links -lnccl, so a libnccl.so link goes into .venv.
    local lib="$nccl/lib"
    [ -e "$lib/libnccl.so" ] || lib="$(cd "$VENV" && pwd)/lib/nccl"
    env+=(HOROVOD_GPU_OPERATIONS=NCCL "HOROVOD_CUDA_HOME=$cuda" "HOROVOD_NCCL_HOME=$nccl"
      "HOROVOD_NCCL_INCLUDE=$nccl/include" "HOROVOD_NCCL_LIB=$lib" HOROVOD_NCCL_LINK=SHARED
      "LDFLAGS=-Wl,-rpath,$nccl/lib")
    options+=(--no-cache-dir --force-reinstall --no-deps)  # pip's wheel cache may hold the CPU build
  fi
  printf 'env'
  printf ' %q' "${env[@]}" "$PY" -m pip install "${options[@]}" "$hvd"
  printf '\n'
}

if [ "${1:-}" = "--print-horovod-build" ]; then
  horovod_build
  exit
fi

if gpu_requested; then need_cuda >/dev/null || exit 1; fi  # before anything changes: says what is missing

check_env_python setup "$VENV" || exit 1
if [ "${1:-}" = "--print-python" ]; then
  find_python setup "${PYTHON:-}" >&2 || exit 1
  echo "$PYTHON_FOUND"
  exit
fi
if [ ! -x "$PY" ]; then
  find_python setup "${PYTHON:-}" || exit 1
  echo "[setup] creating $VENV with $PYTHON_FOUND"
  "$PYTHON_FOUND" -m venv "$VENV"
  $PIP install --upgrade "pip>=24" wheel setuptools
fi
if [ "${1:-}" = "--venv-only" ]; then exit 0; fi

# One TensorFlow: the CUDA build on request, or when it is already there (a later plain `make setup` keeps it).
TF_CPU=$(extra cpu) TF_GPU=$(extra gpu)
if gpu_requested || { have "$TF_GPU" && ! have "$TF_CPU"; }; then BUILD=gpu TF=$TF_GPU; else BUILD=cpu TF=$TF_CPU; fi
if gpu_requested && have "$TF_CPU"; then
  echo "[setup] replacing tensorflow-cpu by the CUDA build (both write the same tensorflow/ package)"
  $PIP uninstall -y tensorflow-cpu horovod
  if have "$TF_GPU"; then $PIP install --force-reinstall --no-deps "tensorflow==${TF_GPU#*==}"; fi  # files it shared
fi
if ! have "$TF"; then
  echo "[setup] installing $TF and Horovod's build tools (a few minutes the first time)"
  $PIP install "$TF" "$(pin numpy)" cmake "$(pin cloudpickle)" psutil pyyaml packaging cffi
fi

HVD=$(extra horovod)
HVD_TF_OPS=$(ls "$VENV"/lib/python3*/site-packages/horovod/tensorflow/mpi_lib*.so 2>/dev/null || true)
hvd_nccl() { $PY -c 'import sys, horovod.tensorflow as h; sys.exit(0 if h.nccl_built() else 1)' >/dev/null 2>&1; }
if ! have "$HVD" || [ -z "$HVD_TF_OPS" ] || { gpu_requested && ! hvd_nccl; }; then
  BUILD_LINE=$(horovod_build)
  if gpu_requested; then
    echo "[setup] building $HVD with TensorFlow, MPI, Gloo and NCCL (GPU operations; a few minutes)"
    NCCL=$(nccl_home)
    if [ ! -e "$NCCL/lib/libnccl.so" ]; then
      mkdir -p "$VENV/lib/nccl" && ln -sf "$NCCL/lib/libnccl.so.2" "$VENV/lib/nccl/libnccl.so"
    fi
  else
    echo "[setup] building $HVD with TensorFlow, MPI and Gloo (about 3 minutes the first time; pip caches the wheel)"
  fi
  eval "$BUILD_LINE"
fi

# PyTorch: its CPU build from PyTorch's own index where that answers (the default index serves Linux only the CUDA
# build, about 3 GB with its CUDA libraries), the CUDA build from the default index with GPU=1.
TORCH=$(pin torch)
TORCH_CPU_INDEX=${COURSE_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
torch_build() { $PY -c 'from importlib.metadata import version; print(version("torch"))' 2>/dev/null; }
reaches() { $PY -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)' "$1" 2>/dev/null; }
if ! have "$TORCH" || { gpu_requested && [[ "$(torch_build)" == *+cpu ]]; }; then
  FROM=()
  if gpu_requested; then
    echo "[setup] installing $TORCH, the CUDA build, from the default index (about 3 GB with its CUDA libraries)"
    FROM=(--force-reinstall)
  elif reaches "$TORCH_CPU_INDEX/torch/"; then
    echo "[setup] installing $TORCH, the CPU build, from PyTorch's CPU index $TORCH_CPU_INDEX (about 200 MB)"
    FROM=(--index-url "$TORCH_CPU_INDEX")
  else
    echo "[setup] PyTorch's CPU index $TORCH_CPU_INDEX cannot be reached: installing $TORCH from the default index" \
      "(its CPU build where pip's local packages hold one, else on Linux the CUDA build, about 3 GB)"
  fi
  $PIP install "${FROM[@]}" "$TORCH" || {
    echo "[setup] $TORCH could not be installed from either index: download its wheel for Python 3.11 where one" \
      "can be reached, then run '$PY -m pip install FILE.whl' and make setup again" >&2
    exit 1
  }
  echo "[setup] torch $(torch_build) installed"
fi
if [ "${1:-}" = "--stack-only" ]; then exit 0; fi

STAMP=.venv/.course-installed  # "gpu" after a GPU set-up; empty after a CPU one (as set-ups before GPU=1 left it)
MARK=""
if [ "$BUILD" = gpu ]; then MARK=gpu; fi
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ] || [ "$(cat "$STAMP")" != "$MARK" ]; then
  echo "[setup] installing the course package and its dependencies"
  $PIP install -e ".[$BUILD,test,docs]"
  printf '%s' "$MARK" >"$STAMP"
fi

# A workshop room needs no pop-ups: JupyterLab's news and update checks are off in this environment.
OVERRIDES=.venv/share/jupyter/lab/settings/overrides.json
if [ ! -f "$OVERRIDES" ]; then
  mkdir -p "$(dirname "$OVERRIDES")"
  echo '{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}}' > "$OVERRIDES"
fi

KERNEL=ddl-hpc
if [ ! -f ".venv/share/jupyter/kernels/$KERNEL/kernel.json" ]; then
  echo "[setup] registering the Jupyter kernel '$KERNEL' (Python (DDL on HPC))"
  $PY -m ipykernel install --sys-prefix --name "$KERNEL" --display-name "Python (DDL on HPC)" >/dev/null
fi
