"""Model FLOPs utilisation of the GPT of examples/gpt, one formula for every
side of a comparison (train_gpt in scripts/gpu_check.py, the PyTorch twin in
bench/train/torch_gpt.py). Needs nothing but Python.

Training FLOPs per token: 6 x the parameters that take part in matrix
products (every weight and bias of the blocks, the final LayerNorm, and wte
once: the tied LM head's matmul; not wpe, a lookup) plus 12 x layers x dim x
seq for the attention scores and their use (PaLM, appendix B, with heads x
head_dim = dim; causal masking not discounted, as nanoGPT and PaLM count).
MFU = tokens/s x that / the GPU's dense bf16 peak (the matmuls of both sides
run in bf16 with fp32 accumulation)."""

FORMULA = ("mfu = tokens_per_s * (6 * (num_params - seq * dim) + 12 * layers * dim * seq) "
           "/ peak_flops (dense bf16)")

# Dense bf16 tensor-core peaks from the vendor's datasheets (FLOP/s), by a
# substring of the name the driver reports; the first match wins.
PEAKS = [
    ("H100 PCIe", 756e12, "H100 PCIe datasheet, dense bf16"),
    ("H100 NVL", 835e12, "H100 NVL datasheet, dense bf16"),
    ("H100", 989.4e12, "H100 SXM datasheet, dense bf16"),
    ("H200", 989.4e12, "H200 SXM datasheet, dense bf16"),
    ("GH200", 989.4e12, "GH200 datasheet, dense bf16"),
    ("A100", 312e12, "A100 datasheet, dense bf16"),
    ("L40S", 362.05e12, "L40S datasheet, dense bf16"),
]


def num_params(layers, dim, seq, vocab):
    """gpt_num_params of examples/gpt/model.c."""
    return vocab * dim + seq * dim + layers * (12 * dim * dim + 13 * dim) + 2 * dim


def flops_per_token(layers, dim, heads, seq, vocab):
    del heads  # heads x head_dim = dim: the count does not depend on the split
    return 6 * (num_params(layers, dim, seq, vocab) - seq * dim) + 12 * layers * dim * seq


def peak_flops(device_name):
    """(peak FLOP/s, where it comes from), or (None, why not) for a GPU
    this table does not know."""
    for key, peak, src in PEAKS:
        if key in (device_name or ""):
            return peak, src
    return None, f"no datasheet peak known for '{device_name}'"


def mfu(tokens_per_s, fpt, peak):
    if not tokens_per_s or not peak:
        return None
    return round(tokens_per_s * fpt / peak, 4)
