#!/usr/bin/env bash
# Installs what is missing, builds zeroc, and runs the demo: examples/gpt, a
# small GPT-2-style model trained on the host (CPU) path by two ranks under
# ZeRO-2 in bf16, driven by a DeepSpeed JSON config, on the text of the GPL-3
# (its last 10% held out). It prints progress lines, the validation loss next
# to the unigram entropy of the same bytes, and a generated sample. Extra
# arguments go to train_gpt and override the config (e.g. --stage 3,
# --world 4, --steps 50, --json).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/build_dir.sh
bash scripts/deps.sh
zc_configure build
ninja -C build
if [[ ! -x build/examples/gpt/train_gpt ]]; then
  echo "demo.sh: build/examples/gpt/train_gpt was not built: OpenBLAS (libopenblas-dev) was" \
       "not found when build/ was configured (see the meson output above)" >&2
  exit 1
fi
exec ./build/examples/gpt/train_gpt --config examples/ds_config_gpt_zero2.json --steps 1000 --sample 200 "$@"
