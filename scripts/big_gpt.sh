#!/usr/bin/env bash
# Larger than memory: installs what is missing, builds zeroc, and trains
# examples/gpt at 32 layers, dim 2560, 20 heads (2.52 billion parameters, seq
# 64, batch 1, bf16) for 3 steps at ZeRO stage 3 with the optimizer state and
# the parameters on the disk (offload_optimizer and offload_param "nvme",
# max_in_cpu 0). Its fp32 master, Adam moments and bf16 parameters take 33
# GiB of swap files; the host holds about 21 GiB at the peak (the largest
# shape whose plan fits a 24 GiB machine: README). train_gpt's pre-check
# plans the memory first and refuses, naming each part, a machine that
# cannot hold it: pass a smaller shape (--layers 24 --dim 2304 --heads 18 is
# 1.53 B) or more steps as train_gpt flags.
#
# The swap files, the config and a 4 KiB training text (the start of the
# GPL-3, so the final validation is a few windows) go into a directory of
# its own under ZC_SWAP_DIR (default: build/, on the repository's disk),
# removed at the end, also on Ctrl-C; the swap files have no names while
# the run goes on, so a killed run leaves nothing behind either.
# --init-from FILE starts from a Hugging Face GPT-2 checkpoint of that shape
# (a random bf16 one: python3 scripts/make_big_gpt.py FILE, 5 GB): it is
# imported straight into the NVMe swap files (zc_load_safetensors: the
# master written alone, through a 32 MiB staging ring).
# --bf16-state (first, before the train_gpt flags) keeps the optimizer state
# in bf16 - master and moments, stochastic rounding (bf16.
# bf16_master_weights_and_grads and bf16_optimizer_states) - so the swap
# files hold 8 bytes a parameter instead of 14 (docs/config.md, "Optimizer
# state precision").
# Usage: bash scripts/big_gpt.sh [--bf16-state] [train_gpt flags]
set -euo pipefail
cd "$(dirname "$0")/.."
state_keys=""
if [[ "${1:-}" == --bf16-state ]]; then
  state_keys=', "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true'
  shift
fi
source scripts/build_dir.sh
bash scripts/deps.sh
zc_configure build
ninja -C build
if [[ ! -x build/examples/gpt/train_gpt ]]; then
  echo "big_gpt.sh: build/examples/gpt/train_gpt was not built: OpenBLAS (libopenblas-dev)" \
       "was not found when build/ was configured (see the meson output above)" >&2
  exit 1
fi
parent=${ZC_SWAP_DIR:-$PWD/build}
work=$(mktemp -d "$parent/zc-big-gpt.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
head -c 4096 /usr/share/common-licenses/GPL-3 > "$work/data.txt"
cat > "$work/ds_config.json" <<EOF
{
  "train_micro_batch_size_per_gpu": 1,
  "gradient_accumulation_steps": 1,
  "gradient_clipping": 1.0,
  "bf16": { "enabled": true$state_keys },
  "wall_clock_breakdown": true,
  "optimizer": {
    "type": "AdamW",
    "params": { "lr": 1e-6, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1 }
  },
  "zero_optimization": {
    "stage": 3,
    "overlap_comm": true,
    "stage3_param_persistence_threshold": 0,
    "offload_optimizer": { "device": "nvme", "nvme_path": "$work", "pin_memory": true },
    "offload_param": { "device": "nvme", "nvme_path": "$work", "pin_memory": true,
                       "max_in_cpu": 0 }
  }
}
EOF
./build/examples/gpt/train_gpt --config "$work/ds_config.json" --layers 32 --dim 2560 \
  --heads 20 --seq 64 --vocab 256 --batch 1 --stage 3 --world 1 --steps 3 --eval-every 0 \
  --data "$work/data.txt" --launcher threads "$@"
# The engine's swap directories and files are gone with it: only what this
# script wrote is left.
left=$(find "$work" -mindepth 1 ! -name ds_config.json ! -name data.txt | head -5)
if [[ -n "$left" ]]; then
  echo "big_gpt.sh: the run left files under $work: $left" >&2
  exit 1
fi
echo "big_gpt.sh: nothing was left under the swap directory $work"
