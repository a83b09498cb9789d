#!/usr/bin/env python3
"""scripts/gpu_bundle.sh makes a bundle that needs nothing outside itself but
the allow-list below, and is small enough to carry to a GPU machine.

    check_gpu_bundle.py SOURCE_ROOT OUTDIR

Builds the bundle into OUTDIR (ZC_GPU_BUILD_DIR from the environment keeps
the lean build between runs), then, in a copy unpacked here:
  - it is at most 32 MiB compressed, and holds every executable the check
    runs plus libzeroc.so.0 and MANIFEST.json, which lists exactly its files;
  - every ELF in it (executables and libraries) has a RUNPATH into the
    bundle, and each of its DT_NEEDED entries is either a library in the
    bundle's lib/ or on the allow-list: the C and C++ runtimes and the
    loader (libc, libm, libpthread, libdl, librt, libresolv - glibc's own -,
    libgcc_s, libstdc++, ld-linux), the CUDA driver and runtime, cuBLAS and
    cuBLASLt, NCCL, and libnvidia-*;
  - the loader, with no LD_LIBRARY_PATH, resolves every other library of
    every ELF to the bundle's own copy, and two of the programs run from it;
  - the CUDA plugins libzeroc_cuda.so and libgpt_cuda.so are in lib/ and load
    (every symbol bound), while libzeroc.so.0, train_gpt and the zeroc CLI
    link no CUDA library (a CPU run maps none), train_gpt --device cuda finds
    its plugin (it fails, here without a driver, for want of the driver
    only), and `zeroc bench adam --device cuda` reaches bin/bench_gpu_adam.
Exit 77 (skip) where this machine has no CUDA toolkit to build with."""
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

LIMIT = 32 << 20
ALLOWED = re.compile(r"^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libpthread\.so|"
                     r"libdl\.so|librt\.so|libresolv\.so|libgcc_s\.so|libstdc\+\+\.so|"
                     r"libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so|libnccl\.so|"
                     r"libnvidia-)")
PLUGINS = {"libzeroc_cuda.so", "libgpt_cuda.so"}
CUDA_LIB = re.compile(r"^lib(cudart|cublas|cublasLt|nccl|cuda)\.so")
EXECUTABLES = {"test_gpu_kernels", "test_gpu_device", "test_gpu_engine", "test_gpu_engine_streams",
               "test_gpu_nccl", "zc_nccl_helper", "test_gpu_nccl_wrap", "test_gpt_cuda_layers",
               "test_gpt_cuda_model", "test_gpu_act", "bench_gpu_adam", "bench_gpu_norm",
               "train_gpt", "zeroc", "zc_gpu_env"}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def have_toolkit():
    return shutil.which("nvcc") or os.access("/usr/local/cuda/bin/nvcc", os.X_OK)


def dynamic(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    runpath = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[([^\]]+)\]", out)
    return needed, runpath


def main():
    root, out = sys.argv[1], os.path.abspath(sys.argv[2])
    if not have_toolkit():
        print("SKIP: no CUDA toolkit (nvcc) here to build the bundle with")
        return 77
    p = subprocess.run(["bash", os.path.join(root, "scripts", "gpu_bundle.sh"), out],
                       capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"gpu_bundle.sh exit {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    tarball = os.path.join(out, "zeroc-gpu-bundle.tar.xz")
    size = os.path.getsize(tarball)
    print(f"# bundle {size / 2**20:.1f} MiB compressed")
    if size > LIMIT:
        fail(f"the bundle is {size} bytes, over {LIMIT}")
    with tempfile.TemporaryDirectory(prefix="zc-gpu-bundle-") as tmp:
        with tarfile.open(tarball) as tf:
            names = tf.getnames()
            if any(n.startswith("/") or ".." in n.split("/") for n in names):
                fail(f"unsafe member names: {names}")
            tf.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        b = os.path.join(tmp, "zeroc-gpu")
        bins = set(os.listdir(os.path.join(b, "bin")))
        libs = set(os.listdir(os.path.join(b, "lib")))
        if bins != EXECUTABLES:
            fail(f"executables {sorted(bins)}, want {sorted(EXECUTABLES)}")
        if "libzeroc.so.0" not in libs:
            fail("no libzeroc.so.0")
        if not PLUGINS <= libs:
            fail(f"lib/ lacks the CUDA plugins {sorted(PLUGINS - libs)}")
        manifest = json.load(open(os.path.join(b, "MANIFEST.json")))
        listed = set(manifest["files"])
        want = {"bin/" + f for f in bins} | {"lib/" + f for f in libs}
        if listed != want:
            fail(f"MANIFEST.json files differ: {sorted(listed ^ want)}")
        if manifest.get("gpu_arch") != ["sm_90"]:
            fail(f"gpu_arch {manifest.get('gpu_arch')}, want the lean sm_90 build")
        env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        for d, rp in (("bin", "$ORIGIN/../lib"), ("lib", "$ORIGIN")):
            for f in sorted(os.listdir(os.path.join(b, d))):
                path = os.path.join(b, d, f)
                needed, runpath = dynamic(path)
                if runpath != [rp]:
                    fail(f"{d}/{f}: RUNPATH {runpath}, want [{rp}]")
                for n in needed:
                    if n not in libs and not ALLOWED.match(n):
                        fail(f"{d}/{f} needs {n}: neither in the bundle nor on the allow-list")
                    if n in libs and ALLOWED.match(n):
                        fail(f"lib/{n} is on the allow-list: the bundle must not carry it")
                ldd = subprocess.run(["ldd", path], capture_output=True, text=True,
                                     env=env).stdout
                for name, where in re.findall(r"^\s*(\S+) => (\S+)", ldd, re.M):
                    if ALLOWED.match(name):
                        continue
                    if where == "not":
                        fail(f"{d}/{f}: {name} not found")
                    if not os.path.realpath(where).startswith(os.path.realpath(b) + os.sep):
                        fail(f"{d}/{f}: {name} resolves to {where}, outside the bundle")
        for path in (os.path.join(b, "lib", "libzeroc.so.0"), os.path.join(b, "bin", "train_gpt"),
                     os.path.join(b, "bin", "zeroc")):
            cuda = [n for n in dynamic(path)[0] if CUDA_LIB.match(n)]
            if cuda:
                fail(f"{os.path.basename(path)} links {cuda}: CUDA must wait for its plugin")
        for plugin in sorted(PLUGINS):
            path = os.path.join(b, "lib", plugin)
            if not any(CUDA_LIB.match(n) for n in dynamic(path)[0]):
                fail(f"lib/{plugin} links no CUDA library")
            # RTLD_NOW (ctypes' mode): every symbol of it bound, as its loader does.
            load = "import ctypes, sys; ctypes.CDLL(sys.argv[1])"
            r = subprocess.run([sys.executable, "-c", load, path], capture_output=True,
                               text=True, env=env)
            if r.returncode != 0:
                fail(f"lib/{plugin} does not load: {r.stderr[-800:]}")
        r = subprocess.run([os.path.join(b, "bin", "train_gpt"), "--device", "cuda", "--steps", "1",
                            "--layers", "1", "--dim", "32", "--seq", "16", "--eval-every", "0"],
                           capture_output=True, text=True, env=env, timeout=120)
        if "libgpt_cuda.so" in r.stderr:
            fail(f"bin/train_gpt --device cuda does not find its plugin: {r.stderr[-800:]}")
        if r.returncode != 0 and "libcuda.so.1" not in r.stderr:
            fail(f"bin/train_gpt --device cuda: exit {r.returncode}, not for want of the "
                 f"driver: {r.stderr[-800:]}")
        # The CLI runs the GPU Adam bench beside it (tools/cmd_bench_adam_cuda.c):
        # the bench's own check refuses this size, so the arguments reached it.
        r = subprocess.run([os.path.join(b, "bin", "zeroc"), "bench", "adam", "--device", "cuda",
                            "--n", "100"], capture_output=True, text=True, env=env, timeout=60)
        if r.returncode != 2 or "bench_gpu_adam: --n item 100 is not a multiple of 64" not in r.stderr:
            fail(f"bin/zeroc bench adam --device cuda does not reach bin/bench_gpu_adam: exit "
                 f"{r.returncode}: {r.stderr[-500:]}")
        for prog, args in (("train_gpt", ["--help"]), ("zeroc", ["bench", "train", "--help"])):
            r = subprocess.run([os.path.join(b, "bin", prog)] + args, capture_output=True,
                               text=True, env=env)
            if r.returncode != 0 or "usage" not in r.stdout:
                fail(f"bin/{prog} {' '.join(args)}: exit {r.returncode}: {r.stderr[-500:]}")
        print(f"# {len(bins)} executables and {len(libs)} libraries, every DT_NEEDED inside "
              "or allowed, every RUNPATH into the bundle")
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
