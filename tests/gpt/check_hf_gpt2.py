#!/usr/bin/env python3
"""train_gpt against Hugging Face's GPT-2, through the fixtures that
tests/oracle/make_hf_gpt2.py made with transformers (no torch needed here).

    check_hf_gpt2.py TRAIN_GPT ZEROC FIXTURE_DIR

  - train_gpt --init-from the fixture's model.safetensors, on its tokens in
    the fixture's batches (--order sequential), fp32: the first loss within
    1e-5 (relative) of transformers' and the losses of 5 AdamW steps within
    1e-4 of torch.optim.AdamW's, at stages 1 and 3 on 2 ranks (the two the
    same bits);
  - --export after 0 steps writes the fixture's tensors back bitwise (the
    same names, shapes and bytes; config.json beside it), and an export after
    5 steps imported again (--init-from) is the engine's state bitwise
    (params_sha256);
  - zeroc ckpt import --names hf-gpt2 makes a checkpoint that train_gpt
    --resume trains from exactly as --init-from does; zeroc ckpt export
    --names hf-gpt2 --max-shard-size writes a sharded set (index and parts)
    that --init-from takes, bitwise.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

TRAIN, ZEROC, FIX = sys.argv[1], sys.argv[2], sys.argv[3]
EX = json.load(open(os.path.join(FIX, "expected.json")))
D = EX["data"]
BASE = ["--tokens", os.path.join(FIX, "tokens.bin"), "--order", "sequential",
        "--seq", str(D["seq"]), "--batch", str(D["batch"]), "--world", str(D["world"]),
        "--dtype", "fp32", "--lr", str(EX["adamw"]["lr"]), "--clip", "0",
        "--eval-every", "0", "--json"]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(args, cmd=None):
    p = subprocess.run((cmd or [TRAIN]) + args, capture_output=True, text=True, timeout=240)
    if p.returncode != 0:
        print(p.stdout[-2000:], p.stderr[-2000:])
        raise SystemExit("FAIL: %s exited %d" % (" ".join((cmd or [TRAIN]) + args), p.returncode))
    return p.stdout


def lines(out):
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def train(init, steps, stage=1, extra=()):
    out = lines(run(["--init-from", init, "--steps", str(steps), "--stage", str(stage)] +
                    BASE + list(extra)))
    return [l["loss"] for l in out if "step" in l and "loss" in l], \
        [l for l in out if l.get("final")][0]["params_sha256"]


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        h.pop("__metadata__", None)
        return h, 8 + n


def tensor_bytes(path):
    h, start = header(path)
    data = open(path, "rb").read()
    return {k: (v["dtype"], v["shape"], data[start + v["data_offsets"][0]:
                                             start + v["data_offsets"][1]])
            for k, v in h.items()}


model = os.path.join(FIX, "model.safetensors")
tmp = tempfile.mkdtemp(prefix="zc-hf-gpt2-")
try:
    losses, sha5 = train(model, 5)
    first = EX["first_loss"]
    check(abs(losses[0] - first) <= 1e-5 * abs(first),
          "first loss %.9g, transformers %.9g" % (losses[0], first))
    for i, (a, b) in enumerate(zip(losses, EX["losses"])):
        check(abs(a - b) <= 1e-4 * abs(b), "step %d loss %.9g, torch AdamW %.9g" % (i + 1, a, b))
    check(len(losses) == len(EX["losses"]), "%d losses" % len(losses))
    losses3, sha3 = train(model, 5, stage=3)
    check(losses3 == losses and sha3 == sha5, "stage 3 trains the same bits as stage 1")

    # Export after no step: the fixture's own tensors, bitwise.
    e0 = os.path.join(tmp, "e0")
    os.mkdir(e0)
    _, sha0 = train(model, 0, extra=["--export", os.path.join(e0, "model.safetensors")])
    ours, theirs = tensor_bytes(os.path.join(e0, "model.safetensors")), tensor_bytes(model)
    check(set(ours) == set(theirs), "the export names the fixture's tensors")
    check(all(ours[k] == theirs[k] for k in theirs if k in ours),
          "the export's tensors are the fixture's bytes (dtype, shape, values)")
    cfg = json.load(open(os.path.join(e0, "config.json")))
    check(cfg.get("n_layer") == EX["model"]["layers"] and cfg.get("n_embd") == EX["model"]["dim"],
          "config.json beside the export")
    # Export after 5 steps, imported again: the engine's state.
    e5 = os.path.join(tmp, "e5")
    os.mkdir(e5)
    _, sha_e = train(model, 5, extra=["--export", os.path.join(e5, "model.safetensors")])
    _, sha_back = train(os.path.join(e5, "model.safetensors"), 0)
    check(sha_back == sha_e == sha5, "export after 5 steps re-imported: params_sha256 %s" %
          sha_back[:16])

    # zeroc ckpt import -> train_gpt --resume, and zeroc ckpt export sharded.
    conf = os.path.join(tmp, "ds.json")
    json.dump({"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 1}, open(conf, "w"))
    ck = os.path.join(tmp, "ck")
    run(["ckpt", "import", model, ck, "--world", "2", "--config", conf, "--names", "hf-gpt2"],
        cmd=[ZEROC])
    m = EX["model"]
    out = lines(run(["--resume", "--save-dir", ck, "--steps", "5", "--stage", "1", "--layers",
                     str(m["layers"]), "--heads", str(m["heads"]), "--dim", str(m["dim"]),
                     "--vocab", str(m["vocab"]), "--ctx", str(m["ctx"])] + BASE))
    rl = [l["loss"] for l in out if "step" in l and "loss" in l]
    rsha = [l for l in out if l.get("final")][0]["params_sha256"]
    check(rl == losses and rsha == sha5, "zeroc ckpt import, then train_gpt --resume: the "
          "losses and params_sha256 of --init-from")
    sharded = os.path.join(tmp, "sharded")
    run(["ckpt", "export", ck, sharded, "--names", "hf-gpt2", "--max-shard-size", "100K"],
        cmd=[ZEROC])
    idx = json.load(open(os.path.join(sharded, "model.safetensors.index.json")))
    parts = sorted(set(idx["weight_map"].values()))
    check(len(parts) > 1 and set(idx["weight_map"]) == set(theirs),
          "a sharded export: %d parts, the fixture's names" % len(parts))
    joined = {}
    for p in parts:
        joined.update(tensor_bytes(os.path.join(sharded, p)))
    check(all(joined[k] == theirs[k] for k in theirs),
          "the sharded export's tensors are the fixture's bytes")
    # No config.json there: the heads are not in the shapes, --heads says them.
    _, sha_sh = train(os.path.join(sharded, "model.safetensors.index.json"), 0,
                      extra=["--heads", str(m["heads"])])
    check(sha_sh == sha0, "--init-from the sharded index: the fixture's values")
finally:
    shutil.rmtree(tmp)
print("%d failed" % len(failures))
sys.exit(1 if failures else 0)
