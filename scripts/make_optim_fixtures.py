#!/usr/bin/env python3
"""Reference trajectories of the host Lion and Adagrad (src/optim/lion.h,
src/optim/adagrad.h) for tests/optim/test_ew_fixtures.c.

    python3 scripts/make_optim_fixtures.py [OUT_DIR]   (default tests/optim/fixtures)

Needs torch (CPU build) and numpy. Writes lion.json and adagrad.json: for
each case the hyper-parameters, the initial fp32 parameters and state, five
steps of fp32 gradients, and after each step the parameters and state the
reference computes in float64. The tests run zeroc's fp32 kernels from the
same inputs and compare step by step. Nothing here calls zeroc: the values
come from torch and from the published update rules.

  Adagrad, numerator "decayed": torch.optim.Adagrad itself, on float64
    tensors (lr, lr_decay, weight_decay, initial_accumulator_value, eps).
    That is DeepSpeed's Adagrad without optimizer offload
    (deepspeed/runtime/engine.py builds torch.optim.Adagrad then).
  Adagrad, numerator "raw": DeepSpeedCPUAdagrad's rule, which torch does not
    offer: the L2 term grad + wd * param enters the accumulator, the update
    divides the gradient without it (csrc/adagrad/cpu_adagrad.cpp Step_1),
    written below in float64 torch operations. With weight_decay 0 it is
    torch.optim.Adagrad, and the script checks that it is.
  In both, where weight decay is on, a gradient whose sum with the L2 term
    wd * p would nearly cancel (|g + wd p| < |g| / 4 + |wd p| / 4, p the
    reference's parameter at that step) is drawn with the other sign: the
    cancellation's fp32 rounding is of the terms, not of the small result,
    and the tests hold every value to 1e-6 of the reference's magnitudes.
  Lion: torch has no Lion; the paper's rule (Chen et al. 2023, Algorithm 2)
    in float64: c = b1 m + (1 - b1) g, p -= lr (sign(c) + wd p),
    m = b2 m + (1 - b2) g. The draws keep every |c| far from 0 relative to
    its terms, so fp32 rounding cannot flip a sign and the sign(0) rules
    (which differ between the paper and DeepSpeed) are not involved; the
    tests check those on chosen values.
"""
import json
import os
import sys

import numpy as np
import torch

N = 203     # a few hundred elements, not a multiple of 8 or 16 (tails)
STEPS = 5


def f32(a):
    """Values exactly representable in fp32, as float64."""
    return np.asarray(a, dtype=np.float32).astype(np.float64)


def draw(rng, n):
    """Parameters in [-2, 2] and gradients of magnitude in [0.05, 1]: no
    gradient near 0, so Lion's first c = (1 - b1) g is far from 0."""
    p0 = f32(rng.uniform(-2.0, 2.0, n))
    g = [f32(rng.choice([-1.0, 1.0], n) * rng.uniform(0.05, 1.0, n)) for _ in range(STEPS)]
    return p0, g


def lists(a):
    return [float(x) for x in a]


def lion_case(name, seed, lr, betas, wd):
    # Draw again until every c is far from 0 relative to its two terms.
    for attempt in range(100):
        rng = np.random.default_rng(seed + attempt)
        p0, grads = draw(rng, N)
        p, m = p0.copy(), np.zeros(N)
        ps, ms, margin = [], [], np.inf
        for g in grads:
            t1, t2 = betas[0] * m, (1 - betas[0]) * g
            c = t1 + t2
            margin = min(margin, float(np.min(np.abs(c) / (np.abs(t1) + np.abs(t2)))))
            p = p - lr * (np.sign(c) + wd * p)
            m = betas[1] * m + (1 - betas[1]) * g
            ps.append(lists(p))
            ms.append(lists(m))
        if margin > 1e-3:
            break
    else:
        raise SystemExit(f"{name}: no draw keeps c away from 0")
    return {
        "name": name, "reference": "Lion paper's rule in float64 (numpy)",
        "lr": lr, "beta1": betas[0], "beta2": betas[1], "weight_decay": wd,
        "n": N, "steps": STEPS, "c_margin": margin,
        "master0": lists(p0), "state0": [0.0] * N, "grads": [lists(g) for g in grads],
        "master": ps, "state": ms,
    }


def away_from_l2(g, p, wd):
    """g, with the sign flipped where g + wd p would nearly cancel."""
    if wd == 0.0:
        return g
    near = np.abs(g + wd * p) < 0.25 * (np.abs(g) + np.abs(wd * p))
    return np.where(near, -g, g)


def adagrad_torch(p0, grads, lr, eps, wd, lr_decay, init_acc):
    """torch.optim.Adagrad's trajectory; grads[t] is adjusted (away_from_l2)
    against the parameters before step t, in place."""
    p = torch.nn.Parameter(torch.tensor(p0, dtype=torch.float64))
    opt = torch.optim.Adagrad([p], lr=lr, lr_decay=lr_decay, weight_decay=wd,
                              initial_accumulator_value=init_acc, eps=eps, foreach=False)
    ps, ss = [], []
    for t in range(len(grads)):
        grads[t] = g = away_from_l2(grads[t], p.detach().numpy(), wd)
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
        ps.append(lists(p.detach().numpy()))
        ss.append(lists(opt.state[p]["sum"].numpy()))
    return ps, ss


def adagrad_ds(p0, grads, lr, eps, wd, init_acc):
    """DeepSpeedCPUAdagrad's rule in float64 (cpu_adagrad.cpp Step_1); grads
    adjusted in place as adagrad_torch does."""
    p = torch.tensor(p0, dtype=torch.float64)
    s = torch.full_like(p, init_acc)
    ps, ss = [], []
    for t in range(len(grads)):
        grads[t] = away_from_l2(grads[t], p.numpy(), wd)
        g = torch.tensor(grads[t], dtype=torch.float64)
        gd = g + wd * p if wd > 0 else g
        s = s + gd * gd
        p = p + (-lr) * (g / (s.sqrt() + eps))
        ps.append(lists(p.numpy()))
        ss.append(lists(s.numpy()))
    return ps, ss


def adagrad_case(name, seed, numerator, lr, eps, wd, lr_decay=0.0, init_acc=0.0):
    rng = np.random.default_rng(seed)
    p0, grads = draw(rng, N)
    if numerator == "decayed":
        ps, ss = adagrad_torch(p0, grads, lr, eps, wd, lr_decay, init_acc)
        ref = f"torch.optim.Adagrad {torch.__version__} on float64 tensors"
    else:
        assert lr_decay == 0.0, "DeepSpeedCPUAdagrad has no lr_decay"
        ps, ss = adagrad_ds(p0, grads, lr, eps, wd, init_acc)
        ref = "DeepSpeedCPUAdagrad's rule (cpu_adagrad.cpp) in float64 torch operations"
        if wd == 0.0:  # the same formula as torch's then
            tp, ts = adagrad_torch(p0, list(grads), lr, eps, wd, 0.0, init_acc)
            assert np.allclose(tp, ps, rtol=1e-15, atol=0) and np.allclose(ts, ss, rtol=1e-15)
    return {
        "name": name, "reference": ref, "numerator": numerator,
        "lr": lr, "eps": eps, "weight_decay": wd, "lr_decay": lr_decay,
        "initial_accumulator_value": init_acc, "n": N, "steps": STEPS,
        "master0": lists(p0), "state0": [init_acc] * N, "grads": [lists(g) for g in grads],
        "master": ps, "state": ss,
    }


def write(path, cases):
    doc = {"generator": "scripts/make_optim_fixtures.py", "torch": torch.__version__,
           "numpy": np.__version__, "cases": cases}
    with open(path, "w") as f:
        json.dump(doc, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"{path}: {len(cases)} cases")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "optim", "fixtures")
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "lion.json"), [
        lion_case("lion_defaults", 101, 1e-3, (0.9, 0.999), 0.0),
        lion_case("lion_decay", 202, 3e-4, (0.9, 0.99), 0.1),
        lion_case("lion_large_decay", 303, 1e-2, (0.95, 0.98), 1.0),
    ])
    write(os.path.join(out, "adagrad.json"), [
        adagrad_case("adagrad_defaults", 11, "raw", 1e-2, 1e-10, 0.0),
        adagrad_case("adagrad_ds_decay", 12, "raw", 1e-2, 1e-10, 0.1),
        adagrad_case("adagrad_torch_decay", 13, "decayed", 1e-2, 1e-10, 0.1),
        adagrad_case("adagrad_torch_initial_acc", 14, "decayed", 5e-2, 1e-8, 0.0, 0.0, 0.1),
        adagrad_case("adagrad_torch_lr_decay", 15, "decayed", 1e-2, 1e-10, 0.01, 0.5, 0.0),
    ])


if __name__ == "__main__":
    main()
