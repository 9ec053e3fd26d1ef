#!/usr/bin/env bash
# Local multi-process training: ./launch_train.sh N [options/x.json] [extra main_train.py args]
#   ./launch_train.sh 2 options/train_dncnn_demo.json --set train.total_iter=200
# Runs `torchrun --standalone --nproc_per_node=N main_train.py --opt ...` (one process per GPU,
# or N CPU processes with one thread each). Under a platform that already started one process per
# GPU (WORLD_SIZE set) it refuses: nesting launchers would start N processes per process.
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
exec "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node="$N" main_train.py --opt "$OPT" "$@"
