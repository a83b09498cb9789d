#!/usr/bin/env python3
"""Tokens/s of examples/gpt/train_gpt on the CPU next to the same GPT in
PyTorch, same model, batch, sequence length and dtype, two ranks each,
interleaved in one run.

zeroc: train_gpt --device cpu --world 2 --launcher threads (two ranks as
threads of one process, one BLAS thread each), ZeRO stage --stage (default
0, the stage that does what DDP does), --dtype fp32 or bf16.

PyTorch: bench/train/torch_gpt.py's model (the same GPT: shapes, parameter
count, tied head, initialisation) under DistributedDataParallel, two
processes with gloo over a FileStore in a private temporary directory, one
intra-op thread per rank (torchrun's default for several processes on a
node), AdamW (betas 0.9, 0.95, weight decay 0.1 on matrices), global-norm
clipping at 1.0; --dtype bf16 is torch.autocast(bfloat16) with fp32 master
weights, as train_gpt's bf16 keeps fp32 master weights and computes in
bf16. --attention sdpa (F.scaled_dot_product_attention, what a PyTorch user
writes; the default) or naive (the score matrix materialised).

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
$ZC_TORCH_PYTHON, else /work/venv-torch/bin/python, else python3); the
script re-runs itself under it, once per rank, with --torch-rank.
"""
import argparse
import atexit
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

MODEL = {"layers": 6, "dim": 256, "heads": 8, "seq": 128, "vocab": 256}
children = set()
tmpdirs = []


def cleanup():
    for p in list(children):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        p.wait()
    children.clear()
    for d in tmpdirs:
        shutil.rmtree(d, ignore_errors=True)
    tmpdirs.clear()


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
    tmp = tempfile.mkdtemp(prefix="zc-vs-torch-")
    tmpdirs.append(tmp)
    procs = []
    try:
        for rank in range(2):
            argv = [a.torch_python, os.path.abspath(__file__), "--torch-rank", str(rank),
                    "--store", os.path.join(tmp, "store"), "--dtypes", dtype,
                    "--attention", a.attention, "--steps", str(a.steps)] + model_flags(a)
            env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, start_new_session=True, env=env)
            children.add(p)
            procs.append(p)
        outs = []
        deadline = time.monotonic() + a.timeout
        for p in procs:
            try:
                outs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                return {"status": "failed", "why": f"timed out after {a.timeout} s"}
        bad = [(p.returncode, e) for p, (_, e) in zip(procs, outs) if p.returncode != 0]
        if bad:
            return {"status": "failed", "why": f"status {bad[0][0]}: {bad[0][1].strip()[-400:]}"}
        rec = json.loads(outs[0][0].strip().splitlines()[-1])
        rec["status"] = "ok"
        return rec
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            children.discard(p)
        shutil.rmtree(tmp, ignore_errors=True)
        tmpdirs.remove(tmp)


def torch_rank(a):
    """One DDP rank (run under the torch python); rank 0 prints one JSON line."""
    import torch
    import torch.distributed as dist

    sys.path.insert(0, os.path.join(ROOT, "bench", "train"))
    import gpt_flops
    import torch_gpt

    torch.set_num_threads(1)
    rank = a.torch_rank
    dist.init_process_group("gloo", init_method="file://" + a.store, rank=rank, world_size=2)
    torch.manual_seed(1)
    model = torch_gpt.build(torch, a.layers, a.dim, a.heads, a.seq, a.vocab)(a.attention)
    n = sum(p.numel() for p in model.parameters())  # the tied wte once
    want = gpt_flops.num_params(a.layers, a.dim, a.seq, a.vocab)
    if n != want:
        print(f"vs_torch.py: {n} parameters, examples/gpt has {want}", file=sys.stderr)
        return 1
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=3e-3,
                            betas=(0.9, 0.95), eps=1e-8, foreach=True)
    gen = torch.Generator().manual_seed(2 + rank)
    bf16 = a.dtypes == "bf16"
    times, losses = [], []
    for _ in range(a.steps):
        data = torch.randint(0, 256, (a.batch, a.seq + 1), generator=gen)
        t0 = time.perf_counter()
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = ddp(data[:, :-1], data[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps({"torch": torch.__version__, "num_params": n,
                          "step_s": [round(t, 5) for t in times],
                          "loss": [round(x, 4) for x in losses]}), flush=True)
    return 0


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
    ap.add_argument("--torch-rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    a = ap.parse_args()
    for k in ("layers", "dim", "heads", "seq", "batch", "steps", "repeats", "timeout"):
        if getattr(a, k) < 1:
            ap.error(f"--{k} must be positive")
    if a.dim % a.heads or a.vocab < 256 or not 0 <= a.warmup < a.steps:
        ap.error("--dim must be a multiple of --heads, --vocab >= 256, 0 <= --warmup < --steps")
    dtypes = a.dtypes.split(",")
    if not dtypes or any(d not in ("fp32", "bf16") for d in dtypes):
        ap.error(f"--dtypes: {a.dtypes!r} is not a comma-separated list of fp32, bf16")
    if a.torch_rank is not None:
        return torch_rank(a)

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
                rec.update({"launcher": "DDP, gloo, 2 processes, 1 thread each",
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
