#!/usr/bin/env bash
# Install the Debian packages the course needs, when missing. As root this uses apt-get; otherwise
# it names exactly what to install (or which module to load on an HPC cluster) and stops.
# Usage: scripts/setup-system.sh [PACKAGE...]   (default: the packages `make lab` needs)
set -euo pipefail

PACKAGES=("$@")
missing=()
if [ ${#PACKAGES[@]} -eq 0 ]; then
  PACKAGES=(openmpi-bin libopenmpi-dev)
  # Horovod compiles at install time and .venv needs Python's venv module: checked by what works, so a
  # compiler or a Python from elsewhere (pyenv, a module) counts as much as Debian's packages.
  for tool in g++ make cmake; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  # Only a Python 3.11 counts (pyproject.toml's requires-python): with a python3 of another version,
  # setup-python.sh fetches one with uv or says how to get one (scripts/python-choice.sh); that python3's venv
  # package would not help.
  PY=$(command -v python3.11 || true)
  if [ -z "$PY" ] && python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' >/dev/null 2>&1; then
    PY=$(command -v python3)
  fi
  if [ -n "$PY" ]; then
    "$PY" -c "import venv, ensurepip" >/dev/null 2>&1 || missing+=(python3-venv python3-dev)
  elif ! command -v python3 >/dev/null 2>&1; then
    missing+=(python3-venv python3-dev)  # no Python at all
  fi
fi

for pkg in "${PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

# Not a Debian system, but the tools are there (an HPC module, a conda env): nothing to do.
if ! command -v dpkg >/dev/null 2>&1 && command -v mpicc >/dev/null 2>&1 && command -v mpiexec >/dev/null 2>&1; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "[setup] installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  exit 0
fi

if [[ " ${missing[*]} " == *" libopenmpi-dev "* ]] && command -v mpicc >/dev/null 2>&1; then
  exit 0   # Open MPI from elsewhere (module load openmpi) is as good as Debian's
fi

cat >&2 <<MSG
[setup] missing system packages: ${missing[*]}
  Ask an administrator to run, as root:   apt-get install -y ${missing[*]}
  On an HPC cluster instead:     module load openmpi   (then run make again)
MSG
exit 1
