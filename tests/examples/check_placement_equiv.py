#!/usr/bin/env python3
"""train_mlp and train_gpt under zero_optimization.max_memory: every mix of
placements trains bitwise like the explicit configuration without offload
(docs/placement.md).

For fp32, bf16 and fp16 and worlds 1-4, each example trains at stage 3
without offload (the reference; at accumulation 1 the master weights are the
same at every stage) and then with budgets that force:
  - everything on the device (ample budgets);
  - the optimizer state split over device, pinned host and NVMe;
  - the stage-3 parameter shards split over device, pinned host and NVMe;
  - "stage": "auto" under device budgets of exactly what each stage needs
    without offload, taking the lowest stage that fits (train_gpt, an
    8-block model with a small live window: stage 1 needs more than 2, 2
    more than 3 from 3 ranks on, so every stage is chosen; train_mlp's pools
    outweigh what its 4 layers shard, so it takes stage 1).
Each run: params_sha256 equal to the reference, the placement reported
(zc_stats) the one asked for, the device and pinned high-water marks
within the device and cpu budgets, no swap file left.

The budgets are searched on each example's own placement: train_gpt's with
`zeroc estimate --max-memory` (the build's planner on its layout), train_mlp's
with one-step runs (its placement in --json).

Usage: check_placement_equiv.py TRAIN_MLP TRAIN_GPT ZEROC [--worlds W,...]

--worlds: the worlds to run (default 1,2,3,4; each in 1-4). The sanitizer
build runs 1,2,3: W = 3 is the first where stage 3 needs less than stage 2,
so every stage is still chosen, and W = 4's extra thread is the slowest part
of the run under the sanitizers.
"""
import json
import os
import subprocess
import sys
import tempfile

failures = []
BIG = 1 << 40
KINDS = ("device", "pinned", "nvme")
GPT = ["--layers", "8", "--dim", "64", "--heads", "4", "--seq", "64", "--vocab", "256"]
GPT_MODEL = "gpt:8,64,4,64,256"
# train_gpt's stage 3 live window: wte + wpe and two blocks, so that stage 3
# needs less device memory than stage 2 (the default window holds them all).
LIVE = 1 << 17
# train_gpt's reduce_bucket_size: about one block (a block of dim 64 holds
# 49,984 elements), so that a set of stage 2's gradient pool holds one block
# and stage 2 needs less than stage 1. With the default bucket the whole
# model's gradients fit in one, stage 2's pool holds them all (one reduction
# per step, as DeepSpeed with a bucket that large) and stage 2 needs more
# than stage 1: "auto" would never take it.
BUCKET = 1 << 16


def fail(name, msg):
    failures.append(name)
    print("FAIL %s: %s" % (name, msg), flush=True)


def final(stdout):
    for ln in stdout.splitlines():
        try:
            j = json.loads(ln)
        except ValueError:
            continue
        if j.get("final"):
            return j
    return None


class Example:
    def __init__(self, name, exe, tmp, swap):
        self.name, self.exe, self.tmp, self.swap = name, exe, tmp, swap

    def config(self, zero):
        micro = 2 if self.name == "gpt" else 32
        if self.name == "gpt":
            zero = dict(zero, reduce_bucket_size=BUCKET)
        return {"train_micro_batch_size_per_gpu": micro, "zero_optimization": zero}

    def run(self, cfg, world, dtype, steps=2):
        path = os.path.join(self.tmp, "cfg.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        argv = [self.exe, "--config", path, "--steps", str(steps), "--world", str(world),
                "--dtype", dtype, "--json", "--launcher", "threads"]
        if self.name == "gpt":
            argv += GPT + ["--eval-every", "0"]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        j = final(r.stdout) if r.returncode == 0 else None
        return j, r.stderr[-1500:]

    def peaks(self, j):
        return j["peak_bytes"] if self.name == "gpt" else j["peak_bytes_by_kind"]


def placed(place):
    return {k: v for k, v in zip(KINDS, place)}


def offload_zero(swap, stage=3):
    return {"stage": stage, "stage3_param_persistence_threshold": 0,
            "stage3_max_live_parameters": LIVE,
            "offload_optimizer": {"device": "auto", "nvme_path": swap},
            "offload_param": {"device": "auto", "nvme_path": swap}}


def gpt_probe(z, ex, world, dtype):
    """The placement train_gpt's build would choose, from zeroc estimate."""
    def probe(budgets):
        cfg = ex.config(dict(offload_zero(ex.swap), max_memory=budgets))
        path = os.path.join(ex.tmp, "est.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        spec = ",".join("%s=%d" % kv for kv in budgets.items())
        r = subprocess.run([z, "estimate", "--model", GPT_MODEL, "--chunks", "per-block",
                            "--device", "host", "--dtype", dtype, "--world", str(world),
                            "--micro-batch", "2", "--config", path, "--json",
                            "--max-memory", spec], capture_output=True, text=True, timeout=60)
        rows = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
        if not rows or not rows[0].get("fits"):
            return None
        p = rows[0]["placement"]
        names = ("device", "pinned host", "NVMe")
        return {"device_used": rows[0]["budgets"]["device"]["used"],
                "optimizer": [p["optimizer"][k]["chunks"] for k in names],
                "params": [p["parameters"][k]["chunks"] for k in names]}
    return probe


def mlp_probe(ex, world, dtype):
    """The placement train_mlp's build would choose: its --plan line
    (zc_plan_memory on its tensors)."""
    def probe(budgets):
        path = os.path.join(ex.tmp, "plan.json")
        with open(path, "w") as f:
            json.dump(ex.config(dict(offload_zero(ex.swap), max_memory=budgets)), f)
        r = subprocess.run([ex.exe, "--config", path, "--world", str(world), "--dtype", dtype,
                            "--plan"], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            return None
        p = json.loads(r.stdout)["plan"]
        return {"device_used": p["bytes_by_kind"]["device"],
                "optimizer": p["placement"]["optimizer"], "params": p["placement"]["params"]}
    return probe


def search(probe, what, world):
    """Budgets under which `what` (optimizer or params) lands on all three
    kinds. The optimizer: device budgets from 85% of the all-device plan
    down, each with the cpu budget bisected for the largest that sends some
    state to NVMe, kept when some is still pinned. Parameter shards leave the
    device only after all optimizer state has, and go to NVMe only when the
    pinned memory saved pays for their swap buffers, so only a narrow band of
    budgets splits them: a grid over it (device 36-20%, cpu 22-8% of the
    all-device plan, 2% steps)."""
    full = probe({"device": BIG, "cpu": BIG, "nvme": BIG})
    if not full:
        return None
    dall, n = full["device_used"], sum(full[what])
    if what == "params":
        for d in range(36, 19, -2):
            for c in range(22, 7, -2):
                b = {"device": dall * d // 100, "cpu": dall * c // 100, "nvme": BIG}
                got = probe(b)
                if got and all(k > 0 for k in got[what]):
                    return b, got
        return None
    for d in range(85, 0, -5):
        dev = dall * d // 100
        top = probe({"device": dev, "cpu": BIG, "nvme": BIG})
        if not top or not 0 < top[what][0] < n:
            continue
        lo, hi = 0, dall  # some on NVMe (or nothing fits) at lo, none at hi
        if (probe({"device": dev, "cpu": hi, "nvme": BIG}) or {what: [0, 0, 1]})[what][2]:
            continue
        while hi - lo > 256:
            mid = (lo + hi) // 2
            got = probe({"device": dev, "cpu": mid, "nvme": BIG})
            if got is None or got[what][2] > 0:
                lo = mid
            else:
                hi = mid
        b = {"device": dev, "cpu": lo, "nvme": BIG}
        got = probe(b)
        if got and all(k > 0 for k in got[what]):
            return b, got
    return None


def check_run(ex, name, got, ref, budgets, want=None):
    if got["params_sha256"] != ref:
        fail(name, "params_sha256 %s, without budgets %s" % (got["params_sha256"], ref))
    if want:
        for what, place in want.items():
            if got["placement"][what] != place:
                fail(name, "%s placement %r, planned %r" % (what, got["placement"][what],
                                                             place))
    pk = ex.peaks(got)
    if pk["device"] > budgets.get("device", 0) or pk["pinned"] > budgets.get("cpu", 0):
        fail(name, "peaks %r over budgets %r" % (pk, budgets))
    if os.listdir(ex.swap):
        fail(name, "swap files left: %r" % os.listdir(ex.swap))


def stage_needs(ex, z, world, dtype):
    """Device bytes of stages 1-3 without offload on this example, planned
    (train_gpt: zeroc estimate on its layout; train_mlp: its --plan)."""
    needs = {}
    for st in (1, 2, 3):
        zero = {"stage": st, "stage3_param_persistence_threshold": 0,
                "stage3_max_live_parameters": LIVE}
        path = os.path.join(ex.tmp, "need.json")
        with open(path, "w") as f:
            json.dump(ex.config(zero), f)
        if ex.name == "gpt":
            argv = [z, "estimate", "--model", GPT_MODEL, "--chunks", "per-block", "--device",
                    "host", "--dtype", dtype, "--world", str(world), "--micro-batch", "2",
                    "--config", path, "--json"]
        else:
            argv = [ex.exe, "--config", path, "--world", str(world), "--dtype", dtype, "--plan"]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        rows = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
        if r.returncode != 0 or len(rows) != 1:
            fail("%s stage %d W%d %s" % (ex.name, st, world, dtype), r.stderr[-1500:])
            return None
        row = rows[0]
        needs[st] = row["bytes"]["device"] if ex.name == "gpt" else \
            row["plan"]["bytes_by_kind"]["device"]
    return needs


def check_example(ex, z, chosen, worlds):
    for world in worlds:
        for dtype in ("fp32", "bf16", "fp16"):
            tag = "%s W%d %s" % (ex.name, world, dtype)
            ref_j, err = ex.run(ex.config({"stage": 3, "stage3_param_persistence_threshold": 0,
                                           "stage3_max_live_parameters": LIVE}), world, dtype)
            if not ref_j:
                fail(tag + " reference", err)
                continue
            ref = ref_j["params_sha256"]
            probe = gpt_probe(z, ex, world, dtype) if ex.name == "gpt" else \
                mlp_probe(ex, world, dtype)
            # Everything on the device.
            b = {"device": BIG, "cpu": BIG, "nvme": BIG}
            got, err = ex.run(ex.config(dict(offload_zero(ex.swap), max_memory=b)), world,
                              dtype)
            if not got:
                fail(tag + " all device", err)
            else:
                n = got["placement"]["optimizer"]
                check_run(ex, tag + " all device", got, ref, b,
                          {"optimizer": [sum(n), 0, 0],
                           "params": [sum(got["placement"]["params"]), 0, 0]})
            # Optimizer state, then parameter shards, over three kinds (the
            # latter where budgets can split them; required of train_gpt once).
            for what in ("optimizer", "params"):
                found = search(probe, what, world)
                name = "%s %s over three kinds" % (tag, what)
                if not found:
                    if what == "optimizer":
                        fail(name, "no budgets found")
                    continue
                b, plan = found
                chosen.add((ex.name, what))
                if what == "params":
                    print("%s: %r" % (name, plan["params"]), flush=True)
                got, err = ex.run(ex.config(dict(offload_zero(ex.swap), max_memory=b)),
                                  world, dtype)
                if not got:
                    fail(name, err)
                    continue
                check_run(ex, name, got, ref, b,
                          {"optimizer": plan["optimizer"], "params": plan["params"]})
            # "stage": "auto" at each stage's own need: the lowest stage
            # whose need fits is taken.
            needs = stage_needs(ex, z, world, dtype)
            if not needs:
                continue
            ran = set()
            for st in (1, 2, 3):
                b = {"device": needs[st]}
                want = min(s for s in (1, 2, 3) if needs[s] <= needs[st])
                if want in ran:
                    continue  # the same choice at a larger budget: nothing new
                ran.add(want)
                zero = {"stage": "auto", "stage3_param_persistence_threshold": 0,
                        "stage3_max_live_parameters": LIVE, "max_memory": b}
                got, err = ex.run(ex.config(zero), world, dtype)
                name = "%s stage auto at stage %d's need" % (tag, st)
                if not got:
                    fail(name, err)
                    continue
                if got["stage"] != want:
                    fail(name, "took stage %r, want %d (needs %r)" % (got["stage"], want, needs))
                chosen.add((ex.name, got["stage"]))
                check_run(ex, name, got, ref, b)


def main():
    if len(sys.argv) not in (4, 6) or (len(sys.argv) == 6 and sys.argv[4] != "--worlds"):
        print("usage: check_placement_equiv.py TRAIN_MLP TRAIN_GPT ZEROC [--worlds W,...]",
              file=sys.stderr)
        return 2
    mlp, gpt, z = sys.argv[1], sys.argv[2], sys.argv[3]
    worlds = (1, 2, 3, 4)
    if len(sys.argv) == 6:
        try:
            worlds = tuple(int(w) for w in sys.argv[5].split(","))
        except ValueError:
            worlds = ()
        if not worlds or any(w < 1 or w > 4 for w in worlds) or len(set(worlds)) != len(worlds):
            print("--worlds '%s': expected distinct worlds in 1-4, comma separated"
                  % sys.argv[5], file=sys.stderr)
            return 2
    chosen = set()
    with tempfile.TemporaryDirectory(prefix="zc-place-equiv-") as tmp:
        swap = os.path.join(tmp, "swap")
        os.mkdir(swap)
        check_example(Example("mlp", mlp, tmp, swap), z, chosen, worlds)
        check_example(Example("gpt", gpt, tmp, swap), z, chosen, worlds)
    for st in (1, 2, 3):
        if ("gpt", st) not in chosen:
            fail("gpt stage auto", "stage %d never chosen (%r)" % (st, sorted(chosen, key=str)))
    if ("gpt", "params") not in chosen:
        fail("gpt params", "no budgets split the parameter shards three ways")
    print("reached: %s" % sorted(chosen, key=str))
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("placement equivalence checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
