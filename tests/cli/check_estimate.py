#!/usr/bin/env python3
"""`zeroc estimate` as a user runs it (issue 13, item 1).

Checks: strict flags (exit 2, the message names the flag, the value and the
range); --json lines are valid JSON with every field; the bytes of a plan
equal the engine's layout rules computed here independently (chunks of 2^24
elements padded to world x 64, per-rank shards, the two gradient buffers and
the staging slot of the reserve, 256-byte pool slack); DeepSpeed's figures;
GPT-2 small's parameter count and activation formula (docs/estimate.md);
--config narrows the table to the file's configuration.

Usage: check_estimate.py --zeroc PATH
Exits 0 when every check passes, 1 after printing every failure.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

failures = []


def fail(name, msg):
    failures.append(name)
    print("FAIL %s: %s" % (name, msg), flush=True)


def run(z, *args):
    return subprocess.run([z, "estimate"] + list(args), capture_output=True, text=True,
                          timeout=120)


def expect_usage(z, name, args, *words):
    r = run(z, *args)
    if r.returncode != 2:
        fail(name, "exit %r, want 2 (stderr %r)" % (r.returncode, r.stderr))
        return
    for w in words:
        if w not in r.stderr:
            fail(name, "message %r lacks %r" % (r.stderr, w))


def lines(z, *args):
    r = run(z, *args)
    if r.returncode != 0:
        fail("run " + " ".join(args), "exit %r: %s" % (r.returncode, r.stderr))
        return []
    out = []
    for ln in r.stdout.splitlines():
        try:
            out.append(json.loads(ln))
        except ValueError as e:
            fail("json", "%r: %s" % (ln, e))
    return out


def up(v, a):
    return (v + a - 1) // a * a


def plan_stage2(P, W, pesz):
    """Stage 2, no offload, accumulation 1, on a device: the engine's rules."""
    cap = 1 << 24
    tensors = [cap] * (P // cap) + ([P % cap] if P % cap else [])
    padded = [up(t, W * 64) for t in tensors]
    S = sum(padded)
    shard = S // W
    big = max(padded)
    params = S * pesz
    grads = shard * 4
    opt = shard * 12
    pools = (2 * up(big * pesz, 256) + 256) + (up(big * 4, 256) + 256)
    return params + grads + opt + pools + device_bookkeeping(padded, W)


def device_bookkeeping(padded, W):
    """agree.c's status records (1 KiB, a send record and one per rank) and
    step.c's norm partials (a double per chunk, at least 3, send and one per
    rank) and sumsq scratch (a double per 32 blocks of 4096 of the largest
    shard, at least one)."""
    groups = max(1, max(up(up(p // W, 4096) // 4096, 32) // 32 for p in padded))
    return 1024 * (W + 1) + 8 * max(len(padded), 3) * (W + 1) + 8 * groups


def check_max_memory(z):
    """--max-memory (issue 19): strict flags, and the placement of P = 4 x 2^24
    parameters at stage 2 on W ranks against plan_stage2: a device budget of
    exactly the no-offload plan keeps every chunk on the device; one byte less
    moves exactly one chunk's optimizer state (the last one, 2^24 / W
    elements) to pinned memory, as moving any one frees 16 bytes an element;
    no cpu and no device room refuses naming the device budget."""
    expect_usage(z, "mm kind", ["--params", "10", "--world", "1", "--max-memory", "gpu=1GiB"],
                 "device, cpu, nvme")
    expect_usage(z, "mm size", ["--params", "10", "--world", "1", "--max-memory",
                                "device=12XB"], "zero_optimization.max_memory.device", "'12XB'")
    expect_usage(z, "mm twice", ["--params", "10", "--world", "1", "--max-memory",
                                 "cpu=1GiB,cpu=2GiB"], "each once")
    expect_usage(z, "mm nvme path", ["--params", "10", "--world", "1", "--max-memory",
                                     "nvme=1TiB"], "--nvme-path")
    expect_usage(z, "nvme path alone", ["--params", "10", "--world", "1", "--nvme-path", "/x"],
                 "--max-memory")
    cap, W = 1 << 24, 2
    P = 4 * cap
    total = plan_stage2(P, W, 2)
    for budget, pinned in ((total, 0), (total - 1, 1)):
        rows = lines(z, "--params", str(P), "--world", str(W), "--json", "--max-memory",
                     "device=%d,cpu=64GiB" % budget)
        st2 = [r for r in rows if r.get("stage") == 2]
        if len(rows) != 3 or len(st2) != 1:
            fail("mm rows", "%d lines, want 3 (stages 1-3)" % len(rows))
            continue
        r = st2[0]
        pl = r["placement"]["optimizer"]
        if not r["fits"] or pl["pinned host"]["chunks"] != pinned or \
                pl["device"]["chunks"] != 4 - pinned or r["budgets"]["device"]["used"] > budget:
            fail("mm placement %d" % budget, "%r" % r)
        if pinned and (pl["pinned host"]["ranges"] != "3" or
                       pl["pinned host"]["elements"] != cap // W):
            fail("mm last chunk", "%r" % pl)
        if r["budgets"]["device"]["budget"] != budget or \
                r["explicit_config"]["exact"]["zero_optimization"]["max_memory"]["device"] != budget:
            fail("mm budgets", "%r" % r)
    r = run(z, "--params", str(P), "--world", str(W), "--max-memory", "device=1MiB")
    if r.returncode != 1 or "zero_optimization.max_memory.device" not in r.stdout or \
            "short" not in r.stdout:
        fail("mm refusal", "exit %r, stdout %r" % (r.returncode, r.stdout))


def check_hybrid(z):
    """--ranks-per-node / --mics-shard-size / --hpz-partition-size: the hybrid
    rows beside flat. MiCS over groups of S of W ranks holds what flat sharding
    over S ranks holds (stages 2-3; stage 1 adds the fp32 gradient shard the
    replicas all-reduce), and sends, per rank and step, with n the shard:
    18n bytes inside the node (3 peers; 2 gathers and a reduce-scatter of
    bf16) and 4n across (the fp32 all-reduce with the replica); flat over 8
    ranks on 2 nodes of 4 sends 18n' inside and 24n' across. hpZ over 4 adds
    padded/4 bf16 elements and sends 24n' inside, 16n' across."""
    expect_usage(z, "mics divides", ["--params", "10", "--world", "8", "--mics-shard-size", "3"],
                 "--mics-shard-size 3", "--world 8")
    expect_usage(z, "hpz divides", ["--params", "10", "--world", "8",
                                    "--hpz-partition-size", "3"], "--hpz-partition-size 3")
    expect_usage(z, "hier alone", ["--params", "10", "--world", "8", "--mics-hierarchical"],
                 "--mics-hierarchical")
    expect_usage(z, "hier one node", ["--params", "10", "--world", "8", "--ranks-per-node", "4",
                                      "--mics-shard-size", "4", "--mics-hierarchical"],
                 "--mics-hierarchical")
    expect_usage(z, "rpn twice", ["--params", "10", "--world", "8", "--ranks-per-node", "4",
                                  "--gpus-per-node", "2"], "--gpus-per-node 2")
    mics = lines(z, "--params", "1e9", "--world", "8", "--ranks-per-node", "4",
                 "--mics-shard-size", "4", "--json")
    flat4 = {(r["stage"], r["offload_optimizer"], r["offload_param"]): r
             for r in lines(z, "--params", "1e9", "--world", "4", "--json")}
    rows = [r for r in mics if r["sharding"]["kind"] == "mics"]
    if sorted(r["stage"] for r in rows) != [1, 2, 3] or len(mics) != 19:
        fail("mics rows", "%d rows, MiCS at stages %s" % (len(mics), [r["stage"] for r in rows]))
    for r in rows:
        f = flat4[(r["stage"], "none", "none")]
        n = (r["params"] + r["padding_elems"]) // 4
        for part in ("params", "grads", "optimizer", "buffers"):
            want = f["parts"]["device"][part] + (4 * n if part == "grads" and r["stage"] == 1
                                                 else 0)
            if r["parts"]["device"][part] != want:
                fail("mics memory", "stage %d %s: %d, flat over 4 ranks %d%s" %
                     (r["stage"], part, r["parts"]["device"][part], f["parts"]["device"][part],
                      " + the fp32 shard" if want != f["parts"]["device"][part] else ""))
        links = r["comm_bytes_per_step_by_link"]
        if r["stage"] == 3 and links != {"intra_node": 18 * n, "inter_node": 4 * n}:
            fail("mics links", "stage 3: %s, n %d" % (links, n))
        if r["stage"] in (1, 2) and links != {"intra_node": 12 * n, "inter_node": 4 * n}:
            fail("mics links", "stage %d: %s, n %d" % (r["stage"], links, n))
    flat8 = [r for r in mics if r["sharding"]["kind"] == "flat" and r["stage"] == 3 and
             r["offload_optimizer"] == "none" and r["offload_param"] == "none"]
    if len(flat8) == 1:
        n1 = (flat8[0]["params"] + flat8[0]["padding_elems"]) // 8
        if flat8[0]["comm_bytes_per_step_by_link"] != {"intra_node": 18 * n1,
                                                       "inter_node": 24 * n1}:
            fail("flat links", "%s, n %d" % (flat8[0]["comm_bytes_per_step_by_link"], n1))
        hp = [r for r in lines(z, "--params", "1e9", "--world", "8", "--ranks-per-node", "4",
                               "--hpz-partition-size", "4", "--json")
              if r["sharding"]["kind"] == "hpz"]
        if len(hp) != 3:  # stage 3, offload_optimizer none, cpu or nvme, no parameter offload
            fail("hpz rows", "%d" % len(hp))
        for h in hp:
            if h["offload_optimizer"] != "none":
                continue
            padded = h["params"] + h["padding_elems"]
            if h["comm_bytes_per_step_by_link"] != {"intra_node": 24 * n1, "inter_node": 16 * n1}:
                fail("hpz links", "%s, n %d" % (h["comm_bytes_per_step_by_link"], n1))
            if h["parts"]["device"]["params"] != flat8[0]["parts"]["device"]["params"] + \
                    padded // 4 * 2:
                fail("hpz memory", "%d, flat %d" % (h["parts"]["device"]["params"],
                                                    flat8[0]["parts"]["device"]["params"]))
    else:
        fail("flat rows", "%d flat stage-3 rows" % len(flat8))
    t = run(z, "--params", "1e9", "--world", "8", "--ranks-per-node", "4", "--mics-shard-size",
            "4")
    if t.returncode != 0 or t.stdout.count("MiCS 4") != 3 or "across nodes" not in t.stdout:
        fail("mics table", "exit %r:\n%s" % (t.returncode, t.stdout))


def check_state(z):
    """--state both: each configuration from stage 1 again with bf16 master and
    moments, whose optimizer bytes are half of fp32's 12 per element (device and
    pinned homes exactly; the nvme files within their per-tensor alignment)."""
    rows = lines(z, "--params", "1e9", "--world", "8", "--json", "--state", "both")
    f32 = [r for r in rows if r["state"]["master"] == "fp32"]
    b16 = [r for r in rows if r["state"] == {"master": "bf16", "exp_avg": "bf16",
                                             "exp_avg_sq": "bf16"}]
    if len(f32) != 16 or len(b16) != 15 or len(rows) != 31:
        fail("state rows", "%d fp32, %d bf16 of %d" % (len(f32), len(b16), len(rows)))
        return
    key = lambda r: (r["stage"], r["offload_optimizer"], r["offload_param"])
    ref = {key(r): r for r in f32}
    for r in b16:
        base = ref[key(r)]
        for kind in ("device", "pinned"):
            a, b = r["parts"][kind]["optimizer"], base["parts"][kind]["optimizer"]
            if 2 * a != b:
                fail("state %s %s" % (key(r), kind), "bf16 optimizer %d, fp32 %d" % (a, b))
        a, b = r["parts"]["nvme"]["optimizer"], base["parts"]["nvme"]["optimizer"]
        if not (b / 2 <= a <= b / 2 + 3 * 4096 * 128):  # <= 60 chunks, 3 tensors each
            fail("state %s nvme" % (key(r),), "bf16 optimizer %d, fp32 %d" % (a, b))
    t = run(z, "--params", "1e6", "--world", "2", "--state", "bf16")
    if t.returncode != 0 or "| bf16 | bf16 |" not in t.stdout:
        fail("state table", t.stdout)
    expect_usage(z, "state value", ["--params", "10", "--world", "1", "--state", "fp16"],
                 "--state 'fp16'")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zeroc", required=True)
    z = ap.parse_args().zeroc

    # Strict flags.
    expect_usage(z, "world 0", ["--params", "1e9", "--world", "0"], "--world", "'0'",
                 "[1, 65536]")
    expect_usage(z, "world junk", ["--params", "1e9", "--world", "4x"], "--world", "'4x'")
    expect_usage(z, "params fraction", ["--params", "1.5", "--world", "1"], "--params", "'1.5'")
    expect_usage(z, "params range", ["--params", "0", "--world", "1"], "--params", "'0'",
                 "[1, 17592186044416]")
    expect_usage(z, "micro-batch", ["--params", "10", "--world", "1", "--micro-batch", "-1"],
                 "--micro-batch", "'-1'")
    expect_usage(z, "gpn divides", ["--params", "10", "--world", "4", "--gpus-per-node", "3"],
                 "--gpus-per-node", "3", "--world")
    expect_usage(z, "dtype", ["--params", "10", "--world", "1", "--dtype", "fp8"], "--dtype",
                 "'fp8'", "fp32, bf16 or fp16")
    expect_usage(z, "both", ["--params", "10", "--model", "gpt:1,64,1,8,8", "--world", "1"],
                 "exactly one")
    expect_usage(z, "neither", ["--world", "1"], "exactly one")
    expect_usage(z, "no world", ["--params", "10"], "--world")
    expect_usage(z, "heads", ["--model", "gpt:12,768,10,1024,50257", "--world", "1"],
                 "DIM 768", "HEADS 10")
    expect_usage(z, "model items", ["--model", "gpt:12,768,12,1024", "--world", "1"],
                 "five whole numbers")
    expect_usage(z, "model extra", ["--model", "gpt:12,768,12,1024,5,6", "--world", "1"],
                 "five whole numbers")
    expect_usage(z, "model value", ["--model", "gpt:12,0,12,1024,50257", "--world", "1"],
                 "--model DIM", "'0'", "[1, 65536]")
    expect_usage(z, "model kind", ["--model", "llama:1,2,3,4,5", "--world", "1"], "gpt:")
    expect_usage(z, "unknown", ["--params", "10", "--world", "1", "--bogus", "1"], "'--bogus'")
    expect_usage(z, "missing value", ["--params", "10", "--world"], "--world needs a value")

    # JSON: every configuration, every field.
    P, W = 1000000000, 8
    rows = lines(z, "--params", "1e9", "--world", str(W), "--json")
    if len(rows) != 16:
        fail("json rows", "%d lines, want 16 (stage 0 none, stages 1-2 x 3, stage 3 x 3 x 3)"
             % len(rows))
    keys = {"stage", "offload_optimizer", "offload_param", "world", "dtype", "bytes", "parts",
            "activations", "params", "padding_elems", "live_bound", "deepspeed", "sharding",
            "ranks_per_node", "comm_bytes_per_step_by_link", "state"}
    for r in rows:
        if set(r) != keys:
            fail("json keys", "%s" % sorted(r))
        if set(r.get("bytes", {})) != {"device", "pinned", "host", "nvme"}:
            fail("json bytes", "%s" % r.get("bytes"))
        for k in ("host", "pinned", "device", "nvme"):
            if set(r["parts"].get(k, {})) != {"params", "grads", "optimizer", "buffers",
                                              "activations", "other"}:
                fail("json parts", "%s" % r["parts"])
        if r["world"] != W or r["dtype"] != "bf16" or r["params"] != P:
            fail("json values", "%s" % r)
    by = {(r["stage"], r["offload_optimizer"]): r for r in rows if r["offload_param"] == "none"}
    byp = {(r["stage"], r["offload_optimizer"], r["offload_param"]): r for r in rows}
    if any(r["offload_param"] != "none" and r["stage"] != 3 for r in rows):
        fail("offload_param", "listed below stage 3")
    # offload_param cpu: the device keeps no parameter shard (no chunk of 2^24
    # elements is persistent), pinned memory holds them all (bf16), and
    # nothing else moves.
    tensors = [1 << 24] * (P >> 24) + [P % (1 << 24)]
    pshard = sum(up(t, W * 64) for t in tensors) // W
    for opt in ("none", "cpu", "nvme"):
        base, pc, pn = byp.get((3, opt, "none")), byp.get((3, opt, "cpu")), \
            byp.get((3, opt, "nvme"))
        if not (base and pc and pn):
            fail("offload_param rows", "stage 3 %s: missing" % opt)
            continue
        if pc["parts"]["device"]["params"] != 0 or \
                base["parts"]["device"]["params"] != 2 * pshard:
            fail("offload_param cpu", "device params %d (none: %d, want %d)"
                 % (pc["parts"]["device"]["params"], base["parts"]["device"]["params"],
                    2 * pshard))
        if pc["bytes"]["pinned"] - base["bytes"]["pinned"] != 2 * pshard or \
                pc["bytes"]["device"] != base["bytes"]["device"] - 2 * pshard:
            fail("offload_param cpu", "pinned %d -> %d, device %d -> %d, shards %d"
                 % (base["bytes"]["pinned"], pc["bytes"]["pinned"], base["bytes"]["device"],
                    pc["bytes"]["device"], 2 * pshard))
        # nvme with DeepSpeed's max_in_cpu (1e9 elements) caches all 1.25e8
        # shard elements: each shard rounded up to 4 KiB, no swap file.
        cached = sum(up(2 * up(t, W * 64) // W, 4096) for t in tensors)
        if pn["parts"]["pinned"]["params"] != cached or pn["bytes"]["nvme"] != \
                base["bytes"]["nvme"]:
            fail("offload_param nvme", "pinned params %d, want %d; nvme %d"
                 % (pn["parts"]["pinned"]["params"], cached, pn["bytes"]["nvme"]))
    if byp[(3, "cpu", "cpu")]["deepspeed"] != {"gpu": 4 * (1 << 24),
                                               "cpu_per_node": 18 * P * 3 // 2}:
        fail("deepspeed offload_param", "%s" % byp[(3, "cpu", "cpu")]["deepspeed"])
    if byp[(3, "none", "cpu")]["deepspeed"] is not None:
        fail("deepspeed offload_param", "a figure for parameters offloaded without the "
             "optimizer: %s" % byp[(3, "none", "cpu")]["deepspeed"])
    s2 = by.get((2, "none"))
    if s2:
        want = plan_stage2(P, W, 2)
        if s2["bytes"]["device"] != want:
            fail("stage 2 bytes", "device %d, want %d" % (s2["bytes"]["device"], want))
        if s2["deepspeed"] != {"gpu": 2 * P + 18 * P // W, "cpu_per_node": 4 * P * W * 3 // 2}:
            fail("stage 2 deepspeed", "%s" % s2["deepspeed"])
    s2c = by.get((2, "cpu"))
    if s2c:
        tensors = [1 << 24] * (P >> 24) + [P % (1 << 24)]
        shard = sum(up(t, W * 64) for t in tensors) // W
        big = max(up(t, W * 64) for t in tensors) // W
        # master, m, v and the fp32 gradient shard pinned; a bf16 gradient
        # landing buffer per chunk shard and two bf16 output buffers of the
        # largest shard.
        want = 16 * shard + 2 * shard + 2 * big * 2
        if s2c["bytes"]["pinned"] != want:
            fail("stage 2 cpu pinned", "%d, want %d" % (s2c["bytes"]["pinned"], want))
    if (0, "cpu") in by:
        fail("stage 0 offload", "listed, but stage 0 cannot offload")

    # GPT-2 small: parameters and activations.
    L, D, A, S, V, B = 12, 768, 12, 1024, 50257, 2
    g = lines(z, "--model", "gpt:%d,%d,%d,%d,%d" % (L, D, A, S, V), "--world", "1",
              "--micro-batch", str(B), "--dtype", "fp16", "--json")
    if g:
        if g[0]["params"] != 124439808:
            fail("gpt2 params", "%d, want 124439808" % g[0]["params"])
        esz = 2
        act = L * (S * B * D * 34 + 5 * A * S * S * B) * esz // 2 + S * B * D * esz \
            + S * B * V * (esz + 4)
        if g[0]["activations"] != act:
            fail("gpt2 activations", "%d, want %d" % (g[0]["activations"], act))
        if g[0]["bytes"]["device"] < act:
            fail("gpt2 device", "device bytes do not include the activations")

    # --config: only the file's configuration.
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ds.json")
        with open(path, "w") as f:
            json.dump({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}},
                       "bf16": {"enabled": True}}, f)
        c = lines(z, "--params", "1e8", "--world", "2", "--config", path, "--json")
        if [(r["stage"], r["offload_optimizer"]) for r in c] != [(3, "cpu")]:
            fail("config", "%s" % c)
        # offload_param nvme with nothing cached, striped over two
        # directories: the swap file holds every shard rounded up to 4 KiB,
        # then to whole stripes of 2 x aio.block_size (1 MiB by default);
        # buffer_count buffers of the largest shard are pinned.
        with open(path, "w") as f:
            json.dump({"zero_optimization": {
                "stage": 3, "offload_optimizer": {"device": "cpu"},
                "offload_param": {"device": "nvme", "nvme_path": [d, d], "max_in_cpu": 0,
                                  "buffer_count": 3}}, "bf16": {"enabled": True}}, f)
        c = lines(z, "--params", "1e8", "--world", "2", "--config", path, "--json")
        tensors = [1 << 24] * (100000000 >> 24) + [100000000 % (1 << 24)]
        shards = [up(2 * up(t, 128) // 2, 4096) for t in tensors]
        swap = up(sum(shards), 2 << 20)
        if [(r["stage"], r["offload_optimizer"], r["offload_param"]) for r in c] != \
                [(3, "cpu", "nvme")] or c[0]["parts"]["nvme"]["params"] != swap or \
                c[0]["parts"]["pinned"]["buffers"] < 3 * max(shards):
            fail("config offload_param", "want nvme params %d: %s" % (swap, c))
        r = run(z, "--params", "1e8", "--world", "2", "--config", os.path.join(d, "none.json"))
        if r.returncode not in (1, 2) or "none.json" not in r.stderr:
            fail("config missing", "exit %r: %r" % (r.returncode, r.stderr))

    # --chunks per-block: examples/gpt's chunks. gpt:2,64,4,64,256 at world 2
    # pads to 128 elements: {wte, wpe} = 20480 (a multiple of 128), each
    # block 12 x 64^2 + 13 x 64 = 49984 -> 50048, ln_f 128; in one auto chunk
    # the 120576 elements are a multiple of 128 already.
    gpt = ("--model", "gpt:2,64,4,64,256", "--world", "2", "--json")
    auto = lines(z, *gpt)
    blocks = lines(z, *gpt, "--chunks", "per-block")
    if [r["padding_elems"] for r in auto][:1] != [0] or \
            [r["padding_elems"] for r in blocks][:1] != [128]:
        fail("per-block", "padding %s / %s" % ([r["padding_elems"] for r in auto],
                                               [r["padding_elems"] for r in blocks]))
    # --device host: the engine's buffers stand for device memory and are
    # shown as device (as zc_stats reports them), the activations are host
    # memory (without offload nothing else is); the CUDA figures hold the
    # same engine bytes as device memory, the activations too.
    host = lines(z, *gpt, "--device", "host")
    for a, h in zip(auto, host):
        if h["bytes"]["host"] != a["activations"]:
            fail("device host", "stage %d %s: host %d, activations %d"
                 % (a["stage"], a["offload_optimizer"], h["bytes"]["host"], a["activations"]))
        if a["offload_optimizer"] == "none":
            eng = sum(a["parts"]["device"].values())
            if a["bytes"]["device"] != eng + a["activations"] or \
                    h["bytes"]["device"] != eng:
                fail("device host", "stage %d: cuda %s, host %s" % (a["stage"], a["bytes"],
                                                                    h["bytes"]))
    expect_usage(z, "chunks without model", ["--params", "1M", "--world", "1", "--chunks",
                                             "per-block"], "--chunks per-block needs --model")
    expect_usage(z, "chunks value", ["--model", "gpt:1,64,4,64,256", "--world", "1",
                                     "--chunks", "some"], "--chunks 'some'")
    expect_usage(z, "device value", ["--model", "gpt:1,64,4,64,256", "--world", "1",
                                     "--device", "tpu"], "--device 'tpu'")

    check_state(z)

    # The table.
    r = run(z, "--params", "1e9", "--world", "8")
    if r.returncode != 0 or r.stdout.count("\n| ") != 17:
        fail("table", "exit %r, stdout %r" % (r.returncode, r.stdout))

    check_max_memory(z)
    check_hybrid(z)

    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all estimate checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
