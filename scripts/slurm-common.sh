# Shell functions shared by single-node-slurm.sh and virtual-cluster.sh (sourced, not run).
# Each script sets NAME (its name in messages) before sourcing this file.

cannot() { echo "$NAME: $*" >&2; exit 3; }

need_slurm() {
  # root and the Slurm + munge daemons and clients, or exit 3 with the reason
  [ "$(id -u)" -eq 0 ] || cannot "needs root (it starts munged, slurmctld and slurmd as system daemons)"
  export PATH="$PATH:/usr/sbin:/sbin"
  for tool in slurmctld slurmd munged sinfo "$@"; do
    command -v "$tool" >/dev/null 2>&1 ||
      cannot "$tool not found: install the Debian packages slurm-wlm and munge (bash scripts/setup-system.sh slurm-wlm munge)"
  done
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start_munge() {
  # one munged for the machine: its socket is a file, so slurmds in other network namespaces reach it too
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey -c -f -k /etc/munge/munge.key
  fi
  chown munge:munge /etc/munge/munge.key 2>/dev/null || true
  chmod 400 /etc/munge/munge.key
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
  if ! alive /run/munge/munged.pid; then
    if id munge >/dev/null 2>&1; then
      su -s /bin/sh munge -c "munged --pid-file=/run/munge/munged.pid" 2>/dev/null || munged --force
    else
      munged --force
    fi
  fi
}

stop_pidfile() {
  # TERM the process of a pid file, KILL it after 10 s
  local file=$1
  alive "$file" || return 0
  local pid; pid=$(cat "$file")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
  kill -9 "$pid" 2>/dev/null || true
}

node_states() {
  # one "state" per node, as sinfo reports it (idle, mix, alloc, down*, ...)
  sinfo -h -N -o "%t" 2>/dev/null
}

takes_jobs() { [[ "$1" =~ ^(idle|mix|alloc|comp) ]]; }
