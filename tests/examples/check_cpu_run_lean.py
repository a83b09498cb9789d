#!/usr/bin/env python3
"""A CPU run of the default (CUDA) build costs what a CPU-only build's does.

    check_cpu_run_lean.py BUILD_DIR SOURCE_ROOT LEAN_DIR PROBE DATA

BUILD_DIR is the build under test (a CUDA build), LEAN_DIR a directory for
the reference: the same source configured with the same options but
-Dcuda=disabled, only train_gpt built (kept between runs, so a second run
rebuilds only what changed). PROBE is tests/examples/maps_probe.c built as a
library: preloaded, it reports each process's VmHWM and the CUDA libraries
it has mapped when it exits (dlopen'ed ones included).

  1. libzeroc.so and train_gpt name no CUDA library in DT_NEEDED (readelf);
  2. train_gpt --device cpu, the demo's model and config (ZeRO-2, bf16, two
     ranks) for a few steps, as two threads and as two processes under
     mpirun (when installed): no process maps the CUDA runtime, cuBLAS, NCCL,
     the driver or a CUDA plugin of zeroc - the claim itself;
  3. the peak resident memory (VmHWM) of each of those processes is within
     10 MiB of the same run of the CPU-only build (the smaller of two runs
     each, runs interleaved). Skipped under sanitizers, whose shadow memory
     would be compared with a build without them; 1 and 2 still run;
  4. the probe sees what it looks for: train_gpt --device cuda maps the CUDA
     runtime and cuBLAS through its plugin (and fails, on a machine without a
     driver, for want of the driver).
Exits 0, or 1 after printing every failure."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

build, src, lean, probe, data = sys.argv[1:6]
SLACK_KIB = 10 * 1024
CUDA_LIB = re.compile(r"^lib(cudart|cublas|cublasLt|nccl|cuda)\.so")
DEMO = ["--config", os.path.join(src, "examples", "ds_config_gpt_zero2.json"), "--device", "cpu",
        "--steps", "30", "--eval-every", "0", "--data", data]
MPIRUN = shutil.which("mpirun")
MPI_ARGS = ["--oversubscribe", "--allow-run-as-root", "--mca", "btl", "self,vader",
            "-x", "LD_PRELOAD", "-x", "ZC_MAPS_PROBE_DIR", "-x", "ASAN_OPTIONS"]
failures = []


def options(build_dir):
    out = subprocess.run(["meson", "introspect", build_dir, "--buildoptions"],
                         capture_output=True, text=True, check=True).stdout
    return {o["name"]: o["value"] for o in json.loads(out)}


def needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def build_lean(opts):
    """The CPU-only reference: the build's own options but no CUDA."""
    args = ["-Dcuda=disabled", "-Dnccl=disabled", "-Dtests=disabled"]
    for k in ("buildtype", "optimization", "debug", "b_ndebug", "onednn", "mpi", "hwloc",
              "io_uring"):
        if k in opts:
            v = opts[k]
            args.append(f"-D{k}={str(v).lower() if isinstance(v, bool) else v}")
    if os.path.isfile(os.path.join(lean, "build.ninja")):
        cmd = ["meson", "setup", "--reconfigure", lean, src] + args
    else:
        if os.path.isdir(lean):
            shutil.rmtree(lean)  # an interrupted first configure (a git-ignored build dir)
        cmd = ["meson", "setup", lean, src] + args
    for c in (cmd, ["ninja", "-C", lean, "examples/gpt/train_gpt"]):
        p = subprocess.run(c, capture_output=True, text=True)
        if p.returncode != 0:
            print(f"FAIL: {' '.join(c)}: exit {p.returncode}\n{p.stdout[-3000:]}\n"
                  f"{p.stderr[-2000:]}")
            sys.exit(1)
    return os.path.join(lean, "examples", "gpt", "train_gpt")


def run(exe, args, mpi, tmp, expect_ok=True):
    """Runs train_gpt with the probe; returns its processes' reports."""
    out = tempfile.mkdtemp(dir=tmp)
    # No LD_LIBRARY_PATH (meson test sets one to this build): each train_gpt
    # must load its own build's libzeroc, through its RUNPATH.
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LD_PRELOAD", "LD_LIBRARY_PATH")}
    env.update(LD_PRELOAD=probe, ZC_MAPS_PROBE_DIR=out, OPENBLAS_NUM_THREADS="1",
               # A sanitized probe is preloaded before the runtime it needs.
               ASAN_OPTIONS=env.get("ASAN_OPTIONS", "") +
               ":verify_asan_link_order=0:detect_leaks=0")
    cmd = ([MPIRUN, *MPI_ARGS, "-np", "2", exe] if mpi else [exe]) + args
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if expect_ok and p.returncode != 0:
        failures.append(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr[-2000:]}")
    reports = [json.loads(open(f).read()) for f in glob.glob(os.path.join(out, "*.json"))]
    mine = [r for r in reports if os.path.basename(r["exe"]) == "train_gpt"]
    if len(mine) != (2 if mpi else 1):
        failures.append(f"{' '.join(cmd)}: {len(mine)} train_gpt reports from the probe "
                        f"({reports})")
    return mine, p


def main():
    opts = options(build)
    sanitized = opts.get("b_sanitize", "none") not in ("none", "")
    exe = os.path.join(build, "examples", "gpt", "train_gpt")
    lib = os.path.join(build, "libzeroc.so")

    for path in (lib, exe):
        cuda = [n for n in needed(path) if CUDA_LIB.match(n)]
        if cuda:
            failures.append(f"{path} links {cuda}")
        else:
            print(f"ok {os.path.basename(path)}: no CUDA library in DT_NEEDED")

    modes = [False] + ([True] if MPIRUN and opts.get("mpi") != "disabled" else [])
    if len(modes) == 1:
        print("# mpirun is not installed (or MPI not built): threads only")
    ref = None if sanitized else build_lean(opts)
    with tempfile.TemporaryDirectory(prefix="zc-cpu-lean-") as tmp:
        for mpi in modes:
            how = "2 processes (mpirun)" if mpi else "2 ranks as threads"
            hwm = {"default": [], "cpu-only": []}
            for _ in range(2):
                for name, e in (("default", exe), ("cpu-only", ref)):
                    if e is None:
                        continue
                    reps, _ = run(e, DEMO, mpi, tmp)
                    mapped = sorted({lib for r in reps for lib in r["cuda"]})
                    if name == "default" and mapped and not any(how in f for f in failures):
                        failures.append(f"{how}: --device cpu processes map {mapped}")
                    hwm[name].append(max((r["vmhwm_kib"] for r in reps), default=-1))
            if not any(how in f for f in failures):
                print(f"ok {how}: no process maps a CUDA library")
            if ref is None:
                print(f"# {how}: VmHWM {min(hwm['default']) / 1024:.1f} MiB per process; not "
                      "compared under sanitizers")
                continue
            got, want = min(hwm["default"]), min(hwm["cpu-only"])
            line = (f"{how}: VmHWM {got / 1024:.1f} MiB per process, CPU-only build "
                    f"{want / 1024:.1f} MiB")
            if got < 0 or want < 0 or got > want + SLACK_KIB:
                failures.append(line + f" (more than {SLACK_KIB // 1024} MiB above)")
            else:
                print("ok " + line)

        # The probe must see CUDA where it is: the GPU backend's plugin maps it.
        reps, p = run(exe, ["--device", "cuda", "--steps", "1", "--layers", "1", "--dim", "32",
                            "--seq", "16", "--eval-every", "0", "--data", data], False, tmp,
                      expect_ok=False)
        seen = " ".join(" ".join(r["cuda"]) for r in reps)
        if not ("libcudart" in seen and "libcublas" in seen and "libgpt_cuda" in seen):
            failures.append(f"train_gpt --device cuda: the probe saw {seen or 'no CUDA library'}"
                            f" (exit {p.returncode}: {p.stderr[-800:]})")
        elif p.returncode != 0 and "libcuda.so.1" not in p.stderr:
            failures.append(f"train_gpt --device cuda: exit {p.returncode}, not for want of the "
                            f"driver: {p.stderr[-800:]}")
        else:
            print("ok the probe sees the CUDA libraries of a --device cuda run")

    if failures:
        print("FAIL:\n" + "\n".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
