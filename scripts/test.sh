#!/usr/bin/env bash
# Installs what is missing, builds zeroc twice (release-ish and ASan+UBSan),
# runs every unit test in both, and fuzzes the config parser for a bounded
# time. Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh --tests

jobs=$(nproc)

echo "== build (debugoptimized)"
[[ -f build/build.ninja ]] || meson setup build
ninja -C build
meson test -C build --suite unit --print-errorlogs --num-processes "$jobs"
meson test -C build --suite gpu --print-errorlogs --num-processes 1

echo "== build (address,undefined sanitizers)"
[[ -f build-san/build.ninja ]] || meson setup build-san -Db_sanitize=address,undefined -Db_lundef=false
ninja -C build-san
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  meson test -C build-san --suite unit --print-errorlogs --num-processes "$jobs" --timeout-multiplier 4

if [[ -x tests/fuzz/run_fuzz.sh ]]; then
  echo "== fuzz the config parser (bounded)"
  FUZZ_SECONDS="${FUZZ_SECONDS:-45}" tests/fuzz/run_fuzz.sh
fi
echo "== all tests passed"
