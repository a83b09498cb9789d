#!/usr/bin/env bash
# The params_sha256 of train_mlp and train_gpt over the matrix of stages,
# offload homes and precisions, one line per configuration:
#
#   <example> <configuration> <params_sha256 | exit=N: first line of stderr>
#
# For a change that must not change behaviour (a move, a split): run it before
# and after and compare the two files (`diff before.txt after.txt`). A
# configuration the engine refuses (offload at stage 0) is listed with its
# message, which must not change either.
#
# usage: scripts/params_sha.sh [BUILD_DIR] > list.txt
# BUILD_DIR defaults to build; it needs examples/train_mlp and
# examples/gpt/train_gpt. Swap files go to a private directory under
# ${TMPDIR:-/tmp}, removed on exit (and on signals).
set -euo pipefail

build=${1:-build}
mlp=$build/examples/train_mlp
gpt=$build/examples/gpt/train_gpt
for exe in "$mlp" "$gpt"; do
    [[ -x $exe ]] || { echo "params_sha.sh: $exe is missing (ninja -C $build)" >&2; exit 2; }
done
src=$(cd "$(dirname "$0")/.." && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/zc-params-sha-XXXXXX")
trap 'rm -rf -- "$work"' EXIT
trap 'exit 130' INT TERM
mkdir "$work/nvme"

# run NAME LABEL CMD...: one line for this configuration.
run() {
    local name=$1 label=$2
    shift 2
    local out rc=0
    out=$("$@" 2>"$work/err") || rc=$?
    local sha
    sha=$(printf '%s\n' "$out" | grep -o '"params_sha256":"[0-9a-f]*"' | tail -1 | cut -d'"' -f4 || true)
    if [[ $rc -eq 0 && -n $sha ]]; then
        printf '%s %s %s\n' "$name" "$label" "$sha"
    else
        # The message without what may differ between runs or builds: the
        # temporary directory, which rank reported first, the source line.
        printf '%s %s exit=%d: %s\n' "$name" "$label" "$rc" \
            "$(grep -v '^\[zeroc' "$work/err" | head -1 | sed -E \
               -e "s#$work#WORK#g" -e 's/rank [0-9]+: //' -e 's#[a-z0-9_/]+\.c:[0-9]+ ##g')"
    fi
}

# train_mlp: 2 ranks, 20 steps, chunks of 65536 elements (4 chunks and more).
for dt in fp32 bf16 fp16; do
    for s in 0 1 2 3; do
        for off in none cpu nvme; do
            run train_mlp "stage=$s dtype=$dt opt=$off" \
                "$mlp" --stage $s --dtype $dt --steps 20 --json \
                --offload-optimizer $off --nvme-path "$work/nvme"
        done
        # Accumulation: stage 2/3 nvme keeps the fp32 gradient shard in the
        # swap files; cpu keeps it in the home.
        for off in cpu nvme; do
            run train_mlp "stage=$s dtype=$dt opt=$off accum=2" \
                "$mlp" --stage $s --dtype $dt --steps 10 --accum 2 --json \
                --offload-optimizer $off --nvme-path "$work/nvme"
        done
        run train_mlp "stage=$s dtype=$dt opt=cpu ratio=0.5" \
            "$mlp" --stage $s --dtype $dt --steps 10 --json \
            --offload-optimizer cpu --offload-ratio 0.5
    done
    # Stage 3 with the parameter shards offloaded too.
    for poff in cpu nvme; do
        for off in none cpu nvme; do
            for cpu in 0 100000; do
                [[ $poff == cpu && $cpu != 0 ]] && continue
                run train_mlp "stage=3 dtype=$dt opt=$off param=$poff max_in_cpu=$cpu" \
                    "$mlp" --stage 3 --dtype $dt --steps 12 --json \
                    --offload-optimizer $off --offload-param $poff --max-in-cpu $cpu \
                    --nvme-path "$work/nvme"
            done
        done
    done
    # Other world sizes.
    for w in 1 3; do
        for s in 0 1 2 3; do
            run train_mlp "stage=$s dtype=$dt world=$w" \
                "$mlp" --stage $s --dtype $dt --world $w --steps 10 --json
        done
    done
done

# train_gpt: 2 layers, 2 ranks, 8 steps, configs written from the demo's.
gpt_config() { # STAGE OPT PARAM MAX_IN_CPU BUCKET -> path
    local f="$work/gpt-$1-$2-$3-$4-$5.json" zo
    zo="\"stage\": $1, \"overlap_comm\": true, \"reduce_bucket_size\": $5"
    [[ $2 != none ]] && zo+=", \"offload_optimizer\": {\"device\": \"$2\", \"nvme_path\": \"$work/nvme\"}"
    [[ $3 != none ]] && zo+=", \"offload_param\": {\"device\": \"$3\", \"nvme_path\": \"$work/nvme\", \"max_in_cpu\": $4}"
    cat > "$f" <<JSON
{
  "train_micro_batch_size_per_gpu": "auto",
  "gradient_accumulation_steps": "auto",
  "gradient_clipping": 1.0,
  "bf16": { "enabled": true },
  "optimizer": { "type": "AdamW",
    "params": { "lr": 3e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1 } },
  "scheduler": { "type": "WarmupDecayLR",
    "params": { "warmup_min_lr": 0, "warmup_max_lr": 3e-3, "warmup_num_steps": 4,
                "total_num_steps": "auto" } },
  "zero_optimization": { $zo }
}
JSON
    printf '%s' "$f"
}
gpt_flags=(--steps 8 --eval-every 0 --json --seq 32 --batch 4)
for dt in fp32 bf16; do
    for s in 0 1 2 3; do
        for off in none cpu nvme; do
            for bucket in 500000000 20000; do
                cfg=$(gpt_config $s $off none 0 $bucket)
                run train_gpt "stage=$s dtype=$dt opt=$off bucket=$bucket" \
                    "$gpt" --config "$cfg" --stage $s --dtype $dt "${gpt_flags[@]}"
            done
        done
        cfg=$(gpt_config $s nvme none 0 500000000)
        run train_gpt "stage=$s dtype=$dt opt=nvme accum=2" \
            "$gpt" --config "$cfg" --stage $s --dtype $dt --accum 2 "${gpt_flags[@]}"
    done
    for poff in cpu nvme; do
        for off in none cpu nvme; do
            cfg=$(gpt_config 3 $off $poff 0 500000000)
            run train_gpt "stage=3 dtype=$dt opt=$off param=$poff max_in_cpu=0" \
                "$gpt" --config "$cfg" --stage 3 --dtype $dt "${gpt_flags[@]}"
        done
    done
done
