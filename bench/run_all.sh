#!/usr/bin/env bash
# Run every benchmark in bench/ once and print all ratios (raw output; see bench/README.md).
#
#   bash bench/run_all.sh            # full run, about 1 h 40 min on 2 CPU cores (VRT step: ~20, BasicSR side by side: ~60)
#   QUICK=1 bash bench/run_all.sh    # every script with --quick: smallest sizes, fewest reps, no
#                                    # torch.compile row; a few minutes, a smoke run (noisy)
#
# Timings are only meaningful on an otherwise idle machine: check `uptime` first.
# tests/test_benches.py checks that every bench/bench_*.py is run here.
set -euo pipefail
cd "$(dirname "$0")/.."

ARGS=()
if [[ "${QUICK:-0}" == "1" ]]; then
  ARGS=(--quick)
fi

echo "== run_all.sh $(date '+%Y-%m-%d %H:%M:%S'), uptime:$(uptime | sed 's/.*load average/ load average/')"
echo "== python $(python -c 'import sys; print(sys.version.split()[0])'), OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}"
echo
echo "== bench_loop.py: framework loop vs bare PyTorch loop; option rows"
python bench/bench_loop.py "${ARGS[@]}"
echo
echo "== bench_data.py: data wait fraction (demo config, real loader)"
python bench/bench_data.py "${ARGS[@]}"
echo
echo "== bench_resume.py: time to first step, resume vs fresh"
python bench/bench_resume.py "${ARGS[@]}"
echo
echo "== bench_ddp.py: DDP 2x1 vs 1x2 throughput"
python bench/bench_ddp.py "${ARGS[@]}"
echo
echo "== bench_deform_conv.py: deformable conv paths (VRT)"
python bench/bench_deform_conv.py "${ARGS[@]}"
echo
echo "== bench_zoo.py: KAIR image networks (parameters, fwd+bwd), gan / plain iteration"
python bench/bench_zoo.py "${ARGS[@]}"
echo
echo "== bench_inference.py: main_test.py --input images/s and frames/s (tiles off/on), peak RSS of a 100- and 1,000-frame video"
python bench/bench_inference.py "${ARGS[@]}"
echo
echo "== bench_curves.py: cost of redrawing curves.png"
python bench/bench_curves.py "${ARGS[@]}"
echo
echo "== bench_losses.py: cost of each loss, / L1 and / a network step"
python bench/bench_losses.py "${ARGS[@]}"
echo
echo "== bench_vrt_step.py: VRT 006 training step, deformable conv paths x checkpointing (~20 min; --quick: a tiny VRT)"
python bench/bench_vrt_step.py "${ARGS[@]}"
echo
echo "== bench_startup.py: time to the first finished step, main_train.py vs bare PyTorch"
python bench/bench_startup.py "${ARGS[@]}"
echo
echo "== bench_peers.py: BasicSR 1.4.2's own train.py / our main_train.py, steady s/iter on 5 networks, 2 cores, 1 core, beside a busy process (installs BasicSR into \$TMPDIR/bench_peers; ~60 min)"
python bench/bench_peers.py "${ARGS[@]}"
echo
echo "== bench_loader.py: loader samples/s, ours vs KAIR/BasicSR-style baseline (images, clips, lmdb, spikes)"
python bench/bench_loader.py "${ARGS[@]}"
echo
echo "== bench_data_prep.py: which data preparation (extract_subimages, make_lmdb, cache_data): loader samples/s per worker"
python bench/bench_data_prep.py "${ARGS[@]}"
echo
echo "== bench_gpu.py: KAIR configurations on a CUDA GPU, main_train.py option rows vs a bare loop (CUDA only; --quick anywhere)"
python bench/bench_gpu.py "${ARGS[@]}"
echo
echo "== bench_video_gpu.py: VRT 006 / RVRT 002 training step memory and time on a CUDA GPU; attention blocks on any device"
python bench/bench_video_gpu.py "${ARGS[@]}"
echo
echo "== gpu_check.py: every training path on CUDA, then bench_gpu.py's and bench_video_gpu.py's rows, one table (CUDA only; --quick anywhere)"
python bench/gpu_check.py "${ARGS[@]}"
echo
echo "== done $(date '+%H:%M:%S'), uptime:$(uptime | sed 's/.*load average/ load average/')"
