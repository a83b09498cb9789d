#!/usr/bin/env python3
"""Larger than memory, end to end (bench/gpt_nvme/run.sh builds and calls this).

Trains examples/gpt's train_gpt at a GPT-2-XL-like width - 24 layers, dim
2304, 18 heads (1.53 B parameters), seq 64, vocab 256, batch 1, bf16 - at
ZeRO stage 3 with offload_optimizer and offload_param on NVMe (max_in_cpu 0,
wall_clock_breakdown on), a few steps at world 1 and at world 2 (rank
threads), and measures, per run:

  - each step's time and its phases (rank 0's zc_engine_timers: forward and
    backward are the model's compute, reduce, gather, optimizer - Adam and
    the conversions - and io_wait, the NVMe time the prefetch did not hide);
  - the bytes the process read from and wrote to storage in each step
    (/proc/PID/io read_bytes and write_bytes between two step lines), next to
    the time those bytes take at the disk's speed measured in the same run
    (`zeroc bench io`: zeroc's NVMe store and fio, 1 MiB requests);
  - the peak RSS (wait4's ru_maxrss) against the plan train_gpt prints
    (its --json "plan" line: zc_plan_memory for each rank's engine plus the
    example's activations and buffers);
  - that the losses are finite and that no swap file is left afterwards.

--states fp32,bf16 trains the large model at each world with the optimizer
state in fp32 and again in bf16 (master and moments, stochastic rounding) and
says what the bf16 state moves and takes against the fp32 state's run.

Then a smaller model that also fits without offload (4 layers of the same
width: every block still spans 6 chunks) is trained at stage 3 with and
without NVMe offload, and the two params_sha256 are compared.

Everything goes into a work directory of its own (made under --dir, removed at
the end, also on SIGINT/SIGTERM, children killed first): the DeepSpeed config,
the training text (the first 4 KiB of /usr/share/common-licenses/GPL-3, so the
final validation is a few windows), the swap files and the bench io file.
Deterministic: fixed seeds, fixed data, fixed configuration; only the times
depend on the machine (the load average is recorded before and after each
run). Writes OUT/results.jsonl (one object per run and one for the disk) and
OUT/summary.md, and prints the summary.
"""
import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

GIB = 1 << 30
children = []


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def proc_io(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                k, v = line.split(":")
                out[k.strip()] = int(v)
    except OSError:
        return None
    return out


def on_signal(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def run_logged(cmd, log, env=None):
    """Runs cmd, its stdout parsed line by line; returns (status, peak RSS
    bytes, plan, steps, final, wall s). Each step line gets the storage bytes
    read and written since the previous JSON line of interest."""
    with open(log, "w") as lf:
        lf.write("$ " + " ".join(cmd) + "\n")
        lf.flush()
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=lf, text=True, bufsize=1,
                             env=env, start_new_session=True)
        children.append(p.pid)
        plan, final, steps, prev = None, None, [], proc_io(p.pid)
        for line in p.stdout:
            lf.write(line)
            lf.flush()
            if not line.startswith("{"):
                continue
            o = json.loads(line)
            io = proc_io(p.pid)
            if "plan" in o:
                plan = o["plan"]
                prev = io
            elif "loss" in o and "eval" not in o:
                if io and prev:
                    o["read_bytes"] = io["read_bytes"] - prev["read_bytes"]
                    o["write_bytes"] = io["write_bytes"] - prev["write_bytes"]
                prev = io
                steps.append(o)
            elif o.get("final"):
                final = o
        _, status, ru = os.wait4(p.pid, 0)
        children.remove(p.pid)
        wall = time.monotonic() - t0
    code = os.waitstatus_to_exitcode(status)
    return code, ru.ru_maxrss * 1024, plan, steps, final, wall


# --states: the optimizer state's precision (docs/config.md, "Optimizer state
# precision"): fp32 master and moments, or bf16 master and moments with
# stochastic rounding (DeepSpeed's bf16_master_weights_and_grads and
# bf16_optimizer_states).
STATES = {"fp32": {}, "bf16": {"bf16_master_weights_and_grads": True,
                               "bf16_optimizer_states": True}}


def write_config(path, swap, offload, steps, state="fp32"):
    zero = {"stage": 3, "overlap_comm": True, "stage3_param_persistence_threshold": 0}
    if offload:
        zero["offload_optimizer"] = {"device": "nvme", "nvme_path": swap, "pin_memory": True}
        zero["offload_param"] = {"device": "nvme", "nvme_path": swap, "pin_memory": True,
                                 "max_in_cpu": 0}
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
           "gradient_clipping": 1.0, "bf16": dict({"enabled": True}, **STATES[state]),
           "wall_clock_breakdown": True,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-6, "betas": [0.9, 0.95],
                                                     "eps": 1e-8, "weight_decay": 0.1}},
           "zero_optimization": zero}
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)
    return cfg


def disk_speed(zeroc, work, size):
    """zeroc bench io: the NVMe store and fio, 1 MiB requests at depth 8 (the
    swap stores' aio.block_size and queue_depth defaults), reads and writes."""
    cmd = [zeroc, "bench", "io", "--dir", work, "--size", size, "--block", "1M", "--depth",
           "8", "--op", "read,write", "--reps", "3"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    rows = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not rows:
        raise SystemExit(f"{' '.join(cmd)}: status {p.returncode}\n{p.stderr[-2000:]}")
    out = {"cmd": " ".join(cmd)}
    for r in rows:
        out[r["op"]] = {"zeroc_gbps": r["gbps"], "fio_io_uring_gbps": r.get("fio_io_uring_gbps"),
                        "fio_libaio_gbps": r.get("fio_libaio_gbps")}
    return out


def median(v):
    return statistics.median(v) if v else float("nan")


def summarize_run(name, world, state, cmd, code, rss, plan, steps, final, wall, swap_left, load0,
                  load1, disk):
    timed = steps[1:] if len(steps) > 1 else steps  # step 1 records the trace, no prefetch
    phases = ["forward", "backward", "reduce", "gather", "optimizer", "io_wait"]
    ph = {k: median([s.get("timers", {}).get(k, float("nan")) for s in timed]) for k in phases}
    rd = median([s.get("read_bytes", 0) for s in timed])
    wr = median([s.get("write_bytes", 0) for s in timed])
    r_gbps = max(disk["read"]["zeroc_gbps"], disk["read"]["fio_io_uring_gbps"] or 0)
    w_gbps = max(disk["write"]["zeroc_gbps"], disk["write"]["fio_io_uring_gbps"] or 0)
    io_floor = rd / 1e9 / r_gbps + wr / 1e9 / w_gbps
    losses = [s["loss"] for s in steps]
    return {
        "run": name, "world": world, "state": state, "cmd": " ".join(cmd), "status": code,
        "wall_s": wall,
        "num_params": final["num_params"] if final else None,
        "params_sha256": final["params_sha256"] if final else None,
        "losses": losses, "finite": bool(losses) and all(
            isinstance(l, (int, float)) and math.isfinite(l) for l in losses),
        "step_s": [s["step_s"] for s in steps], "step_s_median": median(
            [s["step_s"] for s in timed]), "phases_median_s": ph,
        "read_bytes_per_step": rd, "write_bytes_per_step": wr,
        "read_bytes": [s.get("read_bytes") for s in steps],
        "write_bytes": [s.get("write_bytes") for s in steps],
        "io_floor_s": io_floor, "disk_read_gbps": r_gbps, "disk_write_gbps": w_gbps,
        "peak_rss_bytes": rss, "plan": plan,
        "rss_over_plan": rss / plan["host_peak"] if plan else None,
        "swap_left": swap_left, "loadavg_before": load0, "loadavg_after": load1,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", required=True)
    ap.add_argument("--dir", help="where the work directory (swap files) goes "
                    "(default: --out)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--worlds", default="1,2")
    ap.add_argument("--model", default="24,2304,18",
                    help="LAYERS,DIM,HEADS of the large run (seq 64, vocab 256)")
    ap.add_argument("--equiv-layers", type=int, default=8,
                    help="layers of the with/without offload comparison (0: skip it)")
    ap.add_argument("--io-size", default="4G", help="zeroc bench io --size")
    ap.add_argument("--states", default="fp32",
                    help="optimizer-state precisions of the large run, each of fp32, bf16 "
                    "(bf16 master and moments)")
    a = ap.parse_args()
    states = a.states.split(",")
    if not states or any(st not in STATES for st in states) or len(set(states)) != len(states):
        raise SystemExit(f"--states '{a.states}': expected distinct values of "
                         f"{', '.join(STATES)}")
    exe = os.path.join(a.build, "examples", "gpt", "train_gpt")
    zeroc = os.path.join(a.build, "tools", "zeroc")
    for f in (exe, zeroc):
        if not os.access(f, os.X_OK):
            raise SystemExit(f"{f} is missing: build first (bash bench/gpt_nvme/run.sh)")
    os.makedirs(a.out, exist_ok=True)
    signal.signal(signal.SIGTERM, on_signal)
    work = tempfile.mkdtemp(prefix="zc-gpt-nvme-", dir=a.dir or a.out)
    results = []
    try:
        swap = os.path.join(work, "swap")
        os.mkdir(swap)
        data = os.path.join(work, "data.txt")
        with open("/usr/share/common-licenses/GPL-3", "rb") as src, open(data, "wb") as dst:
            dst.write(src.read(4096))
        print(f"disk: zeroc bench io in {work} (load {loadavg()})", flush=True)
        disk = disk_speed(zeroc, work, a.io_size)
        disk["loadavg_after"] = loadavg()
        results.append({"disk": disk})
        L, D, H = (int(x) for x in a.model.split(","))

        def train(name, layers, world, offload, steps, state="fp32"):
            cfg = os.path.join(work, f"{name}.json")
            write_config(cfg, swap, offload, steps, state)
            cmd = [exe, "--config", cfg, "--layers", str(layers), "--dim", str(D), "--heads",
                   str(H), "--seq", "64", "--vocab", "256", "--batch", "1", "--dtype", "bf16",
                   "--stage", "3", "--world", str(world), "--steps", str(steps),
                   "--eval-every", "0", "--data", data, "--json", "--launcher", "threads"]
            load0 = loadavg()
            print(f"{name}: {' '.join(cmd)} (load {load0})", flush=True)
            code, rss, plan, steps_, final, wall = run_logged(
                cmd, os.path.join(a.out, f"{name}.log"))
            left = os.listdir(swap)
            r = summarize_run(name, world, state, cmd, code, rss, plan, steps_, final, wall, left,
                              load0, loadavg(), disk)
            results.append(r)
            with open(os.path.join(a.out, "results.jsonl"), "w") as f:
                for x in results:
                    f.write(json.dumps(x) + "\n")
            print(f"{name}: status {code}, {wall:.0f} s, steps {r['step_s']}, losses "
                  f"{r['losses']}, peak RSS {rss / GIB:.2f} GiB vs plan "
                  f"{(plan or {}).get('host_peak', 0) / GIB:.2f} GiB, swap left {left}",
                  flush=True)
            for f in left:  # a failed run's leftovers must not fill the disk
                shutil.rmtree(os.path.join(swap, f), ignore_errors=True)
            return r

        for w in (int(x) for x in a.worlds.split(",")):
            for st in states:
                tag = "" if st == "fp32" else f"_{st}state"
                train(f"gpt{L}x{D}_nvme_w{w}{tag}", L, w, True, a.steps, st)
        if a.equiv_layers > 0:
            e0 = train(f"gpt{a.equiv_layers}x{D}_plain_w1", a.equiv_layers, 1, False, 2)
            e1 = train(f"gpt{a.equiv_layers}x{D}_nvme_w1", a.equiv_layers, 1, True, 2)
            same = e0["params_sha256"] is not None and e0["params_sha256"] == e1["params_sha256"]
            results.append({"equivalence": {"layers": a.equiv_layers, "plain":
                            e0["params_sha256"], "nvme": e1["params_sha256"], "same": same}})
    finally:
        for pid in list(children):
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(work, ignore_errors=True)
    with open(os.path.join(a.out, "results.jsonl"), "w") as f:
        for x in results:
            f.write(json.dumps(x) + "\n")
    md = summary(results)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(md)
    print(md)
    bad = [r for r in results if "run" in r and (r["status"] != 0 or not r["finite"] or
                                                 r["swap_left"])]
    eq = [r["equivalence"] for r in results if "equivalence" in r]
    return 1 if bad or (eq and not eq[0]["same"]) else 0


def summary(results):
    disk = next(r["disk"] for r in results if "disk" in r)
    out = ["| run | world | steps | step s (median, from step 2) | step 1 s | forward | "
           "backward | reduce | gather | optimizer | io_wait | read GB/step | write GB/step "
           "| I/O at disk speed s | peak RSS GiB | plan GiB | RSS/plan | losses | load avg "
           "before / after |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
           "---:|---|---|"]
    for r in results:
        if "run" not in r:
            continue
        p = r["phases_median_s"]
        plan = r["plan"]["host_peak"] / GIB if r["plan"] else float("nan")
        out.append(
            f"| {r['run']} | {r['world']} | {len(r['step_s'])} | {r['step_s_median']:.1f} | "
            f"{r['step_s'][0] if r['step_s'] else float('nan'):.1f} | {p['forward']:.1f} | "
            f"{p['backward']:.1f} | {p['reduce']:.1f} | {p['gather']:.1f} | "
            f"{p['optimizer']:.1f} | {p['io_wait']:.1f} | "
            f"{r['read_bytes_per_step'] / 1e9:.2f} | {r['write_bytes_per_step'] / 1e9:.2f} | "
            f"{r['io_floor_s']:.1f} | {r['peak_rss_bytes'] / GIB:.2f} | {plan:.2f} | "
            f"{r['rss_over_plan'] or float('nan'):.3f} | "
            f"{', '.join(f'{l:.4f}' for l in r['losses'])} | {r['loadavg_before']} / "
            f"{r['loadavg_after']} |")
    # The state's precision against fp32 state at the same world, in this run.
    runs = [r for r in results if "run" in r]
    for r in runs:
        ref = next((b for b in runs if b["state"] == "fp32" and b["world"] == r["world"] and
                    b["run"] != r["run"]), None)
        if r["state"] != "fp32" and ref and ref["read_bytes_per_step"] and ref["step_s_median"]:
            moved = r["read_bytes_per_step"] + r["write_bytes_per_step"]
            moved0 = ref["read_bytes_per_step"] + ref["write_bytes_per_step"]
            out.append("")
            rd = r["read_bytes_per_step"] / ref["read_bytes_per_step"]
            wr = r["write_bytes_per_step"] / ref["write_bytes_per_step"]
            out.append(f"{r['run']} against {ref['run']}: bytes moved per step "
                       f"{moved / moved0:.3f}x (read {rd:.3f}x, written {wr:.3f}x), "
                       f"step {r['step_s_median'] / ref['step_s_median']:.3f}x, I/O at disk "
                       f"speed {r['io_floor_s'] / ref['io_floor_s']:.3f}x.")
    out.append("")
    out.append(f"Disk (`{disk['cmd']}`, load after {disk['loadavg_after']}): read "
               f"{disk['read']['zeroc_gbps']:.2f} GB/s by zeroc's store, "
               f"{disk['read']['fio_io_uring_gbps'] or float('nan'):.2f} by fio (io_uring); "
               f"write {disk['write']['zeroc_gbps']:.2f} and "
               f"{disk['write']['fio_io_uring_gbps'] or float('nan'):.2f}.")
    for r in results:
        if "equivalence" in r:
            e = r["equivalence"]
            out.append(f"Equivalence, {e['layers']} layers at stage 3, world 1: without offload "
                       f"{e['plain']}, with NVMe offload {e['nvme']}: "
                       f"{'the same' if e['same'] else 'DIFFERENT'}.")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as e:
        print(f"run_gpt_nvme: interrupted ({e}); the work directory was removed",
              file=sys.stderr)
        sys.exit(130)
