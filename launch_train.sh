#!/usr/bin/env bash
# Local multi-process training: ./launch_train.sh N [options/x.json] [extra main_train.py args]
#   ./launch_train.sh 2 options/train_dncnn_demo.json --set train.total_iter=200
# Runs `python scripts/launch.py --nproc N main_train.py --opt ...`: N ranks on torch's elastic launch
# API (what torchrun runs; standalone rendezvous, no restarts), one process per GPU, or N CPU processes
# with one thread each. It exits with the documented code of the rank that failed first (2 user
# error, 3 preempted with a checkpoint saved, 4 non-finite loss, 5 checkpoint write failed, 130
# Ctrl-C with a checkpoint saved, 128+N killed by signal N), where torchrun exits 1; SIGTERM/SIGUSR1
# to it make the ranks save and exit 3, Ctrl-C (SIGINT) save and exit 130; a second SIGTERM or
# Ctrl-C stops them at once. A stop before any rank started starts none (exit 3, or 130).
# For `--max-restarts`, call torchrun directly. Under a platform that already started one process
# per GPU (WORLD_SIZE set) it refuses: nesting launchers would start N processes per process.
set -euo pipefail
cd "$(dirname "$0")"

usage() { echo "usage: $0 N [options/x.json] [main_train.py args...]" >&2; exit 2; }

if [ -n "${WORLD_SIZE:-}" ]; then
  echo "launch_train.sh: WORLD_SIZE=${WORLD_SIZE} is already set: a launcher or platform has started this" \
       "process as one rank of a distributed job. Run 'python main_train.py --opt ...' directly instead." >&2
  exit 2
fi
[ $# -ge 1 ] || usage
N=$1; shift
[[ "$N" =~ ^[1-9][0-9]*$ ]] || { echo "launch_train.sh: N must be a positive integer, got '$N'" >&2; exit 2; }
OPT=options/train_dncnn_demo.json
if [ $# -ge 1 ] && [[ "$1" != -* ]]; then OPT=$1; shift; fi
[ -f "$OPT" ] || { echo "launch_train.sh: option file not found: $OPT" >&2; exit 2; }

PYTHON=${PYTHON:-python}
# exec: the launcher takes this shell's pid, so signals sent to the script reach it
exec "$PYTHON" scripts/launch.py --nproc "$N" main_train.py --opt "$OPT" "$@"
