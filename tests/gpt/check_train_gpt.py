#!/usr/bin/env python3
"""End-to-end checks of examples/gpt/train_gpt through its --json output.

  check_train_gpt.py TRAIN_GPT DATA_FILE

1. Stages 0-3 give bitwise-identical parameters (params_sha256) and losses
   at worlds 1..4 with accumulation 1, fp32 and bf16; with accumulation 4
   the losses agree within 1e-6.
2. Training a tiny model lowers the loss below the unigram entropy of the
   training bytes, computed here from the file; the validation loss ends
   below the entropy of the validation bytes, which train_gpt reports and
   this script recomputes.
3. Bad flags are refused with status 2 and a message naming the flag; --launcher env
   outside a launcher fails with status 1. The shipped DeepSpeed configs (stages
   0-3, optimizer offload) give one params_sha256.
5. The memory pre-check plans each rank's engine with the library's planner:
   the engine bytes of its --json plan line are those `zeroc estimate --model
   gpt:... --chunks per-block --device host` prints for the same configuration
   (stages 0-3, optimizer and parameter offload to NVMe, worlds 1 and 2), the
   activations are model.c's buffers, and a model no machine holds is refused
   with status 1 naming host memory and the planner, before any rank starts.
6. Validation and sampling run as evaluation passes: at stage 3 (and with the
   shards on NVMe) they change no bit of the training, log no WARN line, and
   prefetch from the second validation on.
"""
import json
import math
import os
import subprocess
import sys
from collections import Counter

exe, data, zeroc = sys.argv[1], sys.argv[2], sys.argv[3]
TINY = ["--layers", "2", "--heads", "2", "--dim", "16", "--seq", "16", "--batch", "2",
        "--eval-every", "0", "--data", data, "--json", "--launcher", "threads"]
failures = []


def run(args, expect=0):
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=300)
    if p.returncode != expect:
        raise SystemExit(f"train_gpt {' '.join(args)}: status {p.returncode}, expected "
                         f"{expect}\n{p.stderr}")
    return p


def lines(args):
    out = [json.loads(l) for l in run(args).stdout.splitlines() if l.startswith("{")]
    steps = [o for o in out if "loss" in o and "eval" not in o]
    final = [o for o in out if o.get("final")]
    assert len(final) == 1, out
    return steps, final[0]


def entropy(b):
    n = len(b)
    return -sum(c / n * math.log(c / n) for c in Counter(b).values())


# 1. stage equivalence
for dtype in ("fp32", "bf16"):
    for world in (1, 2, 3, 4):
        ref = None
        for stage in (0, 1, 2, 3):
            steps, final = lines(TINY + ["--steps", "3", "--stage", str(stage),
                                         "--world", str(world), "--dtype", dtype])
            got = (final["params_sha256"], [s["loss"] for s in steps])
            if ref is None:
                ref = got
            elif got != ref:
                failures.append(f"{dtype} world {world}: stage {stage} differs from stage 0: "
                                f"{got} vs {ref}")
        print(f"ok {dtype} world {world}: stages 0-3 identical ({ref[0][:16]}...)")
# Bytes by link on "two nodes of two" (ZC_RANKS_PER_NODE=2): MiCS S=2 keeps
# every gather inside the node, so it sends fewer bytes across nodes than
# flat stage 3; one node sends none across.
os.environ["ZC_RANKS_PER_NODE"] = "2"
cfgs = {}
for name, zo in (("flat", {}), ("mics", {"mics_shard_size": 2})):
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "zc_gpt_%s_%d.json" % (name, os.getpid()))
    with open(path, "x") as f:
        json.dump({"zero_optimization": dict(stage=3, **zo)}, f)
    try:
        _, final = lines(TINY + ["--steps", "2", "--world", "4", "--config", path])
    finally:
        os.unlink(path)
    cfgs[name] = final["comm_bytes_per_step_by_link"]
    if final["nodes"] != 2:
        failures.append(f"{name}: {final['nodes']} nodes with ZC_RANKS_PER_NODE=2")
del os.environ["ZC_RANKS_PER_NODE"]
if not (0 < cfgs["mics"]["inter_node"] < cfgs["flat"]["inter_node"]):
    failures.append(f"bytes by link: MiCS {cfgs['mics']}, flat {cfgs['flat']}")
_, one = lines(TINY + ["--steps", "1", "--world", "2", "--stage", "3"])
if one["comm_bytes_per_step_by_link"]["inter_node"] != 0 or one["nodes"] != 1:
    failures.append(f"one node: {one['comm_bytes_per_step_by_link']}")
print(f"ok bytes by link: MiCS {cfgs['mics']}, flat {cfgs['flat']}")
acc = {}
for stage in (0, 3):
    steps, final = lines(TINY + ["--steps", "3", "--stage", str(stage), "--world", "2",
                                 "--accum", "4", "--dtype", "fp32"])
    acc[stage] = [s["loss"] for s in steps]
for a, b in zip(acc[0], acc[3]):
    if abs(a - b) > 1e-6 * max(1.0, abs(a)):
        failures.append(f"accumulation 4: stage 3 loss {b} vs stage 0 {a}")
print(f"ok accumulation 4: stage 0 and 3 losses within 1e-6 ({acc[0]})")

# The shipped DeepSpeed configs: stages 0-3 and optimizer offload to the CPU
# give one hash (they differ only in how the state is sharded and placed).
cfg_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")
hashes = {}
for name in ("zero0", "zero1", "zero2", "zero3", "offload"):
    _, final = lines(TINY + ["--steps", "3", "--world", "2", "--config",
                             os.path.join(cfg_dir, f"ds_config_gpt_{name}.json")])
    hashes[name] = final["params_sha256"]
if len(set(hashes.values())) != 1:
    failures.append(f"the DeepSpeed configs disagree: {hashes}")
print(f"ok ds_config_gpt_{{zero0..3,offload}}.json give one hash")

# 2. learning: below the unigram entropy of the bytes
raw = open(data, "rb").read()
n_train = len(raw) - len(raw) // 10
h_train, h_val = entropy(raw[:n_train]), entropy(raw[n_train:])
# Small enough for a few seconds on two cores; deterministic (fixed seed), and
# it ends about 0.3 nats under both bounds.
L, C, T, V = 2, 32, 32, 256
steps, final = lines(["--layers", str(L), "--heads", "4", "--dim", str(C), "--seq", str(T),
                      "--batch", "8", "--world", "2", "--stage", "3", "--dtype", "bf16",
                      "--lr", "1e-2", "--steps", "250", "--eval-every", "0", "--data", data,
                      "--json", "--launcher", "threads"])
last = sum(s["loss"] for s in steps[-10:]) / 10
print(f"train loss (last 10 steps) {last:.4f} vs unigram entropy of the training bytes "
      f"{h_train:.4f}; val_loss {final['val_loss']:.4f} vs {h_val:.4f}")
if not last < h_train:
    failures.append(f"training loss {last} is not below the unigram entropy {h_train}")
if not final["val_loss"] < h_val:
    failures.append(f"val_loss {final['val_loss']} is not below the unigram entropy {h_val}")
if abs(final["unigram_entropy"] - h_val) > 1e-6:
    failures.append(f"reported unigram entropy {final['unigram_entropy']} != {h_val}")
# per block: 4 C^2 (qkv + proj) + 8 C^2 (MLP) weights, 9 C biases, 4 C LayerNorm
if final["num_params"] != L * (12 * C * C + 13 * C) + V * C + T * C + 2 * C:
    failures.append(f"num_params {final['num_params']}")
if not steps[0]["loss"] > 5.0:  # ln 256 = 5.55 at initialisation
    failures.append(f"first loss {steps[0]['loss']} is not near ln 256")

# 3. strict flags
for bad in (["--dim", "30", "--heads", "4"], ["--seq", "1025"], ["--steps", "1.5"],
            ["--vocab", "255"], ["--layers", " 2"], ["--dtype", "fp8"], ["--bogus"],
            ["--data"], ["--launcher", "mpi"], ["--device", "gpu"], ["--lr", "nan"]):
    p = run(bad, expect=2)
    if bad[0] not in p.stderr:
        failures.append(f"{bad}: message does not name the flag: {p.stderr!r}")
print("ok bad flags refused with status 2")

# 4. --launcher env outside a launcher: status 1, naming what is missing
env = {k: v for k, v in os.environ.items()
       if not k.startswith(("RANK", "WORLD_SIZE", "OMPI_", "PMI_", "SLURM_", "MV2_"))}
p = subprocess.run([exe, "--launcher", "env", "--steps", "1"], capture_output=True, text=True,
                   timeout=60, env=env)
if p.returncode != 1 or "RANK" not in p.stderr or "rank -1" in p.stderr:
    failures.append(f"--launcher env without a launcher: status {p.returncode}, {p.stderr!r}")
print("ok --launcher without a launcher refused")

# 5. the memory pre-check is the library's plan (zeroc estimate) plus the
# model's own memory
import shutil
import tempfile
swap = tempfile.mkdtemp(prefix="zc-gpt-plan-")
try:
    L, C, H, T, V, B = 2, 64, 4, 32, 256, 3
    shape = ["--layers", str(L), "--dim", str(C), "--heads", str(H), "--seq", str(T),
             "--vocab", str(V), "--batch", str(B)]
    for stage, off, poff, world in ((0, None, None, 1), (1, None, None, 2), (2, None, None, 2),
                                    (3, None, None, 1), (2, "nvme", None, 2),
                                    (3, "nvme", "nvme", 1), (3, "nvme", "nvme", 2)):
        zero = {"stage": stage, "stage3_param_persistence_threshold": 0}
        if off:
            zero["offload_optimizer"] = {"device": off, "nvme_path": swap}
        if poff:
            zero["offload_param"] = {"device": poff, "nvme_path": swap, "max_in_cpu": 0}
        cfg = os.path.join(swap, "ds.json")
        with open(cfg, "w") as f:
            json.dump({"train_micro_batch_size_per_gpu": B, "bf16": {"enabled": True},
                       "zero_optimization": zero}, f)
        out = run(shape + ["--config", cfg, "--world", str(world), "--steps", "1",
                           "--eval-every", "0", "--data", data, "--json",
                           "--launcher", "threads"]).stdout.splitlines()
        plan = [json.loads(l)["plan"] for l in out if l.startswith('{"plan"')]
        est = subprocess.run([zeroc, "estimate", "--model", f"gpt:{L},{C},{H},{T},{V}",
                              "--world", str(world), "--config", cfg, "--chunks", "per-block",
                              "--device", "host", "--json"], capture_output=True, text=True,
                             timeout=60)
        rows = [json.loads(l) for l in est.stdout.splitlines() if l.startswith("{")]
        what = f"stage {stage} offload {off}/{poff} world {world}"
        if len(plan) != 1 or est.returncode != 0 or len(rows) != 1:
            failures.append(f"{what}: plan lines {plan}, estimate {est.returncode} {rows} "
                            f"{est.stderr}")
            continue
        p, r = plan[0], rows[0]
        engine = {k: r["bytes"][k] for k in ("device", "pinned", "nvme")}
        engine["host"] = r["bytes"]["host"] - r["activations"]  # the CLI adds its formula
        if p["engine_per_rank"] != engine or p["ranks"] != world:
            failures.append(f"{what}: train_gpt plans {p['engine_per_rank']}, zeroc estimate "
                            f"{engine}")
        # model.c's gpt_acts_create for B sequences, in floats
        N, NC = B * T, B * T * C
        acts = NC * (16 * L + 17) + N * (4 * L + 2) + L * B * H * T * T + 2 * N * V
        if p["activations_per_rank"] != 4 * acts:
            failures.append(f"{what}: activations {p['activations_per_rank']} != {4 * acts}")
        if not p["host_peak"] >= world * (engine["host"] + engine["pinned"] + 4 * acts):
            failures.append(f"{what}: host_peak {p['host_peak']} below its parts")
    if os.listdir(swap) != ["ds.json"]:
        failures.append(f"swap files left behind: {os.listdir(swap)}")
finally:
    shutil.rmtree(swap, ignore_errors=True)
print("ok the pre-check's engine plan is zeroc estimate's, stages 0-3 and NVMe offload")
p = run(["--layers", "64", "--dim", "4096", "--heads", "32", "--seq", "64", "--stage", "0",
         "--world", "1", "--launcher", "threads"], expect=1)
if "not enough host memory" not in p.stderr or "zc_plan_memory" not in p.stderr:
    failures.append(f"a model no machine holds: {p.stderr!r}")
print("ok a model beyond host memory refused before it starts")

# 6. validation and the sample are evaluation passes (zc_pass_begin): at stage 3,
# sharded (persistence 0) and with the shards on NVMe, evaluating after every step
# and sampling at the end trains exactly as without them, and logs no WARN line
# (unmarked, every step after an evaluation found the acquire order changed).
swap = tempfile.mkdtemp(prefix="zc-gpt-eval-")
try:
    for poff in (None, "nvme"):
        zero = {"stage": 3, "stage3_param_persistence_threshold": 0,
                "stage3_prefetch_bucket_size": 4096}
        if poff:
            zero["offload_param"] = {"device": poff, "nvme_path": swap, "max_in_cpu": 0}
        cfg = os.path.join(swap, "ds.json")
        with open(cfg, "w") as f:
            json.dump({"train_micro_batch_size_per_gpu": 2, "zero_optimization": zero}, f)
        base = TINY + ["--steps", "4", "--world", "2", "--config", cfg]
        p0, p1 = run(base), run(base + ["--eval-every", "1", "--sample", "4"])
        got, evals = [], []
        for p in (p0, p1):
            out = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
            got.append(([o["loss"] for o in out if "loss" in o and "eval" not in o],
                        [o["params_sha256"] for o in out if o.get("final")]))
            evals = [o for o in out if o.get("eval")]
        what = f"stage 3 offload_param {poff}"
        if got[0] != got[1] or len(evals) != 4:
            failures.append(f"{what}: with evaluation passes {got[1]}, without {got[0]}, "
                            f"{len(evals)} evaluations")
        # The first validation records its acquire order; the later ones prefetch along
        # it: every chunk activation but the first finds its chunk gathered or read ahead.
        elif evals[0]["prefetch_hits"] != 0 or any(
                e["prefetch_misses"] != 1 or e["prefetch_hits"] < 1 for e in evals[1:]):
            failures.append(f"{what}: prefetch in the evaluation passes: "
                            f"{[(e['prefetch_hits'], e['prefetch_misses']) for e in evals]}")
        if "WARN" in p1.stderr:
            failures.append(f"{what}: WARN lines with evaluation passes: {p1.stderr!r}")
    if os.listdir(swap) != ["ds.json"]:
        failures.append(f"swap files left behind: {os.listdir(swap)}")
finally:
    shutil.rmtree(swap, ignore_errors=True)
print("ok evaluation passes at stage 3 change no bit of the training and log no WARN line")

if failures:
    print("\n".join(failures))
    sys.exit(1)
