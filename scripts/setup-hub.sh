#!/usr/bin/env bash
# The shared environment a JupyterHub serves the course from (docs/guide/02-deploy.md, "Deploying on JupyterHub").
#   make setup HUB=1, as root        (or, as root: bash scripts/setup-hub.sh, after `make setup`)
# It makes HUB_PREFIX (default /opt/ddl-hpc) from a Python every user can run: HUB_PYTHON, else a Python 3.11 on
# PATH outside private folders, else a CPython 3.11 that uv installs into HUB_PREFIX-python (/opt/ddl-hpc-python:
# readable by all, unlike root's home; scripts/python-choice.sh chooses as for .venv). `--print-python` prints that
# Python and stops. Into it go TensorFlow and Horovod as `make setup` builds them, JupyterHub (and batchspawner, for
# learners' servers as Slurm jobs: deploy/jupyterhub/jupyterhub_config_slurm.py), and the course as learners get it:
# the student copy's package, installed (not editable), so no learner's kernel reads the instructor's checkout.
# Also: the kernel "Python (DDL on HPC)" for every user, JupyterLab's news prompt off, nbgrader's Formgrader and
# Create Assignment off for everyone (instructors get them back through the instructors' config folder that
# deploy/jupyterhub/jupyterhub_config.py adds for them), the student copy every learner gets on first login, and
# nbgrader's exchange. Idempotent; run it again after updating the course.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${HUB_PREFIX:-/opt/ddl-hpc}
EXCHANGE=${COURSE_NBGRADER_EXCHANGE:-/srv/nbgrader/exchange}
pin() { sed -n "s/^ *\"\($1[=<>][^\"]*\)\",*$/\1/p" pyproject.toml | head -n 1; }
extra() { sed -n "s/^$1 = \[\"\([^\"]*\)\"\]$/\1/p" pyproject.toml | head -n 1; }
source scripts/python-choice.sh  # find_python, check_env_python, private_part

if [ "$(id -u)" -ne 0 ]; then
  echo "[setup-hub] needs root (it writes $PREFIX and $EXCHANGE for every user): run it as root" >&2
  exit 1
fi
# The Python the environment is made from: only needed (and looked for, or fetched) while there is none yet.
check_env_python setup-hub "$PREFIX" || exit 1
if [ -x "$PREFIX/bin/python" ]; then
  needed=("$PREFIX/bin/python")
else
  say=1; [ "${1:-}" != --print-python ] || say=2  # there, stdout is the Python's path alone
  find_python setup-hub "${HUB_PYTHON:-}" "$PREFIX-python" >&"$say" || exit 1
  HUB_PYTHON=$PYTHON_FOUND
  needed=("$HUB_PYTHON")
fi
existing=$PREFIX
while [ ! -e "$existing" ]; do existing=$(dirname "$existing"); done
needed+=("$existing")
for needed in "${needed[@]}"; do
  blocked=$(private_part "$needed")
  if [ -n "$blocked" ]; then
    echo "[setup-hub] $needed cannot be run by other users ($blocked is closed to them), so learners' servers" \
      "could not start: use a system Python, e.g. HUB_PYTHON=/usr/bin/python3.11 (rm -r $PREFIX if it was made" \
      "from that one), and a HUB_PREFIX outside private homes, e.g. /opt/ddl-hpc" >&2
    exit 1
  fi
done
if [ "${1:-}" = "--print-python" ]; then echo "${HUB_PYTHON:-$(readlink -f "$PREFIX/bin/python")}"; exit; fi
if [ ! -x .venv/bin/python ]; then
  echo "[setup-hub] run 'make setup' first: the student copy is built with the checkout's environment" >&2
  exit 1
fi

if [ ! -x "$PREFIX/bin/python" ]; then
  PYTHON="$HUB_PYTHON" SETUP_VENV="$PREFIX" bash scripts/setup-python.sh --venv-only
fi
SETUP_VENV="$PREFIX" bash scripts/setup-python.sh --stack-only

# The course as learners get it: the student copy, kept in the environment (every user can read it: it holds no
# answer) for the spawner to copy into each learner's home, and its package installed from it.
SHARE="$PREFIX/share/ddl-hpc"
STUDENT="$SHARE/student"
mkdir -p "$SHARE"
.venv/bin/python -m course student-copy "$STUDENT" --hub >/dev/null  # each notebook: "practice copy"
BUILD=cpu
if "$PREFIX/bin/python" -c 'import tensorflow as tf, sys; sys.exit(0 if tf.sysconfig.get_build_info().get("is_cuda_build") else 1)' 2>/dev/null; then
  BUILD=gpu
fi
PIP="$PREFIX/bin/python -m pip --disable-pip-version-check -q"
# What is installed is recorded as a digest of the student copy (and this set-up): unchanged, nothing is reinstalled.
digest() { (cd "$1" && find . -type f ! -name '.course-student-copy' -print0 | sort -z | xargs -0 sha256sum) \
  | cat - scripts/setup-hub.sh $(find deploy/jupyterhub -type f | sort) | sha256sum | cut -d' ' -f1; }
STAMP="$PREFIX/.course-hub-installed"
WANT="$BUILD $(digest "$STUDENT")"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  echo "[setup-hub] installing the student package, $(sed -n 's/^hub = \[\(.*\)\]$/\1/p' pyproject.toml | tr -d '"')" \
    "and their dependencies into $PREFIX"
  # A copy to build from: pip's build writes into the source folder (build/, *.egg-info), which the spawner copies.
  BUILD_DIR=$(mktemp -d)
  trap 'rm -rf "$BUILD_DIR"' EXIT
  cp -r "$STUDENT/." "$BUILD_DIR/"
  $PIP install "$BUILD_DIR[$BUILD,hub]"
  $PIP install --no-deps --force-reinstall "$BUILD_DIR"  # the same version number, newer course content
  rm -f "$STAMP"  # written once everything below is done
fi

if [ ! -f "$STAMP" ]; then
  # A workshop room needs no pop-ups: JupyterLab's news and update checks are off for every user.
  SETTINGS="$PREFIX/share/jupyter/lab/settings"
  mkdir -p "$SETTINGS"
  echo '{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}}' \
    >"$SETTINGS/overrides.json"
  "$PREFIX/bin/python" -m ipykernel install --sys-prefix --name ddl-hpc --display-name "Python (DDL on HPC)" >/dev/null

  # nbgrader for everyone: the Assignments tab; Formgrader, Create Assignment and the course list are instructors'.
  # JupyterLab 4.1+ locks what is disabled; unlocked, a higher configuration level (the instructors') can enable it.
  export PATH="$PREFIX/bin:$PATH"
  for ext in formgrader create-assignment course-list; do
    jupyter labextension disable --level=sys_prefix "@jupyter/nbgrader:$ext" >/dev/null 2>&1
    jupyter labextension unlock --level=sys_prefix "@jupyter/nbgrader:$ext" >/dev/null 2>&1
  done
  for ext in formgrader course_list; do
    jupyter server extension disable --sys-prefix "nbgrader.server_extensions.$ext" >/dev/null 2>&1
  done
  # The Assignment List says in one line why a submission was refused (course/grading/exchange.py). Written as the
  # file `jupyter server extension enable --sys-prefix` would write: that command refuses (and exits 0) an extension
  # no configuration lists yet.
  echo '{"ServerApp": {"jpserver_extensions": {"course.grading.exchange": true}}}' \
    >"$PREFIX/etc/jupyter/jupyter_server_config.d/course-exchange.json"
  # Instructors: nbgrader's per-user enabling, written into one folder the hub adds to instructors' JUPYTER_CONFIG_PATH
  # (their own ~/.jupyter stays theirs), with the course's nbgrader settings. `jupyter server extension enable --user`
  # refuses an extension its own folder does not list yet, so the server's half is written as the file it would write.
  INSTRUCTORS="$PREFIX/etc/ddl-hpc-instructors"
  mkdir -p "$INSTRUCTORS/jupyter_server_config.d"
  for ext in formgrader create-assignment course-list; do
    JUPYTER_CONFIG_DIR="$INSTRUCTORS" jupyter labextension enable --level=user "@jupyter/nbgrader:$ext" >/dev/null 2>&1
  done
  cat >"$INSTRUCTORS/jupyter_server_config.d/nbgrader-instructors.json" <<'JSON'
  {
    "ServerApp": {
      "jpserver_extensions": {
        "nbgrader.server_extensions.formgrader": true,
        "nbgrader.server_extensions.course_list": true
      }
    }
  }
JSON
  cp deploy/jupyterhub/nbgrader_config_instructors.py "$INSTRUCTORS/nbgrader_config.py"
  cp deploy/jupyterhub/assignment_header.ipynb "$INSTRUCTORS/assignment_header.ipynb"
  # Everyone's nbgrader: the course id and the exchange; everyone's terminals: the environment's tools on PATH.
  cp deploy/jupyterhub/nbgrader_config_everyone.py "$PREFIX/etc/jupyter/nbgrader_config.py"
  cp deploy/jupyterhub/jupyter_server_config.py "$PREFIX/etc/jupyter/jupyter_server_config.py"
fi

# This checkout holds every answer (solutions/, the tests, course/answers.py): recorded for `course doctor --hub`,
# which checks that it stays closed to other users, wherever it is.
echo "$PWD" >"$SHARE/checkout"
chmod 644 "$SHARE/checkout"
if [ -z "$(private_part "$PWD")" ]; then
  echo "[setup-hub] warning: other users can read this checkout, which holds every answer: chmod 700 $PWD" >&2
fi

# nbgrader's exchange: everyone may create their course's folders in it; the sticky bit keeps anyone but their
# owner from renaming or removing them.
mkdir -p "$EXCHANGE"
chmod 1777 "$EXCHANGE"
if [ ! -f "$STAMP" ]; then chmod -R a+rX "$PREFIX"; echo "$WANT" >"$STAMP"; fi
echo "[setup-hub] ready: $PREFIX," \
  "exchange $EXCHANGE. Start the hub: $PREFIX/bin/jupyterhub -f $PWD/deploy/jupyterhub/jupyterhub_config.py"
