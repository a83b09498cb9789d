#!/usr/bin/env python3
"""torch.optim.AdamW(fused=True) on the sizes bench_gpu_adam measures.

One flat parameter of N elements (so multi-tensor-apply overhead is as small
as torch allows), fp32 params and grads: torch's fused path needs params,
grads and moments of one dtype, so the like-for-like zeroc line is
bench_gpu_adam --grad fp32 --out none (28 bytes per parameter on both sides:
read p, g, m, v; write p, m, v). Timed with CUDA events, median of --reps
after --warmup, in the same session as the zeroc bench:

    python3 bench/gpu_adam/torch_adam.py --zeroc build/bench/gpu_adam/bench_gpu_adam

With --zeroc it also runs the zeroc bench on the same sizes (fp32 grads, no
16-bit copy) and prints each pair with zeroc's speed-up over torch. One JSON
object per line.
"""
import argparse
import json
import statistics
import subprocess
import sys


def parse_size(s):
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1].upper(), 1)
    return int(float(s[:-1] if mul > 1 else s) * mul) & ~63


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="16M,64M,256M,1G")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--zeroc", help="path of bench_gpu_adam to run on the same sizes")
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("torch_adam.py: no CUDA device visible to torch", file=sys.stderr)
        return 1
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(dev)
    torch_rows = {}
    for s in args.sizes.split(","):
        n = parse_size(s)
        p = torch.nn.Parameter(torch.randn(n, device=dev, dtype=torch.float32))
        p.grad = torch.randn(n, device=dev, dtype=torch.float32) * 1e-3
        opt = torch.optim.AdamW([p], lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, fused=True)
        times = []
        for i in range(args.warmup + args.reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            opt.step()
            b.record()
            b.synchronize()
            if i >= args.warmup:
                times.append(a.elapsed_time(b))
        ms = statistics.median(times)
        row = {"bench": "torch_adamw_fused", "device": name, "torch": torch.__version__,
               "params": n, "grad": "fp32", "out": "none", "bytes_per_param": 28, "ms": round(ms, 4),
               "gbps": round(n * 28 / (ms * 1e-3) / 1e9, 1)}
        torch_rows[n] = row
        print(json.dumps(row), flush=True)
        del opt, p
        torch.cuda.empty_cache()

    if args.zeroc:
        out = subprocess.run([args.zeroc, "--sizes", args.sizes, "--grad", "fp32", "--out", "none",
                              "--reps", str(args.reps), "--warmup", str(args.warmup)],
                             check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            z = json.loads(line)
            t = torch_rows.get(z["params"])
            if t:
                print(json.dumps({"bench": "gpu_adam_vs_torch", "device": name, "params": z["params"],
                                  "zeroc_ms": z["ms"], "torch_ms": t["ms"],
                                  "speedup": round(t["ms"] / z["ms"], 3),
                                  "zeroc_fraction_of_copy": z["fraction_of_copy"]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
