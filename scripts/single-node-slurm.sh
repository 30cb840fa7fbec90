#!/usr/bin/env bash
# A real single-node Slurm (Debian slurm-wlm + munge) for tests and workshops on one machine.
# Usage: scripts/single-node-slurm.sh start [--fresh]|stop [DAEMON...]|status
#   start   write /etc/slurm/slurm.conf for this host (if it is not ours already), start munged,
#           slurmctld and slurmd, and wait until the node takes jobs. Idempotent: a running Slurm is left alone.
#           --fresh (for test suites): when slurmctld has to be started, it starts with an empty queue
#           (slurmctld -c) instead of recovering the jobs an earlier, killed run left in its state files;
#           such a job can hold the node's cores for hours (its processes died with the old run).
#   stop [DAEMON...]  stop slurmd, slurmctld and munged started by this script (by their pid files); given
#           names (slurmd, slurmctld, munged), only those (the test suite stops only what it started).
#   status  exit 0 when sinfo answers and the node is up.
# Needs root and the packages slurm-wlm and munge (scripts/setup-system.sh slurm-wlm munge installs them).
# Exit status 3 means "cannot run here" (not root, or the packages are missing), with the reason on stderr.
set -euo pipefail

CONF=/etc/slurm/slurm.conf
MARK="# written by single-node-slurm.sh (course)"
RUN=/run/course-slurm
LOG=/var/log/course-slurm

NAME=single-node-slurm
unset SLURM_CONF   # this script speaks to the Slurm of /etc/slurm, never to a virtual cluster's
# shellcheck source=scripts/slurm-common.sh
. "$(dirname "$0")/slurm-common.sh"

need() { need_slurm; }

node_up() {
  # the node answers and is in a state that takes jobs
  takes_jobs "$(node_states | head -1)"
}

write_conf() {
  local host cpus mem
  host=$(hostname -s)
  cpus=$(nproc)
  mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
  mkdir -p /etc/slurm /var/spool/slurmd /var/spool/slurmctld "$RUN" "$LOG"
  if [ -f "$CONF" ] && ! head -1 "$CONF" | grep -qF "$MARK"; then
    cannot "$CONF exists and was not written by this script; not touching a site's Slurm configuration"
  fi
  cat > "$CONF.new" <<CONFIG
$MARK
ClusterName=course
SlurmctldHost=$host
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmUser=root
SlurmdSpoolDir=/var/spool/slurmd
StateSaveLocation=/var/spool/slurmctld
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONFIG
  mv "$CONF.new" "$CONF"
}

start() {
  local fresh=${1:-}
  need
  if node_up; then echo "single-node-slurm: already running ($(sinfo -h -o '%P %D %t' | head -1))"; return 0; fi
  write_conf
  start_munge
  if ! alive "$RUN/slurmctld.pid"; then
    if [ "$fresh" = "--fresh" ]; then
      echo "single-node-slurm: starting with an empty queue (jobs left by an earlier run are dropped)"
      slurmctld -c
    else
      slurmctld
    fi
  fi
  alive "$RUN/slurmd.pid" || slurmd
  for _ in $(seq 1 60); do
    if node_up; then echo "single-node-slurm: up ($(sinfo -h -o '%P %D %t' | head -1))"; return 0; fi
    # a node that was DOWN from an earlier run comes back when told to
    scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
    sleep 1
  done
  echo "single-node-slurm: Slurm did not come up within 60 s; see $LOG/slurmctld.log and $LOG/slurmd.log" >&2
  tail -5 "$LOG/slurmctld.log" "$LOG/slurmd.log" >&2 2>/dev/null || true
  exit 1
}

stop() {
  need
  local which=" ${*:-slurmd slurmctld munged} " daemon
  for daemon in $which; do
    case "$daemon" in
      slurmd|slurmctld|munged) ;;
      *) echo "single-node-slurm: stop takes slurmd, slurmctld or munged, not $daemon" >&2; exit 2 ;;
    esac
  done
  if [[ "$which" == *" slurmd "* ]]; then stop_pidfile "$RUN/slurmd.pid"; fi
  if [[ "$which" == *" slurmctld "* ]]; then stop_pidfile "$RUN/slurmctld.pid"; fi
  if [[ "$which" == *" munged "* ]]; then stop_pidfile /run/munge/munged.pid; fi
  echo "single-node-slurm: stopped${*:+ $*}"
}

case "${1:-}" in
  start)
    case "${2:-}" in
      ""|--fresh) start "${2:-}" ;;
      *) echo "usage: $0 start [--fresh]|stop [DAEMON...]|status" >&2; exit 2 ;;
    esac ;;
  stop) shift; stop "$@" ;;
  status) need; node_up ;;
  *) echo "usage: $0 start [--fresh]|stop [DAEMON...]|status" >&2; exit 2 ;;
esac
