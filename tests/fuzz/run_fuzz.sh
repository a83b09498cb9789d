#!/bin/sh
# Builds the config-loader fuzz target with clang + ASan + libFuzzer and runs it
# for a bounded time, seeded with the DeepSpeed config corpus.
#
#   tests/fuzz/run_fuzz.sh [SECONDS] [BUILD_DIR]
#
# SECONDS defaults to $ZC_FUZZ_SECONDS or 45; BUILD_DIR to build-fuzz in the
# source root. The corpus is $ZC_DS_CONFIGS or ../shared/ds-configs beside the
# checkout. Exits non-zero on any crash, sanitizer report, leak, or an input
# that runs longer than 10 s (libFuzzer's -timeout); the reproducer is kept in
# the work directory that is printed.
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
secs=${1:-${ZC_FUZZ_SECONDS:-45}}
build=${2:-$root/build-fuzz}
seeds=${ZC_DS_CONFIGS:-$root/../shared/ds-configs}

command -v clang >/dev/null || { echo "run_fuzz.sh: clang not found" >&2; exit 2; }

if [ ! -f "$build/build.ninja" ]; then
    # -fsanitize=fuzzer-no-link gives the library the coverage instrumentation
    # libFuzzer needs; only the fuzz target links the libFuzzer runtime.
    CC=clang CFLAGS="-fsanitize=fuzzer-no-link" \
        meson setup "$build" "$root" -Dfuzz=true -Db_sanitize=address -Db_lundef=false \
        -Dcuda=disabled -Dnccl=disabled -Dmpi=disabled >/dev/null
fi
ninja -C "$build" tests/fuzz/fuzz_config >/dev/null

work=$(mktemp -d "${TMPDIR:-/tmp}/zc_fuzz.XXXXXX")
mkdir -p "$work/corpus"
if [ -d "$seeds" ]; then
    cp "$seeds"/*.json "$work/corpus/" 2>/dev/null || true
else
    echo "run_fuzz.sh: seed corpus $seeds not found; starting from a minimal seed" >&2
fi
# Hostile inputs kept with the tests (dotted names, numbers past every range,
# floods of unknown keys, long non-ASCII strings, offload the engine refuses).
cp "$root"/tests/fuzz/corpus/*.json "$work/corpus/"
printf '{"zero_optimization": {"stage": 3}, "train_batch_size": "auto"}' >"$work/corpus/min.json"

echo "run_fuzz.sh: fuzzing for ${secs}s (work dir $work)"
status=0
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
    "$build/tests/fuzz/fuzz_config" "$work/corpus" \
    -dict="$root/tests/fuzz/config.dict" -max_total_time="$secs" -timeout=10 \
    -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1 \
    -artifact_prefix="$work/" >"$work/fuzz.log" 2>&1 || status=$?
tail -n 25 "$work/fuzz.log"
if [ "$status" -ne 0 ]; then
    echo "run_fuzz.sh: FAILED (libFuzzer exit $status); reproducers in $work:" >&2
    ls "$work" | grep -E '^(crash|leak|timeout|oom)-' >&2 || true
    exit 1
fi
echo "run_fuzz.sh: no crash, leak or hang in ${secs}s"
rm -rf "$work"
