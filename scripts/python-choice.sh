# Which Python the course's environments are made from: sourced (from the checkout's root) by setup-python.sh (.venv)
# and setup-hub.sh (the hub's shared environment), so that both choose the same way.
# TensorFlow 2.15.1 and Horovod 0.28.1 (Horovod's last release: it builds against no TensorFlow 2.16+ / Keras 3) run
# on Python 3.9-3.11 only, and the course asks for what pyproject.toml's requires-python says (3.11 today: 3.11's
# tomllib, and 3.11 is what it is tested on). Hosts with only Python 3.12+ (Ubuntu 24.04, Debian 13) get a CPython
# from uv, without root. Order: the Python the user named; else python3.11, python3.10, python3.9, then python3 on
# PATH, the first that fits; else uv's (uv on PATH, else in .tools/uv, else installed there from PyPI with pip);
# else one line on stderr saying what was found, what is needed and how to get it.
# COURSE_NO_UV_INSTALL=1: never install uv (the tests use it; so can a site that wants no download).

# requires-python ">=3.A,<3.B" as the minor numbers A and B (B excluded).
read -r PY_MIN PY_END <<<"$(sed -n 's/^requires-python = ">=3\.\([0-9]*\),<3\.\([0-9]*\)"$/\1 \2/p' pyproject.toml)"
if [ -z "${PY_END:-}" ]; then
  echo "[setup] pyproject.toml's requires-python is not of the form \">=3.A,<3.B\" that set-up reads" >&2
  exit 1
fi
PY_WANT=3.$((PY_END - 1))  # what uv is asked for: the newest that fits
if [ "$PY_MIN" = $((PY_END - 1)) ]; then PY_RANGE=3.$PY_MIN; else PY_RANGE=3.$PY_MIN-$PY_WANT; fi
PY_WHY="TensorFlow 2.15.1 and Horovod 0.28.1 run on Python 3.9-3.11 only, and the course on $PY_RANGE (pyproject.toml)"
PY_HOW="get one with 'uv python install $PY_WANT', your distribution's python$PY_WANT package or"
PY_HOW+=" 'module load python/$PY_WANT' on a cluster"

# "VERSION EXECUTABLE" of the Python $1 (nothing, status 1, if it does not run).
python_about() { "$1" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3], sys.executable)' 2>/dev/null; }

# Whether the version $1 (3.X.Y) is one the course runs on.
version_fits() {
  local minor=${1#3.}
  minor=${minor%%.*}
  [ "${1%%.*}" = 3 ] && [ "$minor" -ge "$PY_MIN" ] && [ "$minor" -lt "$PY_END" ]
}

# The first folder on the way to PATH that other users cannot enter (or PATH itself if they cannot run it).
private_part() {
  local path part=""
  path=$(readlink -f "$1")
  IFS=/ read -ra parts <<<"${path#/}"
  for name in "${parts[@]}"; do
    part="$part/$name"
    [ "$(( 0$(stat -c %a "$part") & 1 ))" -eq 1 ] || { echo "$part"; return; }
  done
}

# Status 1, with one line on stderr, when the environment $2 exists but was made with a Python that does not fit.
check_env_python() {
  local tag=$1 env=$2 about
  [ -e "$env/bin/python" ] || [ -L "$env/bin/python" ] || return 0
  about=$(python_about "$env/bin/python") || about="(one that no longer runs)"
  version_fits "${about%% *}" && return 0
  echo "[$tag] $env was made with Python ${about%% *}, but $PY_WHY: remove it (rm -rf $env) and run the set-up" \
    "again" >&2
  return 1
}

# Sets UV_FOUND to uv: on PATH, else in .tools/uv, else installed there from PyPI by a python3 that has pip;
# status 1 with UV_FOUND saying why there is none.
find_uv() {
  UV_FOUND=$(command -v uv) && return
  UV_FOUND=$PWD/.tools/uv/bin/uv
  [ -x "$UV_FOUND" ] && return
  UV_FOUND="no uv on PATH"
  case "${COURSE_NO_UV_INSTALL:-}" in "" | 0 | no | false) ;; *) return 1 ;; esac
  python3 -m pip --version >/dev/null 2>&1 || { UV_FOUND+=" and no pip to install it with"; return 1; }
  echo "[$1] installing uv (from PyPI, into .tools/uv) to fetch Python $PY_WANT"
  if python3 -m pip install --disable-pip-version-check -q --target .tools/uv uv >/dev/null 2>&1 &&
    [ -x .tools/uv/bin/uv ]; then
    UV_FOUND=$PWD/.tools/uv/bin/uv
    return 0
  fi
  UV_FOUND+=" and pip could not install it"
  return 1
}

# Sets PYTHON_FOUND to the executable of a Python that fits; status 1 with one line on stderr when there is none.
# $1 the tag of messages ("setup"), $2 a Python the user named (or ""), $3 for a Python every user must run (the
# hub's): the folder uv installs its Python into, world-readable; Pythons on PATH under a private folder are skipped.
find_python() {
  local tag=$1 named=$2 shared=${3:-} name py about blocked seen="" execs="" fetched uv_env=() hint="make setup PYTHON"
  [ -z "$shared" ] || hint=HUB_PYTHON
  PYTHON_FOUND=""
  if [ -n "$named" ]; then
    if ! about=$(python_about "$named"); then
      echo "[$tag] no Python runs as $named: name a Python $PY_RANGE ($PY_WHY); $PY_HOW" >&2
      return 1
    fi
    if ! version_fits "${about%% *}"; then
      echo "[$tag] $named is Python ${about%% *}, but $PY_WHY: name a Python $PY_RANGE instead; $PY_HOW" >&2
      return 1
    fi
    PYTHON_FOUND=${about#* }
    return 0
  fi
  for name in python3.11 python3.10 python3.9 python3; do
    while read -r py; do  # every one of that name on PATH
      about=$(python_about "$py") || continue
      case " $execs " in *" ${about#* } "*) continue ;; esac  # the same Python by another name
      execs+=" ${about#* }"
      blocked=""
      [ -z "$shared" ] || ! version_fits "${about%% *}" || blocked=$(private_part "${about#* }")
      if version_fits "${about%% *}" && [ -z "$blocked" ]; then
        PYTHON_FOUND=${about#* }
        return 0
      fi
      seen+="${seen:+, }$py ${about%% *}${blocked:+ (under $blocked, closed to other users)}"
    done < <(type -ap "$name")
  done
  [ -n "$seen" ] || seen="no python3 on PATH"
  if find_uv "$tag"; then
    # The hub's Python goes where every user can run it, not into root's home (uv's default).
    [ -z "$shared" ] || uv_env=(UV_PYTHON_INSTALL_DIR="$shared" UV_PYTHON_BIN_DIR="$shared/bin"
      UV_MANAGED_PYTHON=1 UV_PYTHON_PREFERENCE=only-managed)  # (the second: uv before 0.8)
    echo "[$tag] no Python $PY_RANGE on PATH ($seen): asking uv for CPython $PY_WANT"
    if [ -n "$shared" ]; then mkdir -p "$shared" && chmod 755 "$shared"; fi
    fetched=$(env "${uv_env[@]}" "$UV_FOUND" python find --system "$PY_WANT" 2>/dev/null) ||
      { env "${uv_env[@]}" "$UV_FOUND" python install "$PY_WANT" >/dev/null 2>&1 &&
        fetched=$(env "${uv_env[@]}" "$UV_FOUND" python find --system "$PY_WANT" 2>/dev/null); } || fetched=""
    if [ -n "$shared" ]; then chmod -R a+rX "$shared"; fi
    if [ -n "$fetched" ] && about=$(python_about "$fetched") && version_fits "${about%% *}"; then
      PYTHON_FOUND=${about#* }
      return 0
    fi
    seen+="; uv could not fetch Python $PY_WANT ('$UV_FOUND python install $PY_WANT' says why)"
  else
    seen+="; $UV_FOUND"
  fi
  echo "[$tag] no Python $PY_RANGE found (${seen}); $PY_WHY: $PY_HOW, then run the set-up again (or name it:" \
    "$hint=/path/to/python$PY_WANT)" >&2
  return 1
}
