#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for integration tests and demos.
#
#   scripts/slurm-local.sh start   # installs slurm-wlm + munge with apt-get if missing, starts munged,
#                                  # slurmctld and slurmd; prints `export SLURM_CONF=...`
#   scripts/slurm-local.sh stop    # cancels its jobs, stops them (job steps and the munged it started too)
#   scripts/slurm-local.sh env     # prints the export line
#   eval "$(scripts/slurm-local.sh start)"   # start, and set SLURM_CONF in this shell
#
# Two nodes (`start-two-node`, `stop-two-node`, `env-two-node`): each slurmd runs in a network
# namespace of its own (gtslurm1, gtslurm2) with its own hostname (gtnode1, gtnode2, UTS namespace)
# and address ($SLURM_LOCAL_NET.1, .2), joined to slurmctld by a bridge (gtsbr0, .254). Job
# steps on a node run in that node's namespace, so ranks on two nodes talk over the bridge as two
# hosts would. /etc/hosts gets the two names (lines tagged "gnntrain slurm-local", removed by stop).
#
# Runs as root. The config lives in $SLURM_LOCAL_DIR (default /tmp/gnntrain-slurm, or
# /tmp/gnntrain-slurm-two-node) and uses this machine's hostname and CPU count. Exit 3 means
# apt-get cannot install the packages here; exit 4 that network namespaces cannot be made.
set -euo pipefail
cmd=${1:-start}
case "$cmd" in
  *two-node) DIR=${SLURM_LOCAL_DIR:-/tmp/gnntrain-slurm-two-node} ;;
  *) DIR=${SLURM_LOCAL_DIR:-/tmp/gnntrain-slurm} ;;
esac
CONF=$DIR/slurm.conf
NET=${SLURM_LOCAL_NET:-10.78.0}  # the two-node cluster's own subnet, inside its own namespaces
BRIDGE=gtsbr0
TAG="# gnntrain slurm-local"
MUNGE_FLAG=/tmp/gnntrain-slurm-munged  # present while a munged this script started runs

log() { echo "slurm-local: $*" >&2; }

install_packages() {
  command -v slurmctld >/dev/null && command -v munged >/dev/null && return 0
  command -v apt-get >/dev/null || { log "apt-get not available"; exit 3; }
  log "installing slurm-wlm and munge with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  (apt-get update -qq && apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null) \
    || { log "apt-get could not install slurm-wlm/munge"; exit 3; }
}

write_config() {
  local host cpus mem
  host=$(hostname -s)
  cpus=$(getconf _NPROCESSORS_ONLN)  # not nproc: it honours OMP_NUM_THREADS
  mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)
  mkdir -p "$DIR"/{spool,state,log}
  cat > "$CONF" <<CONF
ClusterName=gnntrain-local
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=${SLURM_LOCAL_CTLD_PORT:-16817}
SlurmdPort=${SLURM_LOCAL_SLURMD_PORT:-16818}
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.log
SchedulerType=sched/backfill
# a test cluster: a pending job whose begin time passed starts within a second, not at the next
# 30 s backfill pass (the requeued job of the preemption test waited that long)
SchedulerParameters=bf_interval=1,sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
KillWait=5
InactiveLimit=0
MinJobAge=300
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
}

write_two_node_config() {
  local cpus mem
  cpus=$(getconf _NPROCESSORS_ONLN)
  mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.4)}' /proc/meminfo)
  mkdir -p "$DIR"/{spool,state,log}
  cat > "$CONF" <<CONF
ClusterName=gnntrain-two-node
SlurmctldHost=$(hostname -s)($NET.254)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=${SLURM_LOCAL_CTLD_PORT:-16827}
SlurmdPort=${SLURM_LOCAL_SLURMD_PORT:-16828}
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.log
SchedulerType=sched/backfill
# a test cluster: a pending job whose begin time passed starts within a second, not at the next
# 30 s backfill pass (the requeued job of the preemption test waited that long)
SchedulerParameters=bf_interval=1,sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
KillWait=5
InactiveLimit=0
MinJobAge=300
NodeName=gtnode1 NodeAddr=$NET.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
NodeName=gtnode2 NodeAddr=$NET.2 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=gtnode1,gtnode2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
}

two_node_network() {
  command -v ip >/dev/null || { log "iproute2 (ip) is missing"; exit 4; }
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge || { log "cannot create bridge $BRIDGE"; exit 4; }
    ip addr add "$NET.254/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
  fi
  local i ns
  for i in 1 2; do
    ns=gtslurm$i
    if ! ip netns list | grep -qw "$ns"; then
      ip netns add "$ns" || { log "cannot create network namespace $ns"; exit 4; }
      ip link del "gtsp$i" 2>/dev/null || true  # a peer left behind by an earlier namespace
      ip link add "gtsv$i" type veth peer name "gtsp$i"
      ip link set "gtsp$i" master "$BRIDGE"
      ip link set "gtsp$i" up
      ip link set "gtsv$i" netns "$ns"
      ip -n "$ns" addr add "$NET.$i/24" dev "gtsv$i"
      ip -n "$ns" link set "gtsv$i" up
      ip -n "$ns" link set lo up
      ip -n "$ns" route add default via "$NET.254"
    fi
    grep -q "^$NET.$i gtnode$i " /etc/hosts || echo "$NET.$i gtnode$i $TAG" >> /etc/hosts
  done
}

start_two_node() {
  install_packages
  stop_two_node  # from a clean slate: a half-built network from an interrupted start would never register
  two_node_network
  write_two_node_config
  start_munge
  export SLURM_CONF=$CONF
  # -c: no job records from an earlier run (a job left completing there held both nodes forever)
  pgrep -f "slurmctld -f $CONF" >/dev/null || slurmctld -f "$CONF" -c
  local i
  for i in 1 2; do  # nsenter, not `ip netns exec`: that remounts /sys, hiding the cgroup fs slurmd reads
    mkdir -p "$DIR/spool/gtnode$i"
    pgrep -f "slurmd -f $CONF -N gtnode$i" >/dev/null || \
      nsenter --net="/run/netns/gtslurm$i" unshare --uts sh -c "hostname gtnode$i && exec slurmd -f $CONF -N gtnode$i"
  done
  for _ in $(seq 1 60); do
    if [ "$(sinfo -h -N -o '%T' 2>/dev/null | grep -cE '^(idle|mixed|allocated)')" = 2 ]; then
      echo "export SLURM_CONF=$CONF"
      return 0
    fi
    scontrol update nodename=gtnode1,gtnode2 state=resume >/dev/null 2>&1 || true
    sleep 1
  done
  log "the two nodes did not become idle; see $DIR/log/"
  tail -n 20 "$DIR"/log/*.log >&2 || true
  exit 1
}

wait_gone() {  # a daemon still saving its state would make the next start think it is running
  local _                 # $2: half-seconds to wait before SIGKILL (slurmd keeps no state worth waiting for)
  for _ in $(seq 1 "${2:-30}"); do pgrep -f "$1" >/dev/null || return 0; sleep 0.5; done
  pkill -9 -f "$1" 2>/dev/null || true
}

cancel_jobs() {  # every job of this cluster, so that no step outlives slurmd
  local jobs _
  # no controller of this cluster, no jobs to ask it for: squeue would wait out its retries (59 s
  # where the config was never written, on a fresh machine); kill_steps ends any step left behind
  pgrep -f "slurmctld -f $CONF" >/dev/null || return 0
  jobs=$(SLURM_CONF=$CONF squeue -h -o %A 2>/dev/null || true)
  [ -n "$jobs" ] || return 0
  # shellcheck disable=SC2086
  SLURM_CONF=$CONF scancel $jobs 2>/dev/null || true
  for _ in $(seq 1 20); do
    [ -z "$(SLURM_CONF=$CONF squeue -h -o %A 2>/dev/null || true)" ] && return 0
    sleep 0.5
  done
}

kill_steps() {  # slurmstepd processes of this cluster (their environment names $CONF) and their children
  local all="" frontier="" next pid
  for pid in $(pgrep -f '^slurmstepd' || true); do
    # not a pipe: under pipefail, grep -q leaving early fails the pipeline with tr's SIGPIPE
    grep -qxF "SLURM_CONF=$CONF" < <(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null) &&
      frontier="$frontier $pid"
  done
  while [ -n "${frontier// /}" ]; do
    all="$all $frontier"
    next=""
    for pid in $frontier; do next="$next $(pgrep -P "$pid" | tr '\n' ' ')"; done
    frontier=$next
  done
  # shellcheck disable=SC2086
  [ -z "${all// /}" ] || kill -9 $all 2>/dev/null || true
}

stop_munge() {  # only a munged this script started (another on the machine is not ours)
  [ -f "$MUNGE_FLAG" ] || return 0
  local _
  pkill -x munged 2>/dev/null || true
  for _ in $(seq 1 20); do pgrep -x munged >/dev/null || break; sleep 0.5; done  # it saves its seed
  pkill -9 -x munged 2>/dev/null || true
  rm -f "$MUNGE_FLAG"
}

stop_daemons() {
  cancel_jobs
  pkill -f "slurmd -f $CONF" 2>/dev/null || true
  pkill -f "slurmctld -f $CONF" 2>/dev/null || true
  wait_gone "slurmd -f $CONF" 4
  wait_gone "slurmctld -f $CONF"
  kill_steps
  stop_munge
}

stop_two_node() {
  stop_daemons
  local i
  for i in 1 2; do
    ip link del "gtsp$i" 2>/dev/null || true  # not every kernel removes a veth with its peer's namespace
    ip netns del "gtslurm$i" 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  sed -i "/$TAG\$/d" /etc/hosts 2>/dev/null || true
}

start_munge() {
  if pgrep -x munged >/dev/null; then return 0; fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
  if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
  fi
  chown -R munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge 2>/dev/null || true
  chmod 0400 /etc/munge/munge.key
  runuser -u munge -- munged 2>/dev/null || munged --force
  touch "$MUNGE_FLAG"  # stop ends it
}

start() {
  install_packages
  write_config
  start_munge
  export SLURM_CONF=$CONF
  # -c: no job records from an earlier run (a job left completing there held both nodes forever)
  pgrep -f "slurmctld -f $CONF" >/dev/null || slurmctld -f "$CONF" -c
  pgrep -f "slurmd -f $CONF" >/dev/null || slurmd -f "$CONF"
  for _ in $(seq 1 60); do
    if sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
      echo "export SLURM_CONF=$CONF"
      return 0
    fi
    scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
    sleep 1
  done
  log "the node did not become idle; see $DIR/log/"
  tail -n 20 "$DIR"/log/*.log >&2 || true
  exit 1
}

stop() {
  stop_daemons
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  env|env-two-node) echo "export SLURM_CONF=$CONF" ;;
  start-two-node) start_two_node ;;
  stop-two-node) stop_two_node ;;
  *) echo "usage: $0 start|stop|env|start-two-node|stop-two-node|env-two-node" >&2; exit 2 ;;
esac
