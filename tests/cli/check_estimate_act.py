#!/usr/bin/env python3
"""`zeroc estimate --checkpoint-activations` and `--fit-device`
(docs/estimate.md, "Activations").

Checks, against figures computed here from the formulas: without
checkpointing the activations column is every layer's (Korthikanti et al.
2022: per layer S B D (34 + 5 A S / D) values of 2 bytes, scaled to the
working precision, plus the embedding's output and the logits with their
fp32 softmax); with checkpointing by block it is one layer's plus the same
two, and the activation store holds LAYERS - 1 inputs of S B D values (the
last block runs on into its backward) where
--checkpoint-offload (or the config's section) puts them - device slots
aligned to 256 bytes, pinned ones to 4 KiB pages, and on a GPU two device
staging slots beside pinned ones; --seq changes the sequence, not the
model; --fit-device's batch fits and one more does not, and checkpointing
fits a larger one; the refusals are usage errors naming the flag.

Usage: check_estimate_act.py --zeroc PATH
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

failures = []
L, D, A, SEQ, V = 6, 512, 8, 1024, 256


def fail(name, msg):
    failures.append(name)
    print("FAIL %s: %s" % (name, msg), flush=True)


def run(z, *args):
    return subprocess.run([z, "estimate"] + list(args), capture_output=True, text=True,
                          timeout=120)


def rows(z, *args):
    r = run(z, *args)
    if r.returncode != 0:
        fail(" ".join(args), "exit %d: %s" % (r.returncode, r.stderr))
        return []
    return [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]


def up(v, a):
    return (v + a - 1) // a * a


def acts(S, B, e, layers):
    per = (34 * S * B * D + 5 * A * S * S * B) * e // 2
    return per * layers + S * B * D * e + S * B * V * (e + 4)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zeroc", required=True)
    z = ap.parse_args().zeroc
    tmp = tempfile.mkdtemp(prefix="zc-est-act-")
    cfg = os.path.join(tmp, "s2.json")
    with open(cfg, "w") as f:
        json.dump({"zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}, f)
    model = ["--model", "gpt:%d,%d,%d,%d,%d" % (L, D, A, SEQ, V), "--world", "1", "--chunks",
             "per-block", "--config", cfg, "--json"]
    for seq in (SEQ, 512):
        for B in (1, 3):
            base = model + ["--micro-batch", str(B), "--seq", str(seq)]
            none = rows(z, *base)
            inp = seq * B * D * 2  # bf16 block inputs
            for home, kind, dev_extra in (("device", "device", 0),
                                          ("cpu", "pinned", 2 * up(inp, 256)),
                                          ("nvme", "nvme", None)):
                extra = ["--checkpoint-activations", "block", "--checkpoint-offload", home]
                args = base + extra
                if home == "nvme":
                    ncfg = os.path.join(tmp, "nvme.json")
                    with open(ncfg, "w") as f:
                        json.dump({"zero_optimization": {"stage": 2}, "bf16": {"enabled": True},
                                   "activation_checkpointing": {"nvme_path": tmp,
                                                                "buffer_count": 3}}, f)
                    args = [a if a != cfg else ncfg for a in args]
                blk = rows(z, *args)
                name = "seq %d B %d %s" % (seq, B, home)
                if len(none) != 1 or len(blk) != 1:
                    fail(name, "%d and %d lines" % (len(none), len(blk)))
                    continue
                n, b = none[0], blk[0]
                if n["activations"] != acts(seq, B, 2, L):
                    fail(name, "none: activations %d, formula %d" %
                         (n["activations"], acts(seq, B, 2, L)))
                if b["activations"] != acts(seq, B, 2, 1):
                    fail(name, "block: activations %d, formula %d" %
                         (b["activations"], acts(seq, B, 2, 1)))
                st = b["act_store"]
                if home == "device":
                    want = {"device": (L - 1) * up(inp, 256), "pinned": 0, "nvme": 0}
                elif home == "cpu":
                    want = {"device": dev_extra, "pinned": (L - 1) * up(inp, 4096), "nvme": 0}
                else:
                    want = {"device": 2 * up(inp, 256), "pinned": 3 * up(inp, 4096),
                            "nvme": up((L - 1) * up(inp, 4096), 1 << 20)}
                if st != want:
                    fail(name, "store %s, expected %s" % (st, want))
                if b["seq"] != seq or b["params"] != n["params"]:
                    fail(name, "seq %s, params %s vs %s" % (b["seq"], b["params"], n["params"]))
                grown = b["bytes"]["device"] - n["bytes"]["device"]
                want_dev = want["device"] + acts(seq, B, 2, 1) - acts(seq, B, 2, L)
                if grown != want_dev:
                    fail(name, "device column moved by %d, expected %d" % (grown, want_dev))
    # --fit-device: the batch fits, one more does not; checkpointing fits more.
    budget = 2 << 30
    fit = rows(z, *(model + ["--fit-device", "2GiB"]))
    best = {}
    for r in fit:
        mode, seq, B = r["checkpoint_activations"], r["seq"], r["micro_batch"]
        best[(mode, seq)] = B
        args = model + ["--seq", str(seq)] + (["--checkpoint-activations", "block"]
                                              if mode == "block" else [])
        for b, fits in ((B, True), (B + 1, False)):
            if b < 1:
                continue
            got = rows(z, *(args + ["--micro-batch", str(b)]))
            dev = got[0]["bytes"]["device"] if got else None
            if dev is None or (dev <= budget) != fits:
                fail("fit %s seq %d" % (mode, seq), "batch %d: %s bytes vs %d" % (b, dev, budget))
    for seq in (128, 256, 512, 1024):
        if not best.get(("block", seq), 0) > best.get(("none", seq), 0):
            fail("fit seq %d" % seq, "block %s not above none %s" %
                 (best.get(("block", seq)), best.get(("none", seq))))
    # Refusals.
    for args, word in ((["--params", "1000", "--world", "1", "--seq", "4"], "--model"),
                       (model + ["--seq", "2048"], "--seq 2048"),
                       (model + ["--checkpoint-offload", "cpu"], "--checkpoint-activations"),
                       (model + ["--checkpoint-activations", "all"], "none or block"),
                       (model + ["--fit-device", "lots"], "--fit-device")):
        r = run(z, *args)
        if r.returncode != 2 or word not in r.stderr:
            fail("usage %s" % " ".join(args[-2:]), "exit %d: %s" % (r.returncode, r.stderr))
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    os.rmdir(tmp)
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
