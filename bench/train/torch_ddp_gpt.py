#!/usr/bin/env python3
"""The GPT of examples/gpt (bench/train/torch_gpt.py's model) trained with
PyTorch DistributedDataParallel on the CPU: --world processes on this
machine, gloo over a FileStore in a private temporary directory (no network),
each rank with --threads intra-op threads (torchrun's default for several
processes on a node is 1, as train_gpt's ranks have one BLAS thread each;
OMP_NUM_THREADS and MKL_NUM_THREADS are set to it for the ranks).

The ranks are children of this process (torch.multiprocessing, spawn), so
they share its session, as torchrun's ranks share torchrun's and
train_gpt's rank threads share their process: where the kernel groups the
CPU share by session (sched_autogroup), both systems then get the same
share of a busy machine.

The step is a PyTorch user's: forward and backward (DDP all-reduces the
gradients in buckets during backward), global-norm clipping at 1.0, AdamW
(betas 0.9, 0.95, weight decay 0.1 on matrices), bf16 autocast for
--dtype bf16 (fp32 master weights) or plain fp32; --attention sdpa
(F.scaled_dot_product_attention, what a PyTorch user writes) or naive (the
score matrix materialised). Tokens are random bytes. Rank 0 prints one JSON
line: the step times (each from the step's start to the end of its
optimizer step, gradient all-reduce included), their median after
--warmup, tokens/s over all ranks, the losses.

The one PyTorch side of the CPU benchmarks: bench/contention/contention.py
(the slowdown under shared cores) and bench/gpt_cpu/vs_torch.py (tokens/s
against train_gpt) run it. Alone:
    python3 bench/train/torch_ddp_gpt.py --layers 2 --dim 64 --heads 4 --seq 64
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_args  # noqa: E402  (the flag checks, shared with vs_torch.py)
import gpt_flops  # noqa: E402  (examples/gpt's parameter count)
import torch_gpt  # noqa: E402  (the model, shared with the single-process bench)


def rank_main(rank, a, store_path, out_path):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method="file://" + store_path, rank=rank,
                            world_size=a.world)
    torch.manual_seed(1)
    model = torch_gpt.build(torch, a.layers, a.dim, a.heads, a.seq, a.vocab)(a.attention)
    n = sum(p.numel() for p in model.parameters())  # the tied wte once
    want = gpt_flops.num_params(a.layers, a.dim, a.seq, a.vocab)
    if n != want:
        raise SystemExit(f"torch_ddp_gpt.py: {n} parameters, examples/gpt has {want}")
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=3e-3,
                            betas=(0.9, 0.95), eps=1e-8, foreach=True)
    gen = torch.Generator().manual_seed(2 + rank)
    times, losses = [], []
    for _ in range(a.steps):
        data = torch.randint(0, 256, (a.batch, a.seq + 1), generator=gen)
        t0 = time.perf_counter()
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16,
                            enabled=a.dtype == "bf16"):
            loss = ddp(data[:, :-1], data[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    dist.barrier()
    if rank == 0:
        med = statistics.median(times[a.warmup:])
        rec = {"bench": "torch_ddp_gpt", "torch": torch.__version__, "world": a.world,
               "threads_per_rank": a.threads, "dtype": a.dtype, "attention": a.attention,
               "model": {"layers": a.layers, "dim": a.dim, "heads": a.heads, "seq": a.seq,
                         "vocab": a.vocab},
               "batch": a.batch, "num_params": n,
               "step_s": [round(t, 6) for t in times], "median_step_s": round(med, 6),
               "tokens_per_s": round(a.batch * a.seq * a.world / med, 1),
               "loss": [round(x, 4) for x in losses]}
        with open(out_path, "x") as f:  # the private directory's own file
            f.write(json.dumps(rec) + "\n")
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8, help="sequences per rank")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16")
    ap.add_argument("--attention", choices=["naive", "sdpa"], default="naive")
    a = ap.parse_args()
    gpt_args.check_model_flags(ap, a, ("world", "threads"))

    # Before torch starts its thread pools, here and in the spawned ranks.
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(a.threads)
    import torch.multiprocessing as mp

    tmp = tempfile.mkdtemp(prefix="zc-ddp-")
    try:
        out = os.path.join(tmp, "rank0.json")
        mp.start_processes(rank_main, args=(a, os.path.join(tmp, "store"), out), nprocs=a.world,
                           join=True, start_method="spawn")
        with open(out) as f:
            sys.stdout.write(f.read())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
