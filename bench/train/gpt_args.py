"""The checks every GPT bench applies to its model and step flags (torch_gpt.py,
torch_ddp_gpt.py, bench/gpt_cpu/vs_torch.py), so the three refuse the same
shapes with the same words. Needs nothing but Python."""


def check_model_flags(ap, a, positive=()):
    """ap.error() unless --layers, --dim, --heads, --seq, --batch, --steps
    and the names in `positive` are >= 1, --dim is a multiple of --heads,
    --vocab >= 256 (the byte tokenizer's alphabet) and 0 <= --warmup < --steps."""
    for k in ("layers", "dim", "heads", "seq", "batch", "steps", *positive):
        if getattr(a, k) < 1:
            ap.error(f"--{k} must be positive")
    if a.dim % a.heads or a.vocab < 256 or not 0 <= a.warmup < a.steps:
        ap.error("--dim must be a multiple of --heads, --vocab >= 256, 0 <= --warmup < --steps")
