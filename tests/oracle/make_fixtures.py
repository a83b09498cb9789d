#!/usr/bin/env python3
"""Generate the DeepSpeed replay fixtures of tests/oracle (not run by CI).

Each case trains a module whose loss is sum_i <p_i, G_t,i> through
deepspeed.initialize, on the CPU (DS_ACCELERATOR=cpu, gloo, one process per
rank), with a DeepSpeed JSON config. The gradient of that loss is exactly the
replayed G_t, so a zeroc engine fed the same G_t (tests/oracle/test_replay.c)
must take the same steps. Recorded after every optimizer step: the fp32
masters (every element), the loss scale the step used, whether it was
skipped, the learning rate it applied, Adam's beta1 and the gradient norm
DeepSpeed reports.

The values are chosen so that no rounding happens outside the optimizer:
every initial value is k/256 (|k| <= 255) and every gradient element is
k * 2^e (|k| <= 127, e in [-19, -10]), so they are exact in fp32, bf16 and
fp16, and so is G * loss_scale / gradient_accumulation_steps for the
power-of-two scales used here. Cases marked "D5" load values that are not.

Usage (CPU torch and DeepSpeed in a virtual environment outside the repo):

    python3 -m venv /work/venv-ds
    /work/venv-ds/bin/pip install torch deepspeed==0.19.8 numpy
    DS_ACCELERATOR=cpu /work/venv-ds/bin/python tests/oracle/make_fixtures.py \
        [--out tests/oracle/fixtures] [--only NAME,...] [--ds-sdist deepspeed-0.19.8.tar.gz]
    /work/venv-ds/bin/python tests/oracle/make_fixtures.py --reindex [--out DIR]

(README.md beside this file has the whole procedure and what each case is.)

DeepSpeed's CPU accelerator refuses fp16 when oneDNN has no fp16 kernels
(engine._do_sanity_check, "Type fp16 is not supported on your device"). The
fp16 cases patch that capability check alone (is_fp16_supported and
supported_dtypes); the arithmetic is torch's CPU fp16 as it is, and the
index says so per case (fp16_capability_patched).
"""
import argparse
import copy
import hashlib
import json
import os
import platform
import socket
import sys
import tempfile

import numpy as np

# ---------------------------------------------------------------------------
# The model: a few tensors of uneven (some odd) sizes.

PARAMS = [
    ("emb.weight", [24, 12]),
    ("fc1.weight", [16, 12]),
    ("fc1.bias", [16]),
    ("fc2.weight", [7, 11]),
    ("fc2.bias", [7]),
    ("head.weight", [3, 5]),
    ("norm.gain", [3]),
]
NUMEL = [int(np.prod(s)) for _, s in PARAMS]
N = sum(NUMEL)

# Gradient amplitude: G = k * 2^e with e = GRAD_EXP[t % 3] - 2 * rank -
# 5 * micro. With N = 598 and k uniform in [-127, 127] the norms of one rank's
# gradient are about 1.76, 0.88 and 0.44, so the default gradient_clipping
# (1.0) clips every third step of a world-1 run and no other. The rank and
# micro-step offsets make the 16-bit sums round: two ranks' values (2 bits
# apart) need up to 10 significant bits, more than bf16 holds, and two
# micro-steps' (5 bits apart) up to 13, more than fp16 holds - so a sum in
# 16 bits (DeepSpeed's reduction, and its accumulation with
# grad_accum_dtype unset: D3) differs from one in fp32 where it should.
GRAD_EXP = [-10, -11, -12]
RANK_SHIFT = 2
MICRO_SHIFT = 5

FORMAT_VERSION = 1


def grad_exps(steps, accum, world):
    """e[step][micro][rank]."""
    return [[[GRAD_EXP[t % 3] - RANK_SHIFT * r - MICRO_SHIFT * m for r in range(world)]
             for m in range(accum)] for t in range(steps)]


def init_values(kind):
    rng = np.random.default_rng(20260)
    if kind == "grid":
        k = rng.integers(-255, 256, size=N)
        return (k.astype(np.float64) / 256.0).astype(np.float32)
    if kind == "unrounded":
        # Not representable in bf16 or fp16: where the master starts (D5).
        return (rng.standard_normal(N) * 0.4).astype(np.float32)
    raise ValueError(kind)


def grad_ints(steps, accum, world, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(-127, 128, size=(steps, accum, world, N)).astype(np.int8)


# ---------------------------------------------------------------------------
# The cases. "expect" says what the replay test holds zeroc to:
#   match  zeroc equals DeepSpeed (<= 4 fp32 ulp, sequences exact)
#   D1     fp16 growth step: DeepSpeed unscales with the grown scale
#          (target of zeroc's fp16.deepspeed_unscale_order: true)
#   D2     DeepSpeed stage-0 fp16 (FP16_Optimizer)
#   D3     16-bit gradient accumulation: per zeroc stage, "zeroc_stage_expect"
#          (d3_stages); with the key unset also replayed with
#          data_types.grad_accum_dtype set to the model dtype ("d3_key_run")
#   D4     DeepSpeed stage-0 bf16 (FP16_Optimizer)
#   D5     fp32 initial values that 16 bits cannot hold

ADAMW = {"type": "AdamW", "params": {"lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-3,
                                    "weight_decay": 0.01}}


def cfg(stage, accum=1, opt=None, clip=None, fp16=None, bf16=None, sched=None, data_types=None):
    c = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": accum,
        "optimizer": copy.deepcopy(opt or ADAMW),
        "zero_optimization": {"stage": stage},
        "steps_per_print": 1000000,
    }
    if clip is not None:
        c["gradient_clipping"] = clip
    if fp16 is not None:
        c["fp16"] = dict({"enabled": True}, **fp16)
    if bf16 is not None:
        c["bf16"] = dict({"enabled": True}, **bf16)
    if sched is not None:
        c["scheduler"] = sched
    if data_types is not None:
        c["data_types"] = data_types
    return c


def opt(**params):
    o = copy.deepcopy(ADAMW)
    t = params.pop("type", None)
    if t:
        o["type"] = t
    o["params"].update(params)
    return o


def inf_at(*steps, rank=0, micro=0, elem=100, value="inf"):
    return [{"step": s, "micro": micro, "rank": rank, "elem": elem, "value": value}
            for s in steps]


FP16_NO_GROWTH = {"initial_scale_power": 6, "loss_scale_window": 1000, "hysteresis": 1}
FP16_GROWTH = {"initial_scale_power": 5, "loss_scale_window": 3, "hysteresis": 1}

CASES = [
    # fp32: stages, optimizer variants, clipping, schedulers, accumulation, ranks
    dict(name="f32_adamw_s0", config=cfg(0), steps=12),
    dict(name="f32_adamw_s1", config=cfg(1), steps=12),
    dict(name="f32_adamw_s2", config=cfg(2), steps=12),
    dict(name="f32_adamw_s3", config=cfg(3), steps=12),
    dict(name="f32_adam_l2_s1", config=cfg(1, opt=opt(type="Adam", adam_w_mode=False,
                                                      weight_decay=0.05)), steps=12),
    dict(name="f32_adam_decoupled_s2", config=cfg(2, opt=opt(type="Adam", weight_decay=0.05)),
         steps=12),
    dict(name="f32_nobias_s2", config=cfg(2, opt=opt(bias_correction=False)), steps=12),
    dict(name="f32_eps_default_s1", config=cfg(1, opt=opt(eps=1e-8)), steps=12),
    dict(name="f32_noclip_s1", config=cfg(1, clip=0.0), steps=12),
    dict(name="f32_clip_s3", config=cfg(3, clip=0.3), steps=12),
    dict(name="f32_clip_s0", config=cfg(0, clip=0.3), steps=12),
    dict(name="f32_warmuplr_log_s1",
         config=cfg(1, sched={"type": "WarmupLR", "params": {
             "warmup_min_lr": 0.0, "warmup_max_lr": 0.01, "warmup_num_steps": 6,
             "warmup_type": "log"}}), steps=16),
    dict(name="f32_warmuplr_linear_s2",
         config=cfg(2, sched={"type": "WarmupLR", "params": {
             "warmup_min_lr": 0.001, "warmup_max_lr": 0.01, "warmup_num_steps": 5,
             "warmup_type": "linear"}}), steps=16),
    dict(name="f32_warmupdecay_s2",
         config=cfg(2, sched={"type": "WarmupDecayLR", "params": {
             "warmup_min_lr": 0.0, "warmup_max_lr": 0.01, "warmup_num_steps": 4,
             "total_num_steps": 16}}), steps=16),
    dict(name="f32_warmupcosine_s1",
         config=cfg(1, sched={"type": "WarmupCosineLR", "params": {
             "total_num_steps": 16, "warmup_num_steps": 4, "warmup_min_ratio": 0.1,
             "cos_min_ratio": 0.05}}), steps=16),
    dict(name="f32_onecycle_s2",
         config=cfg(2, sched={"type": "OneCycle", "params": {
             "cycle_min_lr": 0.001, "cycle_max_lr": 0.01, "cycle_first_step_size": 5,
             "decay_lr_rate": 0.1, "decay_step_size": 2, "cycle_momentum": True,
             "cycle_min_mom": 0.85, "cycle_max_mom": 0.95}}), steps=16),
    dict(name="f32_accum2_s0", config=cfg(0, accum=2), steps=12),
    dict(name="f32_accum2_s2", config=cfg(2, accum=2), steps=12),
    dict(name="f32_world2_s1", config=cfg(1), world=2, steps=12),
    dict(name="f32_world2_s3", config=cfg(3), world=2, steps=12),
    dict(name="f32_world2_accum2_s2", config=cfg(2, accum=2), world=2, steps=12),

    # bf16: ZeRO stages 1-3, overflow skips (check_grad_overflow), ranks
    dict(name="bf16_s1", config=cfg(1, bf16={}), steps=12, inject=inf_at(5)),
    dict(name="bf16_s2", config=cfg(2, bf16={}), steps=12, inject=inf_at(5)),
    dict(name="bf16_s3", config=cfg(3, bf16={}), steps=12, inject=inf_at(5)),
    dict(name="bf16_warmupdecay_skip_s2",
         config=cfg(2, bf16={}, sched={"type": "WarmupDecayLR", "params": {
             "warmup_min_lr": 0.0, "warmup_max_lr": 0.01, "warmup_num_steps": 4,
             "total_num_steps": 16}}), steps=16, inject=inf_at(3, 9, value="nan")),
    dict(name="bf16_world2_s2", config=cfg(2, bf16={}), world=2, steps=12,
         inject=inf_at(6, rank=1)),
    dict(name="bf16_world2_s3", config=cfg(3, bf16={}), world=2, steps=12),
    # 16-bit accumulation (D3): which zeroc stages each run is held to, see
    # d3_stages. "twin": the same run with grad_accum_dtype "fp32".
    dict(name="bf16_accum2_s1", config=cfg(1, accum=2, bf16={}), steps=12,
         twin="bf16_accum2_fp32acc_s1"),
    dict(name="bf16_accum2_fp32acc_s1", config=cfg(1, accum=2, bf16={},
                                                   data_types={"grad_accum_dtype": "fp32"}),
         steps=12),
    dict(name="bf16_accum2_s2", config=cfg(2, accum=2, bf16={}), steps=12,
         twin="bf16_accum2_fp32acc_s2"),
    dict(name="bf16_accum2_fp32acc_s2", config=cfg(2, accum=2, bf16={},
                                                   data_types={"grad_accum_dtype": "fp32"}),
         steps=12),
    dict(name="bf16_accum2_s3", config=cfg(3, accum=2, bf16={}), steps=12,
         twin="bf16_accum2_fp32acc_s3"),
    dict(name="bf16_accum2_fp32acc_s3", config=cfg(3, accum=2, bf16={},
                                                   data_types={"grad_accum_dtype": "fp32"}),
         steps=12),
    dict(name="fp16_accum2_s2", config=cfg(2, accum=2, fp16=FP16_NO_GROWTH), steps=12,
         twin="fp16_accum2_fp32acc_s2"),
    dict(name="fp16_accum2_fp32acc_s2", config=cfg(2, accum=2, fp16=FP16_NO_GROWTH,
                                                   data_types={"grad_accum_dtype": "fp32"}),
         steps=12),
    # Three micro-steps, where a 16-bit running sum rounds after each add
    # and a sum rounded once differs from it; two ranks, where ZeRO-1 sums
    # each rank's window before its one reduction and ZeRO-2/3 sum the
    # reductions of every micro-step (d3_key_run). "key_unset_twin": the same
    # run with grad_accum_dtype unset (DeepSpeed's default is the model
    # dtype, so the two are DeepSpeed's same run).
    dict(name="bf16_accum3_s1", config=cfg(1, accum=3, bf16={}), steps=12),
    dict(name="bf16_accum3_s2", config=cfg(2, accum=3, bf16={}), steps=12),
    dict(name="bf16_accum3_s3", config=cfg(3, accum=3, bf16={}), steps=12),
    dict(name="bf16_accum3_bf16acc_s3", config=cfg(3, accum=3, bf16={},
                                                   data_types={"grad_accum_dtype": "bf16"}),
         steps=12, key_unset_twin="bf16_accum3_s3"),
    dict(name="fp16_accum3_s1", config=cfg(1, accum=3, fp16=FP16_NO_GROWTH), steps=12),
    dict(name="fp16_accum3_s2", config=cfg(2, accum=3, fp16=FP16_NO_GROWTH), steps=12),
    dict(name="fp16_accum3_s3", config=cfg(3, accum=3, fp16=FP16_NO_GROWTH), steps=12),
    dict(name="bf16_world2_accum3_s1", config=cfg(1, accum=3, bf16={}), world=2, steps=12),
    dict(name="bf16_world2_accum3_s2", config=cfg(2, accum=3, bf16={}), world=2, steps=12),

    # fp16: overflow steps, hysteresis, growth, ranks
    dict(name="fp16_skip_s1", config=cfg(1, fp16=FP16_NO_GROWTH), steps=12,
         inject=inf_at(3, 7) + inf_at(9, value="nan")),
    dict(name="fp16_skip_s3", config=cfg(3, fp16=FP16_NO_GROWTH), steps=12,
         inject=inf_at(3, 7) + inf_at(9, value="nan")),
    dict(name="fp16_hysteresis_s2",
         config=cfg(2, fp16={"initial_scale_power": 6, "loss_scale_window": 1000,
                             "hysteresis": 2}), steps=12, inject=inf_at(2, 3, 4, 8)),
    dict(name="fp16_world2_s2", config=cfg(2, fp16=FP16_NO_GROWTH), world=2, steps=12,
         inject=inf_at(4, rank=1, value="-inf")),
    dict(name="fp16_growth_s1", config=cfg(1, fp16=FP16_GROWTH), steps=16, inject=inf_at(6),
         expect="D1", zeroc_extra={"fp16.deepspeed_unscale_order": True}),
    dict(name="fp16_growth_s3", config=cfg(3, fp16=FP16_GROWTH), steps=16, inject=inf_at(6),
         expect="D1", zeroc_extra={"fp16.deepspeed_unscale_order": True}),
    dict(name="fp16_growth_world2_s2", config=cfg(2, fp16=FP16_GROWTH), world=2, steps=16,
         inject=inf_at(6, rank=1), expect="D1",
         zeroc_extra={"fp16.deepspeed_unscale_order": True}),

    # The known differences (docs/config.md)
    dict(name="fp16_s0", config=cfg(0, fp16=FP16_NO_GROWTH), steps=8, inject=inf_at(3),
         expect="D2"),
    dict(name="bf16_s0", config=cfg(0, bf16={}), steps=8, expect="D4"),
    dict(name="bf16_unrounded_init_s2", config=cfg(2, bf16={}), steps=8, init="unrounded",
         expect="D5"),
    dict(name="fp16_unrounded_init_s1", config=cfg(1, fp16=FP16_NO_GROWTH), steps=8,
         init="unrounded", expect="D5"),
]


def accum_key(c):
    return c["config"].get("data_types", {}).get("grad_accum_dtype")


def d3_key_stages(c):
    """The zeroc stages at which zeroc, accumulating in the model dtype
    (data_types.grad_accum_dtype = the model dtype), differs from a 16-bit
    DeepSpeed run that does so too (the key unset or the model dtype).

    zeroc's 16-bit accumulation is DeepSpeed's: every micro-step's gradient
    times 1/K rounded to the model dtype, the running sum rounded after
    every add. Where the ranks' reduction falls differs by stage, in both:
    zeroc's stages 0/1 sum each rank's window and reduce it once (as
    DeepSpeed's ZeRO-1 reduces the module's accumulated .grad at the
    boundary), its stages 2/3 reduce every micro-step and sum the
    reductions (as ZeRO-2/3 do). One rank: the same everywhere; two: the
    zeroc stages of the other kind differ.
    """
    if c.get("world", 1) == 1:
        return {}
    if c["config"]["zero_optimization"]["stage"] == 1:
        return {"2": "D3", "3": "D3"}
    return {"0": "D3", "1": "D3"}


def d3_stages(c):
    """The zeroc stages a 16-bit run with accumulation is not held to (D3),
    zeroc replayed with the case's own config.

    Measured with DeepSpeed 0.19.8: DeepSpeed's ZeRO-2 and ZeRO-3 sum the
    micro-steps in the model dtype with grad_accum_dtype unset (or the model
    dtype) and in fp32 with "fp32"; its ZeRO-1 rounds the window to the
    model dtype either way (with "fp32" it runs BF16_Optimizer, which
    without immediate_grad_update takes the module's 16-bit gradient at the
    boundary). zeroc's default (unset or "fp32") sums in fp32: its stages
    0/1 round the window's mean to the working dtype once, which equals a
    16-bit running sum of two halves (accumulation 2, one rank) and nothing
    else; its stages 2/3 keep the reductions' sum in fp32. With the key set
    to the model dtype zeroc accumulates as DeepSpeed does (d3_key_stages).
    """
    K = c["config"]["gradient_accumulation_steps"]
    if case_dtype(c) == "fp32" or K == 1:
        return {}
    acc = accum_key(c)
    if acc == case_dtype(c):
        return d3_key_stages(c)
    ds_stage = c["config"]["zero_optimization"]["stage"]
    fp32_sum = acc == "fp32" and ds_stage >= 2
    if fp32_sum:  # DeepSpeed too sums in fp32: zeroc's stages 2/3
        return {"0": "D3", "1": "D3"}
    if K == 2 and c.get("world", 1) == 1:
        return {"2": "D3", "3": "D3"}
    return {s: "D3" for s in "0123"}


def d3_key_run(c):
    """For a 16-bit run with accumulation whose DeepSpeed config leaves
    grad_accum_dtype unset (DeepSpeed's default: the model dtype): the key
    zeroc is replayed with to accumulate as DeepSpeed did, and the zeroc
    stages that differ even so (d3_key_stages). None elsewhere."""
    if case_dtype(c) == "fp32" or c["config"]["gradient_accumulation_steps"] == 1 or \
            accum_key(c) is not None:
        return None
    return {"grad_accum_dtype": case_dtype(c), "zeroc_stage_expect": d3_key_stages(c)}


def case_dtype(c):
    if c["config"].get("fp16", {}).get("enabled"):
        return "fp16"
    if c["config"].get("bf16", {}).get("enabled"):
        return "bf16"
    return "fp32"


def grads_key(c):
    return "grads_s%d_k%d_w%d" % (c["steps"], c["config"]["gradient_accumulation_steps"],
                                  c.get("world", 1))


def grads_seed(c):
    # One gradient stream per shape of run; every case of that shape replays it.
    return 1000 + 97 * c["steps"] + 13 * c["config"]["gradient_accumulation_steps"] + \
        c.get("world", 1)


# ---------------------------------------------------------------------------
# One rank of one case (runs in its own process).


def rank_main(rank, case, init, gints, port, result_path):
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank),
                       "WORLD_SIZE": str(case.get("world", 1)),
                       "LOCAL_WORLD_SIZE": str(case.get("world", 1)),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    import torch
    torch.set_num_threads(1)
    import deepspeed
    from deepspeed.accelerator import get_accelerator
    from deepspeed.utils import safe_get_full_fp32_param
    from deepspeed.runtime.utils import get_global_norm_of_tensors

    dtype = case_dtype(case)
    acc = get_accelerator()
    patched = False
    if dtype == "fp16" and not acc.is_fp16_supported():
        acc.is_fp16_supported = lambda: True
        acc.supported_dtypes = lambda: [torch.float, torch.bfloat16, torch.float16]
        patched = True

    deepspeed.init_distributed(dist_backend="gloo")

    class Replay(torch.nn.Module):
        def __init__(self):
            super().__init__()
            vals = torch.from_numpy(init.copy())
            ps, off = [], 0
            for (_, shape), n in zip(PARAMS, NUMEL):
                ps.append(torch.nn.Parameter(vals[off:off + n].reshape(shape).clone()))
                off += n
            self.ps = torch.nn.ParameterList(ps)

        def forward(self, gs):
            # The loss is sum <p, G>: its gradient is G (times the loss scale
            # and 1 / gradient_accumulation_steps that DeepSpeed applies),
            # computed in fp32 and cast to the parameter dtype, exactly.
            return sum((p.float() * g).sum() for p, g in zip(self.ps, gs))

    model = Replay()
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=copy.deepcopy(case["config"]))
    params = list(engine.module.parameters())
    opt = engine.optimizer
    inner = getattr(opt, "optimizer", opt)

    def masters():
        if type(opt).__name__ == "FP16_Optimizer":
            return torch.cat([f.detach().float().reshape(-1) for f in opt.fp32_groups_flat])
        out = []
        for p in params:
            if hasattr(p, "ds_id") or hasattr(p, "_hp_mapping"):
                out.append(safe_get_full_fp32_param(p).detach().float().reshape(-1).cpu())
            else:
                out.append(p.detach().float().reshape(-1).cpu())
        return torch.cat(out)

    def loss_scale():
        if dtype != "fp16":
            return 1.0
        for attr in ("loss_scale", "cur_scale"):
            v = getattr(opt, attr, None)
            if v is not None:
                return float(v)
        return float(opt.loss_scaler.cur_scale)

    steps = case["steps"]
    K = case["config"]["gradient_accumulation_steps"]
    exps = grad_exps(steps, K, case.get("world", 1))
    inject = case.get("inject", [])
    rec = {"masters": [], "loss_scale": [], "skipped": [], "lr": [], "beta1": [],
           "grad_norm": [], "global_steps": []}
    m0 = masters().numpy()
    norm_source = None
    for t in range(steps):
        scale_before = loss_scale()
        lr_before = float(engine.get_lr()[0])
        beta1_before = float(inner.param_groups[0]["betas"][0])
        skipped_before = engine.skipped_steps
        own_norm = None
        for m in range(K):
            g = gints[t, m, rank].astype(np.float32) * np.float32(2.0 ** exps[t][m][rank])
            for inj in inject:
                if inj["step"] == t and inj["micro"] == m and inj["rank"] == rank:
                    g[inj["elem"]] = {"inf": np.inf, "-inf": -np.inf, "nan": np.nan}[inj["value"]]
            gt = torch.from_numpy(g)
            gs, off = [], 0
            for (_, shape), n in zip(PARAMS, NUMEL):
                gs.append(gt[off:off + n].reshape(shape))
                off += n
            loss = engine(gs)
            engine.backward(loss)
            if m == K - 1 and dtype == "fp32" and case["config"]["zero_optimization"]["stage"] == 0:
                # The engine does not report the norm at stage 0 in fp32
                # (clip_fp32_gradients drops it): DeepSpeed's utils on the
                # averaged gradients, before the engine clips them.
                own_norm = float(get_global_norm_of_tensors([p.grad for p in params]))
            engine.step()
        rec["masters"].append(masters().numpy())
        rec["loss_scale"].append(scale_before)
        rec["skipped"].append(bool(engine.skipped_steps != skipped_before))
        rec["lr"].append(lr_before)
        rec["beta1"].append(beta1_before)
        rec["global_steps"].append(int(engine.global_steps))
        if own_norm is not None:
            norm_source = "deepspeed.runtime.utils.get_global_norm_of_tensors before engine.step()"
            n = own_norm
        else:
            norm_source = "engine.get_global_grad_norm() after engine.step()"
            n = engine.get_global_grad_norm()
            n = None if n is None else float(n)
        if n is not None and not np.isfinite(n):
            n = None  # not finite: the step overflowed
        rec["grad_norm"].append(n)
    if rank == 0:
        rec["master0"] = m0
        rec["norm_source"] = norm_source
        rec["ds_optimizer"] = type(opt).__name__
        rec["ds_inner_optimizer"] = type(inner).__name__
        rec["fp16_capability_patched"] = patched
        np.save(result_path, rec, allow_pickle=True)
    import deepspeed.comm as dist
    dist.barrier()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_case(case, init, gints):
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as td:
        path = os.path.join(td, "rank0.npy")
        mp.spawn(rank_main, args=(case, init, gints, free_port(), path),
                 nprocs=case.get("world", 1), join=True)
        return np.load(path, allow_pickle=True).item()


# ---------------------------------------------------------------------------


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def case_meta(c):
    """What the index says of a case apart from DeepSpeed's results."""
    for k, v in (("world", 1), ("expect", "match"), ("init", "grid"), ("inject", [])):
        c.setdefault(k, v)
    K = c["config"]["gradient_accumulation_steps"]
    return {
        "name": c["name"],
        "expect": c["expect"],
        "dtype": case_dtype(c),
        "ds_stage": c["config"]["zero_optimization"]["stage"],
        "world": c["world"],
        "accum": K,
        "steps": c["steps"],
        "ds_config": c["config"],
        "zeroc_extra": c.get("zeroc_extra", {}),
        "twin": c.get("twin"),
        "key_unset_twin": c.get("key_unset_twin"),
        "zeroc_stage_expect": d3_stages(c),
        "d3_key_run": d3_key_run(c),
        "init": c["init"],
        "grads": grads_key(c) + ".i8",
        "grad_exp": grad_exps(c["steps"], K, c["world"]),
        "inject": c["inject"],
    }


# The fields of case_meta that DeepSpeed's run depends on.
DS_INPUTS = ("ds_config", "world", "accum", "steps", "init", "grads", "grad_exp", "inject")


def compare_twins(cases_out):
    """Whether DeepSpeed's run equals its fp32-accumulation twin's (it does
    not at ZeRO-2/3, which honour grad_accum_dtype; it does at ZeRO-1), and
    its run with the key unset (the model dtype is its default: it must)."""
    by_name = {c["name"]: c for c in cases_out}
    for c in cases_out:
        for field in ("twin", "key_unset_twin"):
            c.pop(field + "_bitwise_equal", None)
            if c.get(field):
                same = c["masters_sha256"] == by_name[c[field]]["masters_sha256"]
                c[field + "_bitwise_equal"] = same
                print("%s vs %s: DeepSpeed %s" % (c["name"], c[field],
                                                  "bitwise equal" if same else "differs"))


def reindex(index_path):
    with open(index_path) as f:
        index = json.load(f)
    old = {c["name"]: c for c in index["cases"]}
    out = []
    for c in CASES:
        meta = case_meta(c)
        o = old.get(c["name"])
        if o is None:
            sys.exit("%s: not in the index: run it (--only %s)" % (c["name"], c["name"]))
        for k in DS_INPUTS:
            if o[k] != meta[k]:
                sys.exit("%s: %s changed: run it (--only %s)" % (c["name"], k, c["name"]))
        o.update(meta)
        out.append(o)
    compare_twins(out)
    index["cases"] = out
    with open(index_path, "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    print("rewrote %s (%d cases)" % (index_path, len(out)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "fixtures"))
    ap.add_argument("--only", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--reindex", action="store_true",
                    help="rewrite the index's expectations (expect, zeroc_stage_expect, twin, "
                         "zeroc_extra) from CASES without running DeepSpeed; a case whose "
                         "DeepSpeed inputs changed must be rerun instead")
    ap.add_argument("--ds-sdist", default="",
                    help="the DeepSpeed sdist the environment was installed from, to record "
                         "its sha256 (the PyPI package records no git commit)")
    a = ap.parse_args()
    if a.reindex:
        return reindex(os.path.join(a.out, "index.json"))
    if os.environ.get("DS_ACCELERATOR") != "cpu":
        sys.exit("set DS_ACCELERATOR=cpu")
    import torch
    import deepspeed
    from deepspeed import git_version_info as gvi

    os.makedirs(a.out, exist_ok=True)
    if not a.only:
        for f in os.listdir(a.out):
            if f.endswith((".f32", ".i8")) or f == "index.json":
                os.remove(os.path.join(a.out, f))
    only = set(x for x in a.only.split(",") if x)
    index_path = os.path.join(a.out, "index.json")
    old, old_index = {}, {}
    if only and os.path.exists(index_path):
        with open(index_path) as f:
            old_index = json.load(f)
        old = {c["name"]: c for c in old_index["cases"]}

    inits = {k: init_values(k) for k in ("grid", "unrounded")}
    for k, v in inits.items():
        with open(os.path.join(a.out, "init_%s.f32" % k), "wb") as f:
            f.write(v.astype("<f4").tobytes())

    cases_out = []
    grads_done = {}
    blobs = {}  # sha256 of a masters file -> its name
    for c in old.values():
        blobs.setdefault(c["masters_sha256"], c["masters"])
    for c in CASES:
        case_meta(c)  # fills the defaults
        key = grads_key(c)
        K = c["config"]["gradient_accumulation_steps"]
        if key not in grads_done:
            grads_done[key] = grad_ints(c["steps"], K, c["world"], grads_seed(c))
            with open(os.path.join(a.out, key + ".i8"), "wb") as f:
                f.write(grads_done[key].tobytes())
        if only and c["name"] not in only:
            if c["name"] in old:
                cases_out.append(old[c["name"]])
            continue
        print("case %s ..." % c["name"], flush=True)
        rec = run_case(c, inits[c["init"]], grads_done[key])
        m = np.stack(rec["masters"]).astype("<f4")
        m0 = rec["master0"].astype("<f4")
        init = inits[c["init"]]
        # The initial master is stored where it is not the initial values:
        # the D5 cases (rounded to 16 bits) and DeepSpeed's stage-0 16-bit
        # path, whose construction takes an optimizer step (D2/D4). Elsewhere
        # it must be the initial values bit for bit, or the case is not a
        # replay of them.
        has0 = not np.array_equal(m0.view(np.uint32), init.view(np.uint32))
        if has0 and c["expect"] not in ("D2", "D4", "D5"):
            sys.exit("%s: DeepSpeed's initial master is not the initial values" % c["name"])
        blob = (m0.tobytes() if has0 else b"") + m.tobytes()
        # Runs that DeepSpeed took bitwise alike (stages 1 and 2, most often)
        # share one file; the index says which.
        digest = sha256(blob)
        fname = blobs.get(digest)
        if fname is None:
            fname = c["name"] + ".f32"
            blobs[digest] = fname
            with open(os.path.join(a.out, fname), "wb") as f:
                f.write(blob)
        out = case_meta(c)
        out.update({
            "masters": fname,
            "masters_has_step0": bool(has0),
            "masters_sha256": digest,
            "loss_scale": rec["loss_scale"],
            "skipped": rec["skipped"],
            "lr": rec["lr"],
            "beta1": rec["beta1"],
            "global_steps": rec["global_steps"],
            "grad_norm": rec["grad_norm"],
            "grad_norm_source": rec["norm_source"],
            "ds_optimizer": rec["ds_optimizer"],
            "ds_inner_optimizer": rec["ds_inner_optimizer"],
            "fp16_capability_patched": rec["fp16_capability_patched"],
        })
        cases_out.append(out)
        print("  %s / %s, skipped %s, scales %s" % (out["ds_optimizer"], out["ds_inner_optimizer"],
              [i for i, s in enumerate(out["skipped"]) if s], sorted(set(out["loss_scale"]))),
              flush=True)

    compare_twins(cases_out)

    ds_sdist = None
    if a.ds_sdist:
        with open(a.ds_sdist, "rb") as f:
            ds_sdist = {"file": os.path.basename(a.ds_sdist), "sha256": sha256(f.read())}
    elif only and old_index.get("deepspeed", {}).get("version") == deepspeed.__version__:
        # The cases kept were made with this version: keep what the index
        # said of where it came from.
        ds_sdist = old_index["deepspeed"].get("sdist")
    index = {
        "format_version": FORMAT_VERSION,
        "generated_by": "tests/oracle/make_fixtures.py",
        "deepspeed": {"version": deepspeed.__version__, "git_hash": gvi.git_hash,
                      "git_branch": gvi.git_branch, "sdist": ds_sdist,
                      "accelerator": "cpu", "comm_backend": "gloo",
                      "inner_optimizer_code": "FusedAdam on the CPU accelerator: "
                      "op_builder/cpu/fused_adam.py builds csrc/cpu/adam/fused_adam.cpp, which "
                      "calls ds_adam_step of csrc/adam/cpu_adam_impl.cpp (DeepSpeedCPUAdam's "
                      "kernel)"},
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "params": [{"name": n, "shape": s} for n, s in PARAMS],
        "numel": N,
        "grad_encoding": "int8 k per element, [step][micro][rank][element]; G = k * "
                         "2^grad_exp[step][micro][rank]"
                         "; then each inject entry sets one element to inf, -inf or nan",
        "masters_encoding": "little-endian float32, [step][element] after each optimizer step "
                            "(preceded by the initial master when masters_has_step0)",
        "init_files": {k: "init_%s.f32" % k for k in inits},
        "cases": cases_out,
    }
    with open(index_path, "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    print("wrote %s (%d cases)" % (index_path, len(cases_out)))


if __name__ == "__main__":
    main()
