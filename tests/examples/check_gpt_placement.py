#!/usr/bin/env python3
"""train_gpt under zero_optimization.max_memory (docs/placement.md).

The same model and data trained with budgets and "auto" placement give the
same params_sha256 as without: stage 3 with budgets that split the
optimizer state over device, pinned host and NVMe, for fp32 and bf16 and
worlds 2 and 4; and "stage": "auto" under a device budget that every stage
holds (it takes stage 1). The library's peak device, pinned and NVMe bytes
stay within the device, cpu and nvme budgets (on the host path the engine's
buffers are reported as device memory, its device-side bookkeeping planned;
the pageable host bookkeeping is not budgeted).

The budgets are found with `zeroc estimate --max-memory` on the same model
(the planner the build uses), and the build must place as it said.

Usage: check_gpt_placement.py TRAIN_GPT ZEROC
"""
import json
import os
import subprocess
import sys
import tempfile

failures = []


def fail(name, msg):
    failures.append(name)
    print("FAIL %s: %s" % (name, msg), flush=True)


def run(exe, cfg, world, dtype, tmp):
    path = os.path.join(tmp, "cfg.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    r = subprocess.run([exe, "--config", path, "--steps", "4", "--world", str(world),
                        "--dtype", dtype, "--eval-every", "0", "--json", "--launcher",
                        "threads"], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return None, r.stderr[-2000:]
    for ln in r.stdout.splitlines():
        try:
            j = json.loads(ln)
        except ValueError:
            continue
        if j.get("final"):
            return j, ""
    return None, "no final line"


def estimate(z, cfg, world, dtype, budgets, tmp):
    path = os.path.join(tmp, "est.json")
    cfg = json.loads(json.dumps(cfg))
    cfg["zero_optimization"]["max_memory"] = budgets
    with open(path, "w") as f:
        json.dump(cfg, f)
    spec = ",".join("%s=%d" % kv for kv in budgets.items())
    r = subprocess.run([z, "estimate", "--model", "gpt:2,64,4,64,256", "--chunks",
                        "per-block", "--device", "host", "--dtype", dtype, "--world",
                        str(world), "--config", path, "--json", "--max-memory", spec],
                       capture_output=True, text=True, timeout=120)
    rows = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
    return rows[0] if rows and rows[0].get("fits") else None


def three_way(z, cfg, world, dtype, tmp):
    """Budgets under which the optimizer state lands on all three kinds."""
    big = 1 << 40
    row = estimate(z, cfg, world, dtype, {"device": big, "cpu": big, "nvme": big}, tmp)
    dall = row["budgets"]["device"]["used"]
    for d in range(90, 0, -5):
        dev = dall * d // 100
        row = estimate(z, cfg, world, dtype, {"device": dev, "cpu": big, "nvme": big}, tmp)
        if not row:
            continue
        cpu_all = row["budgets"]["cpu"]["used"]
        for c in range(95, 0, -5):
            b = {"device": dev, "cpu": cpu_all * c // 100, "nvme": big}
            row = estimate(z, cfg, world, dtype, b, tmp)
            if row and all(row["placement"]["optimizer"][k]["chunks"] > 0
                           for k in ("device", "pinned host", "NVMe")):
                return b, row
    return None, None


def main():
    exe, z = sys.argv[1], sys.argv[2]
    base = {"train_micro_batch_size_per_gpu": 4}
    with tempfile.TemporaryDirectory(prefix="zc-gpt-place-") as tmp:
        swap = os.path.join(tmp, "swap")
        os.mkdir(swap)
        for world in (2, 4):
            for dtype in ("fp32", "bf16"):
                ref_cfg = dict(base, zero_optimization={
                    "stage": 3, "stage3_param_persistence_threshold": 0})
                ref, err = run(exe, ref_cfg, world, dtype, tmp)
                if not ref:
                    fail("ref %d %s" % (world, dtype), err)
                    continue
                mm_cfg = dict(base, zero_optimization={
                    "stage": 3, "stage3_param_persistence_threshold": 0,
                    "offload_optimizer": {"device": "auto", "nvme_path": swap},
                    "offload_param": {"device": "auto"}})
                b, plan = three_way(z, mm_cfg, world, dtype, tmp)
                if not b:
                    fail("budgets %d %s" % (world, dtype), "no three-way budgets found")
                    continue
                mm_cfg["zero_optimization"]["max_memory"] = b
                dev, pinned, nvme = b["device"], b["cpu"], b["nvme"]
                got, err = run(exe, mm_cfg, world, dtype, tmp)
                name = "budgets %d %s" % (world, dtype)
                if not got:
                    fail(name, err)
                    continue
                if got["params_sha256"] != ref["params_sha256"]:
                    fail(name, "params_sha256 %s, without budgets %s"
                         % (got["params_sha256"], ref["params_sha256"]))
                pk = got["peak_bytes"]
                if pk["pinned"] > pinned or pk["nvme"] > nvme or pk["nvme"] == 0 or \
                        pk["pinned"] == 0 or not 0 < pk["device"] <= dev:
                    fail(name, "peaks %r: want device in (0, %d], pinned in (0, %d], "
                         "nvme in (0, %d]" % (pk, dev, pinned, nvme))
                if os.listdir(swap):
                    fail(name, "swap files left: %r" % os.listdir(swap))
                auto_cfg = dict(base, zero_optimization={
                    "stage": "auto", "max_memory": {"device": "64MiB"}})
                got, err = run(exe, auto_cfg, world, dtype, tmp)
                name = "stage auto %d %s" % (world, dtype)
                if not got:
                    fail(name, err)
                    continue
                if got["stage"] != 1 or got["params_sha256"] != ref["params_sha256"]:
                    fail(name, "stage %r sha %s, want 1 and %s"
                         % (got["stage"], got["params_sha256"], ref["params_sha256"]))
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("train_gpt placement checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
