#!/usr/bin/env python3
"""scripts/gpu_check.sh on a machine without a GPU (the dry run): it runs end
to end without waiting for any device (each part ends by itself, saying "no
device", not by a timeout) and reports every GPU part as failed because no
device was found, never as passed, in a well-formed results.jsonl.

    check_gpu_check.py SOURCE_ROOT BUNDLE_OUTDIR

Cases:
  1. the whole check with the bundle (scripts/gpu_bundle.sh BUNDLE_OUTDIR,
     which only repacks after the bundle test): every line a JSON object with
     part, name, status, reason, seconds, device; every part present; the
     bundle and its libraries pass; the device, each GPU test suite (run, and
     failing under ZC_REQUIRE_GPU=1 with failures counted), each sanitizer
     run, bench and training line fails with a reason starting "no device";
     a closing summary line; logs.tar.gz holds the logs; exit status 1;
  2. PARTS=tests,bench: env plus those parts only;
  3. no bundle: every part fails saying so, nothing passes past the env;
  4. usage errors (an unknown part, a malformed deadline, an OUT that holds
     results already) exit 2 and write nothing.
Exit 77 (skip) where this machine has the CUDA toolkit missing, or a GPU."""
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

GPU_PARTS = {"tests", "sanitizer", "adam", "norm", "gpt", "bench_train"}
# The GPU suites gpu_check.py's tests part runs (its TEST_SUITES), one line each.
GPU_SUITES = ["gpu/kernels", "gpu/device", "gpt/cuda_layers", "gpt/cuda_model", "gpu/act",
              "gpu/nccl", "gpu/nccl_wrap", "gpu/engine_streams", "gpu/engine"]
KEYS = {"part", "name", "status", "reason", "seconds", "device"}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check_run(root, bundle, out, parts=None, extra_env=None):
    env = dict(os.environ, OUT=out, ZC_GPU_BUNDLE=bundle)
    env.pop("PARTS", None)
    if parts:
        env["PARTS"] = parts
    env.update(extra_env or {})
    t = time.monotonic()
    p = subprocess.run(["bash", os.path.join(root, "scripts", "gpu_check.sh")], cwd=root,
                       env=env, capture_output=True, text=True, timeout=120)
    return p, time.monotonic() - t


def read_rows(out):
    rows = []
    with open(os.path.join(out, "results.jsonl")) as f:
        for i, line in enumerate(f):
            try:
                r = json.loads(line)
            except ValueError:
                fail(f"results.jsonl line {i + 1} is not JSON: {line!r}")
            if not isinstance(r, dict) or not KEYS <= set(r) and r.get("part") != "summary":
                fail(f"line {i + 1} lacks {KEYS - set(r)}: {r}")
            rows.append(r)
    if not rows or rows[-1].get("part") != "summary":
        fail("no closing summary line")
    return rows[:-1], rows[-1]


def whole_check(root, bundle, tmp):
    out = os.path.join(tmp, "all")
    p, dt = check_run(root, bundle, out)
    # How long it took is printed, not held: that no part waited for a
    # device is held below (every GPU part's reason is "no device", not its
    # timeout's or the global deadline's), and a hang by check_run's timeout.
    print(f"# dry run in {dt:.1f} s, exit {p.returncode}")
    if p.returncode != 1:
        fail(f"exit {p.returncode} (want 1: something failed):\n{p.stdout}\n{p.stderr}")
    rows, summary = read_rows(out)
    by = {(r["part"], r["name"]): r for r in rows}
    for need in (("env", "bundle"), ("env", "bundle_libraries"), ("env", "cuda_libraries")):
        if by.get(need, {}).get("status") != "passed":
            fail(f"{need}: {by.get(need)}")
    dev = by.get(("env", "device"))
    if not dev or dev["status"] != "failed" or not dev["reason"].startswith("no device"):
        fail(f"env/device: {dev}")
    if {r["part"] for r in rows} != GPU_PARTS | {"env"}:
        fail(f"parts {sorted({r['part'] for r in rows})}")
    for r in rows:
        if r["part"] in GPU_PARTS and (r["status"] != "failed" or
                                       not str(r["reason"]).startswith("no device")):
            fail(f"a GPU part without a device: {r}")
        # A part that waited for something ran into its own timeout or the
        # check's deadline, which its reason names (after "no device: ...").
        if any(w in str(r["reason"]) for w in ("timed out", "no time left", "deadline passed")):
            fail(f"a part of the dry run waited for its timeout: {r}")
        if r["device"] is not None:
            fail(f"a device name without a device: {r}")
    suites = [r for r in rows if r["part"] == "tests"]
    if [r["name"] for r in suites] != GPU_SUITES or any(not r["failed"] or r["passed"] for r in suites):
        fail(f"the GPU suites did not run and fail under ZC_REQUIRE_GPU=1: {suites}")
    if len([r for r in rows if r["part"] == "sanitizer"]) != 6:
        fail("not every sanitizer run reported")
    if summary["passed"] != 3 or summary["failed"] != len(rows) - 3 or \
            summary["status"] != "failed":
        fail(f"summary {summary}")
    with tarfile.open(os.path.join(out, "logs.tar.gz")) as tf:
        logs = tf.getnames()
    if "logs/test_gpu_kernels.out" not in logs or "logs/env_probe.out" not in logs:
        fail(f"logs.tar.gz holds {logs}")
    if sorted(os.listdir(out)) != ["logs.tar.gz", "results.jsonl"]:
        fail(f"OUT holds {os.listdir(out)}")
    print(f"# {len(rows)} lines: bundle and libraries passed, every GPU part 'no device'")


def subset(root, bundle, tmp):
    out = os.path.join(tmp, "subset")
    p, _ = check_run(root, bundle, out, parts="tests,bench")
    rows, _ = read_rows(out)
    parts = {r["part"] for r in rows}
    if parts != {"env", "tests", "adam", "norm", "gpt", "bench_train"}:
        fail(f"PARTS=tests,bench ran {sorted(parts)}")
    print("# PARTS=tests,bench: env, tests, adam, norm, gpt, bench_train")


def no_bundle(root, tmp):
    out = os.path.join(tmp, "nobundle")
    p, _ = check_run(root, os.path.join(tmp, "absent.tar.xz"), out)
    rows, summary = read_rows(out)
    if p.returncode != 1 or summary["passed"] != 0:
        fail(f"without a bundle: exit {p.returncode}, {summary}")
    if "no bundle" not in rows[0]["reason"] or len(rows) != 1 + len(GPU_PARTS):
        fail(f"without a bundle: {rows}")
    print("# no bundle: every part failed, the first saying where it looked")


def usage(root, bundle, tmp):
    for env, say in (({"PARTS": "tests,warp"}, "unknown part 'warp'"),
                     ({"ZC_GPU_DEADLINE": "8m"}, "ZC_GPU_DEADLINE"),
                     ({"ZC_GPU_GPT_SEQ": "4096"}, "ZC_GPU_GPT_SEQ")):
        out = os.path.join(tmp, "usage")
        p, _ = check_run(root, bundle, out, extra_env=env)
        if p.returncode != 2 or say not in p.stderr or os.path.exists(out):
            fail(f"{env}: exit {p.returncode}, {p.stderr!r}, wrote {os.path.exists(out)}")
    out = os.path.join(tmp, "all")  # holds results from case 1
    before = open(os.path.join(out, "results.jsonl")).read()
    p, _ = check_run(root, bundle, out)
    if p.returncode != 2 or "exists" not in p.stderr or \
            open(os.path.join(out, "results.jsonl")).read() != before:
        fail(f"an OUT with results: exit {p.returncode}, {p.stderr!r}")
    print("# usage errors: exit 2, nothing written")


def main():
    root, bundle_dir = sys.argv[1], os.path.abspath(sys.argv[2])
    if not (shutil.which("nvcc") or os.access("/usr/local/cuda/bin/nvcc", os.X_OK)):
        print("SKIP: no CUDA toolkit (nvcc) here to build the bundle with")
        return 77
    if shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi", "-L"],
                                                     capture_output=True).returncode == 0:
        print("SKIP: this machine has a GPU: the dry run is for machines without one")
        return 77
    p = subprocess.run(["bash", os.path.join(root, "scripts", "gpu_bundle.sh"), bundle_dir],
                       capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"gpu_bundle.sh exit {p.returncode}: {p.stderr[-3000:]}")
    bundle = os.path.join(bundle_dir, "zeroc-gpu-bundle.tar.xz")
    with tempfile.TemporaryDirectory(prefix="zc-gpu-check-") as tmp:
        whole_check(root, bundle, tmp)
        subset(root, bundle, tmp)
        no_bundle(root, tmp)
        usage(root, bundle, tmp)
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
