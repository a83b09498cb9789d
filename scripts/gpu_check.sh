#!/usr/bin/env bash
# Every GPU check of zeroc in one run, on a GPU machine, from the repository
# root: the environment, the GPU test suites (ZC_REQUIRE_GPU=1),
# compute-sanitizer, the fused-Adam bench against torch's fused AdamW,
# train_gpt at GPT-2 small against the same model in PyTorch, and
# `zeroc bench train --device cuda`. It runs the bundle scripts/gpu_bundle.sh
# made (.gpu/zeroc-gpu-bundle.tar.xz), so the machine needs only the CUDA
# toolkit, an NCCL and PyTorch. Results: $OUT/results.jsonl (one JSON line
# per result), $OUT/logs.tar.gz, and a table on stdout. PARTS=tests,bench
# reruns a subset. See scripts/gpu_check.py and DEVELOPERS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
exec python3 scripts/gpu_check.py "$@"
