#!/usr/bin/env python3
"""Tokens/s of examples/gpt/train_gpt on the CPU next to the same GPT in
PyTorch, same model, batch, sequence length and dtype, two ranks each,
interleaved in one run.

zeroc: train_gpt --device cpu --world 2 --launcher threads (two ranks as
threads of one process, one BLAS thread each), ZeRO stage --stage (default
0, the stage that does what DDP does), --dtype fp32 or bf16.

PyTorch: bench/train/torch_ddp_gpt.py (the benchmarks' one DDP loop):
bench/train/torch_gpt.py's model (the same GPT: shapes, parameter count,
tied head, initialisation) under DistributedDataParallel, two processes with
gloo, one intra-op thread per rank (torchrun's default for several
processes on a node), AdamW (betas 0.9, 0.95, weight decay 0.1 on
matrices), global-norm clipping at 1.0; --dtype bf16 is
torch.autocast(bfloat16) with fp32 master weights, as train_gpt's bf16
keeps fp32 master weights and computes in bf16. --attention sdpa
(F.scaled_dot_product_attention, what a PyTorch user writes; the default)
or naive (the score matrix materialised).

Fair shares: each side runs two busy threads of computation (zeroc: two
rank threads, one BLAS thread each; PyTorch: two rank processes, one
intra-op thread each, plus gloo's mostly idle threads), and each side is
one session (zeroc: its process; PyTorch: the launcher with its two rank
processes, as under torchrun). The kernel's autogroup scheduling
(/proc/sys/kernel/sched_autogroup_enabled) gives every session an equal
share of a busy machine: ranks started each in its own session would get
twice the share of one process with two rank threads, and a busy machine
would show that share, not the kernels.

Each system's figure is tokens per step (2 ranks x batch x seq) over the
median step time after --warmup steps; each step is timed from its start to
the end of its optimizer step. The runs alternate system and dtype,
--repeats times (the order flips every repeat), so that a drift of the
machine's load falls on both; each run records /proc/loadavg before and
after. One JSON object per run, then one {"summary": ...} per dtype with
the medians over the repeats and zeroc / PyTorch.

    python3 bench/gpt_cpu/vs_torch.py --build build
    python3 bench/gpt_cpu/vs_torch.py --build build --dtypes bf16 --repeats 5

The PyTorch side needs a python with torch (--torch-python; by default
$ZC_TORCH_PYTHON, else /work/venv-torch/bin/python, else python3).
"""
import argparse
import atexit
import json
import os
import signal
import statistics
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

TORCH_DDP = os.path.join(ROOT, "bench", "train", "torch_ddp_gpt.py")
sys.path.insert(0, os.path.join(ROOT, "bench", "train"))
import gpt_args  # noqa: E402  (the flag checks, shared with torch_ddp_gpt.py)
MODEL = {"layers": 6, "dim": 256, "heads": 8, "seq": 128, "vocab": 256}
children = set()


def cleanup():
    for p in list(children):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        p.wait()
    children.clear()


def on_signal(sig, _frame):
    cleanup()
    sys.exit(128 + sig)


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def run_child(argv, timeout, env=None):
    """Runs argv (no shell) in its own session; returns (status, stdout, stderr)."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, env=env)
    children.add(p)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        children.discard(p)
        return None, out, err
    children.discard(p)
    return p.returncode, out, err


def model_flags(a):
    return [f"--{k}={getattr(a, k)}" for k in ("layers", "dim", "heads", "seq", "vocab",
                                               "batch")]


def zeroc_run(a, dtype):
    argv = [a.train_gpt, "--device", "cpu", "--world", "2", "--launcher", "threads",
            "--stage", str(a.stage), "--dtype", dtype, "--steps", str(a.steps),
            "--eval-every", "0", "--json"]
    for k in ("layers", "dim", "heads", "seq", "vocab", "batch"):
        argv += [f"--{k}", str(getattr(a, k))]
    rc, out, err = run_child(argv, a.timeout)
    if rc != 0:
        return {"status": "failed", "why": f"status {rc}: {err.strip()[-400:]}"}
    steps = [json.loads(l) for l in out.splitlines()
             if l.startswith("{") and '"step_s"' in l]
    times = [s["step_s"] for s in steps]
    if len(times) != a.steps:
        return {"status": "failed", "why": f"{len(times)} step lines, expected {a.steps}"}
    return {"status": "ok", "step_s": times, "loss": [s["loss"] for s in steps]}


def torch_run(a, dtype):
    """bench/train/torch_ddp_gpt.py: one child (its own session) whose two
    ranks are its children, in its session."""
    argv = [a.torch_python, TORCH_DDP, "--world", "2", "--threads", "1", "--dtype", dtype,
            "--attention", a.attention, "--steps", str(a.steps), "--warmup", str(a.warmup)]
    argv += model_flags(a)
    rc, out, err = run_child(argv, a.timeout)
    if rc != 0:
        return {"status": "failed", "why": f"status {rc}: {err.strip()[-400:]}"}
    recs = [json.loads(l) for l in out.splitlines() if l.startswith('{"bench": "torch_ddp_gpt"')]
    if len(recs) != 1 or len(recs[0]["step_s"]) != a.steps:
        return {"status": "failed", "why": f"no step record: {out.strip()[-400:]}"}
    rec = {k: recs[0][k] for k in ("torch", "num_params", "step_s", "loss")}
    rec["status"] = "ok"
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="meson build directory with train_gpt")
    ap.add_argument("--train-gpt", help="train_gpt to run (default BUILD/examples/gpt/train_gpt)")
    ap.add_argument("--torch-python")
    for k, v in MODEL.items():
        ap.add_argument(f"--{k}", type=int, default=v)
    ap.add_argument("--batch", type=int, default=8, help="sequences per rank")
    ap.add_argument("--stage", type=int, choices=range(4), default=0)
    ap.add_argument("--dtypes", default="fp32,bf16", help="comma-separated: fp32, bf16")
    ap.add_argument("--attention", choices=["sdpa", "naive"], default="sdpa")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per run")
    a = ap.parse_args()
    gpt_args.check_model_flags(ap, a, ("repeats", "timeout"))
    dtypes = a.dtypes.split(",")
    if not dtypes or any(d not in ("fp32", "bf16") for d in dtypes):
        ap.error(f"--dtypes: {a.dtypes!r} is not a comma-separated list of fp32, bf16")
    a.train_gpt = a.train_gpt or os.path.join(a.build, "examples", "gpt", "train_gpt")
    if not os.access(a.train_gpt, os.X_OK):
        ap.error(f"--train-gpt {a.train_gpt}: not an executable (build first, or give --build)")
    a.torch_python = (a.torch_python or os.environ.get("ZC_TORCH_PYTHON")
                      or next((p for p in ("/work/venv-torch/bin/python",)
                               if os.access(p, os.X_OK)), "python3"))
    rc, _, err = run_child([a.torch_python, "-c", "import torch"], 120)
    if rc != 0:
        ap.error(f"--torch-python {a.torch_python}: cannot import torch: {err.strip()[-200:]}")
    atexit.register(cleanup)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)

    tokens = 2 * a.batch * a.seq
    common = {"model": {k: getattr(a, k) for k in MODEL}, "batch_per_rank": a.batch,
              "ranks": 2, "tokens_per_step": tokens, "steps": a.steps, "warmup": a.warmup,
              "cpus": os.cpu_count()}
    results = {d: {"zeroc": [], "torch": []} for d in dtypes}
    for rep in range(a.repeats):
        order = [(d, s) for d in dtypes for s in ("zeroc", "torch")]
        if rep % 2:
            order.reverse()
        for dtype, system in order:
            before = loadavg()
            t0 = time.monotonic()
            rec = zeroc_run(a, dtype) if system == "zeroc" else torch_run(a, dtype)
            rec.update({"bench": "gpt_cpu_vs_torch", "system": system, "dtype": dtype,
                        "repeat": rep, "wall_s": round(time.monotonic() - t0, 2),
                        "loadavg_before": before, "loadavg_after": loadavg(), **common})
            if system == "zeroc":
                rec.update({"launcher": "threads", "stage": a.stage})
            else:
                rec.update({"launcher": "DDP, gloo, 2 processes, 1 thread each, one session",
                            "attention": a.attention,
                            "precision": "autocast bf16" if dtype == "bf16" else "fp32"})
            if rec["status"] == "ok":
                med = statistics.median(rec["step_s"][a.warmup:])
                rec["median_step_s"] = round(med, 5)
                rec["tokens_per_s"] = round(tokens / med, 1)
                results[dtype][system].append(rec["tokens_per_s"])
            print(json.dumps(rec), flush=True)
    for dtype in dtypes:
        z, t = results[dtype]["zeroc"], results[dtype]["torch"]
        summ = {"dtype": dtype, "attention": a.attention, "stage": a.stage, **common,
                "zeroc_tokens_per_s": z, "torch_tokens_per_s": t,
                "loadavg_end": loadavg()}
        if z and t:
            summ["zeroc_median"] = statistics.median(z)
            summ["torch_median"] = statistics.median(t)
            summ["ratio"] = round(summ["zeroc_median"] / summ["torch_median"], 3)
        print(json.dumps({"summary": summ}), flush=True)
    return 0 if all(r["zeroc"] and r["torch"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
