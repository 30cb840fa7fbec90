#!/usr/bin/env bash
# A multi-node Slurm cluster on one machine, for tests and for rehearsing a multi-node workshop.
# Usage: scripts/virtual-cluster.sh start [--nodes N] | stop | status
#   start   N nodes (default 2): a bridge brvc (10.77.0.1/24), one network namespace per node with its own
#           hostname (vc1, vc2, ...; address 10.77.0.1i), a slurmd in each and a slurmctld with its own
#           configuration and ports, so it runs beside the single-node Slurm. Idempotent. Prints on stdout
#           what a client needs:  eval "$(scripts/virtual-cluster.sh start)"
#             SLURM_CONF              this cluster's configuration (sbatch, srun, squeue, ... talk to it)
#             COURSE_CONTROLLER_HOST  the address at which the nodes reach this host (an engine cluster's
#                                     controller must listen there, not on 127.0.0.1)
#             OMPI_MCA_*_if_include   Open MPI uses the bridge's network between the nodes
#   stop    stops every daemon (its munged too), namespace, link and /etc/hosts line that start made.
#           Two more nodes (vc<N+1>, vc<N+2>) form the partition gpu, shaped as the notebooks' example site:
#           48 cores (declared, not this machine's: config_overrides) and 8 GPUs each (device files, no
#           hardware), so a job there gets Slurm's layout, CUDA_VISIBLE_DEVICES included, as on that site.
#   status  prints the nodes and their states; exit 0 when every node takes jobs.
# Needs root, network namespaces, and the packages slurm-wlm, munge and iproute2.
# Exit status 3 means "cannot run here", with the reason on stderr.
set -euo pipefail

NAME=virtual-cluster
# shellcheck source=scripts/slurm-common.sh
. "$(dirname "$0")/slurm-common.sh"

BASE=/var/lib/course-vc               # configuration, state, spool and pid files
LOG=/var/log/course-vc
CONF=$BASE/slurm.conf
BRIDGE=brvc
NET=10.77.0
HOST_IP=$NET.1
HOSTS_MARK="# course virtual-cluster"
# This cluster's own munged (socket, pid file, seed), named in slurm.conf (AuthInfo): stop ends it with the other
# daemons, and the machine's munged (a site's, or the single-node Slurm's) is never touched.
MUNGE=$BASE/munge
export SLURM_CONF=$CONF
SITE_NODES=2 SITE_CPUS=48 SITE_GPUS=8  # the gpu partition: notebook 11's example site

say() { echo "$NAME: $*" >&2; }

node_names() { [ -f "$BASE/nodes" ] && cat "$BASE/nodes"; }

exports() {
  echo "export SLURM_CONF=$CONF"
  echo "export COURSE_CONTROLLER_HOST=$HOST_IP"
  echo "export OMPI_MCA_btl_tcp_if_include=$NET.0/24"
  echo "export OMPI_MCA_oob_tcp_if_include=$NET.0/24"
}

all_up() {
  # every node of the configuration answers and takes jobs
  local states n
  [ -f "$CONF" ] || return 1
  states=$(node_states) || return 1
  n=$(node_names | wc -l)
  [ "$(echo "$states" | grep -cE '^(idle|mix|alloc|comp)')" -eq "$n" ] && [ "$n" -gt 0 ]
}

check_namespaces() {
  command -v ip >/dev/null && command -v nsenter >/dev/null && command -v unshare >/dev/null ||
    cannot "ip, nsenter and unshare are needed: install the Debian packages iproute2 and util-linux"
  ip netns add vc-probe 2>/dev/null || cannot "this machine does not allow network namespaces (ip netns add failed)"
  ip netns del vc-probe
}

write_conf() {
  local n=$1 host cpus mem i
  host=$(hostname -s)
  cpus=$(( $(nproc) / n )); [ "$cpus" -ge 1 ] || cpus=1
  mem=$(awk -v n="$n" '/MemTotal/ {print int($2 / 1024 * 0.9 / n)}' /proc/meminfo)
  mkdir -p "$BASE/state" "$LOG"
  : > "$BASE/nodes"
  for i in $(seq 1 $((n + SITE_NODES))); do
    echo "vc$i" >> "$BASE/nodes"; mkdir -p "$BASE/spool/vc$i" "$BASE/tmp/vc$i"
  done
  write_gres "$n"
  {
    echo "# written by virtual-cluster.sh (course): $n nodes in network namespaces"
    echo "ClusterName=coursevc"
    echo "SlurmctldHost=$host($HOST_IP)"
    echo "SlurmctldPort=6917"
    echo "SlurmdPort=6918"
    echo "AuthType=auth/munge"
    echo "AuthInfo=socket=$MUNGE/munge.socket"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "GresTypes=gpu"
    echo "SlurmdParameters=config_overrides"  # the gpu nodes declare more cores than this machine has
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "ReturnToService=2"
    echo "SlurmUser=root"
    echo "StateSaveLocation=$BASE/state"
    echo "SlurmdSpoolDir=$BASE/spool/%n"
    # each node its own temporary directory (PMIx's files are per node; /tmp is shared by the namespaces)
    echo "TmpFS=$BASE/tmp/%n"
    echo "SlurmctldPidFile=$BASE/slurmctld.pid"
    echo "SlurmdPidFile=$BASE/slurmd-%n.pid"
    echo "SlurmctldLogFile=$LOG/slurmctld.log"
    echo "SlurmdLogFile=$LOG/slurmd-%n.log"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "MpiDefault=none"
    for i in $(seq 1 "$n"); do
      echo "NodeName=vc$i NodeAddr=$NET.1$i CPUs=$cpus RealMemory=$mem State=UNKNOWN"
    done
    for i in $(seq $((n + 1)) $((n + SITE_NODES))); do
      echo "NodeName=vc$i NodeAddr=$NET.1$i CPUs=$SITE_CPUS RealMemory=$mem Gres=gpu:$SITE_GPUS State=UNKNOWN"
    done
    echo "PartitionName=vc Nodes=vc[1-$n] Default=YES MaxTime=INFINITE State=UP"
    echo "PartitionName=gpu Nodes=vc[$((n + 1))-$((n + SITE_NODES))] MaxTime=INFINITE State=UP"
  } > "$CONF"
}

write_gres() {
  # the gpu nodes' GPUs: character devices (/dev/null's numbers) that Slurm hands out by index
  local n=$1 k
  mkdir -p "$BASE/dev"
  for k in $(seq 0 $((SITE_GPUS - 1))); do
    [ -c "$BASE/dev/gpu$k" ] || mknod "$BASE/dev/gpu$k" c 1 3
  done
  echo "NodeName=vc[$((n + 1))-$((n + SITE_NODES))] Name=gpu File=$BASE/dev/gpu[0-$((SITE_GPUS - 1))]" > "$BASE/gres.conf"
}

add_network() {
  local n=$1 i
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
    ip addr add "$HOST_IP/24" dev "$BRIDGE"
  fi
  ip link set "$BRIDGE" up
  for i in $(seq 1 "$n"); do
    if ! ip netns list | grep -qw "vc$i"; then
      ip netns add "vc$i"
      ip link add "vch$i" type veth peer name "vcn$i"
      ip link set "vch$i" master "$BRIDGE" up
      ip link set "vcn$i" netns "vc$i"
      ip -n "vc$i" addr add "$NET.1$i/24" dev "vcn$i"
      ip -n "vc$i" link set "vcn$i" up
      ip -n "vc$i" link set lo up
      # the nodes reach this host (the controller) through the bridge
      ip -n "vc$i" route add default via "$HOST_IP"
    fi
    grep -q "^$NET.1$i vc$i " /etc/hosts || echo "$NET.1$i vc$i $HOSTS_MARK" >> /etc/hosts
  done
}

start_munged() {
  # the machine's key (made if missing), this cluster's socket: a file, so slurmds in the namespaces reach it too
  [ -s /etc/munge/munge.key ] || mungekey -c -f -k /etc/munge/munge.key
  mkdir -p "$MUNGE" "$LOG"
  chmod 755 "$BASE" "$MUNGE"  # every user's sbatch and squeue talk to it
  alive "$MUNGE/munged.pid" && return 0
  # as root (--force: munged would rather run as its own user, which owns the machine's munged files)
  munged --force --socket="$MUNGE/munge.socket" --pid-file="$MUNGE/munged.pid" --seed-file="$MUNGE/munged.seed" \
    --log-file="$LOG/munged.log" 2>>"$LOG/munged.log"
}

start_daemons() {
  local node
  # an empty queue: jobs of an earlier, killed run must not hold the nodes
  alive "$BASE/slurmctld.pid" || slurmctld -f "$CONF" -c
  for node in $(node_names); do
    alive "$BASE/slurmd-$node.pid" && continue
    # not `ip netns exec`: it remounts /sys, and slurmd then finds no cgroup file system.
    # unshare --uts gives the slurmd its own hostname, which is how it knows which node it is.
    nsenter --net="/var/run/netns/$node" unshare --uts sh -c "hostname $node; exec slurmd -f $CONF"
  done
}

start() {
  local n=2
  case "${1:-}" in
    "") ;;
    --nodes) [[ "${2:-}" =~ ^[1-9][0-9]?$ ]] || { say "--nodes needs a number from 1 to 9"; exit 2; }; n=$2 ;;
    *) say "usage: $0 start [--nodes N] | stop | status"; exit 2 ;;
  esac
  [ "$n" -le $((9 - SITE_NODES)) ] || { say "--nodes: at most $((9 - SITE_NODES)) nodes"; exit 2; }
  need_slurm
  if all_up && [ "$(node_names | wc -l)" -eq $((n + SITE_NODES)) ]; then
    say "already running ($(node_names | tr '\n' ' '))"
    exports
    return 0
  fi
  if [ -f "$CONF" ] && [ "$(node_names | wc -l)" -ne $((n + SITE_NODES)) ]; then
    say "running with $(node_names | wc -l) nodes; stopping it to start $n (and $SITE_NODES gpu nodes)"
    stop >/dev/null
  fi
  check_namespaces
  write_conf "$n"
  start_munged
  add_network $((n + SITE_NODES))
  start_daemons
  for _ in $(seq 1 60); do
    if all_up; then
      say "up: $(node_names | tr '\n' ' ')(partitions vc: $n nodes, gpu: $SITE_NODES nodes)"
      exports
      return 0
    fi
    scontrol update nodename="vc[1-$((n + SITE_NODES))]" state=resume >/dev/null 2>&1 || true
    sleep 1
  done
  say "the nodes did not come up within 60 s; see $LOG/slurmctld.log and $LOG/slurmd-vc1.log"
  tail -5 "$LOG/slurmctld.log" "$LOG/slurmd-vc1.log" >&2 2>/dev/null || true
  exit 1
}

stop() {
  local node link
  need_slurm
  for node in $(node_names); do stop_pidfile "$BASE/slurmd-$node.pid"; done
  stop_pidfile "$BASE/slurmctld.pid"
  stop_pidfile "$MUNGE/munged.pid"
  # job steps that outlived their slurmd run in the node's namespace: end them before deleting it
  for node in $(ip netns list 2>/dev/null | awk '/^vc[0-9]/ {print $1}'); do
    for pid in $(ip netns pids "$node" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$node" 2>/dev/null || true
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | grep -E '^vch[0-9]+' | cut -d@ -f1); do
    ip link del "$link" 2>/dev/null || true
  done
  ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE"
  if grep -qF "$HOSTS_MARK" /etc/hosts; then
    # /etc/hosts may be a bind mount: rewrite it in place instead of replacing the file
    grep -vF "$HOSTS_MARK" /etc/hosts > "$BASE/hosts.new" || true
    cat "$BASE/hosts.new" > /etc/hosts
    rm -f "$BASE/hosts.new"
  fi
  rm -f "$CONF" "$BASE/nodes"
  rm -rf "$BASE/state" "$BASE/spool" "$BASE/tmp" "$BASE/dev" "$BASE/gres.conf" "$MUNGE"
  say "stopped (daemons, munged included, namespaces, links and /etc/hosts lines removed)"
}

status() {
  need_slurm
  [ -f "$CONF" ] || { say "not running"; exit 1; }
  sinfo -N -o "%N %t %c" 2>/dev/null || { say "slurmctld does not answer"; exit 1; }
  all_up
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) stop ;;
  status) status ;;
  *) say "usage: $0 start [--nodes N] | stop | status"; exit 2 ;;
esac
