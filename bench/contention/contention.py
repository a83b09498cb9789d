#!/usr/bin/env python3
"""How much a two-rank training step slows when other jobs share the cores.

Runs examples/gpt/train_gpt with two ranks - as threads of one process and
as two processes under mpirun - and, when a python with torch is given
(--torch-python) or found, the same GPT under PyTorch DDP (gloo, two
processes: bench/train/torch_ddp_gpt.py), each once "quiet" (nothing
added by this bench) and once "loaded" (with --hogs busy processes that this
bench starts and stops), and reports each one's slowdown, loaded median step
time / quiet median step time. Quiet and loaded runs alternate, --repeats
times, so that a drift of the machine's own load falls on both; every run
records /proc/loadavg before and after it.

zeroc's runs use a copy of examples/ds_config_gpt_zero2.json with
wall_clock_breakdown on, so each step also reports rank 0's time in the
gradient reduction ("reduce": mostly waiting for the other rank).

Every child is started from an argv (no shell) in its own session; the hogs
die with this process (PR_SET_PDEATHSIG) and every child is killed on
SIGINT, SIGTERM and SIGHUP, and at exit. The config copy lives in a private
temporary directory, removed at the end.

Prints one JSON object per run, then one summary object
({"summary": ...}) whose "slowdown" maps system/launcher to loaded/quiet.

    python3 bench/contention/contention.py --build build
    python3 bench/contention/contention.py --build build --model small --steps 12
    python3 bench/contention/contention.py --baseline OLD_BUILD/examples/gpt/train_gpt
"""
import argparse
import atexit
import ctypes
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

# name: train_gpt flags (torch_ddp_gpt.py takes the same names)
MODELS = {
    "demo": {"layers": 2, "dim": 64, "heads": 4, "seq": 64, "batch": 8},
    "small": {"layers": 6, "dim": 256, "heads": 8, "seq": 128, "batch": 8},
}

children = set()  # Popen objects still running
hogs = []
tmpdir = None


def set_pdeathsig():
    """In the child, before exec: die when this bench dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def cleanup():
    for p in list(children):
        kill_group(p)
    children.clear()
    stop_hogs()
    global tmpdir
    if tmpdir:
        shutil.rmtree(tmpdir, ignore_errors=True)
        tmpdir = None


def on_signal(sig, _frame):
    cleanup()
    os._exit(128 + sig)


def start_hogs(n):
    for _ in range(n):
        p = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             start_new_session=True, preexec_fn=set_pdeathsig)
        hogs.append(p)
    time.sleep(0.5)  # running before the measured program starts


def stop_hogs():
    while hogs:
        kill_group(hogs.pop())


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return None


def run(argv, env, timeout):
    """Runs argv in its own session; returns (exit code, stdout, stderr, seconds)."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
                         preexec_fn=set_pdeathsig)
    children.add(p)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(p)
        out, err = p.communicate()
        children.discard(p)
        return None, out, err + "\n(timed out after %d s)" % timeout, time.monotonic() - t0
    children.discard(p)
    return p.returncode, out, err, time.monotonic() - t0


def flags(**kv):
    """--name value pairs, as train_gpt and torch_ddp_gpt.py take them."""
    return [x for k, v in kv.items() for x in (f"--{k.replace('_', '-')}", str(v))]


def zeroc_case(a, exe, launcher, cfg):
    argv = [exe, *flags(**MODELS[a.model], steps=a.steps, eval_every=0, dtype=a.dtype,
                                stage=2, config=cfg), "--json"]
    env = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "ZC_COMM"):
        env.pop(k, None)
    if launcher == "threads":
        return [*argv, *flags(world=2, launcher="threads")], env
    return [a.mpirun, "--oversubscribe", "--allow-run-as-root", "--mca", "btl", "self,vader",
            "--bind-to", a.mpi_bind, "-np", "2", *argv], env


def torch_case(a):
    argv = [a.torch_python, os.path.join(ROOT, "bench", "train", "torch_ddp_gpt.py"),
            *flags(**MODELS[a.model], steps=a.steps, warmup=a.warmup, world=2, threads=1,
                   dtype=a.dtype)]
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"  # torchrun's default for several processes on a node
    return argv, env


def parse_zeroc(out, warmup):
    steps = [json.loads(l) for l in out.splitlines() if l.startswith('{"step"')]
    steps = steps[warmup:]
    if not steps:
        return None
    rec = {"median_step_s": statistics.median(s["step_s"] for s in steps)}
    red = [s["timers"]["reduce"] for s in steps if "timers" in s]
    if red:
        rec["median_reduce_s"] = statistics.median(red)
    return rec


def parse_torch(out):
    for l in out.splitlines():
        if l.startswith('{"bench": "torch_ddp_gpt"'):
            return {"median_step_s": json.loads(l)["median_step_s"]}
    return None


def find_torch_python():
    for cand in (os.environ.get("ZC_TORCH_PYTHON"), "/work/venv-torch/bin/python3",
                 sys.executable):
        if not cand or not os.access(cand, os.X_OK):
            continue
        r = subprocess.run([cand, "-c", "import torch"], stdin=subprocess.DEVNULL,
                           capture_output=True)
        if r.returncode == 0:
            return cand
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"),
                    help="meson build directory holding examples/gpt/train_gpt")
    ap.add_argument("--train-gpt", help="train_gpt to run (default: BUILD's)")
    ap.add_argument("--baseline", help="another train_gpt (e.g. a build of an earlier commit) "
                    "run in the same window, reported as zeroc-baseline")
    ap.add_argument("--mpirun", default=shutil.which("mpirun"))
    ap.add_argument("--torch-python", help="a python with torch (default: $ZC_TORCH_PYTHON, "
                    "/work/venv-torch/bin/python3, this python); 'none' skips DDP")
    ap.add_argument("--model", choices=sorted(MODELS), default="demo")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5, help="steps left out of the median")
    ap.add_argument("--repeats", type=int, default=2, help="quiet/loaded pairs per case")
    ap.add_argument("--hogs", type=int, default=2, help="busy processes in a loaded run")
    ap.add_argument("--launchers", default="threads,mpirun")
    ap.add_argument("--mpi-bind", choices=["core", "none"], default="core",
                    help="mpirun --bind-to (core: Open MPI's default for two ranks; none: the "
                    "ranks float, as DDP's processes do)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per run")
    a = ap.parse_args()
    if not 0 <= a.warmup < a.steps or a.repeats < 1 or a.hogs < 1 or a.timeout < 1:
        ap.error("want 0 <= --warmup < --steps, --repeats >= 1, --hogs >= 1, --timeout >= 1")
    launchers = a.launchers.split(",")
    if not launchers or any(l not in ("threads", "mpirun") for l in launchers):
        ap.error("--launchers: a comma-separated list of threads, mpirun")
    a.train_gpt = a.train_gpt or os.path.join(a.build, "examples", "gpt", "train_gpt")
    if not os.access(a.train_gpt, os.X_OK):
        ap.error(f"no train_gpt at {a.train_gpt} (build it: ninja -C {a.build})")
    if "mpirun" in launchers and not a.mpirun:
        ap.error("mpirun not found: install Open MPI or pass --launchers threads")
    if a.torch_python == "none":
        a.torch_python = None
    elif a.torch_python is None:
        a.torch_python = find_torch_python()

    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    atexit.register(cleanup)
    global tmpdir
    tmpdir = tempfile.mkdtemp(prefix="zc-contention-")
    with open(os.path.join(ROOT, "examples", "ds_config_gpt_zero2.json")) as f:
        cfg = json.load(f)
    cfg["wall_clock_breakdown"] = True
    cfg_path = os.path.join(tmpdir, "ds_config.json")
    with open(cfg_path, "x") as f:
        json.dump(cfg, f)

    if a.baseline and not os.access(a.baseline, os.X_OK):
        ap.error(f"--baseline {a.baseline}: not an executable")
    cases = [("zeroc", l) for l in launchers]
    if a.baseline:
        cases += [("zeroc-baseline", l) for l in launchers]
    if a.torch_python:
        cases.append(("torch_ddp", "processes"))
    results = {}  # (system, launcher, condition) -> [median step s]
    reduces = {}
    failed = False
    for rep in range(a.repeats):
        for cond in ("quiet", "loaded") if rep % 2 == 0 else ("loaded", "quiet"):
            for system, launcher in cases:
                if cond == "loaded":
                    start_hogs(a.hogs)
                if system == "torch_ddp":
                    argv, env = torch_case(a)
                else:
                    exe = a.train_gpt if system == "zeroc" else a.baseline
                    argv, env = zeroc_case(a, exe, launcher, cfg_path)
                before = loadavg()
                rc, out, err, secs = run(argv, env, a.timeout)
                after = loadavg()
                stop_hogs()
                rec = {"system": system, "launcher": launcher, "condition": cond,
                       "repeat": rep, "hogs": a.hogs if cond == "loaded" else 0,
                       "model": a.model, "dtype": a.dtype, "steps": a.steps,
                       "warmup": a.warmup, "wall_s": round(secs, 2),
                       "loadavg_before": before, "loadavg_after": after}
                got = None
                if rc == 0:
                    got = parse_torch(out) if system == "torch_ddp" else parse_zeroc(out, a.warmup)
                if got is None:
                    failed = True
                    msg = err or out
                    rec["error"] = "exit %s: %s" % (rc, msg if len(msg) < 2000 else
                                                    msg[:500] + " ... " + msg[-1500:])
                else:
                    rec.update({k: round(v, 6) for k, v in got.items()})
                    key = (system, launcher, cond)
                    results.setdefault(key, []).append(got["median_step_s"])
                    if "median_reduce_s" in got:
                        reduces.setdefault(key, []).append(got["median_reduce_s"])
                print(json.dumps(rec), flush=True)

    summary = {"model": a.model, "model_flags": MODELS[a.model], "dtype": a.dtype,
               "steps": a.steps, "warmup": a.warmup, "repeats": a.repeats, "hogs": a.hogs,
               "mpi_bind": a.mpi_bind,
               "cores": os.cpu_count(), "train_gpt": a.train_gpt, "baseline": a.baseline,
               "torch_python": a.torch_python, "step_s": {}, "reduce_s": {}, "slowdown": {}}
    for system, launcher in cases:
        name = f"{system}/{launcher}"
        q = results.get((system, launcher, "quiet"))
        l = results.get((system, launcher, "loaded"))
        if q and l:
            qm, lm = statistics.median(q), statistics.median(l)
            summary["step_s"][name] = {"quiet": round(qm, 6), "loaded": round(lm, 6)}
            summary["slowdown"][name] = round(lm / qm, 3)
        rq, rl = reduces.get((system, launcher, "quiet")), reduces.get((system, launcher, "loaded"))
        if rq and rl:
            summary["reduce_s"][name] = {"quiet": round(statistics.median(rq), 6),
                                         "loaded": round(statistics.median(rl), 6)}
    print(json.dumps({"summary": summary}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
