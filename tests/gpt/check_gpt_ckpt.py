#!/usr/bin/env python3
"""train_gpt --checkpoint-activations block (docs/activations.md).

Each block's input goes to the engine's activation store in forward and the
block is recomputed from it in backward: the run's losses (every step, the
bits of its JSON) and params_sha256 are those of the run that keeps every
activation, at stages 0-3, worlds 1-3, fp32 / bf16 / fp16, with
accumulation, with the store in device memory, pinned host memory and on
NVMe (there with fewer buffers than blocks, so most inputs are read back
from the file). Beside that:
  - the store saved and restored one input per block but the last (which
    runs on into its backward) and micro-step;
  - the example's own activation buffers shrink to one block's, and the
    store holds (layers - 1) x B x seq x dim x 4 bytes where the section says (the
    plan line's act_store_per_rank, zc_plan_memory's, equals the engine's);
  - the config's activation_checkpointing section decides the home when
    --checkpoint-offload is not given;
  - refusals: --checkpoint-offload without block (usage, exit 2), and
    partition_activations without a model-parallel group (refused by the
    memory plan before anything starts: exit 2, naming the key).

Usage: check_gpt_ckpt.py TRAIN_GPT DATA
"""
import json
import os
import subprocess
import sys
import tempfile

failures = []
MODEL = ["--layers", "4", "--dim", "32", "--heads", "2", "--seq", "32", "--batch", "2"]


def fail(name, msg):
    failures.append(name)
    print("FAIL %s: %s" % (name, msg), flush=True)


def run(exe, data, args, expect_rc=0):
    cmd = [exe, "--data", data, "--steps", "3", "--eval-every", "0", "--json",
           "--launcher", "threads"] + MODEL + args
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != expect_rc:
        return None, "exit %d: %s" % (r.returncode, r.stderr[-1500:])
    if expect_rc:
        return r.stderr, ""
    steps, final, plan = [], None, None
    for ln in r.stdout.splitlines():
        try:
            j = json.loads(ln)
        except ValueError:
            continue
        if "plan" in j:
            plan = j["plan"]
        elif j.get("final"):
            final = j
        elif "step" in j and "loss" in j:
            steps.append(j["loss"])
    if not final or plan is None:
        return None, "no final or plan line"
    final["losses"] = steps
    final["plan"] = plan
    return final, ""


def main():
    exe, data = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="zc-gpt-ckpt-", dir=os.environ.get("ZC_TEST_TMPDIR"))
    nvme = os.path.join(tmp, "nvme")
    os.mkdir(nvme)
    cfg2 = os.path.join(tmp, "two_buffers.json")
    with open(cfg2, "w") as f:
        json.dump({"activation_checkpointing": {"buffer_count": 2}}, f)
    block_in = 2 * 32 * 32 * 4  # B x seq x dim x fp32
    cases = [
        ("--stage 0 --world 1 --dtype fp32", "device"),
        ("--stage 0 --world 2 --dtype bf16 --accum 2", "cpu"),
        ("--stage 1 --world 3 --dtype fp16", "nvme"),
        ("--stage 1 --world 2 --dtype bf16", "device"),
        ("--stage 2 --world 1 --dtype bf16", "cpu"),
        ("--stage 2 --world 3 --dtype fp32 --accum 2", "nvme"),
        ("--stage 3 --world 1 --dtype fp16", "device"),
        ("--stage 3 --world 2 --dtype fp32", "cpu"),
        ("--stage 3 --world 3 --dtype bf16 --accum 2", "nvme"),
    ]
    for flags, home in cases:
        base = flags.split()
        # Both runs read the same file (a --config changes the optimizer's
        # defaults too): the NVMe home's two buffers.
        if home == "nvme":
            base += ["--config", cfg2]
        ref, why = run(exe, data, base + ["--checkpoint-activations", "none"])
        name = "%s none" % flags
        if not ref:
            fail(name, why)
            continue
        extra = ["--checkpoint-activations", "block", "--checkpoint-offload", home]
        if home == "nvme":
            extra += ["--checkpoint-nvme-path", nvme]
        got, why = run(exe, data, base + extra)
        name = "%s block %s" % (flags, home)
        if not got:
            fail(name, why)
            continue
        if got["losses"] != ref["losses"]:
            fail(name, "losses %s != %s" % (got["losses"], ref["losses"]))
        if got["params_sha256"] != ref["params_sha256"]:
            fail(name, "params_sha256 %s != %s" % (got["params_sha256"], ref["params_sha256"]))
        accum = int(base[base.index("--accum") + 1]) if "--accum" in base else 1
        st = got["act_store"]
        # Three of the four blocks per micro-step, three steps.
        if st["saves"] != 3 * 3 * accum or st["restores"] != st["saves"]:
            fail(name, "store saved %d, restored %d; expected %d" %
                 (st["saves"], st["restores"], 9 * accum))
        if got["checkpoint_offload"] != home:
            fail(name, "home %s" % got["checkpoint_offload"])
        if not got["model_activation_bytes"] < ref["model_activation_bytes"]:
            fail(name, "the model's activations did not shrink: %d vs %d" %
                 (got["model_activation_bytes"], ref["model_activation_bytes"]))
        kind = {"device": "device", "cpu": "pinned", "nvme": "nvme"}[home]
        # Slots of one block input each, aligned to their home's unit.
        unit = 256 if home == "device" else 4096
        slot = (block_in + unit - 1) // unit * unit
        if home == "nvme":
            want = (3 * slot + (1 << 20) - 1) // (1 << 20) * (1 << 20)
        else:
            want = 3 * slot
        if st[kind] != want:
            fail(name, "store holds %d bytes of %s, expected %d" % (st[kind], kind, want))
        planned = got["plan"]["act_store_per_rank"]
        for k in ("device", "pinned", "nvme"):
            if planned[k] != st[k]:
                fail(name, "planned %s %d, built %d" % (k, planned[k], st[k]))
        if home == "nvme" and not st["nvme_read_bytes"] > 0:
            fail(name, "2 buffers for 3 checkpoints and nothing read back")
        if ref["act_store"]["saves"] != 0:
            fail(flags + " none", "the run without checkpointing saved")

    # One layer: the block runs on into its backward, so nothing is kept and
    # no store is made; the buffers are the same as without checkpointing.
    one = ["--layers", "1", "--stage", "1", "--world", "2"]
    ref, why = run(exe, data, one)
    got, why2 = run(exe, data, one + ["--checkpoint-activations", "block"])
    if not ref or not got:
        fail("one layer", why or why2)
    elif got["params_sha256"] != ref["params_sha256"] or got["losses"] != ref["losses"] or \
            got["act_store"]["saves"] != 0 or \
            any(got["act_store"][k] for k in ("device", "pinned", "nvme")) or \
            got["model_activation_bytes"] != ref["model_activation_bytes"]:
        fail("one layer", "%s against %s" % (got["act_store"], ref["act_store"]))

    # The config's section decides the home.
    cfg = os.path.join(tmp, "cpu.json")
    with open(cfg, "w") as f:
        json.dump({"zero_optimization": {"stage": 2},
                   "activation_checkpointing": {"cpu_checkpointing": True}}, f)
    got, why = run(exe, data, ["--config", cfg, "--world", "2", "--checkpoint-activations",
                               "block"])
    if not got or got["checkpoint_offload"] != "cpu" or not got["act_store"]["pinned"]:
        fail("config section", why or "home %s" % (got and got["checkpoint_offload"]))

    # Refusals.
    err, why = run(exe, data, ["--checkpoint-offload", "cpu"], expect_rc=2)
    if err is None or "--checkpoint-activations block" not in err:
        fail("offload without block", why or err)
    cfg = os.path.join(tmp, "part.json")
    with open(cfg, "w") as f:
        json.dump({"activation_checkpointing": {"partition_activations": True}}, f)
    err, why = run(exe, data, ["--config", cfg, "--checkpoint-activations", "block"],
                   expect_rc=2)
    if err is None or "partition_activations" not in err:
        fail("partition without a group", why or err)

    os.rmdir(nvme)
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    os.rmdir(tmp)
    if failures:
        print("%d failure(s): %s" % (len(failures), ", ".join(failures)))
        return 1
    print("ok: %d configurations bitwise with and without checkpointing" % len(cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
