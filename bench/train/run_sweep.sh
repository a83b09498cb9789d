#!/usr/bin/env bash
# The full sweep of `zeroc bench train` whose table and plot bench/RESULTS.md
# and the README show: installs what is missing (matplotlib included),
# builds, and runs the GPT example (4 layers, dim 128, 4 heads, seq 128,
# vocab 256, 8 sequences per rank) in every configuration of stages 0-3 x
# offload_optimizer none/cpu/nvme x offload_param (stage 3) x bf16/fp32 at
# worlds 1 and 2, 8 steps each, the first 3 untimed.
# Usage: bash bench/train/run_sweep.sh OUT_DIR [more zeroc bench train flags]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: bash bench/train/run_sweep.sh OUT_DIR [flags]}
shift
source scripts/build_dir.sh
bash scripts/deps.sh --bench
# The bench finds a python3 with matplotlib itself (the one on PATH, else
# Debian's, where deps.sh installed it; else gnuplot) and says which.
zc_configure build
ninja -C build
exec ./build/tools/zeroc bench train --out "$out" --model 4,128,4,128,256 --batch 8 \
  --steps 8 --warmup 3 --world 1,2 --dtype bf16,fp32 "$@"
