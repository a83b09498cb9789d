#!/usr/bin/env python3
"""The command line's ranges are the ones it accepts, and its exit status
tells the truth (issue 25, item 6):

- `zeroc estimate` accepts exactly the ranges its --help states: every flag
  at the top of its stated range answers (exit 0, one JSON line per
  configuration, the figures integers or, past 2^63 bytes, numbers), one
  past the top is a usage error naming the flag and the range. A --model
  shape is held to --params's range too: every part at its top together
  (2.1e14 parameters) is a usage error giving the count, the largest shape
  within it and each part's top alone are answered, with the parameters a
  GPT-2 shape has (counted here). The top of
  --params is 2^20 chunks; the run is bounded by a generous timeout only
  (the plan was quadratic in the chunks: --params 1T took a minute and the
  top would take hours), never timed.
- `zeroc bench train` exits 1 when every configuration failed, with the
  reasons in results.jsonl; 0 while any ran (tests/cli/check_bench_train.py).
  A --model its workload (train_gpt) would refuse - vocabulary 1, a part
  past its top - is a usage error (exit 2) naming the part and its range,
  before any configuration runs; the ranges its --help states are
  train_gpt's own (--help of each).
- train_mlp's --nvme-path refuses an empty entry wherever it is ("DIR,",
  ",DIR", "A,,B", "", ",").

Usage: check_cli_ranges.py ZEROC TRAIN_MLP [TRAIN_GPT]. Prints TAP.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

RESULTS = []


def check(name, problems):
    RESULTS.append((name, problems))
    n = len(RESULTS)
    if problems:
        print("not ok %d - %s\n#   %s" % (n, name, "\n#   ".join(problems)))
    else:
        print("ok %d - %s" % (n, name))


def run(cmd, timeout=300, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def value(text):
    """'2^44' or '65536' as an int."""
    m = re.fullmatch(r"2\^(\d+)", text)
    return 1 << int(m.group(1)) if m else int(text)


def stated_ranges(zeroc):
    """The ranges `zeroc estimate --help` states, by flag (and --model part)."""
    p = run([zeroc, "estimate", "--help"])
    h = " ".join(p.stdout.split())
    out = {}
    m = re.search(r"--params N .*? N in \[1, ([^\]]+)\]", h)
    out["--params"] = value(m.group(1)) if m else None
    for flag in ("--world W", "--ranks-per-node N", "--micro-batch B"):
        m = re.search(re.escape(flag) + r" [^\[]*\[1, ([^\]]+)\]", h)
        out[flag.split()[0]] = value(m.group(1)) if m else None
    for part in ("LAYERS", "DIM", "HEADS", "SEQ", "VOCAB"):
        m = re.search(part + r" in \[1, ([^\]]+)\]", h)
        out[part] = value(m.group(1)) if m else None
    return out


def gpt_params(layers, dim, seq, vocab):
    """A GPT-2 shape's parameters, as docs/estimate.md counts them: tied
    token embedding V x D, positions S x D, per layer 12 D^2 + 13 D (qkv,
    projection, MLP and their biases, two LayerNorms), the final LayerNorm."""
    return vocab * dim + seq * dim + layers * (12 * dim * dim + 13 * dim) + 2 * dim


def estimate_rows(p, problems, want_params=None):
    if p.returncode != 0:
        problems.append("exit %d: %s" % (p.returncode, p.stderr.strip()[:300]))
        return []
    try:
        rows = [json.loads(line) for line in p.stdout.splitlines() if line]
    except ValueError as e:
        problems.append("not JSON lines: %s" % e)
        return []
    if len(rows) != 16:
        problems.append("%d configurations, want 16" % len(rows))
    for r in rows:
        for k, v in list(r["bytes"].items()) + [("activations", r["activations"])]:
            if not isinstance(v, (int, float)) or v < 0:
                problems.append("stage %d: %s is %r" % (r["stage"], k, v))
        if want_params is not None and r["params"] != want_params:
            problems.append("params %r, want %d" % (r["params"], want_params))
    return rows


def estimate_ranges(zeroc):
    rng = stated_ranges(zeroc)
    missing = [k for k, v in rng.items() if v is None]
    check("--help states every range", ["no range for %s" % k for k in missing])
    if missing:
        return
    # Every part at its top together is more parameters than --params takes
    # (one range for both ways of naming a model): the top model keeps the
    # other parts at their tops and DIM at the largest multiple of HEADS
    # whose total fits; each part's top alone, the rest at 1, is answered.
    dim = rng["HEADS"]
    while gpt_params(rng["LAYERS"], dim * 2, rng["SEQ"], rng["VOCAB"]) <= rng["--params"] and \
            dim * 2 <= rng["DIM"]:
        dim *= 2
    top = (rng["LAYERS"], dim, rng["HEADS"], rng["SEQ"], rng["VOCAB"])
    top_model = "gpt:%d,%d,%d,%d,%d" % top
    # The tops, alone and together.
    cases = [
        ("--params at the top", ["--params", str(rng["--params"]), "--world", "1"],
         rng["--params"]),
        ("--params at the top, every flag at the top",
         ["--params", str(rng["--params"]), "--world", str(rng["--world"]), "--gpus-per-node",
          str(rng["--ranks-per-node"]), "--micro-batch", str(rng["--micro-batch"])],
         rng["--params"]),
        ("--params 1T", ["--params", "1T", "--world", "8"], 1 << 40),
        ("--model at the top", ["--model", top_model, "--world", "1"],
         gpt_params(top[0], top[1], top[3], top[4])),
        ("--model at the top, every flag at the top, per-block chunks, host",
         ["--model", top_model, "--world", str(rng["--world"]), "--gpus-per-node",
          str(rng["--ranks-per-node"]), "--micro-batch", str(rng["--micro-batch"]),
          "--chunks", "per-block", "--device", "host"], None),
        ("--model at the top, fp32", ["--model", top_model, "--world", "64", "--dtype", "fp32",
                                      "--micro-batch", str(rng["--micro-batch"])], None),
    ]
    for i, part in enumerate(("LAYERS", "DIM", "HEADS", "SEQ", "VOCAB")):
        v = [1, rng["HEADS"] if part == "HEADS" else 1, 1, 1, 1]
        v[i] = rng[part]
        cases.append(("--model %s at the top alone" % part,
                      ["--model", "gpt:%d,%d,%d,%d,%d" % tuple(v), "--world", "1"],
                      gpt_params(v[0], v[1], v[3], v[4])))
    for name, args, params in cases:
        problems = []
        p = run([zeroc, "estimate", "--json"] + args)
        rows = estimate_rows(p, problems, params)
        if rows and "--micro-batch" in args and "--model" in args and \
                not any(isinstance(r["activations"], float) for r in rows):
            problems.append("the activations of the top micro-batch fit 2^63 bytes: the case "
                            "does not reach what it means to")
        check(name, problems)
    # One past each top: a usage error naming the flag and the stated range.
    past = [("--params", ["--params", str(rng["--params"] + 1), "--world", "1"],
             "[1, %d]" % rng["--params"]),
            ("--world", ["--params", "10", "--world", str(rng["--world"] + 1)],
             "[1, %d]" % rng["--world"]),
            ("--gpus-per-node", ["--params", "10", "--world", "1", "--gpus-per-node",
                                 str(rng["--ranks-per-node"] + 1)],
             "[1, %d]" % rng["--ranks-per-node"]),
            ("--micro-batch", ["--params", "10", "--world", "1", "--micro-batch",
                               str(rng["--micro-batch"] + 1)], "[1, %d]" % rng["--micro-batch"])]
    for i, part in enumerate(("LAYERS", "DIM", "HEADS", "SEQ", "VOCAB")):
        v = [rng[k] for k in ("LAYERS", "DIM", "HEADS", "SEQ", "VOCAB")]
        v[i] += 1
        if part == "HEADS":
            v[1] = rng["HEADS"] + 1  # a DIM it divides, so the range is what is refused
        past.append(("--model " + part, ["--model", "gpt:%d,%d,%d,%d,%d" % tuple(v),
                                         "--world", "1"], "--model %s" % part))
    every = [rng[k] for k in ("LAYERS", "DIM", "HEADS", "SEQ", "VOCAB")]
    total = gpt_params(every[0], every[1], every[3], every[4])
    assert total > rng["--params"]
    past.append(("--model with every part at its top (%d parameters)" % total,
                 ["--model", "gpt:%d,%d,%d,%d,%d" % tuple(every), "--world", "1"],
                 "has %d parameters, out of range [1, 2^44]" % total))
    for flag, args, want in past:
        p = run([zeroc, "estimate"] + args)
        problems = []
        if p.returncode != 2:
            problems.append("exit %d, want 2 (usage): %s" % (p.returncode, p.stderr.strip()))
        elif want not in p.stderr or "out of range" not in p.stderr:
            problems.append("message %r does not give %r" % (p.stderr.strip(), want))
        check("one past the top of %s is refused" % flag, problems)


WORKLOAD = """#!%s
import sys
sys.stderr.write("a stand-in workload refuses every configuration\\n")
sys.exit(1)
"""


def bench_all_failed(zeroc, tmp):
    wl = os.path.join(tmp, "refuse.py")
    with open(wl, "w") as f:
        f.write(WORKLOAD % sys.executable)
    os.chmod(wl, 0o700)
    out = os.path.join(tmp, "bench")
    p = run([zeroc, "bench", "train", "--out", out, "--workload", wl, "--only", "stage=0,1",
             "--only", "offload_optimizer=none", "--steps", "2", "--warmup", "1", "--timeout",
             "60"])
    problems = []
    if p.returncode != 1:
        problems.append("exit %d, want 1: %s" % (p.returncode, p.stderr.strip()[-400:]))
    if "every one of the 2 configurations failed" not in p.stderr:
        problems.append("stderr does not say so: %r" % p.stderr[-400:])
    try:
        with open(os.path.join(out, "results.jsonl")) as f:
            rows = [json.loads(x) for x in f if x.strip()]
        if [r["status"] for r in rows] != ["failed", "failed"] or \
                any("refuses every configuration" not in r.get("reason", "") for r in rows):
            problems.append("results.jsonl: %r" % rows)
    except (OSError, ValueError) as e:
        problems.append("results.jsonl: %s" % e)
    left = [n for n in os.listdir(out) if n.startswith("zeroc-bench-train.")] \
        if os.path.isdir(out) else []
    if left:
        problems.append("its work directory is left: %s" % left)
    check("bench train: every configuration failed is exit 1", problems)


MARK_WORKLOAD = """#!%s
import sys
open(%r, "a").write("ran\\n")
sys.exit(1)
"""

BENCH_PARTS = ("LAYERS", "DIM", "HEADS", "SEQ", "VOCAB")


def bench_model_ranges(zeroc, train_gpt):
    """The ranges `zeroc bench train --help` states for --model: each part's
    [lo, hi], which must be train_gpt's (its --help: --layers lo..hi)."""
    h = " ".join(run([zeroc, "bench", "train", "--help"]).stdout.split())
    out = {}
    for part in BENCH_PARTS:
        m = re.search(part + r" in \[(\d+), (\d+)\]", h)
        out[part] = (int(m.group(1)), int(m.group(2))) if m else None
    problems = ["bench train --help states no range for %s" % k for k, v in out.items()
                if v is None]
    if train_gpt and not problems:
        g = " ".join(run([train_gpt, "--help"]).stdout.split())
        # bench train's workload reads bytes: its vocabulary starts where
        # train_gpt's byte-level text does ("bytes need 256"), above the 2
        # token ids read with --tokens may have.
        byte_vocab = re.search(r"bytes need (\d+)", g)
        for part in BENCH_PARTS:
            m = re.search(r"--%s (\d+)\.\.(\d+)" % part.lower(), g)
            theirs = (int(m.group(1)), int(m.group(2))) if m else None
            if part == "VOCAB" and theirs and byte_vocab:
                theirs = (int(byte_vocab.group(1)), theirs[1])
            if theirs != out[part]:
                problems.append("--model %s: bench train states %s, train_gpt --%s %s"
                                % (part, out[part], part.lower(), theirs))
    check("bench train --help states train_gpt's ranges for --model", problems)
    return None if problems else out


def bench_model_refused(zeroc, train_gpt, tmp):
    """A --model train_gpt would refuse is a usage error before any
    configuration runs: exit 2 naming the part and its range, the workload
    never started, no output directory."""
    rng = bench_model_ranges(zeroc, train_gpt)
    if not rng:
        return
    marker = os.path.join(tmp, "workload_ran")
    wl = os.path.join(tmp, "mark.py")
    with open(wl, "w") as f:
        f.write(MARK_WORKLOAD % (sys.executable, marker))
    os.chmod(wl, 0o700)
    good = [2, 64, 4, 64, 256]
    cases = [("1,8,1,8,1", "VOCAB", 1)]
    for i, part in enumerate(BENCH_PARTS):
        lo, hi = rng[part]
        for v in ([lo - 1] if lo > 1 else []) + [hi + 1]:
            m = list(good)
            m[i] = v
            if part == "HEADS":
                m[1] = 64 * 2  # a DIM in range; the heads' range is what is refused
            cases.append((",".join(map(str, m)), part, v))
    for model, part, v in cases:
        out = os.path.join(tmp, "bench_refused")
        p = run([zeroc, "bench", "train", "--out", out, "--workload", wl, "--model", model,
                 "--only", "stage=0", "--only", "offload_optimizer=none", "--steps", "2",
                 "--warmup", "1"])
        problems = []
        lo, hi = rng[part]
        want = "%s %d is out of range [%d, %d]" % (part, v, lo, hi)
        if p.returncode != 2:
            problems.append("exit %d, want 2 (usage): %s" % (p.returncode, p.stderr[-400:]))
        elif want not in p.stderr or "--model" not in p.stderr:
            problems.append("message %r lacks %r" % (p.stderr.strip()[-400:], want))
        if os.path.exists(marker):
            problems.append("the workload ran")
            os.unlink(marker)
        if os.path.lexists(out):
            problems.append("it made %s" % out)
            shutil.rmtree(out, ignore_errors=True)
        check("bench train --model %s is refused up front" % model, problems)


def nvme_path_entries(train_mlp, tmp):
    d = os.path.join(tmp, "swap")
    os.makedirs(d, exist_ok=True)
    for arg in (d + ",", "," + d, d + ",," + d, "", ",", d + ",,"):
        p = run([train_mlp, "--stage", "2", "--offload-optimizer", "nvme", "--nvme-path", arg,
                 "--steps", "1"], timeout=120)
        problems = []
        if p.returncode != 2 or "--nvme-path" not in p.stderr or "empty" not in p.stderr:
            problems.append("exit %d: %s" % (p.returncode, p.stderr.strip()[-300:]))
        if os.listdir(d):
            problems.append("files left in the swap directory: %s" % os.listdir(d))
        check("train_mlp --nvme-path %r is refused" % arg, problems)
    os.makedirs(d + "2", exist_ok=True)
    p = run([train_mlp, "--stage", "2", "--offload-optimizer", "nvme", "--nvme-path",
             d + "," + d + "2", "--steps", "1"], timeout=300)
    check("train_mlp --nvme-path A,B runs",
          [] if p.returncode == 0 else ["exit %d: %s" % (p.returncode, p.stderr[-300:])])


def main():
    zeroc, train_mlp = sys.argv[1], sys.argv[2]
    train_gpt = sys.argv[3] if len(sys.argv) > 3 else None
    with tempfile.TemporaryDirectory(prefix="zc-ranges-") as tmp:
        estimate_ranges(zeroc)
        bench_all_failed(zeroc, tmp)
        bench_model_refused(zeroc, train_gpt, tmp)
        nvme_path_entries(train_mlp, tmp)
    print("1..%d" % len(RESULTS))
    return 1 if any(p for _, p in RESULTS) else 0


if __name__ == "__main__":
    sys.exit(main())
