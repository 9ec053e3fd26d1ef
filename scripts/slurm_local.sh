#!/usr/bin/env bash
# A real one-node SLURM cluster on localhost, for the launch tests and CI (Debian, run as root).
#
#   conf=$(INSTALL_SLURM=1 scripts/slurm_local.sh start [STATE_DIR])   # prints the SLURM_CONF path, nothing else
#   SLURM_CONF=$conf sbatch ... ; SLURM_CONF=$conf srun -n 2 ...
#   scripts/slurm_local.sh stop STATE_DIR|SLURM_CONF
#
# `start` installs slurmd/slurmctld/slurm-client/munge with apt-get when missing and INSTALL_SLURM=1 is
# set (never otherwise: without it a missing SLURM is one line and exit 1), writes slurm.conf in
# STATE_DIR (default: a new /tmp/slurm_local.XXXXXX) and starts its own munged (private socket),
# slurmctld and slurmd on free ports, so it never touches a system munge or another cluster on the
# machine. `stop` ends exactly those three daemons, found by their pid files in STATE_DIR and
# checked against their command lines, never by name.
set -Eeuo pipefail

log() { echo "slurm_local: $*" >&2; }
die() { log "$*"; exit 1; }

COMMANDS="slurmctld slurmd sbatch srun squeue scontrol munged"

# the commands of COMMANDS that are not on PATH (`command -v a b` succeeds when any one is found)
missing_commands() {
  local c missing=""
  for c in $COMMANDS; do command -v "$c" >/dev/null 2>&1 || missing="$missing $c"; done
  echo "${missing# }"
}

install_packages() {
  [ "${INSTALL_SLURM:-}" = 1 ] || die "not installed: $1; INSTALL_SLURM=1 lets this script apt-get install \
slurmd slurmctld slurm-client munge (as root)"
  [ "$(id -u)" = 0 ] || die "must run as root to install packages"
  command -v apt-get >/dev/null || die "slurm is not installed and apt-get is absent"
  log "installing slurmd slurmctld slurm-client munge with apt-get"
  local policy=/usr/sbin/policy-rc.d made_policy=0
  if [ ! -e "$policy" ]; then  # keep the packages' init scripts from starting system daemons
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && made_policy=1
  fi
  local rc=0
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      slurmd slurmctld slurm-client munge; } >&2 || rc=$?
  [ "$made_policy" = 1 ] && rm -f "$policy"
  [ "$rc" = 0 ] || die "apt-get install failed (exit $rc)"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null \
    || echo "$1"
}

# pid from a pid file, only when that process is alive and was started with STATE_DIR on its command line
owned_pid() {
  local file=$1 state=$2 pid
  [ -s "$file" ] || return 1
  pid=$(tr -dc '0-9' < "$file")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  [ "$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null)" != Z ] || return 1  # exited, unreaped
  tr '\0' ' ' < "/proc/$pid/cmdline" | grep -qF "$state" || return 1
  echo "$pid"
}

stop_daemon() {
  local name=$1 file=$2 state=$3 pid i
  pid=$(owned_pid "$file" "$state") || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 100); do
    owned_pid "$file" "$state" >/dev/null || { log "stopped $name ($pid)"; return 0; }
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  log "killed $name ($pid) after 10 s"
}

stop() {
  local arg=${1:?usage: $0 stop STATE_DIR|SLURM_CONF} state
  if [ -f "$arg" ]; then state=$(cd "$(dirname "$arg")" && pwd); else state=$(cd "$arg" && pwd); fi
  [ -f "$state/slurm.conf" ] || [ -d "$state/munge" ] || die "$state is not a folder made by '$0 start'"
  stop_state "$state"
}

stop_state() {
  local state=$1
  if owned_pid "$state/slurmctld.pid" "$state" >/dev/null; then  # let running jobs end cleanly first
    SLURM_CONF="$state/slurm.conf" timeout 10 scancel --full --quiet --user="$(id -u)" 2>/dev/null || true
  fi
  stop_daemon slurmd "$state/slurmd.pid" "$state"
  stop_daemon slurmctld "$state/slurmctld.pid" "$state"
  stop_daemon munged "$state/munge/munged.pid" "$state"
}

start() {
  local missing
  missing=$(missing_commands)
  [ -z "$missing" ] || install_packages "$missing"
  [ "$(id -u)" = 0 ] || die "must run as root (the daemons and munge need it)"

  local state=${1:-}
  if [ -z "$state" ]; then state=$(mktemp -d /tmp/slurm_local.XXXXXX); else mkdir -p "$state"; fi
  state=$(cd "$state" && pwd)
  chmod 755 "$state"
  local conf=$state/slurm.conf sock=$state/munge/munge.socket
  trap 'log "start failed; logs in $state"; stop_state "$state"' ERR

  mkdir -p "$state/munge" "$state/spool" "$state/ctld"
  chown munge:munge "$state/munge" && chmod 755 "$state/munge"
  local key=/etc/munge/munge.key
  if [ ! -s "$key" ]; then
    key=$state/munge/munge.key
    runuser -u munge -- mungekey --create --keyfile="$key"
  fi
  runuser -u munge -- /usr/sbin/munged --socket="$sock" --key-file="$key" --pid-file="$state/munge/munged.pid" \
    --log-file="$state/munge/munged.log" --seed-file="$state/munge/munged.seed"
  local i
  for i in $(seq 50); do munge -n -S "$sock" 2>/dev/null | unmunge -S "$sock" >/dev/null 2>&1 && break; sleep 0.1; done
  munge -n -S "$sock" | unmunge -S "$sock" >/dev/null || { log "munged did not answer"; false; }

  local cpus mem_mb ctld_port d_port
  cpus=$(env -u OMP_NUM_THREADS nproc)  # nproc obeys OMP_NUM_THREADS; the cores are what counts
  mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
  ctld_port=$(free_port 6817)
  d_port=$(free_port 6818)
  cat > "$conf" <<EOF
ClusterName=local
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
KillWait=5
MinJobAge=600
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/spool
SlurmctldLogFile=$state/slurmctld.log
SlurmdLogFile=$state/slurmd.log
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
  slurmctld -f "$conf"
  slurmd -f "$conf" -N localhost
  export SLURM_CONF=$conf
  for i in $(seq 100); do
    [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && break
    sleep 0.2
  done
  [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] || { log "node not idle after 20 s: $(sinfo 2>&1 | tail -1)"; false; }
  trap - ERR
  log "cluster up in $state (slurmctld :$ctld_port, slurmd :$d_port)"
  echo "$conf"
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  *) echo "usage: $0 start [STATE_DIR] | stop STATE_DIR|SLURM_CONF" >&2; exit 2 ;;
esac
