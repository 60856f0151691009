#!/usr/bin/env bash
# A real single-node Slurm on this machine (Debian slurm-wlm, root, no systemd/cgroups), for the
# Slurm tests and for trying the sbatch templates locally.
#   slurm/local_cluster.sh start    install slurm-wlm if missing, write the config, start the
#                                   daemons; idempotent and quick when the cluster is already up
#   slurm/local_cluster.sh stop     stop the daemons started here
#   slurm/local_cluster.sh status   exit 0 when the node is up
# The config goes to /etc/slurm/slurm.conf (so sbatch/squeue need no SLURM_CONF); a slurm.conf
# that this script did not write is never touched. State, logs and pid files: $STATE_DIR.
set -euo pipefail

STATE_DIR=${MAGMA_SLURM_STATE:-/var/tmp/magma-slurm}
CONF=/etc/slurm/slurm.conf
MARK="# written by magma_torch slurm/local_cluster.sh"

die() { echo "local_cluster: $*" >&2; exit 1; }

alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

up() {
  alive "$STATE_DIR/slurmctld.pid" && alive "$STATE_DIR/slurmd.pid" &&
    [[ $(sinfo -h -N -o %T 2>/dev/null | head -1) =~ ^(idle|mixed|allocated) ]]
}

install() {
  command -v slurmctld >/dev/null && command -v munged >/dev/null && return
  [[ $(id -u) == 0 ]] || die "slurm-wlm is not installed and installing it needs root"
  command -v apt-get >/dev/null || die "slurm-wlm is not installed and there is no apt-get to install it"
  echo "local_cluster: installing slurm-wlm (apt)"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm >/dev/null
}

write_conf() {
  if [[ -f $CONF ]] && ! grep -qF "$MARK" "$CONF"; then
    die "$CONF exists and was not written by this script; not touching a real cluster's config"
  fi
  local mem=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) - 1024 ))
  mkdir -p "$STATE_DIR/state" "$STATE_DIR/spool" "$STATE_DIR/log"
  chown slurm:slurm "$STATE_DIR/state" "$STATE_DIR/log"
  cat > "$CONF.new" <<EOF
$MARK
ClusterName=magma
SlurmctldHost=$(hostname)
SlurmUser=slurm
SlurmctldPidFile=$STATE_DIR/slurmctld.pid
SlurmdPidFile=$STATE_DIR/slurmd.pid
StateSaveLocation=$STATE_DIR/state
SlurmdSpoolDir=$STATE_DIR/spool
SlurmctldLogFile=$STATE_DIR/log/slurmctld.log
SlurmdLogFile=$STATE_DIR/log/slurmd.log
# no systemd, no cgroups, no accounting daemon on these machines
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
# without a default a job that asks no --mem takes the whole node and arrays run one task at a time
DefMemPerCPU=1024
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
NodeName=$(hostname) CPUs=$(nproc) RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  mv "$CONF.new" "$CONF"
}

stop() {
  local d pid
  for d in slurmd slurmctld; do
    alive "$STATE_DIR/$d.pid" || continue
    pid=$(cat "$STATE_DIR/$d.pid")
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
}

start() {
  install
  if up; then echo "local_cluster: up ($(hostname))"; return; fi
  write_conf
  stop   # a half-started pair from an earlier run
  if ! pgrep -u munge -x munged >/dev/null; then
    mkdir -p /run/munge && chown munge:munge /run/munge
    runuser -u munge -- /usr/sbin/munged
  fi
  /usr/sbin/slurmctld
  /usr/sbin/slurmd
  for _ in $(seq 100); do
    if up; then echo "local_cluster: up ($(hostname))"; return; fi
    sleep 0.2
  done
  tail -5 "$STATE_DIR/log/slurmctld.log" "$STATE_DIR/log/slurmd.log" >&2 || true
  die "slurm did not come up (logs in $STATE_DIR/log)"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) up ;;
  *) die "usage: $0 start|stop|status" ;;
esac
