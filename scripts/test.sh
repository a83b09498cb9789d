#!/usr/bin/env bash
# Installs what is missing, builds zeroc twice (release-ish and ASan+UBSan),
# runs every unit test in both, and fuzzes the config parser for a bounded
# time (ZC_FUZZ_SECONDS, default 45). Exits non-zero if anything fails, or if
# a suite that must run defines no test.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/build_dir.sh
bash scripts/deps.sh --tests

jobs=$(nproc)
logs=()

# run_suite DIR SUITE [meson test args...]: runs one suite, refusing a build
# that defines none of its tests (meson itself says "No tests defined" and
# exits 0, which would read as a pass).
run_suite() {
  local dir=$1 suite=$2
  shift 2
  if [[ $(zc_count_tests "$dir" "$suite") -eq 0 ]]; then
    echo "test.sh: $dir defines no '$suite' test; its configure did not find Criterion" \
         "(see 'tests (Criterion)' in the summary above)" >&2
    exit 1
  fi
  meson test -C "$dir" --suite "$suite" --logbase "$suite" --print-errorlogs "$@"
  logs+=("$dir/meson-logs/$suite.json")
}

# -Dtests=enabled: a configure that cannot find Criterion fails here with
# meson's reason instead of producing a build without tests.
echo "== build (debugoptimized)"
zc_configure build -Dtests=enabled
ninja -C build
run_suite build unit --num-processes "$jobs"
# The gpu suite exists when the CUDA toolkit was found; its tests skip with
# the reason when no device is present. Without the toolkit it is not built,
# which the summary reports instead of counting it.
if [[ $(zc_count_tests build gpu) -gt 0 ]]; then
  run_suite build gpu --num-processes 1
else
  echo "test.sh: no gpu suite in this build (CUDA toolkit not found at configure)"
fi

echo "== build (address,undefined sanitizers)"
zc_configure build-san -Dtests=enabled -Db_sanitize=address,undefined -Db_lundef=false
ninja -C build-san
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  run_suite build-san unit --num-processes "$jobs" --timeout-multiplier 4

fuzz=0
echo "== fuzz the config parser (bounded)"
tests/fuzz/run_fuzz.sh
fuzz=1

# One closing line over every run above (meson's test logs, plus the fuzz run).
python3 scripts/test_summary.py --fuzz-passed "$fuzz" "${logs[@]}"
