#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for integration tests and demos.
#
#   scripts/slurm-local.sh start   # installs slurm-wlm + munge with apt-get if missing, starts munged,
#                                  # slurmctld and slurmd; prints `export SLURM_CONF=...`
#   scripts/slurm-local.sh stop    # stops them
#   scripts/slurm-local.sh env     # prints the export line
#
# Runs as root. The config lives in $SLURM_LOCAL_DIR (default /tmp/gnntrain-slurm) and uses this
# machine's hostname and CPU count. Exit 3 means apt-get cannot install the packages here.
set -euo pipefail
DIR=${SLURM_LOCAL_DIR:-/tmp/gnntrain-slurm}
CONF=$DIR/slurm.conf
cmd=${1:-start}

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

start_munge() {
  if pgrep -x munged >/dev/null; then return 0; fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
  if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
  fi
  chown -R munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge 2>/dev/null || true
  chmod 0400 /etc/munge/munge.key
  runuser -u munge -- munged 2>/dev/null || munged --force
}

start() {
  install_packages
  write_config
  start_munge
  export SLURM_CONF=$CONF
  pgrep -f "slurmctld -f $CONF" >/dev/null || slurmctld -f "$CONF"
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
  pkill -f "slurmd -f $CONF" 2>/dev/null || true
  pkill -f "slurmctld -f $CONF" 2>/dev/null || true
  sleep 1
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) echo "usage: $0 start|stop|env" >&2; exit 2 ;;
esac
