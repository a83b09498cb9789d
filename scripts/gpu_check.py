#!/usr/bin/env python3
"""Every GPU check of zeroc in one run (scripts/gpu_check.sh starts this).

Runs from the repository root on a GPU machine that has the CUDA toolkit,
cuBLAS, an NCCL (the toolkit's or the pip package nvidia-nccl-cu13's) and
PyTorch, but none of zeroc's other dependencies: those come in the bundle
that scripts/gpu_bundle.sh built elsewhere (.gpu/zeroc-gpu-bundle.tar.xz).

Parts, in this order, each under its own timeout and all under one global
deadline (480 s):
  env          GPU, memory, SMs, driver, CUDA runtime, cuBLAS, the NCCL the
               loader finds (path, version, older than the headers or not),
               and every bundled binary's libraries resolved
  tests        every GPU test suite with ZC_REQUIRE_GPU=1 (a skip for want of
               a device is a failure)
  sanitizer    compute-sanitizer memcheck on the kernel, device, GPT-layer and
               activation-store tests, racecheck and synccheck on the kernels
  adam         bench_gpu_adam at 16M..1G parameters next to the D2D copy and
               torch's fused AdamW (bench/gpu_adam/torch_adam.py); then the
               engine's zc_step (stage 0, bf16, world 1) at 64M and 256M
               next to one bare Adam call over as many parameters
               (bench_gpu_adam --engine 0), and its optimizer phase next to
               bench_gpu_adam's bf16 rate of this run
  norm         bench_gpu_norm: the gradient norm's sum of squares at 16M..512M
               bf16 and fp32 elements next to the D2D copy's read rate,
               checked bitwise against the host
  gpt          train_gpt --device cuda, stage 0 and 3, GPT-2 small shape:
               tokens/s, MFU, bitwise agreement; the same model in PyTorch
               eager and torch.compile (bench/train/torch_gpt.py); a verdict
               line: stage 0 >= 1.0x eager and >= 0.7x compile, stage 3's
               step <= 1.05x stage 0's; stage 0 again with
               --checkpoint-activations block --checkpoint-offload cpu (each
               block's input in pinned host memory, recomputed in backward):
               bitwise stage 0's params, its step <= 1.4x stage 0's, the
               store's exposed time <= 10% of the step
  bench_train  zeroc bench train --device cuda, stages 0-3 x offload none/cpu
PARTS=tests,bench runs a subset (bench = adam,norm,gpt,bench_train; env
always runs: it finds the libraries the others load).

Output: one JSON object per line in OUT/results.jsonl (OUT: $OUT, else a new
folder gpu-check.<time> here), every part's logs in OUT/logs.tar.gz, and a
table on stdout. Every line has "part", "name", "status" (passed or failed),
"reason" (why it failed), "seconds" and "device". Without a usable GPU every
GPU part is a failure whose reason starts with "no device", never a pass.
Exit status: 0 all passed, 1 something failed, 2 a usage error.

Environment: OUT, PARTS, ZC_GPU_BUNDLE (the bundle file), ZC_GPU_DEADLINE
(seconds, default 480), ZC_GPU_GPT_BATCH, ZC_GPU_GPT_SEQ, ZC_GPU_GPT_STEPS.
"""
import glob
import json
import os
import re
import shutil
import signal
import site
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(ROOT, "bench", "train"))
import gpt_flops  # noqa: E402  (no torch needed)

PARTS = ["env", "tests", "sanitizer", "adam", "norm", "gpt", "bench_train"]
ALIASES = {"bench": ["adam", "norm", "gpt", "bench_train"]}
# Seconds each part may take at most. They add up to the global deadline
# (480 s), so a run in which every part takes its whole budget still reaches
# the last part; a part that ends early leaves its time to the deadline only.
# adam has the most per program: its four sizes up to 1G parameters run three
# times (fp32, torch, 16-bit) before the engine's step at 64M and 256M.
PART_BUDGET = {"env": 30, "tests": 110, "sanitizer": 60, "adam": 90, "norm": 20, "gpt": 120,
               "bench_train": 50}
assert sum(PART_BUDGET.values()) == 480, "the part budgets must add up to the deadline"
# The CUDA libraries the bundle leaves to the machine, and where to look when
# the loader does not find them by itself.
MACHINE_LIBS = ["libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13", "libnccl.so.2"]
# The bundle's CUDA plugins (lib/): what links NCCL and cuBLAS.
PLUGINS = ["libzeroc_cuda.so", "libgpt_cuda.so"]
TEST_SUITES = [  # name, executable, extra environment (the order they run in)
    ("gpu/kernels", "test_gpu_kernels", {}),
    ("gpu/device", "test_gpu_device", {}),
    ("gpt/cuda_layers", "test_gpt_cuda_layers", {}),
    ("gpt/cuda_model", "test_gpt_cuda_model", {}),
    ("gpu/act", "test_gpu_act", {}),
    ("gpu/nccl", "test_gpu_nccl", {"ZC_NCCL_HELPER": "@bin/zc_nccl_helper"}),
    ("gpu/nccl_wrap", "test_gpu_nccl_wrap", {}),
    ("gpu/engine_streams", "test_gpu_engine_streams", {}),
    ("gpu/engine", "test_gpu_engine", {}),
]
# Tests that provoke a CUDA API error or a fault on purpose: compute-sanitizer
# reports those as errors, so they are left out of its runs (they still run,
# and must pass, in the tests part).
ON_PURPOSE = {
    "test_gpu_kernels": {"streams_events_and_allocation_failure": "a failed allocation"},
    "test_gpu_device": {"launch_does_not_report_an_earlier_error": "a failed cudaMalloc",
                        "fault_surfaces_at_the_wait_naming_the_work": "a wild-pointer fault"},
    "test_gpt_cuda_layers": {"launch_does_not_report_an_earlier_error": "a failed cudaMalloc"},
}
# Tests too large for the sanitizers' tracking within the part's budget (their
# kernels run in smaller tests there); they still run, and must pass, in the
# tests part.
TOO_LARGE = {
    "test_gpu_kernels": {"sumsq_three_tree_levels": "269 MB through the norm kernels"},
}
SANITIZER_RUNS = [  # tool, executable, Criterion suite
    ("memcheck", "test_gpu_kernels", "gpu_kernels"),
    ("memcheck", "test_gpu_device", "gpu_device"),
    ("memcheck", "test_gpt_cuda_layers", "gpt_cuda"),
    ("racecheck", "test_gpu_kernels", "gpu_kernels"),
    ("synccheck", "test_gpu_kernels", "gpu_kernels"),
    # Last: the store's copies on the caller's and its own streams (what is
    # left of the part's budget; the tests part runs it in full).
    ("memcheck", "test_gpu_act", "gpu_act"),
]


class Usage(Exception):
    pass


def env_number(name, default, lo, hi, integer=True):
    v = os.environ.get(name, "")
    if v == "":
        return default
    try:
        x = int(v) if integer else float(v)
    except ValueError:
        raise Usage(f"{name}='{v}': expected {'an integer' if integer else 'a number'} "
                    f"in [{lo}, {hi}]")
    if not (lo <= x <= hi):
        raise Usage(f"{name}={v}: out of range [{lo}, {hi}]")
    return x


def parse_parts(text):
    if not text:
        return list(PARTS)
    want = set()
    for p in text.split(","):
        p = p.strip()
        if p in ALIASES:
            want.update(ALIASES[p])
        elif p in PARTS:
            want.add(p)
        else:
            raise Usage(f"PARTS: unknown part '{p}' (parts: {', '.join(PARTS)}; bench = "
                        f"{','.join(ALIASES['bench'])})")
    want.add("env")
    return [p for p in PARTS if p in want]


class Check:
    def __init__(self, out, deadline_s):
        self.out = out
        self.t0 = time.monotonic()
        self.deadline = self.t0 + deadline_s
        self.work = tempfile.mkdtemp(prefix="zeroc-gpu-check.")
        self.logs = os.path.join(self.work, "logs")
        os.mkdir(self.logs)
        self.results = open(os.path.join(out, "results.jsonl"), "x")
        self.rows = []
        self.device = None          # the GPU's name
        self.no_device = None       # why there is none, or None
        self.bin = self.lib = None  # the unpacked bundle
        self.env = dict(os.environ)
        self.child = None

    # ---- output -------------------------------------------------------------
    def emit(self, part, name, status, reason=None, seconds=None, **extra):
        row = {"part": part, "name": name, "status": status, "reason": reason,
               "seconds": None if seconds is None else round(seconds, 2),
               "device": self.device}
        row.update(extra)
        self.rows.append(row)
        self.results.write(json.dumps(row) + "\n")
        self.results.flush()
        mark = "ok  " if status == "passed" else "FAIL"
        print(f"[{mark}] {part}/{name}" + (f": {reason}" if reason else ""), flush=True)
        return row

    def left(self):
        return self.deadline - time.monotonic()

    def budget(self, want):
        return max(0.0, min(want, self.left()))

    # ---- running programs ---------------------------------------------------
    def run(self, log, argv, timeout, env=None, cwd=None):
        """Runs argv in its own process group, stdout and stderr to
        logs/<log>.out and .err. Returns (rc or None when killed, seconds,
        stdout text, stderr text)."""
        out_p = os.path.join(self.logs, log + ".out")
        err_p = os.path.join(self.logs, log + ".err")
        t = time.monotonic()
        rc = None
        with open(out_p, "w") as fo, open(err_p, "w") as fe:
            fe.write("$ " + " ".join(argv) + "\n")
            fe.flush()
            if timeout < 1:
                fe.write("not started: no time left\n")
            else:
                try:
                    self.child = subprocess.Popen(argv, stdout=fo, stderr=fe, cwd=cwd or ROOT,
                                                  env=env or self.env, start_new_session=True,
                                                  stdin=subprocess.DEVNULL)
                except OSError as e:
                    fe.write(f"cannot start: {e}\n")
                    self.child = None
                if self.child:
                    try:
                        rc = self.child.wait(timeout=timeout)
                    except subprocess.TimeoutExpired:
                        self.kill_child()
                        fe.write(f"\nkilled after {timeout:.0f} s\n")
                    self.child = None
        dt = time.monotonic() - t
        return rc, dt, open(out_p, errors="replace").read(), open(err_p, errors="replace").read()

    def kill_child(self):
        c = self.child
        if c and c.poll() is None:
            try:
                os.killpg(c.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            c.wait()

    def finish(self):
        """Packs the logs into OUT/logs.tar.gz and prints the table."""
        with tarfile.open(os.path.join(self.out, "logs.tar.gz"), "w:gz") as t:
            t.add(self.logs, arcname="logs")
        shutil.rmtree(self.work, ignore_errors=True)  # the unpacked bundle, the logs
        npass = sum(r["status"] == "passed" for r in self.rows)
        nfail = len(self.rows) - npass
        self.results.write(json.dumps({"part": "summary", "name": "all", "status":
                                       "passed" if nfail == 0 else "failed",
                                       "passed": npass, "failed": nfail,
                                       "seconds": round(time.monotonic() - self.t0, 1),
                                       "device": self.device}) + "\n")
        self.results.close()
        print(f"\n{'part/name':40} {'status':7} {'s':>6}  detail")
        for r in self.rows:
            detail = (r.get("summary") if r["status"] == "passed" else r["reason"]) or ""
            print(f"{r['part'] + '/' + r['name']:40.40} {r['status']:7} "
                  f"{r['seconds'] if r['seconds'] is not None else '-':>6}  {str(detail)[:90]}")
        print(f"\n{npass} passed, {nfail} failed ({time.monotonic() - self.t0:.0f} s); "
              f"results in {self.out}/results.jsonl, logs in {self.out}/logs.tar.gz")
        return 0 if nfail == 0 else 1


# ---- env ------------------------------------------------------------------------

def candidate_dirs():
    dirs = ["/usr/local/cuda/lib64", "/usr/local/cuda/lib",
            "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/lib/x86_64-linux-gnu"]
    sites = []
    try:
        sites += site.getsitepackages()
    except AttributeError:
        pass
    sites += glob.glob("/opt/*/.venv/lib/python3*/site-packages")
    sites += glob.glob("/usr/local/lib/python3*/dist-packages")
    for s in sites:
        dirs += sorted(glob.glob(os.path.join(s, "nvidia", "*", "lib")))
        dirs += sorted(glob.glob(os.path.join(s, "nvidia", "cu13", "lib")))
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def missing_libs(binary, env):
    try:
        p = subprocess.run(["ldd", binary], capture_output=True, text=True, env=env, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    gone = re.findall(r"^\s*(\S+) => not found", p.stdout, re.M)
    return gone, p.stdout


def part_env(c, bundle):
    """Returns whether the bundle was unpacked (a device or not)."""
    t = time.monotonic()
    if not os.path.isfile(bundle):
        c.emit("env", "bundle", "failed", f"no bundle at {bundle}: run scripts/gpu_bundle.sh on "
               "a machine with the CUDA toolkit and carry .gpu", time.monotonic() - t)
        c.no_device = "no device checked: the bundle is missing"
        return False
    with tarfile.open(bundle) as tf:
        # Regular files only, inside the target ("data" where Python has it).
        tf.extractall(c.work, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    base = os.path.join(c.work, "zeroc-gpu")
    c.bin, c.lib = os.path.join(base, "bin"), os.path.join(base, "lib")
    manifest = json.load(open(os.path.join(base, "MANIFEST.json")))
    c.emit("env", "bundle", "passed", None, time.monotonic() - t, path=bundle,
           commit=manifest.get("commit"), dirty=manifest.get("dirty"),
           gpu_arch=manifest.get("gpu_arch"), files=len(manifest.get("files", [])))

    # The machine's CUDA libraries: where the loader finds them, or where
    # they were found and added to LD_LIBRARY_PATH.
    t = time.monotonic()
    probe = os.path.join(c.bin, "zc_gpu_env")
    found = {}
    # The probe links the runtime and cuBLAS; NCCL is linked only by the CUDA
    # plugin libzeroc loads on first need (lib/libzeroc_cuda.so), and cuBLAS
    # by train_gpt's (lib/libgpt_cuda.so): a library is the loader's only if
    # none of them misses it.
    gone = []
    for f in [probe] + [os.path.join(c.lib, p) for p in PLUGINS]:
        g, _ = missing_libs(f, c.env)
        if g is None:
            gone = None
            break
        gone += g
    for name in MACHINE_LIBS:
        if gone is not None and name not in gone:
            found[name] = "loader"
            continue
        for d in candidate_dirs():
            if os.path.exists(os.path.join(d, name)):
                ld = c.env.get("LD_LIBRARY_PATH", "")
                c.env["LD_LIBRARY_PATH"] = d + (os.pathsep + ld if ld else "")
                found[name] = os.path.join(d, name)
                break
        else:
            found[name] = None
    lost = [n for n, v in found.items() if v is None]
    c.emit("env", "cuda_libraries", "failed" if lost else "passed",
           f"not found on this machine: {', '.join(lost)}" if lost else None,
           time.monotonic() - t, found=found, ld_library_path=c.env.get("LD_LIBRARY_PATH"))

    # Every bundled binary's libraries, resolved as they will be loaded.
    t = time.monotonic()
    unresolved = {}
    for f in sorted(os.listdir(c.bin)) + sorted(os.listdir(c.lib)):
        path = os.path.join(c.bin if os.path.exists(os.path.join(c.bin, f)) else c.lib, f)
        g, text = missing_libs(path, c.env)
        if g is None or g:
            unresolved[f] = g if g is not None else text
    c.emit("env", "bundle_libraries", "failed" if unresolved else "passed",
           "unresolved: " + "; ".join(f"{k} needs {', '.join(v) if isinstance(v, list) else v}"
                                      for k, v in unresolved.items()) if unresolved else None,
           time.monotonic() - t)

    # The device, driver, runtime, cuBLAS and NCCL as the probe sees them.
    rc, dt, out, err = c.run("env_probe", [probe], c.budget(20))
    info = {}
    try:
        info = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        pass
    smi_rc, _, smi, _ = c.run("nvidia_smi", ["nvidia-smi", "--query-gpu=name,driver_version,"
                                              "memory.total,clocks.max.sm", "--format=csv"],
                               c.budget(10))
    nccl = info.get("nccl") or {}
    notes = []
    if nccl.get("found") and "site-packages" in (nccl.get("path") or "") + " ".join(
            str(v) for v in found.values()):
        notes.append("NCCL from the pip package (nvidia-nccl-cu13): the toolkit has none")
    if nccl.get("older_than_headers"):
        notes.append(f"the run-time NCCL {nccl.get('version')} is OLDER than the headers "
                     f"{nccl.get('headers')} the bundle was built against")
    if rc == 0 and info.get("devices"):
        d0 = info["devices"][0]
        c.device = d0["name"]
        c.emit("env", "device", "passed", None, dt, devices=info["devices"],
               driver=info.get("driver_version"), runtime=info.get("runtime_version"),
               cudart=info.get("cudart_path"), cublas=info.get("cublas_version"),
               cublas_path=info.get("cublas_path"), nccl=nccl, notes=notes,
               nvidia_smi=smi.strip() if smi_rc == 0 else None,
               summary=f"{d0['name']}, {d0['memory_bytes'] / 2**30:.0f} GiB, "
                       f"{d0['sm_count']} SMs; NCCL {nccl.get('version')}")
        return True
    why = info.get("error") or (err.strip().splitlines() or ["the probe printed nothing"])[-1]
    c.no_device = f"no device: {why}"
    c.emit("env", "device", "failed", c.no_device, dt, nccl=nccl, notes=notes,
           runtime=info.get("runtime_version"), cublas=info.get("cublas_version"))
    return True  # the bundle is there: the parts still report, each "no device"


# ---- tests and sanitizer ----------------------------------------------------------

def tap_counts(text):
    passed, failed, skipped = [], [], []
    for line in text.splitlines():
        m = re.match(r"^(not ok|ok) - (\S+)(.*)$", line)
        if not m:
            continue
        name, rest = m.group(2), m.group(3)
        if m.group(1) == "not ok":
            failed.append(name)
        elif "# SKIP" in rest:
            skipped.append(name + ":" + rest.split("# SKIP", 1)[1].strip())
        else:
            passed.append(name)
    return passed, failed, skipped


def suite_env(c, extra):
    env = dict(c.env, ZC_REQUIRE_GPU="1")
    for k, v in extra.items():
        env[k] = v.replace("@bin", c.bin)
    return env


def part_tests(c):
    end = time.monotonic() + PART_BUDGET["tests"]
    for name, exe, extra in TEST_SUITES:
        timeout = c.budget(end - time.monotonic())
        rc, dt, out, err = c.run("test_" + name.replace("/", "_"),
                                 [os.path.join(c.bin, exe), "--tap=-", "--jobs=1"], timeout,
                                 env=suite_env(c, extra))
        ok, bad, skip = tap_counts(out)
        if rc is None:
            why = f"timed out after {timeout:.0f} s" if timeout >= 1 else "not run: no time left"
        elif bad or rc != 0:
            why = f"{len(bad)} failed: {', '.join(bad[:6])}" if bad else f"exit status {rc}"
        else:
            why = None
        if c.no_device:
            why = c.no_device + (f" ({why})" if why else "")
        c.emit("tests", name, "failed" if why else "passed", why, dt, passed=len(ok),
               failed=bad, skipped=skip, summary=f"{len(ok)} passed, {len(bad)} failed, "
                                                 f"{len(skip)} skipped")


def find_sanitizer():
    for p in [os.path.join(d, "compute-sanitizer") for d in os.environ.get("PATH", "").split(":")
              if d] + ["/usr/local/cuda/bin/compute-sanitizer",
                       "/usr/local/cuda/compute-sanitizer/compute-sanitizer"]:
        if os.access(p, os.X_OK):
            return p
    return None


def part_sanitizer(c):
    san = find_sanitizer()
    end = time.monotonic() + PART_BUDGET["sanitizer"]
    for tool, exe, suite in SANITIZER_RUNS:
        name = f"{tool}/{exe.replace('test_', '')}"
        left_out = {**ON_PURPOSE.get(exe, {}), **TOO_LARGE.get(exe, {})}
        if c.no_device or not san:
            c.emit("sanitizer", name, "failed", c.no_device or "compute-sanitizer not found "
                   "(PATH, /usr/local/cuda/bin)", 0.0, excluded=left_out)
            continue
        filt = [f"--filter={suite}/!({'|'.join(left_out)})"] if left_out else []
        argv = [san, "--tool", tool, "--error-exitcode", "99", "--target-processes", "all",
                "--print-limit", "50", os.path.join(c.bin, exe), "--tap=-", "--jobs=1"] + filt
        timeout = c.budget(end - time.monotonic())
        rc, dt, out, err = c.run(f"sanitizer_{tool}_{exe}", argv, timeout,
                                 env=suite_env(c, {}))
        errors = sum(int(n) for n in re.findall(r"ERROR SUMMARY: (\d+) error", out + err))
        ok, bad, skip = tap_counts(out)
        if rc is None:
            why = f"timed out after {timeout:.0f} s" if timeout >= 1 else "not run: no time left"
        elif errors or rc == 99:
            why = f"{errors} finding(s) (exit {rc}): see logs/sanitizer_{tool}_{exe}.*"
        elif bad or rc != 0:
            why = f"tests failed under the sanitizer: {', '.join(bad[:6]) or f'exit {rc}'}"
        else:
            why = None
        c.emit("sanitizer", name, "failed" if why else "passed", why, dt, errors=errors,
               tests_run=len(ok) + len(bad), excluded=left_out,
               summary=f"{errors} errors, {len(ok)} tests clean; left out: "
                       f"{', '.join(left_out) or 'none'}")


# ---- benchmarks ----------------------------------------------------------------

RESERVED = {"part", "name", "status", "reason", "seconds", "device", "summary"}


def fields(row, *drop):
    """A program's JSON row as extra fields of a result line (the line's
    own keys, and `drop`, left out)."""
    return {k: v for k, v in (row or {}).items() if k not in RESERVED and k not in drop}


def json_lines(text):
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    return rows


def last_line(text):
    return (text.strip().splitlines() or [""])[-1][:300]


def part_adam(c):
    """bench_gpu_adam with fp32 gradients and no 16-bit copy (28 bytes per
    parameter, torch's fused AdamW's traffic) next to torch_adam.py on the
    same sizes, then with bf16 and fp16 gradients and a bf16 copy. torch runs
    with the machine's own environment (its libraries, not the ones this
    check added to LD_LIBRARY_PATH for the bundle)."""
    end = time.monotonic() + PART_BUDGET["adam"]
    sizes = "16M,64M,256M,1G"
    if c.no_device:
        for name in ("zeroc_fp32", "torch_fused_adamw", "zeroc_16bit", "verdict",
                     "engine_step", "engine_step_verdict"):
            c.emit("adam", name, "failed", c.no_device, 0.0)
        return
    bench = os.path.join(c.bin, "bench_gpu_adam")
    runs = {}
    for name, argv, env in (
            ("zeroc_fp32", [bench, "--sizes", sizes, "--grad", "fp32", "--out", "none"], None),
            ("torch_fused_adamw", [sys.executable, "bench/gpu_adam/torch_adam.py", "--sizes",
                                   sizes], dict(os.environ)),
            ("zeroc_16bit", [bench, "--sizes", sizes, "--grad", "bf16,fp16", "--out", "bf16"],
             None)):
        rc, dt, out, err = c.run("adam_" + name, argv, c.budget(end - time.monotonic()), env=env)
        rows = json_lines(out)
        runs[name] = rows
        for r in rows:
            c.emit("adam", f"{name}/{r.get('grad')}/{r.get('params')}", "passed", None, None,
                   **fields(r))
        ok = rc == 0 and bool(rows)
        c.emit("adam", name, "passed" if ok else "failed",
               None if ok else f"exit {rc}: {last_line(err)}", dt)
    torch_ms = {r["params"]: r["ms"] for r in runs["torch_fused_adamw"] if "ms" in r}
    vs = [{"params": z["params"], "zeroc_ms": z["ms"], "torch_ms": torch_ms[z["params"]],
           "speedup": round(torch_ms[z["params"]] / z["ms"], 3)}
          for z in runs["zeroc_fp32"] if z.get("params") in torch_ms and z.get("ms")]
    # The bar: >= 0.90 of the copy from 64M parameters, >= 1.0x torch.
    misses = [f"{r['grad']} {r['params']}: {r['fraction_of_copy']} of the copy"
              for r in runs["zeroc_fp32"] + runs["zeroc_16bit"]
              if r.get("params", 0) >= 64 << 20 and r.get("fraction_of_copy", 0) < 0.90]
    misses += [f"{r['params']}: {r['speedup']}x torch" for r in vs if r["speedup"] < 1.0]
    have = len(vs) == 4 and len(runs["zeroc_16bit"]) == 8
    c.emit("adam", "verdict", "passed" if have and not misses else "failed",
           None if have and not misses else ("; ".join(misses) or "results missing"), None,
           vs_torch=vs, bar=">= 0.90 of the D2D copy at >= 64M parameters; >= 1.0x torch "
                            "fused AdamW (fp32 gradients, no 16-bit copy: 28 bytes/param)",
           summary="; ".join(f"{r['params'] >> 20}M {r['speedup']}x torch" for r in vs))
    engine_step(c, bench, end, runs["zeroc_16bit"])


def engine_step(c, bench, end, bare_rows):
    """The engine's zc_step around the same Adam (bench_gpu_step.c): stage 0,
    bf16, world 1. The bar, both at 64M and 256M: the step, timed to the
    device's end, at >= 0.9 of one bare Adam call's rate over as many
    parameters in the same process; and the breakdown's optimizer phase at
    >= 0.9 of bench_gpu_adam's bf16 rate of this run (the issue's own
    measure; on CUDA it misses work still queued when zc_step returns, hence
    the first)."""
    argv = [bench, "--engine", "0", "--sizes", "64M,256M", "--grad", "bf16", "--reps", "10",
            "--warmup", "2"]
    rc, dt, out, err = c.run("adam_engine_step", argv, c.budget(end - time.monotonic()))
    rows = [r for r in json_lines(out) if r.get("bench") == "gpu_step"]
    bare = {r["params"]: r["ms"] for r in bare_rows
            if r.get("grad") == "bf16" and r.get("ms") and "params" in r}
    for r in rows:
        if bare.get(r.get("params")) and r.get("optimizer_ms"):
            r["optimizer_vs_bench_gpu_adam"] = round(bare[r["params"]] / r["optimizer_ms"], 3)
        c.emit("adam", f"engine_step/{r.get('dtype')}/{r.get('params')}", "passed", None, None,
               **fields(r))
    ok = rc == 0 and len(rows) == 2
    c.emit("adam", "engine_step", "passed" if ok else "failed",
           None if ok else f"exit {rc}, {len(rows)} of 2 results: {last_line(err)}", dt)
    misses = [f"{r['params'] >> 20}M: step at {r.get('fraction_of_adam')} of the bare Adam"
              for r in rows if not r.get("fraction_of_adam", 0) >= 0.9]
    misses += [f"{r['params'] >> 20}M: optimizer phase at {r.get('optimizer_vs_bench_gpu_adam')}"
               f" of bench_gpu_adam's bf16 rate" for r in rows
               if not r.get("optimizer_vs_bench_gpu_adam", 0) >= 0.9]
    good = ok and not misses
    c.emit("adam", "engine_step_verdict", "passed" if good else "failed",
           None if good else ("; ".join(misses) or "results missing"), None,
           bar=">= 0.9 of one bare Adam call's rate, timed from zc_step to the device's end, "
               "and the breakdown's optimizer phase >= 0.9 of bench_gpu_adam's bf16 rate at "
               "the same size (stage 0, bf16, world 1)",
           summary="; ".join(f"{r['params'] >> 20}M step {r.get('step_ms')} ms, optimizer "
                             f"{r.get('optimizer_ms')} ms, adam {r.get('adam_ms')} ms"
                             for r in rows))


def part_norm(c):
    """bench_gpu_norm: sumsq_async (the engine's norm) at 16M, 128M and 512M
    elements, bf16 and fp32, next to a D2D copy of the same bytes; every
    result checked bitwise against the host backend."""
    if c.no_device:
        for name in ("bench", "verdict"):
            c.emit("norm", name, "failed", c.no_device, 0.0)
        return
    argv = [os.path.join(c.bin, "bench_gpu_norm"), "--sizes", "16M,128M,512M", "--dtype",
            "bf16,fp32"]
    rc, dt, out, err = c.run("norm", argv, c.budget(PART_BUDGET["norm"]))
    rows = json_lines(out)
    for r in rows:
        c.emit("norm", f"{r.get('dtype')}/{r.get('elements')}", "passed"
               if r.get("bitwise_host") else "failed",
               None if r.get("bitwise_host") else "not bitwise equal to the host", None,
               **fields(r))
    ok = rc == 0 and len(rows) == 6
    c.emit("norm", "bench", "passed" if ok else "failed",
           None if ok else f"exit {rc}, {len(rows)} of 6 results: {last_line(err)}", dt)
    # The bar: >= 0.8 of the copy's read rate from 10^8 bf16 elements.
    big = [r for r in rows if r.get("dtype") == "bf16" and r.get("elements", 0) >= 10**8]
    misses = [f"{r['elements']}: {r.get('fraction_of_copy_read')} of the copy's read rate"
              for r in big if not r.get("fraction_of_copy_read", 0) >= 0.8]
    good = len(big) == 2 and not misses
    c.emit("norm", "verdict", "passed" if good else "failed",
           None if good else ("; ".join(misses) or "results missing"), None,
           bar=">= 0.8 of the D2D copy's read rate at >= 1e8 bf16 elements",
           summary="; ".join(f"{r['dtype']} {r['elements'] >> 20}M "
                             f"{r.get('fraction_of_copy_read')} of copy read" for r in rows))


def gpt_shape():
    return {"layers": 12, "dim": 768, "heads": 12, "vocab": 50304,
            "seq": env_number("ZC_GPU_GPT_SEQ", 1024, 16, 1024),
            "batch": env_number("ZC_GPU_GPT_BATCH", 4, 1, 64),
            "steps": env_number("ZC_GPU_GPT_STEPS", 6, 3, 100), "warmup": 2}


def random_text(c, seq, batch):
    """Random bytes: enough for training windows and one validation batch
    (train_gpt validates over the last 10% at the end)."""
    path = os.path.join(c.work, f"random-{seq}-{batch}.bin")
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(os.urandom(10 * (batch * seq + 2)))
    return path


def part_gpt(c):
    end = time.monotonic() + PART_BUDGET["gpt"]
    g = gpt_shape()
    if c.no_device:
        for name in ("zeroc_stage0", "zeroc_stage3", "stage0_equals_stage3", "stage3_timeline",
                     "zeroc_ckpt_cpu", "ckpt_equals_none", "ckpt_verdict", "torch_eager",
                     "torch_compile", "verdict"):
            c.emit("gpt", name, "failed", c.no_device, 0.0)
        return
    data = random_text(c, g["seq"], g["batch"])
    peak, peak_src = gpt_flops.peak_flops(c.device)
    fpt = gpt_flops.flops_per_token(g["layers"], g["dim"], g["heads"], g["seq"], g["vocab"])
    common = {"model": {k: g[k] for k in ("layers", "dim", "heads", "seq", "vocab")},
              "batch": g["batch"], "flops_per_token": fpt, "mfu_formula": gpt_flops.FORMULA,
              "peak_flops": peak, "peak_source": peak_src}
    finals = {}
    tps_of, torch_tps, act_of = {}, {}, {}
    for stage in (0, 3, "ckpt"):
        argv = [os.path.join(c.bin, "train_gpt"), "--device", "cuda", "--launcher", "threads",
                "--world", "1", "--stage", str(0 if stage == "ckpt" else stage), "--dtype",
                "bf16", "--layers",
                str(g["layers"]), "--dim", str(g["dim"]), "--heads", str(g["heads"]), "--seq",
                str(g["seq"]), "--vocab", str(g["vocab"]), "--batch", str(g["batch"]),
                "--steps", str(g["steps"]), "--eval-every", "0", "--data", data, "--json"]
        if stage == "ckpt":
            argv += ["--checkpoint-activations", "block", "--checkpoint-offload", "cpu"]
        if stage == 3:
            # The timeline of two steps after the warm-up (docs/trace.md; its
            # overhead is far below the speed bars' margins, bench/trace).
            timeline = os.path.join(c.work, "gpt_stage3_timeline.json")
            if os.path.exists(timeline):
                os.unlink(timeline)
            argv += ["--trace", timeline, "--trace-steps",
                     "%d-%d" % (g["warmup"] + 1, g["warmup"] + 2)]
        rc, dt, out, err = c.run(f"gpt_zeroc_stage{stage}", argv,
                                 c.budget(min(45 if stage != "ckpt" else 30,
                                              end - time.monotonic())))
        rows = json_lines(out)
        steps = [r for r in rows if "tokens_per_s" in r and r.get("tokens_per_s")]
        final = next((r for r in rows if r.get("final")), None)
        timed = [r["tokens_per_s"] for r in steps[g["warmup"]:]]
        tps = sorted(timed)[len(timed) // 2] if timed else None
        ok = rc == 0 and final is not None and tps
        if final:
            finals[stage] = final
        if ok:
            tps_of[stage] = tps
            exposed = [r.get("act_s") / r["step_s"] for r in steps[g["warmup"]:]
                       if r.get("act_s") is not None and r.get("step_s")]
            if exposed:
                act_of[stage] = sorted(exposed)[len(exposed) // 2]
        c.emit("gpt", "zeroc_ckpt_cpu" if stage == "ckpt" else f"zeroc_stage{stage}",
               "passed" if ok else "failed",
               None if ok else f"exit {rc}: {(err.strip().splitlines() or [''])[-1][:300]}", dt,
               tokens_per_s=tps, mfu=gpt_flops.mfu(tps, fpt, peak),
               step_s=[r.get("step_s") for r in steps], num_params=(final or {}).get("num_params"),
               params_sha256=(final or {}).get("params_sha256"),
               peak_bytes=(final or {}).get("peak_bytes"), **common,
               summary=f"{tps or 0:.0f} tok/s, MFU {gpt_flops.mfu(tps, fpt, peak)}")
    # The stage-3 run's timeline, held to the format and the step sums.
    rc, dt, out, err = c.run("gpt_stage3_timeline",
                             [sys.executable, "tests/trace/trace_check.py", timeline],
                             c.budget(min(30, end - time.monotonic())))
    c.emit("gpt", "stage3_timeline", "passed" if rc == 0 else "failed",
           None if rc == 0 else f"exit {rc}: {(err.strip().splitlines() or [''])[-1][:300]}",
           dt, bar="tests/trace/trace_check.py: format, nesting, each step's top-level spans "
                   "adding up to it",
           summary=((out.strip().splitlines() or [""])[1:2] or [""])[0].strip()[:200])
    same = 0 in finals and 3 in finals and \
        finals[0]["params_sha256"] == finals[3]["params_sha256"]
    c.emit("gpt", "stage0_equals_stage3", "passed" if same else "failed",
           None if same else "params_sha256 differ (or a run failed)", None,
           sha256={str(s): f["params_sha256"] for s, f in finals.items()})
    # Activation checkpointing on the GPU: the recompute is the same
    # arithmetic, so the parameters are stage 0's bitwise.
    same = 0 in finals and "ckpt" in finals and \
        finals[0]["params_sha256"] == finals["ckpt"]["params_sha256"]
    c.emit("gpt", "ckpt_equals_none", "passed" if same else "failed",
           None if same else "params_sha256 differ (or a run failed)", None,
           act_store=(finals.get("ckpt") or {}).get("act_store"))
    slow = tps_of[0] / tps_of["ckpt"] if 0 in tps_of and "ckpt" in tps_of else None
    exposed = act_of.get("ckpt")
    good = slow is not None and slow <= 1.4 and exposed is not None and exposed <= 0.10
    c.emit("gpt", "ckpt_verdict", "passed" if good else "failed",
           None if good else f"step over stage 0's {slow}, exposed store time {exposed}", None,
           step_over_stage0=None if slow is None else round(slow, 3),
           exposed_fraction=None if exposed is None else round(exposed, 4),
           bar="recompute step <= 1.4x stage 0's; store time <= 10% of the step")
    for mode in ("eager", "compile"):
        argv = [sys.executable, "bench/train/torch_gpt.py", "--mode", mode, "--layers",
                str(g["layers"]), "--dim", str(g["dim"]), "--heads", str(g["heads"]), "--seq",
                str(g["seq"]), "--vocab", str(g["vocab"]), "--batch", str(g["batch"]),
                "--steps", str(g["steps"]), "--warmup", str(g["warmup"])]
        rc, dt, out, err = c.run(f"gpt_torch_{mode}", argv, c.budget(end - time.monotonic()),
                                 env=dict(os.environ))
        row = next((r for r in json_lines(out) if r.get("bench") == "torch_gpt"), None)
        ok = rc == 0 and row is not None
        want = (finals.get(0) or {}).get("num_params")
        if ok and want is not None and row.get("num_params") != want:
            ok, why = False, f"torch model has {row.get('num_params')} parameters, zeroc {want}"
        else:
            why = None if ok else f"exit {rc}: {(err.strip().splitlines() or [''])[-1][:300]}"
        c.emit("gpt", f"torch_{mode}", "passed" if ok else "failed", why, dt,
               **fields(row, "bench"),
               summary=f"{(row or {}).get('tokens_per_s') or 0:.0f} tok/s, "
                       f"MFU {(row or {}).get('mfu')}")
        if ok:
            torch_tps[mode] = row.get("tokens_per_s")
    gpt_verdict(c, tps_of, torch_tps)


def gpt_verdict(c, zeroc_tps, torch_tps):
    """The GPU speed targets of the GPT example (the same model, batch and
    steps in one run): stage 0 at >= 1.0x PyTorch eager's tokens/s and
    >= 0.7x torch.compile's; stage 3 at one rank no slower than 1.05x stage
    0's step (what the engine adds when nothing is gathered from elsewhere)."""
    z0, z3 = zeroc_tps.get(0), zeroc_tps.get(3)
    eager, compiled = torch_tps.get("eager"), torch_tps.get("compile")
    # name: (value, bar, True where the value must be at least the bar,
    # False where at most). Tokens/s inverts step time, so stage 3's step
    # over stage 0's is stage 0's tokens/s over stage 3's.
    checks = {"stage0_over_eager": (z0 / eager if z0 and eager else None, 1.0, True),
              "stage0_over_compile": (z0 / compiled if z0 and compiled else None, 0.7, True),
              "stage3_step_over_stage0": (z0 / z3 if z0 and z3 else None, 1.05, False)}
    missing = [k for k, (v, _, _) in checks.items() if v is None]
    misses = [f"{k} {v:.3f} {'<' if at_least else '>'} {bar:.2f}"
              for k, (v, bar, at_least) in checks.items()
              if v is not None and (v < bar if at_least else v > bar)]
    good = not missing and not misses
    c.emit("gpt", "verdict", "passed" if good else "failed",
           None if good else "; ".join(misses + [f"{k}: a run failed" for k in missing]), None,
           **{k: (round(v, 3) if v is not None else None) for k, (v, _, _) in checks.items()},
           bar=">= 1.0x torch eager, >= 0.7x torch.compile (stage 0 tokens/s); "
               "stage 3 step <= 1.05x stage 0's (one rank)")


def part_bench_train(c):
    if c.no_device:
        c.emit("bench_train", "sweep", "failed", c.no_device, 0.0)
        return
    out_dir = os.path.join(c.logs, "bench_train")  # results.md and the plot go with the logs
    text = random_text(c, 64, 64)
    argv = [os.path.join(c.bin, "zeroc"), "bench", "train", "--out", out_dir, "--json",
            "--device", "cuda", "--only", "offload_optimizer=none,cpu",
            "--only", "offload_param=none,cpu", "--steps", "4", "--warmup", "2",
            "--timeout", "60", "--workload", os.path.join(c.bin, "train_gpt"),
            "--data", text, "--plot-script", "bench/train/plot_memory_time.py"]
    rc, dt, out, err = c.run("bench_train", argv, c.budget(PART_BUDGET["bench_train"]))
    rows = json_lines(out)
    for r in rows:
        cfg = r.get("config", {})
        name = f"stage{cfg.get('stage')}/opt_{cfg.get('offload_optimizer')}/" \
               f"param_{cfg.get('offload_param')}"
        ok = r.get("status") == "ok"
        c.emit("bench_train", name, "passed" if ok else "failed", None if ok else r.get("reason"),
               (r.get("step_s") or {}).get("median"), **fields(r))
    ok = rc == 0 and rows and all(r.get("status") == "ok" for r in rows)
    c.emit("bench_train", "sweep", "passed" if ok else "failed",
           None if ok else f"exit {rc}, {len(rows)} configurations: "
           f"{(err.strip().splitlines() or [''])[-1][:300]}", dt)


# ---- main -------------------------------------------------------------------------

def main():
    try:
        parts = parse_parts(os.environ.get("PARTS", ""))
        deadline = env_number("ZC_GPU_DEADLINE", 480, 10, 3600, integer=False)
        gpt_shape()
    except Usage as e:
        print(f"gpu_check: {e}", file=sys.stderr)
        return 2
    out = os.environ.get("OUT") or ""
    if out:
        os.makedirs(out, exist_ok=True)
        if os.path.exists(os.path.join(out, "results.jsonl")):
            print(f"gpu_check: {out}/results.jsonl exists: give an empty OUT", file=sys.stderr)
            return 2
    else:
        out = os.path.join(os.getcwd(), time.strftime("gpu-check.%Y%m%d-%H%M%S"))
        os.mkdir(out)
    c = Check(out, deadline)
    bundle = os.environ.get("ZC_GPU_BUNDLE") or os.path.join(ROOT, ".gpu",
                                                               "zeroc-gpu-bundle.tar.xz")

    def stop(sig, _frame):
        c.kill_child()
        c.emit("summary", "interrupted", "failed", f"signal {sig} before the end", None)
        sys.exit(c.finish() or 1)

    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, stop)
    print(f"gpu_check: parts {','.join(parts)}; deadline {deadline:.0f} s; output {out}",
          flush=True)
    have_bundle = part_env(c, bundle)
    runners = {"tests": part_tests, "sanitizer": part_sanitizer, "adam": part_adam,
               "norm": part_norm, "gpt": part_gpt, "bench_train": part_bench_train}
    for p in parts[1:]:
        if not have_bundle:
            c.emit(p, "all", "failed", c.no_device, 0.0)
        elif c.left() < 5:
            c.emit(p, "all", "failed", f"not run: the {deadline:.0f} s deadline passed", 0.0)
        else:
            try:
                runners[p](c)
            except Exception as e:  # a bug here must not cost the other parts' results
                c.kill_child()
                c.emit(p, "internal_error", "failed", f"gpu_check.py: {type(e).__name__}: {e}",
                       None)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
