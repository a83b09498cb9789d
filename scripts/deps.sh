#!/usr/bin/env bash
# Installs the Debian packages zeroc needs to build and test, when missing.
# Usage: scripts/deps.sh [--tests | --bench]   (--tests adds the test and fuzz
# tools; --bench adds matplotlib, which `zeroc bench train` draws its plot with)
set -euo pipefail

pkgs=(meson ninja-build pkg-config gcc libc6-dev libjansson-dev liburing-dev libhwloc-dev libnuma-dev
      libopenblas-dev libdnnl-dev libxxhash-dev)
# OpenBLAS: the fp32 matmuls of examples/gpt; oneDNN (libdnnl-dev): its bf16 matmuls on CPUs
# with bf16 instructions; xxHash: checkpoint checksums
if [[ "${1:-}" == "--tests" ]]; then
  # Open MPI: the MPI communicator (meson -Dmpi=auto finds it) and the
  # mpirun that tests/comm launches its multi-process tests with.
  pkgs+=(libcriterion-dev clang libclang-rt-14-dev python3 libopenmpi-dev openmpi-bin
         python3-venv) # venv: the checkpoint export test pip-installs safetensors
  # tests/cli/check_bench_train.py runs `zeroc bench train`, plot included:
  # matplotlib (Debian's python3) and gnuplot, the plot's two programs.
  pkgs+=(python3-matplotlib gnuplot-nox)
  # scripts/gpu_bundle.sh (tests/scripts/check_gpu_bundle.py): RUNPATHs into
  # the bundle, and its compression.
  pkgs+=(patchelf xz-utils)
fi
if [[ "${1:-}" == "--bench" ]]; then
  pkgs+=(python3 python3-matplotlib)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
