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
# script requeues the job, which resumes from that checkpoint by itself. Any other failure is not
# requeued: the script exits with the ranks' code (2 user error, 4 non-finite loss, 5 checkpoint
# write failed, 130 Ctrl-C/SIGINT, 128+N killed by signal N).
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
# Exit codes. srun exits with the highest exit code of its tasks, but a task ended by a signal wins
# (128+N); observed on SLURM 22.05. With --kill-on-bad-exit=1 the first rank to exit non-zero gets
# the others SIGTERMed, and a rank a moment slower to leave (a user error found at start-up) turned
# code 2 into 143. So the ranks get RANK_EXIT_WAIT_S to end by themselves (they stop together for
# codes 2-5), then srun kills the rest (a crashed rank: the others fail at their next collective or
# are killed then). The ranks' codes reach this script: 0 done, 2 user error, 3 stopped for
# preemption (checkpoint saved; also for a stop that came during start-up, with nothing to save),
# 4 non-finite loss, 5 checkpoint write failed (a full disk: "no space left on <mount>"), 130 Ctrl-C
# (SIGINT, e.g. `scancel --signal=INT`: a person asked to stop, not requeued), 128+N a rank killed
# by signal N. Only 3 is requeued; any other code becomes the job's exit code (ExitCode in
# `scontrol show job`).
RANK_EXIT_WAIT_S=60
# shellcheck disable=SC2086  # EXTRA_ARGS is a list of words on purpose
srun --kill-on-bad-exit=0 --wait="$RANK_EXIT_WAIT_S" "$PYTHON" -u main_train.py --opt "$OPT" ${EXTRA_ARGS:-} "$@"
rc=$?
if [ "$rc" -eq "$EXIT_PREEMPTED" ]; then
  echo "job ${SLURM_JOB_ID}: stopped for preemption, checkpoint saved; requeueing"
  if scontrol requeue "${SLURM_JOB_ID}"; then
    exit 0
  fi
  echo "job ${SLURM_JOB_ID}: scontrol requeue failed; resubmit this script to resume" >&2
fi
echo "job ${SLURM_JOB_ID}: training exited with code ${rc}"
exit "$rc"
