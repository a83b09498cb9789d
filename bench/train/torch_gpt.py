#!/usr/bin/env python3
"""The GPT of examples/gpt in PyTorch, trained a few steps for a side-by-side
tokens/s with train_gpt --device cuda (scripts/gpu_check.py runs both).

The same model as examples/gpt/model.c: token and position embeddings,
pre-LayerNorm blocks (LayerNorm eps 1e-5, causal self-attention with a bias
on the fused qkv and the output projection, a 4x GELU(tanh) MLP with
biases), a final LayerNorm and an LM head tied to the token embedding, the
same initialisation (normal 0.02, residual projections scaled by
1/sqrt(2 layers), zero biases, unit LayerNorm gains) and so the same
parameter count (checked against bench/train/gpt_flops.py). The training
step matches train_gpt's defaults: AdamW (betas 0.9, 0.95; weight decay 0.1
on the matrices, none on biases and gains; lr 3e-3), global-norm clipping at
1.0, fp32 master weights with the matmuls in bf16 (torch.autocast; train_gpt
--dtype bf16 runs cuBLAS bf16 matmuls with fp32 accumulation). Tokens are
random bytes (vocabulary entries 0..255 of --vocab), as in the check.

--mode eager or compile (torch.compile of the model); --attention sdpa
(F.scaled_dot_product_attention, what a PyTorch user writes) or naive (the
score matrix materialised, as train_gpt's kernels do). One JSON line:
tokens/s (median of the steps after --warmup), MFU by gpt_flops.FORMULA,
the step times, and the peak used. --device cpu runs a tiny shape anywhere
(a smoke test; no MFU)."""
import argparse
import json
import math
import os
import statistics
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_args  # noqa: E402
import gpt_flops  # noqa: E402


def build(torch, L, C, H, T, V):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self, attention):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C, eps=1e-5)
            self.c_attn = nn.Linear(C, 3 * C)
            self.attn_proj = nn.Linear(C, C)
            self.ln_2 = nn.LayerNorm(C, eps=1e-5)
            self.c_fc = nn.Linear(C, 4 * C)
            self.mlp_proj = nn.Linear(4 * C, C)
            self.attention = attention

        def attend(self, x):
            B_, T_, _ = x.shape
            q, k, v = self.c_attn(x).split(C, dim=2)
            q, k, v = (t.view(B_, T_, H, C // H).transpose(1, 2) for t in (q, k, v))
            if self.attention == "sdpa":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
                mask = torch.ones(T_, T_, dtype=torch.bool, device=x.device).tril()
                att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
                y = att @ v
            return self.attn_proj(y.transpose(1, 2).reshape(B_, T_, C))

        def forward(self, x):
            x = x + self.attend(self.ln_1(x))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self, attention):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Embedding(T, C)
            self.h = nn.ModuleList(Block(attention) for _ in range(L))
            self.ln_f = nn.LayerNorm(C, eps=1e-5)
            for name, p in self.named_parameters():
                if p.dim() == 1:
                    nn.init.ones_(p) if ".weight" in name else nn.init.zeros_(p)
                else:
                    std = 0.02 / math.sqrt(2 * L) if name.endswith("_proj.weight") else 0.02
                    nn.init.normal_(p, 0.0, std)

        def forward(self, idx, targets):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for b in self.h:
                x = b(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # the tied head, no bias
            return F.cross_entropy(logits.float().view(-1, V), targets.reshape(-1))

    return GPT


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--attention", choices=["sdpa", "naive"], default="sdpa")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    a = ap.parse_args()
    gpt_args.check_model_flags(ap, a)

    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        print("torch_gpt.py: no CUDA device visible to torch", file=sys.stderr)
        return 1
    dev = torch.device(a.device)
    torch.manual_seed(1)
    model = build(torch, a.layers, a.dim, a.heads, a.seq, a.vocab)(a.attention).to(dev)
    n = sum(p.numel() for p in model.parameters())  # the tied wte once
    want = gpt_flops.num_params(a.layers, a.dim, a.seq, a.vocab)
    if n != want:
        print(f"torch_gpt.py: {n} parameters, examples/gpt has {want}", file=sys.stderr)
        return 1
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=3e-3,
                            betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if a.device == "cuda"
                                                            else {"foreach": True}))
    step_fn = torch.compile(model) if a.mode == "compile" else model
    gen = torch.Generator(device=dev).manual_seed(2)

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()

    times, losses = [], []
    for _ in range(a.steps):
        data = torch.randint(0, 256, (a.batch, a.seq + 1), device=dev, generator=gen)
        sync()
        t0 = time.perf_counter()
        with torch.autocast(device_type=a.device, dtype=torch.bfloat16):
            loss = step_fn(data[:, :-1], data[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    tps = a.batch * a.seq / statistics.median(times[a.warmup:])
    name = torch.cuda.get_device_name(dev) if a.device == "cuda" else "cpu"
    peak, src = gpt_flops.peak_flops(name) if a.device == "cuda" else (None, "cpu: no peak")
    fpt = gpt_flops.flops_per_token(a.layers, a.dim, a.heads, a.seq, a.vocab)
    print(json.dumps({
        "bench": "torch_gpt", "mode": a.mode, "attention": a.attention, "device": name,
        "torch": torch.__version__, "model": {"layers": a.layers, "dim": a.dim, "heads": a.heads,
                                              "seq": a.seq, "vocab": a.vocab},
        "batch": a.batch, "num_params": n, "precision": "fp32 master, autocast bf16 matmuls",
        "tokens_per_s": round(tps, 1), "step_s": [round(t, 5) for t in times],
        "first_step_s": round(times[0], 3), "loss": [round(x, 4) for x in losses],
        "flops_per_token": fpt, "peak_flops": peak, "peak_source": src,
        "mfu": gpt_flops.mfu(tps, fpt, peak), "mfu_formula": gpt_flops.FORMULA}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
