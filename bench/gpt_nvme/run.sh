#!/usr/bin/env bash
# Larger than memory, end to end: a 1.53-billion-parameter GPT (24 layers, dim
# 2304, 18 heads, seq 64, vocab 256, batch 1, bf16) trained by examples/gpt at
# stage 3 with the optimizer state and the parameters on NVMe (max_in_cpu 0),
# at world 1 and world 2 (rank threads), next to the disk's measured speed.
# Installs fio when missing, builds build/ (train_gpt, zeroc), then runs
# bench/gpt_nvme/run_gpt_nvme.py, which writes its JSON lines and a markdown
# summary into OUT_DIR and prints the summary. Everything it puts on the disk
# (swap files, the bench io file) lives in a directory of its own under
# --dir (default: OUT_DIR) and is removed at the end, also on Ctrl-C.
# Usage: bash bench/gpt_nvme/run.sh OUT_DIR [run_gpt_nvme.py flags, see --help]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: bash bench/gpt_nvme/run.sh OUT_DIR [flags]}
shift
if ! command -v fio >/dev/null 2>&1; then
  echo "run.sh: installing fio (the disk's ceiling)" >&2
  if [[ $(id -u) -eq 0 ]]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq fio >&2
fi
source scripts/build_dir.sh
zc_configure build >/dev/null
ninja -C build examples/gpt/train_gpt tools/zeroc >&2
mkdir -p "$out"
exec python3 bench/gpt_nvme/run_gpt_nvme.py --build build --out "$out" "$@"
