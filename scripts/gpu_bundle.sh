#!/usr/bin/env bash
# Builds what scripts/gpu_check.sh runs on a GPU machine and packs it, with
# every shared library it needs beyond the CUDA toolkit, the driver and the C
# and C++ runtimes, into one compressed file that runs anywhere with those.
#
#   scripts/gpu_bundle.sh [OUTDIR]       (default: .gpu, git-ignored)
#
# Runs on a machine without a GPU (the CUDA toolkit, with cuBLAS and NCCL,
# and the Debian packages of scripts/deps.sh --tests are needed here, none of
# them there). The build is lean: sm_90 only (-Dgpu_arch=90; override with
# ZC_GPU_ARCH), no MPI, and only the targets the check runs, in its own build
# directory (ZC_GPU_BUILD_DIR, default build-gpu), kept between runs so a
# second bundle rebuilds only what changed.
#
# OUTDIR receives zeroc-gpu-bundle.tar.xz (replaced atomically) holding
# zeroc-gpu/bin (the executables), zeroc-gpu/lib (libzeroc.so.0, the CUDA
# plugins libzeroc_cuda.so and libgpt_cuda.so that libzeroc and train_gpt
# load on first need - beside libzeroc, and on the executables' RUNPATH -,
# and the libraries they load: jansson, liburing, hwloc, Criterion and its
# own dependencies, OpenBLAS, xxHash, libnuma, ...) and zeroc-gpu/MANIFEST.json
# (commit, architectures, the NCCL headers it was built against, the
# allow-list). Every ELF in it finds its libraries through its RUNPATH
# ($ORIGIN/../lib, $ORIGIN), so no LD_LIBRARY_PATH is needed for them. What it
# does not carry is the allow-list below: the C and C++ runtimes and the
# loader, and the CUDA driver, runtime, cuBLAS and NCCL, which the GPU
# machine has (gpu_check.sh finds and reports them).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=${1:-.gpu}
build=${ZC_GPU_BUILD_DIR:-build-gpu}
arch=${ZC_GPU_ARCH:-90}

# Libraries a bundled ELF may need without the bundle carrying them, as
# regular expressions on the SONAME (tests/scripts/check_gpu_bundle.py states
# the same list and checks every DT_NEEDED against it). libresolv is glibc's
# own: a copy from this machine's glibc must not meet another glibc there.
ALLOW='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libgcc_s\.so|libstdc\+\+\.so|libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so|libnccl\.so|libnvidia-)'

die() { echo "gpu_bundle: $*" >&2; exit 1; }
for tool in meson ninja patchelf ldd readelf strip tar xz; do
  command -v "$tool" >/dev/null || die "$tool is not installed (bash scripts/deps.sh --tests)"
done
command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] ||
  die "no CUDA toolkit (nvcc) on this machine: the bundle is built with it"

# The targets gpu_check.sh runs (paths in the build directory).
targets=(
  tests/gpu/test_gpu_kernels tests/gpu/test_gpu_device tests/gpu/test_gpu_engine
  tests/gpu/test_gpu_engine_streams tests/gpu/test_gpu_nccl tests/gpu/zc_nccl_helper
  tests/gpu/test_gpu_nccl_wrap
  tests/gpt/test_gpt_cuda_layers tests/gpt/test_gpt_cuda_model tests/act/test_gpu_act
  bench/gpu_adam/bench_gpu_adam bench/gpu_norm/bench_gpu_norm examples/gpt/train_gpt
  tools/zeroc tools/zc_gpu_env
)
# The CUDA plugins (src/cuda_plugin/abi.h, examples/gpt/cuda_module.h): no
# executable links them, so they are named here and go to lib/.
plugins=(libzeroc_cuda.so examples/gpt/libgpt_cuda.so)

source scripts/build_dir.sh
# No oneDNN: it serves only the CPU's bf16 matmuls of train_gpt, and would add
# its 38 MB library (and OpenMP, OpenCL loaders) to the bundle.
echo "gpu_bundle: configuring $build (sm_$arch, no MPI, no oneDNN)"
zc_configure "$build" -Dtests=enabled -Dcuda=enabled -Dnccl=enabled -Dmpi=disabled \
  -Donednn=disabled -Dgpu_arch="$arch" -Dbuildtype=debugoptimized >"$build.configure.log" 2>&1 ||
  { tail -20 "$build.configure.log" >&2; die "configure failed (log: $build.configure.log)"; }
rm -f "$build.configure.log"
ninja -C "$build" "${targets[@]}" "${plugins[@]}"

stage=$(mktemp -d "${TMPDIR:-/tmp}/zeroc-gpu-bundle.XXXXXX")
trap 'rm -rf -- "$stage"' EXIT
trap 'exit 130' INT TERM HUP
b="$stage/zeroc-gpu"
mkdir -p "$b/bin" "$b/lib"

for t in "${targets[@]}"; do
  [[ -f "$build/$t" ]] || die "$build/$t was not built"
  cp "$build/$t" "$b/bin/"
done
lib=$(readlink -f "$build/libzeroc.so.0")
cp "$lib" "$b/lib/libzeroc.so.0"
for t in "${plugins[@]}"; do
  [[ -f "$build/$t" ]] || die "$build/$t was not built"
  cp "$build/$t" "$b/lib/"
done

# Every library the executables load, transitively (ldd follows the chain),
# that is not on the allow-list, under its SONAME.
declare -A seen=()
for f in "$b"/bin/* "$b"/lib/*; do
  while read -r name _ path _; do
    [[ "$name" =~ $ALLOW ]] && continue
    [[ "$name" == libzeroc.so.0 || -n "${seen[$name]:-}" ]] && continue
    [[ "$path" == /* && -f "$path" ]] || die "$(basename "$f") needs $name, which ldd cannot find here"
    seen[$name]=1
    cp -L "$path" "$b/lib/$name"
  done < <(ldd "$f" | awk '$2 == "=>" {print $1, $2, $3, $4}')
done

# Debug sections out (the kernels' -lineinfo lives in the fat binary and
# stays, for compute-sanitizer's reports), then RUNPATHs into the bundle.
chmod u+w "$b"/bin/* "$b"/lib/*
strip --strip-debug "$b"/bin/* "$b"/lib/*
for f in "$b"/bin/*; do patchelf --set-rpath '$ORIGIN/../lib' "$f"; done
for f in "$b"/lib/*; do patchelf --set-rpath '$ORIGIN' "$f"; done

python3 - "$b/MANIFEST.json" "$arch" "$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
  "$(git status --porcelain 2>/dev/null | grep -q . && echo true || echo false)" \
  "$ALLOW" "$b" <<'EOF'
import json, os, subprocess, sys
path, arch, commit, dirty, allow, b = sys.argv[1:]
code = None
for inc in ("/usr/local/cuda/include/nccl.h", "/usr/include/nccl.h"):
    if os.path.exists(inc):
        for line in open(inc):
            if line.startswith("#define NCCL_VERSION_CODE"):
                code = int(line.split()[2])
        break
files = sorted(os.path.join(d, f) for d in ("bin", "lib") for f in os.listdir(os.path.join(b, d)))
json.dump({"commit": commit, "dirty": dirty == "true", "gpu_arch": ["sm_" + arch],
           "nccl_headers": code, "allowed_outside": allow, "files": files},
          open(path, "w"), indent=1)
EOF

mkdir -p "$out"
tmp_tar=$(mktemp "$out/.zeroc-gpu-bundle.XXXXXX")
trap 'rm -rf -- "$stage" "$tmp_tar"' EXIT
tar -C "$stage" -cf - zeroc-gpu | xz -6 -T0 >"$tmp_tar"
chmod 644 "$tmp_tar"
mv -f "$tmp_tar" "$out/zeroc-gpu-bundle.tar.xz"
size=$(stat -c %s "$out/zeroc-gpu-bundle.tar.xz")
echo "gpu_bundle: $out/zeroc-gpu-bundle.tar.xz ($((size / 1024)) KiB, $(ls "$b/bin" | wc -l)" \
     "executables, $(ls "$b/lib" | wc -l) libraries)"
