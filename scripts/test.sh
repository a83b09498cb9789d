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
meson test -C build --suite unit --logbase unit --print-errorlogs --num-processes "$jobs"
meson test -C build --suite gpu --logbase gpu --print-errorlogs --num-processes 1

echo "== build (address,undefined sanitizers)"
[[ -f build-san/build.ninja ]] || meson setup build-san -Db_sanitize=address,undefined -Db_lundef=false
ninja -C build-san
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  meson test -C build-san --suite unit --logbase unit --print-errorlogs --num-processes "$jobs" --timeout-multiplier 4

fuzz=0
if [[ -x tests/fuzz/run_fuzz.sh ]]; then
  echo "== fuzz the config parser (bounded)"
  FUZZ_SECONDS="${FUZZ_SECONDS:-45}" tests/fuzz/run_fuzz.sh
  fuzz=1
fi

# One closing line over every run above (meson's test logs, plus the fuzz run).
python3 - "$fuzz" build/meson-logs/unit.json build/meson-logs/gpu.json build-san/meson-logs/unit.json <<'PY'
import json, sys
passed, failed, skipped = int(sys.argv[1]), 0, 0
for path in sys.argv[2:]:
    for line in open(path):
        r = json.loads(line).get("result")
        if r in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif r == "SKIP":
            skipped += 1
        else:
            failed += 1
print("zeroc: %d passed, %d failed, %d skipped" % (passed, failed, skipped))
sys.exit(1 if failed else 0)
PY
