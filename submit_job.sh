#!/bin/bash
# SLURM batch script: one task per GPU, srun starts the ranks, main_train.py detects them.
#
#   sbatch submit_job.sh [options/x.json] [main_train.py args...]
#   OPT=options/x.json EXTRA_ARGS="--set train.total_iter=1000" sbatch --nodes=2 submit_job.sh
#
# Edit the header for your cluster (or override any line on the sbatch command line):
# --ntasks-per-node must equal the GPUs per node in --gres (CPU-only partition: --gres=none).
# Preemption: SLURM sends SIGUSR1 (--signal) before the time limit, or SIGTERM when it preempts;
# every rank agrees on the stop, rank 0 saves a checkpoint, the ranks exit with code 3, and this
# script requeues the job, which resumes from that checkpoint by itself.
#SBATCH --job-name=restoration
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gres=gpu:8
#SBATCH --cpus-per-task=8
#SBATCH --time=48:00:00
#SBATCH --output=%x-%j.out
#SBATCH --error=%x-%j.err
#SBATCH --open-mode=append
#SBATCH --signal=USR1@180
#SBATCH --requeue
set -uo pipefail

EXIT_PREEMPTED=3
OPT=${OPT:-options/train_dncnn_demo.json}
if [ $# -ge 1 ] && [[ "$1" != -* ]]; then OPT=$1; shift; fi
cd "${SLURM_SUBMIT_DIR:-$(dirname "$0")}"

first_node=$(scontrol show hostnames "${SLURM_JOB_NODELIST}" 2>/dev/null | head -n 1)
export MASTER_ADDR=${MASTER_ADDR:-${first_node:-127.0.0.1}}
export MASTER_PORT=${MASTER_PORT:-$((15000 + SLURM_JOB_ID % 20000))}
export TORCH_NCCL_ASYNC_ERROR_HANDLING=${TORCH_NCCL_ASYNC_ERROR_HANDLING:-1}
PYTHON=${PYTHON:-python}

echo "job ${SLURM_JOB_ID} (restart ${SLURM_RESTART_COUNT:-0}) on ${SLURM_JOB_NODELIST}: ${OPT}" \
     "master ${MASTER_ADDR}:${MASTER_PORT}"
# shellcheck disable=SC2086  # EXTRA_ARGS is a list of words on purpose
srun --kill-on-bad-exit=1 "$PYTHON" -u main_train.py --opt "$OPT" ${EXTRA_ARGS:-} "$@"
rc=$?
if [ "$rc" -eq "$EXIT_PREEMPTED" ]; then
  echo "job ${SLURM_JOB_ID}: stopped for preemption, checkpoint saved; requeueing"
  scontrol requeue "${SLURM_JOB_ID}"
  exit 0
fi
exit "$rc"
