#!/usr/bin/env python3
"""The host optimizer benches (bench/cpu_adam) at tiny sizes: what they print,
not how fast anything ran (no assertion here reads a time).

- bench_cpu_ew (Lion and Adagrad), and `zeroc bench adam --optimizer lion`
  and `--optimizer adagrad`: every stdout line is strict JSON; each case line
  has exactly the documented keys, one line per optimizer x thread count x
  N x gradient dtype x copy; bytes_per_s / params_per_s is the bytes a
  parameter the bench documents (read master, state: 8; gradient 4 fp32 or 2
  bf16; write master, state: 8; copy 2 when on) and bytes_per_param says the
  same; the summary line names, for each case at the largest N, one of the
  thread counts run, and meets_bar is its ratio >= 0.90.
- bench_cpu_adam and bench_cpu_adam_lp, which share the option parsing and
  the measurement with it (bench_opts.h): the same keys as before and the
  same bytes-per-parameter rule (Adam: 24 + gradient + copy; over 16-bit
  state: 2 x the three state widths + 4).
- A bad --optimizer exits 2 with a message naming the flag and prints
  nothing on stdout; so do the shared flags' bad values in each bench.

Usage: check_bench_optim.py ZEROC BENCH_CPU_EW BENCH_CPU_ADAM BENCH_CPU_ADAM_LP.
Prints TAP.
"""
import json
import subprocess
import sys

RESULTS = []
TINY = ["--n", "4K,16K", "--reps", "1", "--threads", "1,2", "--variant", "scalar"]

EW_KEYS = {"bench", "optimizer", "variant", "threads", "n", "grad_dtype", "param_copy",
           "seconds", "params_per_s", "bytes_per_s", "stream_bytes_per_s", "ratio_to_stream",
           "bytes_per_param"}
EW_SUMMARY_KEYS = {"optimizer", "variant", "grad_dtype", "param_copy", "threads",
                   "params_per_s", "ratio_to_stream", "meets_bar"}
ADAM_KEYS = {"variant", "threads", "n", "grad_dtype", "param_copy", "seconds", "params_per_s",
             "bytes_per_s", "stream_bytes_per_s", "ratio_to_stream", "triad_bytes_per_s",
             "bytes_per_param"}
LP_KEYS = {"bench", "variant", "threads", "n", "state", "stochastic", "seconds",
           "params_per_s", "bytes_per_s", "stream_bytes_per_s", "ratio_to_stream",
           "bytes_per_param"}
GRAD_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
LP_STATE_BYTES = {"bf16_master_bf16_moments": 6, "fp32_master_bf16_moments": 8,
                  "bf16_master_fp32_moments": 10, "fp32": 12}


def check(name, problems):
    RESULTS.append((name, problems))
    n = len(RESULTS)
    if problems:
        print("not ok %d - %s\n#   %s" % (n, name, "\n#   ".join(problems[:20])), flush=True)
    else:
        print("ok %d - %s" % (n, name), flush=True)


def run(cmd, timeout=300):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def json_lines(p, probs):
    """The stdout lines of p as objects (strict JSON: no NaN or Infinity)."""
    def bad_constant(c):
        raise ValueError("non-JSON number " + c)
    out = []
    if p.returncode != 0:
        probs.append("exit %d: %s" % (p.returncode, p.stderr[-400:]))
        return out
    for line in p.stdout.splitlines():
        try:
            out.append(json.loads(line, parse_constant=bad_constant))
        except ValueError as e:
            probs.append("not strict JSON (%s): %s" % (e, line[:200]))
    if not out or "summary" not in out[-1]:
        probs.append("no summary line last: %r" % p.stdout[-300:])
    return out


def bytes_rule(o, want, probs):
    """bytes_per_s / params_per_s and bytes_per_param against the formula."""
    if o["bytes_per_param"] != want:
        probs.append("bytes_per_param %s, expected %d: %s" % (o["bytes_per_param"], want, o))
    pps, bps = o["params_per_s"], o["bytes_per_s"]
    if not isinstance(pps, (int, float)) or not isinstance(bps, (int, float)) or pps <= 0:
        probs.append("params_per_s %r, bytes_per_s %r: not positive numbers" % (pps, bps))
    elif abs(bps / pps - want) > 2e-3 * want:  # both printed to 5 significant digits
        probs.append("bytes_per_s / params_per_s = %.5f, expected %d: %s" % (bps / pps, want, o))


def keys(o, want, probs):
    if set(o) != want:
        probs.append("keys %s, expected %s" % (sorted(o), sorted(want)))
        return False
    return True


def check_ew(name, cmd, optimizers):
    probs = []
    lines = json_lines(run(cmd), probs)
    cases = lines[:-1] if lines else []
    seen = set()
    for o in cases:
        if not keys(o, EW_KEYS, probs):
            continue
        if o["bench"] != "cpu_ew" or o["optimizer"] not in optimizers:
            probs.append("bench %r, optimizer %r" % (o["bench"], o["optimizer"]))
        if o["grad_dtype"] not in ("fp32", "bf16") or o["param_copy"] not in ("none", "bf16"):
            probs.append("case %s/%s" % (o["grad_dtype"], o["param_copy"]))
            continue
        want = 16 + GRAD_BYTES[o["grad_dtype"]] + (2 if o["param_copy"] == "bf16" else 0)
        bytes_rule(o, want, probs)
        seen.add((o["optimizer"], o["threads"], o["n"], o["grad_dtype"], o["param_copy"]))
    expect = {(op, t, n, g, c) for op in optimizers for t in (1, 2) for n in (4096, 16384)
              for g in ("fp32", "bf16") for c in ("none", "bf16")}
    if seen != expect:
        probs.append("cases missing %s, unexpected %s" % (sorted(expect - seen)[:4],
                                                           sorted(seen - expect)[:4]))
    if lines and "summary" in lines[-1]:
        s = lines[-1]
        if s.get("summary") != "cpu_ew" or s.get("n") != 16384:
            probs.append("summary %r" % {k: s.get(k) for k in ("summary", "n")})
        best = s.get("best_threads") or []
        got = set()
        for b in best:
            if not keys(b, EW_SUMMARY_KEYS, probs):
                continue
            got.add((b["optimizer"], b["grad_dtype"], b["param_copy"]))
            if b["threads"] not in (1, 2):
                probs.append("best thread count %r was not run" % b["threads"])
            r = b["ratio_to_stream"]
            if b["meets_bar"] != (isinstance(r, (int, float)) and r >= 0.90):
                probs.append("meets_bar %r for ratio %r" % (b["meets_bar"], r))
            # The summary's figures are one of the case lines at the largest N.
            if not any(o.get("n") == 16384 and o.get("threads") == b["threads"]
                       and o.get("optimizer") == b["optimizer"]
                       and o.get("grad_dtype") == b["grad_dtype"]
                       and o.get("param_copy") == b["param_copy"]
                       and o.get("params_per_s") == b["params_per_s"] for o in cases):
                probs.append("summary entry matches no case line: %s" % b)
        want = {(op, g, c) for op in optimizers for g in ("fp32", "bf16")
                for c in ("none", "bf16")}
        if got != want or len(best) != len(want):
            probs.append("summary cases %s, expected %s" % (sorted(got), sorted(want)))
    check(name, probs)


def check_usage_error(name, cmd, flag):
    p = run(cmd)
    probs = []
    if p.returncode != 2:
        probs.append("exit %d, expected 2" % p.returncode)
    if flag not in p.stderr:
        probs.append("stderr does not name %s: %r" % (flag, p.stderr[-300:]))
    if p.stdout:
        probs.append("stdout not empty: %r" % p.stdout[:200])
    check(name, probs)


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: check_bench_optim.py ZEROC BENCH_CPU_EW BENCH_CPU_ADAM "
                 "BENCH_CPU_ADAM_LP")
    zeroc, ew, adam, lp = sys.argv[1:]

    check_ew("bench_cpu_ew: keys, cases, bytes per parameter, summary", [ew] + TINY,
             ("lion", "adagrad"))
    for opt in ("lion", "adagrad"):
        check_ew("zeroc bench adam --optimizer %s" % opt,
                 [zeroc, "bench", "adam", "--optimizer", opt] + TINY, (opt,))
    check_ew("zeroc bench adam --optimizer=lion --device cpu",
             [zeroc, "bench", "adam", "--optimizer=lion", "--device", "cpu"] + TINY, ("lion",))

    probs = []
    lines = json_lines(run([adam] + TINY), probs)
    for o in lines[:-1]:
        if keys(o, ADAM_KEYS, probs):
            bytes_rule(o, 24 + GRAD_BYTES[o["grad_dtype"]] + (o["param_copy"] != "none") * 2,
                       probs)
    if len(lines) != 2 * 2 * 3 * 2 + 1:
        probs.append("%d lines, expected 25" % len(lines))
    check("bench_cpu_adam: keys and bytes per parameter", probs)
    probs = []
    p = run([zeroc, "bench", "adam", "--optimizer", "adam"] + TINY)
    if p.returncode != 0 or p.stdout.splitlines()[0:1] and set(json.loads(
            p.stdout.splitlines()[0])) != ADAM_KEYS:
        probs.append("exit %d, first line %r" % (p.returncode, p.stdout[:200]))
    check("zeroc bench adam --optimizer adam is bench_cpu_adam", probs)

    probs = []
    lines = json_lines(run([lp] + TINY), probs)
    for o in lines[:-1]:
        if keys(o, LP_KEYS, probs):
            bytes_rule(o, 2 * LP_STATE_BYTES[o["state"]] + 4, probs)
    if len(lines) != 2 * 2 * 4 * 2 + 1:
        probs.append("%d lines, expected 33" % len(lines))
    check("bench_cpu_adam_lp: keys and bytes per parameter", probs)

    check_usage_error("zeroc bench adam --optimizer sgd", [zeroc, "bench", "adam",
                      "--optimizer", "sgd", "--n", "4K"], "--optimizer")
    check_usage_error("zeroc bench adam --optimizer= (empty)",
                      [zeroc, "bench", "adam", "--optimizer=", "--n", "4K"], "--optimizer")
    check_usage_error("zeroc bench adam --optimizer (no value)",
                      [zeroc, "bench", "adam", "--n", "4K", "--optimizer"], "--optimizer")
    check_usage_error("zeroc bench adam --optimizer lion --device cuda",
                      [zeroc, "bench", "adam", "--optimizer", "lion", "--device", "cuda"],
                      "--optimizer")
    check_usage_error("bench_cpu_ew --optimizer adam", [ew, "--optimizer", "adam"],
                      "--optimizer")
    for prog in (ew, adam, lp):
        name = prog.rsplit("/", 1)[-1]
        for flag, val in (("--n", "0"), ("--threads", "1,,2"), ("--reps", "2.5")):
            check_usage_error("%s %s %s" % (name, flag, val), [prog, flag, val], flag)
        p = run([prog, "--variant", "nope", "--n", "4K"])
        check("%s --variant nope" % name,
              [] if p.returncode == 2 and "no variant named 'nope'" in p.stderr
              else ["exit %d: %r" % (p.returncode, p.stderr[-300:])])


main()
print("1..%d" % len(RESULTS))
sys.exit(1 if any(p for _, p in RESULTS) else 0)
