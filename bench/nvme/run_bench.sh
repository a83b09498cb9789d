#!/bin/sh
# Runs bench_nvme (the NVMe store next to fio) and prints one JSON object per
# case. Installs fio when missing. Usage:
#   bench/nvme/run_bench.sh [--build DIR] [bench_nvme options...]
# e.g. bench/nvme/run_bench.sh --dir /nvme --size 2G --block 1M --depth 32
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build="$root/build-bench"
if [ "${1:-}" = "--build" ]; then
    build=$2
    shift 2
fi

if ! command -v fio >/dev/null 2>&1; then
    echo "run_bench.sh: installing fio" >&2
    if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq fio >&2
fi

if [ ! -x "$build/bench/nvme/bench_nvme" ]; then
    [ -d "$build" ] || meson setup "$build" "$root" --buildtype=release >&2
    ninja -C "$build" bench/nvme/bench_nvme >&2
fi
exec "$build/bench/nvme/bench_nvme" "$@"
