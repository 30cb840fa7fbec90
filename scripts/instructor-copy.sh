#!/usr/bin/env bash
# An instructor's own copy of the course, made as root from the site's checkout (docs/guide/02-deploy.md,
# "Deploying on JupyterHub"):  bash scripts/instructor-copy.sh INSTRUCTOR [DEST]   (DEST: ~INSTRUCTOR/ddl-hpc-course)
# The copy holds every answer (solutions/, the tests, course/answers.py), and the instructor's home may still be
# open to every user (Debian makes homes 755; the hub closes a home only at its owner's first login). So DEST is made
# the instructor's and closed (700) before anything is cloned into it: at no moment can another user read a file of
# it. Its `origin` is the site checkout's own (the site's checkout is closed to the instructor), and it is recorded
# in the shared environment (HUB_PREFIX, /opt/ddl-hpc) for `course doctor --hub`, which names it if it is ever opened.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "[instructor-copy] $*" >&2; }
[ "$(id -u)" -eq 0 ] || { say "needs root: it reads the site's closed checkout and writes into INSTRUCTOR's home"; exit 1; }
[ $# -ge 1 ] && [ $# -le 2 ] || { say "usage: bash scripts/instructor-copy.sh INSTRUCTOR [DEST]"; exit 2; }
user=$1
entry=$(getent passwd "$user") || { say "no user $user"; exit 1; }
home=$(echo "$entry" | cut -d: -f6)
dest=${2:-$home/ddl-hpc-course}
if [ -e "$dest" ]; then say "$dest exists: remove it first, or name another DEST"; exit 1; fi

install -d -m 700 -o "$user" -g "$(id -gn "$user")" "$dest"  # closed before it holds anything
git clone -q "$PWD" "$dest"
# DEST is the instructor's already: git refuses a root-run command in another user's repository unless told it is safe
if origin=$(git remote get-url origin 2>/dev/null); then
  git -c safe.directory="$dest" -C "$dest" remote set-url origin "$origin"
fi
chown -R "$user:$(id -gn "$user")" "$dest"

record="${HUB_PREFIX:-/opt/ddl-hpc}/share/ddl-hpc/instructor-copies"
if [ -d "$(dirname "$record")" ]; then
  { cat "$record" 2>/dev/null; echo "$dest"; } | sort -u >"$record.new" && mv "$record.new" "$record"
  chmod 644 "$record"
fi
echo "[instructor-copy] $dest: $user's alone (700)"
