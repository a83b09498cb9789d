#!/usr/bin/env bash
# What bf16 optimizer state costs in validation loss: the GPT example trained
# with the demo's configuration (examples/ds_config_gpt_zero2.json: ZeRO-2,
# two ranks, bf16 parameters) and the same configuration with its optimizer
# state in bf16 - master and moments with stochastic rounding, the same with
# rounding to nearest even, and bf16 moments beside an fp32 master - each
# printing its --json line with the validation loss. The state precision
# changes the numbers only, not the work, so the runs need no quiet machine.
#
#   bash bench/state_precision/run.sh OUT [train_gpt flags...]
#
# OUT (a directory that must not exist) receives one config per variant, one
# output per variant and seed, and summary.jsonl: each variant's validation
# loss for every seed, their mean and the mean's ratio to the fp32-state
# run's. One seed's loss moves by a few percent with the data order alone
# (bench/RESULTS.md), so the comparison is of means over SEEDS seeds
# (environment, default 5: --seed 1..SEEDS; FIRST_SEED, default 1, moves
# the range to FIRST_SEED..FIRST_SEED+SEEDS-1, so a later run can add
# seeds to an earlier one's). Extra flags go to every
# train_gpt run (e.g. --layers 6 --dim 256 --heads 8 for the larger model).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: run.sh OUT [train_gpt flags...]}
shift
mkdir "$out" # refuses an existing path: this script writes only what it made
bin=build/examples/gpt/train_gpt
base=examples/ds_config_gpt_zero2.json
# VARIANTS (environment): a subset, space-separated, fp32 first.
read -r -a variants <<< "${VARIANTS:-fp32 bf16_sr bf16_rne moments_bf16}"
[[ "${variants[0]}" == fp32 ]] || { echo "run.sh: VARIANTS must start with fp32" >&2; exit 2; }
python3 - "$base" "$out" <<'PY'
import json, sys
base, out = sys.argv[1], sys.argv[2]
cfg = json.load(open(base))
extra = {
    "fp32": {},
    "bf16_sr": {"bf16_master_weights_and_grads": True, "bf16_optimizer_states": True},
    "bf16_rne": {"bf16_master_weights_and_grads": True, "bf16_optimizer_states": True,
                 "stochastic_rounding": False},
    "moments_bf16": {"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"},
}
for name, keys in extra.items():
    c = json.loads(json.dumps(cfg))
    c["bf16"].update(keys)
    with open(f"{out}/{name}.json", "x") as f:
        json.dump(c, f, indent=2)
PY
seeds=${SEEDS:-5}
[[ "$seeds" =~ ^[1-9][0-9]{0,2}$ ]] || { echo "run.sh: SEEDS '$seeds': expected 1..999" >&2; exit 2; }
first=${FIRST_SEED:-1}
[[ "$first" =~ ^[1-9][0-9]{0,5}$ ]] || { echo "run.sh: FIRST_SEED '$first': expected 1..999999" >&2; exit 2; }
last=$((first + seeds - 1))
for v in "${variants[@]}"; do
  for ((s = first; s <= last; s++)); do
    "$bin" --config "$out/$v.json" --steps 1000 --seed "$s" --json "$@" > "$out/$v.seed$s.out"
  done
done
python3 - "$out" "$first" "$last" "${variants[@]}" <<'PY'
import json, sys
out, first, last, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
def final(n, s):
    lines = [json.loads(l) for l in open(f"{out}/{n}.seed{s}.out") if l.startswith("{")]
    return [l for l in lines if l.get("final")][-1]["val_loss"]
losses = {n: [final(n, s) for s in range(first, last + 1)] for n in names}
mean = {n: sum(v) / len(v) for n, v in losses.items()}
with open(f"{out}/summary.jsonl", "x") as f:
    for n in names:
        line = {"variant": n, "seeds": [first, last], "val_loss": losses[n], "mean": mean[n],
                "ratio_to_fp32_state": mean[n] / mean["fp32"]}
        print(json.dumps(line))
        f.write(json.dumps(line) + "\n")
PY
