#!/usr/bin/env bash
# Installs what is missing, builds zeroc, and runs the demo: the MLP example
# training on the host (CPU) path with its default configuration.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
[[ -f build/build.ninja ]] || meson setup build
ninja -C build
exec ./build/examples/train_mlp "$@"
