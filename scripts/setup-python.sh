#!/usr/bin/env bash
# Install the course's Python stack into .venv. Idempotent: every step is skipped when already done.
# Horovod compiles against the TensorFlow that is already installed, so the order matters:
# TensorFlow and the build tools first, then Horovod with --no-build-isolation, then the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
PIP="$PY -m pip --disable-pip-version-check -q"

if [ ! -x "$PY" ]; then
  echo "[setup] creating .venv with $(command -v python3.11 || command -v python3)"
  "$(command -v python3.11 || command -v python3)" -m venv .venv
  $PIP install --upgrade "pip>=24" wheel setuptools
fi

pin() { sed -n "s/^ *\"\($1[=<>][^\"]*\)\",*$/\1/p" pyproject.toml | head -n 1; }

have() { $PY - "$1" <<'PYEOF' 2>/dev/null
import sys
from importlib.metadata import version
from packaging.requirements import Requirement
req = Requirement(sys.argv[1])
sys.exit(0 if req.specifier.contains(version(req.name), prereleases=True) else 1)
PYEOF
}

TF=$(pin tensorflow-cpu)
if [ -n "${COURSE_GPU:-}" ]; then TF="tensorflow[and-cuda]==${TF#*==}"; fi
if ! have "$TF"; then
  echo "[setup] installing $TF and Horovod's build tools (a few minutes the first time)"
  $PIP install "$TF" "$(pin numpy)" cmake cloudpickle psutil pyyaml packaging cffi
fi

HVD=$(pin horovod)
HVD_TF_OPS=$(ls .venv/lib/python3*/site-packages/horovod/tensorflow/mpi_lib*.so 2>/dev/null || true)
if ! have "$HVD" || [ -z "$HVD_TF_OPS" ]; then
  echo "[setup] building $HVD with TensorFlow, MPI and Gloo (about 3 minutes the first time; pip caches the wheel)"
  HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
  HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 CMAKE_POLICY_VERSION_MINIMUM=3.5 MAKEFLAGS=-j"$(nproc)" \
    $PIP install --no-build-isolation "$HVD"
fi

STAMP=.venv/.course-installed
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ]; then
  echo "[setup] installing the course package and its dependencies"
  $PIP install -e ".[test]"
  touch "$STAMP"
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
