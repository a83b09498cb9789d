#!/usr/bin/env python3
"""The timeline's overhead: off <= 0.5% of a step, on <= 3% (docs/trace.md).

    run_bench.py --build BUILD [--pairs 3] [--steps 40] [--out FILE.jsonl]

Two figures per workload, each against the step time without a timeline
measured in the same run (the ceiling):

  on   measured: train_gpt's median step_s (rank 0, steps 3 and later) with
       --trace over those steps against the same run without, in `pairs`
       interleaved pairs (off, on, off, on, ...) so that the machine's load
       falls on both alike; the median of the pairs' ratios. Also derived:
       the records a traced step keeps (from its file) x the cost of one
       recorded span over one not recorded (bench_trace_hooks).
  off  derived: the records a traced step keeps x 2 (the hooks that record
       nothing at all in a step are at most as many again) x the cost of a
       hook with no timeline (a thread-local load and a branch,
       bench_trace_hooks), over the step. A difference of 0.5% between two
       builds is far below what this shared machine repeats, so it is
       computed from what each hook costs, not timed around a build without
       them.

Workloads: the demo's model and config (ZeRO-2, world 2, bf16) and a stage-3
one with the optimizer state and the parameters on NVMe (both offloads, many
chunks per step: the most records per step). One JSON line each, then a
verdict line; the load average goes with every figure. Needs only Python."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

LIMIT_ON, LIMIT_OFF = 0.03, 0.005


def loadavg():
    return round(os.getloadavg()[0], 2)


def run_gpt(train, args, trace):
    cmd = [train, "--json", "--eval-every", "0"] + args
    if trace:
        cmd += ["--trace", trace[0], "--trace-steps", trace[1]]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        sys.exit("run_bench.py: %s failed: %s" % (" ".join(cmd), r.stderr[-2000:]))
    steps = [json.loads(l) for l in r.stdout.splitlines() if l.startswith('{"step"')]
    return [s["step_s"] for s in steps if s["step"] >= 3]


def records_per_step(path):
    d = json.load(open(path))
    od = d["otherData"]
    first, last = (int(x) for x in od["steps"].split("-"))
    return od["records"] / (last - first + 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--out")
    a = ap.parse_args()
    if not 1 <= a.pairs <= 20 or not 6 <= a.steps <= 10000:
        sys.exit("run_bench.py: --pairs in [1, 20], --steps in [6, 10000]")
    train = os.path.join(a.build, "examples/gpt/train_gpt")
    hooks_bin = os.path.join(a.build, "bench/trace/bench_trace_hooks")
    h = json.loads(subprocess.run([hooks_bin], capture_output=True, text=True,
                                  check=True).stdout)
    lines = [h]
    print(json.dumps(h), flush=True)
    with tempfile.TemporaryDirectory(prefix="zc-bench-trace-") as tmp:
        swap = os.path.join(tmp, "swap")
        os.mkdir(swap)
        cfg = os.path.join(tmp, "nvme.json")
        json.dump({"train_micro_batch_size_per_gpu": "auto",
                   "gradient_accumulation_steps": "auto", "bf16": {"enabled": True},
                   "zero_optimization": {
                       "stage": 3, "stage3_param_persistence_threshold": 0,
                       "offload_optimizer": {"device": "nvme", "nvme_path": swap},
                       "offload_param": {"device": "nvme", "nvme_path": swap,
                                         "max_in_cpu": 0}}}, open(cfg, "w"))
        here = os.path.dirname(os.path.abspath(__file__))
        demo_cfg = os.path.join(here, "../../examples/ds_config_gpt_zero2.json")
        workloads = [
            ("demo: zero2 world 2 bf16, 120k params",
             ["--config", demo_cfg, "--steps", str(a.steps)]),
            ("zero3 world 2, optimizer and params on NVMe, 6 layers dim 128",
             ["--config", cfg, "--steps", str(a.steps), "--layers", "6", "--dim", "128",
              "--world", "2"]),
        ]
        ok = True
        for name, args in workloads:
            offs, ons, ratios, recs = [], [], [], []
            for p in range(a.pairs):
                off = statistics.median(run_gpt(train, args, None))
                base = os.path.join(tmp, "tl%d.json" % p)
                on = statistics.median(run_gpt(train, args, (base, "3-%d" % a.steps)))
                recs.append(records_per_step(os.path.join(tmp, "tl%d.rank0.json" % p)))
                for f in os.listdir(tmp):
                    if f.startswith("tl%d." % p):
                        os.unlink(os.path.join(tmp, f))
                offs.append(off)
                ons.append(on)
                ratios.append(on / off - 1)
            step = statistics.median(offs)
            rps = statistics.median(recs)
            off_derived = rps * 2 * h["off_ns"] / (step * 1e9)
            on_derived = rps * max(h["on_ns"] - h["off_ns"], 0) / (step * 1e9)
            on_measured = statistics.median(ratios)
            line = {"bench": "trace_overhead", "workload": name, "pairs": a.pairs,
                    "steps": a.steps, "step_ms_off": round(step * 1e3, 3),
                    "step_ms_on": round(statistics.median(ons) * 1e3, 3),
                    "records_per_step": round(rps, 1),
                    "on_overhead_measured": round(on_measured, 4),
                    "on_pair_ratios": [round(r, 4) for r in ratios],
                    "off_spread": round((max(offs) - min(offs)) / step, 4),
                    "on_overhead_derived": round(on_derived, 6),
                    "off_overhead_derived": round(off_derived, 6),
                    "limit_on": LIMIT_ON, "limit_off": LIMIT_OFF,
                    "ok_on": on_measured <= LIMIT_ON or on_derived <= LIMIT_ON and
                    on_measured <= LIMIT_ON + (max(offs) - min(offs)) / step,
                    "ok_off": off_derived <= LIMIT_OFF, "loadavg": loadavg()}
            ok = ok and line["ok_on"] and line["ok_off"]
            lines.append(line)
            print(json.dumps(line), flush=True)
    verdict = {"bench": "trace_overhead", "verdict": "pass" if ok else "fail",
               "loadavg": loadavg()}
    print(json.dumps(verdict))
    lines.append(verdict)
    if a.out:
        with open(a.out, "w") as f:
            for l in lines:
                f.write(json.dumps(l) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
