#!/usr/bin/env python3
"""train_gpt's progress lines, timeline and comms logger, end to end.

    check_observe_gpt.py TRAIN_GPT DEMO_CONFIG DEMO_SH TRACE_CHECK

  - the demo's cadence: with the demo's configuration (steps_per_print
    unset) a progress line every --steps / 20 steps, so the demo
    (scripts/demo.sh's --steps, read from the script) prints 20; run here
    at 100 steps: exactly 20 lines, for steps 5, 10, ..., 100, and the whole
    output stays short; steps_per_print from a config decides instead;
  - each progress line carries tok/s, TFLOP/s and MFU; the --json lines carry
    flops_per_s_per_rank = tokens_per_s x FLOPs per token / world (the formula
    of bench/train/gpt_flops.py, recomputed here) and mfu against
    --peak-flops;
  - --trace FILE --trace-steps 2-4 at world 2: one file per rank that passes
    TRACE_CHECK (format, nesting, top-level spans adding up to each step),
    its steps those of the window, each of rank 0's steps within 5% of the
    step_s train_gpt (rank 0) measured around it; a second run refuses to write over the
    files (exit status 1, the message names them); a malformed
    --trace-steps is a usage error;
  - comms_logger enabled in the config: the summary table is printed.
Takes about 15 s."""
import json
import os
import re
import subprocess
import sys
import tempfile

train, demo_cfg, demo_sh, trace_check = sys.argv[1:5]
DATA = "/usr/share/common-licenses/GPL-3"
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg)


def run(args, **kw):
    return subprocess.run([train, "--data", DATA] + args, capture_output=True, text=True,
                          timeout=240, **kw)


def gpt_flops_per_token(layers, dim, seq, vocab):
    n = vocab * dim + seq * dim + layers * (12 * dim * dim + 13 * dim) + 2 * dim
    return 6 * (n - seq * dim) + 12 * layers * dim * seq


STEP_LINE = re.compile(r"^step +(\d+)/(\d+)  loss \S+  grad_norm \S+  lr \S+  (\d+) tok/s  "
                       r"(\S+) TFLOP/s  MFU (\S+)%$")

# ---- the demo's cadence -----------------------------------------------------
demo_steps = int(re.search(r"^exec .*train_gpt .*--steps (\d+)", open(demo_sh).read(),
                           re.M).group(1))
r = run(["--config", demo_cfg, "--steps", "100", "--eval-every", "0"])
if r.returncode != 0:
    fail("demo config run failed: %s" % r.stderr[-2000:])
lines = [l for l in r.stdout.splitlines() if l.startswith("step ")]
got = [int(STEP_LINE.match(l).group(1)) for l in lines if STEP_LINE.match(l)]
if got != list(range(5, 101, 5)):
    fail("100 steps with the demo's config: progress lines at %s, want every 5th" % got)
if len(lines) != len(got):
    fail("progress lines without tok/s, TFLOP/s and MFU: %s" % [l for l in lines
                                                               if not STEP_LINE.match(l)][:3])
if len(r.stdout.splitlines()) > 40:
    fail("the demo's config prints %d lines for 100 steps" % len(r.stdout.splitlines()))
print("demo cadence: %d progress lines for 100 steps; the demo's %d steps print %d"
      % (len(got), demo_steps, demo_steps // max(1, demo_steps // 20)))
if demo_steps // max(1, demo_steps // 20) != 20:
    fail("scripts/demo.sh's --steps %d would not print 20 lines" % demo_steps)

with tempfile.TemporaryDirectory(prefix="zc-observe-") as tmp:
    # steps_per_print from the config.
    cfg = json.load(open(demo_cfg))
    cfg["steps_per_print"] = 7
    cfg["comms_logger"] = {"enabled": True}
    p = os.path.join(tmp, "spp.json")
    json.dump(cfg, open(p, "w"))
    r = run(["--config", p, "--steps", "21", "--eval-every", "0", "--layers", "1"])
    got = [int(STEP_LINE.match(l).group(1)) for l in r.stdout.splitlines() if STEP_LINE.match(l)]
    if r.returncode != 0 or got != [7, 14, 21]:
        fail("steps_per_print 7 over 21 steps: lines at %s (%s)" % (got, r.stderr[-500:]))
    if "--- comms_logger (rank 0) ---" not in r.stdout or "busbw (GB/s)" not in r.stdout or \
            "reduce_scatter" not in r.stdout:
        fail("comms_logger enabled: no summary table in\n%s" % r.stdout[-1500:])

    # JSON lines: FLOPs and MFU against --peak-flops.
    L, D, T, V, B, W = 1, 32, 32, 256, 4, 2
    r = run(["--json", "--steps", "3", "--layers", str(L), "--dim", str(D), "--heads", "2",
             "--seq", str(T), "--batch", str(B), "--world", str(W), "--eval-every", "0",
             "--peak-flops", "1e12"])
    steps = [json.loads(l) for l in r.stdout.splitlines() if l.startswith('{"step"')]
    fpt = gpt_flops_per_token(L, D, T, V)
    for s in steps:
        want = s["tokens_per_s"] * fpt / W
        if abs(s["flops_per_s_per_rank"] - want) > 1e-6 * want:
            fail("step %d: flops_per_s_per_rank %g, tokens_per_s x %d / %d = %g"
                 % (s["step"], s["flops_per_s_per_rank"], fpt, W, want))
        if abs(s["mfu"] - want / 1e12) > 1e-6 * want / 1e12:
            fail("step %d: mfu %g, want %g" % (s["step"], s["mfu"], want / 1e12))
    if len(steps) != 3:
        fail("--json: %d step lines (%s)" % (len(steps), r.stderr[-500:]))

    # The timeline.
    base = os.path.join(tmp, "tl.json")
    args = ["--json", "--steps", "6", "--world", "2", "--stage", "3", "--eval-every", "0",
            "--trace", base, "--trace-steps", "2-4"]
    r = run(args)
    if r.returncode != 0:
        fail("--trace run failed: %s" % r.stderr[-2000:])
    step_s = {json.loads(l)["step"]: json.loads(l)["step_s"]
              for l in r.stdout.splitlines() if l.startswith('{"step"')}
    files = [os.path.join(tmp, "tl.rank%d.json" % k) for k in range(2)]
    for f in files:
        if not os.path.exists(f):
            fail("--trace: %s was not written (%s)" % (f, os.listdir(tmp)))
    c = subprocess.run([sys.executable, trace_check] + files, capture_output=True, text=True)
    if c.returncode != 0:
        fail("trace_check: %s" % c.stderr)
    print(c.stdout, end="")
    for f in files:
        if not os.path.exists(f):
            continue
        d = json.load(open(f))
        ev = [e for e in d["traceEvents"] if e.get("ph") == "X" and e["cat"] == "step"]
        if sorted(e["args"]["step"] for e in ev) != [2, 3, 4]:
            fail("%s: steps %s, the window is 2-4" % (f, [e["args"]["step"] for e in ev]))
        for e in ev if f == files[0] else []:  # step_s is rank 0's
            dur_s = e["dur"] / 1e6
            want = step_s[e["args"]["step"]]
            if abs(dur_s - want) > 0.05 * want:
                fail("%s: step %d lasts %.6f s on the timeline, train_gpt measured %.6f s"
                     % (f, e["args"]["step"], dur_s, want))
    r = run(args)
    if r.returncode != 1 or "never written over an existing file" not in r.stderr:
        fail("a second --trace run: status %d, stderr %s" % (r.returncode, r.stderr[-500:]))
    r = run(["--steps", "2", "--trace", base + "2", "--trace-steps", "4-2"])
    if r.returncode != 2 or "--trace-steps" not in r.stderr:
        fail("--trace-steps 4-2: status %d, stderr %s" % (r.returncode, r.stderr[-500:]))

if failures:
    sys.exit("%d failure(s)" % len(failures))
print("train_gpt progress, timeline and comms logger: ok")
