#!/usr/bin/env bash
# Installs what is missing, builds zeroc, and runs the demo: the MLP example
# training on the host (CPU) path, two ranks, driven by a DeepSpeed JSON config
# (ZeRO-2, bf16, AdamW, WarmupDecayLR). Extra arguments go to train_mlp and
# override the config (e.g. --stage 3, --world 4, --json).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/build_dir.sh
bash scripts/deps.sh
zc_configure build
ninja -C build
exec ./build/examples/train_mlp --config examples/ds_config_zero2.json "$@"
