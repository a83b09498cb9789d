#!/usr/bin/env python3
"""Fixtures that hold train_gpt --init-from to Hugging Face's GPT2LMHeadModel.

    make_hf_gpt2.py [--out tests/oracle/gpt2]          # writes the fixtures
    make_hf_gpt2.py --check-export DIR_OR_FILE [--steps 0|5]
                                                       # from_pretrained of a
                                                       # train_gpt --export

Needs torch (CPU is enough), transformers and safetensors from pip, in a
virtual environment outside the repository; CI does not run it, the normal
tests compare against what it wrote (tests/gpt/check_hf_gpt2.py,
tests/gpt/test_hf_logits.c).

It makes a small random-initialised GPT2LMHeadModel (2 layers, n_embd 64,
4 heads, n_positions 128, vocab 512; dropout 0, eager attention, fp32) and
saves it with save_pretrained (model.safetensors, config.json); 4096 token
ids with some structure to learn (a noisy walk), in llm.c's .bin format
(tokens.bin); and, for the batches train_gpt draws with --order sequential
--seq 32 --batch 4 --world 2 (window g of the run starts at token
(g mod nw) x 32, nw = (n_train - 1) // 32, n_train = n - n // 10; a step takes
8 windows), Hugging Face's loss on the first batch, its logits for the first
16 positions of the first window (logits.bin, float32 little-endian,
[16, 512]) and the losses of 5 steps of torch.optim.AdamW (lr 1e-3, betas
(0.9, 0.95), eps 1e-8, weight decay 0.1 on the 2-D tensors and 0 on the
1-D ones, no clipping: train_gpt --lr 1e-3 --clip 0 --dtype fp32, whose
defaults are those betas, eps and decay groups) in expected.json.
"""
import argparse
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

LAYERS, DIM, HEADS, CTX, VOCAB = 2, 64, 4, 128, 512
N_TOKENS, SEQ, BATCH, WORLD, STEPS = 4096, 32, 4, 2, 5
LR, BETAS, EPS, DECAY = 1e-3, (0.9, 0.95), 1e-8, 0.1
LOGIT_ROWS = 16


def tokens():
    """A walk that mostly steps by a small amount: something to learn."""
    g = torch.Generator().manual_seed(7)
    t = [0]
    steps = torch.randint(-3, 4, (N_TOKENS - 1,), generator=g).tolist()
    jumps = torch.randint(0, VOCAB, (N_TOKENS - 1,), generator=g).tolist()
    coin = torch.rand(N_TOKENS - 1, generator=g).tolist()
    for s, j, c in zip(steps, jumps, coin):
        t.append(j if c < 0.1 else (t[-1] + s) % VOCAB)
    return t


def write_llmc(path, toks):
    header = [20240520, 1, len(toks)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(toks), *toks))


def windows(toks, step):
    n_train = len(toks) - len(toks) // 10
    nw = (n_train - 1) // SEQ
    g0 = step * BATCH * WORLD
    starts = [((g0 + i) % nw) * SEQ for i in range(BATCH * WORLD)]
    x = torch.tensor([toks[s:s + SEQ] for s in starts])
    y = torch.tensor([toks[s + 1:s + SEQ + 1] for s in starts])
    return x, y


def model_config():
    return GPT2Config(n_layer=LAYERS, n_embd=DIM, n_head=HEADS, n_positions=CTX,
                      vocab_size=VOCAB, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                      layer_norm_epsilon=1e-5, activation_function="gelu_new",
                      tie_word_embeddings=True, bos_token_id=VOCAB - 1,
                      eos_token_id=VOCAB - 1)


def load(path):
    kw = {"attn_implementation": "eager", "torch_dtype": torch.float32}
    try:
        return GPT2LMHeadModel.from_pretrained(path, **kw)
    except TypeError:
        kw.pop("torch_dtype")
        return GPT2LMHeadModel.from_pretrained(path, **kw)


def train(model, toks):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": DECAY},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS)
    losses = []
    for step in range(STEPS):
        x, y = windows(toks, step)
        logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return losses


def make(out):
    torch.manual_seed(1234)
    os.makedirs(out, exist_ok=True)
    model = GPT2LMHeadModel(model_config()).float().eval()
    try:
        model.save_pretrained(out, safe_serialization=True)
    except TypeError:
        model.save_pretrained(out)
    for extra in ("generation_config.json",):
        p = os.path.join(out, extra)
        if os.path.exists(p):
            os.remove(p)
    toks = tokens()
    write_llmc(os.path.join(out, "tokens.bin"), toks)
    model = load(out)
    model.train()  # dropout is 0: train and eval compute the same
    x, y = windows(toks, 0)
    with torch.no_grad():
        logits = model(input_ids=x).logits
    first = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1)).item()
    with open(os.path.join(out, "logits.bin"), "wb") as f:
        f.write(logits[0, :LOGIT_ROWS].contiguous().numpy().astype("<f4").tobytes())
    losses = train(model, toks)
    assert abs(losses[0] - first) <= 1e-6 * abs(first), (losses[0], first)
    expected = {
        "model": {"layers": LAYERS, "dim": DIM, "heads": HEADS, "ctx": CTX, "vocab": VOCAB},
        "data": {"tokens": N_TOKENS, "seq": SEQ, "batch": BATCH, "world": WORLD,
                 "order": "sequential"},
        "adamw": {"lr": LR, "betas": list(BETAS), "eps": EPS, "weight_decay_2d": DECAY,
                  "weight_decay_1d": 0.0, "clip": 0},
        "first_loss": first, "losses": losses,
        "logits": {"file": "logits.bin", "window": 0, "rows": LOGIT_ROWS, "vocab": VOCAB},
        "made_with": {"torch": torch.__version__,
                      "transformers": __import__("transformers").__version__},
    }
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=2)
        f.write("\n")
    print("wrote %s: first loss %.6f, losses %s" % (out, first, losses))


def check_export(path, steps, fixtures):
    """train_gpt --init-from FIXTURE --steps N --export PATH, loaded back:
    its logits on the first window against Hugging Face's own model after
    the same N AdamW steps."""
    d = path if os.path.isdir(path) else os.path.dirname(path) or "."
    ours = load(d).eval()
    ref = load(fixtures)
    toks = tokens()
    if steps:
        ref.train()
        ref_losses = train(ref, toks)[:steps]
    ref.eval()
    x, _ = windows(toks, 0)
    with torch.no_grad():
        a = ours(input_ids=x).logits
        b = ref(input_ids=x).logits
    diff = (a - b).abs().max().item()
    print(json.dumps({"check": "export_from_pretrained", "steps": steps,
                      "max_abs_logit_diff": diff, "logit_scale": b.abs().max().item()}))
    return diff <= (1e-6 if steps == 0 else 1e-3)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt2")
    ap.add_argument("--out", default=here)
    ap.add_argument("--check-export")
    ap.add_argument("--steps", type=int, default=0, choices=[0, 5])
    a = ap.parse_args()
    if a.check_export:
        sys.exit(0 if check_export(a.check_export, a.steps, here) else 1)
    make(a.out)


if __name__ == "__main__":
    main()
