#!/usr/bin/env python3
"""A random bf16 GPT-2-shaped checkpoint, large: the model of
scripts/big_gpt.sh for --init-from (no torch or numpy needed).

    make_big_gpt.py OUT.safetensors [--layers 32] [--dim 2560] [--heads 20]
                    [--vocab 256] [--ctx 64] [--seed 1]

Writes OUT (which must not exist) as one safetensors file under
GPT2LMHeadModel's names (transformer.wte.weight, transformer.h.N.attn.c_attn
.weight stored [in, out] as Conv1D keeps it, ...; no lm_head.weight: tied),
sorted by name as the safetensors writer sorts them, and config.json beside
it unless one is there. The defaults are big_gpt.sh's shape: 2.52 B
parameters, 5.04 GB. Weights are random bf16 of magnitude 2^-7..2^-6 with a
random sign (finite by construction: the exponent is fixed, the mantissa
random), LayerNorm gains 1 and every bias 0. Written in 64 MiB blocks; the
file is removed if the script fails or is interrupted.
"""
import argparse
import json
import os
import random
import struct
import sys

BLOCK = 64 << 20


def tensors(a):
    C, V, T = a.dim, a.vocab, a.ctx
    out = [("transformer.wte.weight", [V, C]), ("transformer.wpe.weight", [T, C]),
           ("transformer.ln_f.weight", [C]), ("transformer.ln_f.bias", [C])]
    for l in range(a.layers):
        p = "transformer.h.%d." % l
        out += [(p + "ln_1.weight", [C]), (p + "ln_1.bias", [C]),
                (p + "attn.c_attn.weight", [C, 3 * C]), (p + "attn.c_attn.bias", [3 * C]),
                (p + "attn.c_proj.weight", [C, C]), (p + "attn.c_proj.bias", [C]),
                (p + "ln_2.weight", [C]), (p + "ln_2.bias", [C]),
                (p + "mlp.c_fc.weight", [C, 4 * C]), (p + "mlp.c_fc.bias", [4 * C]),
                (p + "mlp.c_proj.weight", [4 * C, C]), (p + "mlp.c_proj.bias", [C])]
    return sorted(out)


# High bytes of a bf16 (little-endian: every second byte): the sign kept,
# the exponent's top seven bits 0111100 (2^-7 or 2^-6 with the low byte's
# exponent bit).
HIGH = bytes((b & 0x80) | 0x3C for b in range(256))
ONE = struct.pack("<H", 0x3F80)


def write_values(f, name, n, rng):
    if name.endswith(".bias"):
        f.write(bytes(2 * n))
        return
    if ".ln_" in name or "ln_f." in name:
        f.write(ONE * n)
        return
    left = 2 * n
    while left:
        k = min(left, BLOCK)
        b = bytearray(rng.randbytes(k))
        b[1::2] = bytes(b[1::2]).translate(HIGH)
        f.write(b)
        left -= k


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--dim", type=int, default=2560)
    ap.add_argument("--heads", type=int, default=20)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--ctx", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.dim % a.heads:
        sys.exit("make_big_gpt.py: --dim must be a multiple of --heads")
    ts = tensors(a)
    header, at = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in ts:
        n = 1
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [at, at + 2 * n]}
        at += 2 * n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(len(text) + 8) % 4096)  # the data starts on a 4 KiB block
    fd = os.open(a.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            rng = random.Random(a.seed)
            for name, shape in ts:
                n = 1
                for d in shape:
                    n *= d
                write_values(f, name, n, rng)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        os.unlink(a.out)
        raise
    cfg = os.path.join(os.path.dirname(os.path.abspath(a.out)), "config.json")
    try:
        with open(cfg, "x") as f:
            json.dump({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
                       "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
                       "n_embd": a.dim, "n_head": a.heads, "n_layer": a.layers,
                       "n_positions": a.ctx, "vocab_size": a.vocab,
                       "tie_word_embeddings": True}, f, indent=2)
    except FileExistsError:
        pass
    params = at // 2
    print("%s: %d tensors, %.3f B parameters, %.3f GB" % (a.out, len(ts), params / 1e9,
                                                         (8 + len(text) + at) / 1e9))


if __name__ == "__main__":
    main()
