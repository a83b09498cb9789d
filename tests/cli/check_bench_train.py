#!/usr/bin/env python3
"""`zeroc bench train` end to end on a short sweep of the GPT example.

usage: check_bench_train.py ZEROC TRAIN_GPT

1. The sweep: stages 0-3 x offload_optimizer none/cpu/nvme (from stage 1) at
   world 2, bf16, and stage 3 x offload_param none/cpu/nvme, 4 steps (2 timed).
   Every JSON line has the interface's keys; results.jsonl holds the same
   lines as stdout; results.md a row per configuration; the SVG and PNG are
   images. Every configuration that ran has the library's peak within 10% of
   `zeroc estimate`'s bytes in every kind (and both 0 where one is), step
   times ordered min <= median <= max, samples/s = world x batch / median and
   the six breakdown phases (>= 0; gather 0 exactly in stage 0, io_wait 0
   without nvme), swap files seen on disk under nvme (either offload), the
   parameter shards in pinned memory (offload_param cpu) or on NVMe (nvme,
   max_in_cpu 0) and a VmHWM above the library's peak. Every configuration
   runs, offload_param included. The bench's own directory is gone
   afterwards, and a second run into the same DIR is refused without
   touching the files.
2. A crash, a hang and a refusal: a stand-in workload (this script's
   as_workload) kills itself with SIGKILL in stage 1, sleeps past --timeout
   in stage 2, and in stage 3 with offload_param nvme points
   offload_param.nvme_path at a regular file, which the library refuses when
   it loads the configuration; the first two come out "killed" with the
   reason, the third "failed" with the library's message naming the key, and stage 0 and stage 3
   without offload complete.
3. SIGTERM to the bench while the hanging configuration runs: the child is
   killed, the bench's directory removed, the bench dies of SIGTERM, and the
   configuration finished before stays in results.jsonl.
4. The plot, with this machine's own PATH (no prepared interpreter): drawn,
   the bench saying by what, the SVG's key naming every configuration; a
   python3 first on PATH without matplotlib is passed over for Debian's
   /usr/bin/python3 (where scripts/deps.sh installs matplotlib), then
   gnuplot; --plot-with gnuplot and none.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

KEYS = {"config", "status", "peak", "estimate", "step_s", "samples_per_s"}
# The engine's bookkeeping (chunk and segment tables, about 100 bytes per
# tensor and chunk, and per-rank tables) for the sweep's 2-layer GPT.
BOOKKEEPING = 256 << 10
KINDS = ("device", "pinned", "host", "nvme")
BATCH, WORLD = 8, 2


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def as_workload(argv):
    """Stand-in for train_gpt: misbehaves by stage, else runs the real one."""
    cfg = json.load(open(argv[argv.index("--config") + 1]))
    zero = cfg["zero_optimization"]
    stage = zero["stage"]
    if stage == 3 and zero.get("offload_param", {}).get("device") == "nvme":
        # A regular file where a directory must be: the library refuses it.
        path = os.path.join(os.environ["ZC_TEST_TMP"], "not-a-directory")
        open(path, "w").close()
        zero["offload_param"]["nvme_path"] = path
        with open(argv[argv.index("--config") + 1], "w") as f:
            json.dump(cfg, f)
    if stage == 1:
        print("about to crash", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    if stage == 2:
        piddir = os.environ.get("ZC_TEST_PIDDIR")
        if piddir:
            with open(os.path.join(piddir, "hung.pid"), "w") as f:
                f.write(str(os.getpid()))
        time.sleep(600)
    real = os.environ["ZC_TEST_TRAIN_GPT"]
    os.execv(real, [real] + argv[1:])


def run(cmd, env=None, timeout=300):
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    return p, time.monotonic() - t0


def lines_of(p):
    return [json.loads(l) for l in p.stdout.splitlines() if l.strip()]


def check_files(out, rows):
    with open(os.path.join(out, "results.jsonl")) as f:
        disk = [json.loads(l) for l in f if l.strip()]
    if disk != rows:
        fail("results.jsonl differs from the lines printed")
    md = open(os.path.join(out, "results.md")).read()
    body = [l for l in md.splitlines() if l.startswith("| ") and not l.startswith("| stage |")]
    if len(body) != len(rows):
        fail(f"results.md has {len(body)} rows for {len(rows)} configurations")
    if not open(os.path.join(out, "memory_vs_time.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n":
        fail("memory_vs_time.png is not a PNG")
    if "<svg" not in open(os.path.join(out, "memory_vs_time.svg")).read(4096):
        fail("memory_vs_time.svg is not an SVG")
    left = [n for n in os.listdir(out) if n.startswith("zeroc-bench-train.")]
    if left:
        fail(f"the bench's directory was left behind: {left}")


def check_ok(r):
    c = r["config"]
    name = f"stage {c['stage']} {c['offload_optimizer']} {c['offload_param']}"
    for k in KINDS:
        peak, est = r["peak"][k], r["estimate"][k]
        if peak == 0 and est == 0:
            continue
        # On the host path the engine's buffers are device memory (as on a
        # GPU) and the pageable host memory the library allocates is its
        # bookkeeping alone, which the planner does not count
        # (docs/placement.md): small, and planned as nothing.
        if k == "host" and est == 0 and 0 < peak <= BOOKKEEPING:
            continue
        if peak == 0 or abs(est - peak) > 0.10 * peak:
            fail(f"{name}: {k} estimate {est} is not within 10% of the peak {peak}")
    s = r["step_s"]
    if not (0 < s["min"] <= s["median"] <= s["max"]):
        fail(f"{name}: step times out of order {s}")
    want = WORLD * BATCH / s["median"]
    if abs(r["samples_per_s"] - want) > 1e-6 * want:
        fail(f"{name}: samples/s {r['samples_per_s']}, want {want}")
    bd = r["breakdown_s"]
    if set(bd) != {"forward", "backward", "reduce", "gather", "optimizer", "io_wait"}:
        fail(f"{name}: breakdown {bd}")
    if any(v < 0 for v in bd.values()):
        fail(f"{name}: a negative phase {bd}")
    if (c["stage"] == 0) != (bd["gather"] == 0):
        fail(f"{name}: gather {bd['gather']} (0 exactly when stage 0)")
    nvme = "nvme" in (c["offload_optimizer"], c["offload_param"])
    if not nvme and bd["io_wait"] != 0:
        fail(f"{name}: io_wait {bd['io_wait']} without nvme")
    if nvme and r["process"]["nvme_files"] <= 0:
        fail(f"{name}: no swap file seen on disk")

    if r["process"]["vmhwm"] < sum(r["peak"][k] for k in ("device", "pinned", "host")):
        fail(f"{name}: VmHWM {r['process']['vmhwm']} below the library's peak")


def has_matplotlib(py):
    return bool(py) and os.access(py, os.X_OK) and subprocess.run(
        [py, "-c", "import matplotlib"], capture_output=True).returncode == 0


def check_plot(p, out, rows, want):
    """The plot of a sweep run with this machine's own PATH: drawn by what
    `want` names ("matplotlib" or "gnuplot"; None: by either), which the
    bench said; the key in the SVG names every configuration that ran."""
    said = [l for l in p.stderr.splitlines() if "plot drawn with" in l]
    if not said:
        fail(f"no plot drawn: {p.stderr[-1500:]!r}")
    if want and want not in said[0]:
        fail(f"the plot was drawn with {said[0]!r}, expected {want}")
    svg = open(os.path.join(out, "memory_vs_time.svg")).read()
    for i, r in enumerate(r for r in rows if r["status"] == "ok"):
        c = r["config"]
        if r.get("max_memory"):
            name = "w%d %s: device " % (c["world"], c["dtype"])
        else:
            name = f"s{c['stage']}"
            if c["offload_optimizer"] != "none":
                name += f" opt:{c['offload_optimizer']}"
            if c["offload_param"] != "none":
                name += f" par:{c['offload_param']}"
            name += f" w{c['world']} {c['dtype']}"
        if name not in svg:
            fail(f"the key in the SVG does not name {name!r} ({c})")


def sweep(zeroc, train_gpt, tmp):
    out = os.path.join(tmp, "sweep")
    cmd = [zeroc, "bench", "train", "--out", out, "--json", "--steps", "4", "--warmup", "2",
           "--world", str(WORLD), "--batch", str(BATCH), "--workload", train_gpt,
           "--timeout", "120"]
    env = dict(os.environ)  # this machine's own PATH
    p, dt = run(cmd, env=env)
    if p.returncode != 0:
        fail(f"exit {p.returncode}: {p.stderr}")
    rows = lines_of(p)
    print(f"# sweep of {len(rows)} configurations in {dt:.1f} s")
    if len(rows) != 16:
        fail(f"{len(rows)} configurations, want 16 (1 + 3 + 3 + 3 x 3)")
    for r in rows:
        if not KEYS <= set(r):
            fail(f"missing keys {KEYS - set(r)} in {r}")
        c = r["config"]
        if set(c) != {"stage", "offload_optimizer", "offload_param", "world", "dtype",
                      "checkpoint_activations", "optimizer_state"} or \
                c["checkpoint_activations"] != "none" or c["optimizer_state"] != "fp32" or \
                r["state_over_fp32"] is not None:
            fail(f"config keys {sorted(c)}")
        if r["status"] != "ok":
            fail(f"{c}: {r['status']}: {r.get('reason')}")
        check_ok(r)
        # The parameter home against the same configuration without it: cpu
        # moves the shards to pinned memory; nvme (the bench sets max_in_cpu
        # 0) to the swap file, with pinned buffers.
        if c["offload_param"] != "none":
            base = next(b for b in rows if b["config"] == dict(c, offload_param="none"))
            more = {k: r["peak"][k] - base["peak"][k] for k in KINDS}
            if more["pinned"] <= 0 or more["device"] >= 0 or \
                    (more["nvme"] > 0) != (c["offload_param"] == "nvme"):
                fail(f"{c}: the parameter home's bytes {more} against offload_param none")
        # The reference of the same run: stage 0 (the sweep's first line).
        ddp = rows[0]["step_s"]["median"]
        want = r["step_s"]["median"] / ddp
        if abs(r["step_over_ddp"] - want) > 1e-9 * want:
            fail(f"{c}: step_over_ddp {r['step_over_ddp']}, want {want}")
    check_files(out, rows)
    check_plot(p, out, rows, None)
    before = {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in os.listdir(out)}
    p, _ = run(cmd, env=env)
    if p.returncode != 1 or "exists" not in p.stderr:
        fail(f"a second run into the same --out: exit {p.returncode}, {p.stderr!r}")
    after = {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in os.listdir(out)}
    if before != after:
        fail("the refused second run changed the output directory")


def crash_and_hang(zeroc, train_gpt, tmp):
    out = os.path.join(tmp, "faults")
    env = dict(os.environ, ZC_TEST_TRAIN_GPT=train_gpt, ZC_TEST_TMP=tmp)
    wrapper = os.path.join(tmp, "workload.py")
    with open(wrapper, "w") as f:
        f.write(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
                "import check_bench_train\ncheck_bench_train.as_workload(sys.argv)\n")
    os.chmod(wrapper, 0o700)
    cmd = [zeroc, "bench", "train", "--out", out, "--json", "--steps", "3", "--warmup", "1",
           "--workload", wrapper, "--only", "offload_optimizer=none",
           "--only", "offload_param=none,nvme", "--timeout", "3"]
    p, dt = run(cmd, env=env)
    if p.returncode != 0:
        fail(f"exit {p.returncode}: {p.stderr}")
    order = lines_of(p)
    rows = {r["config"]["stage"]: r for r in order if r["config"]["offload_param"] == "none"}
    if sorted(rows) != [0, 1, 2, 3] or len(order) != 5:
        fail(f"stages {sorted(rows)} in {len(order)} configurations")
    refused = [r for r in order if r["config"]["offload_param"] == "nvme"]
    reason = refused[0].get("reason") or "" if refused else ""
    if not refused or refused[0]["status"] != "failed" or \
            "zero_optimization.offload_param.nvme_path" not in reason or \
            "is not a directory" not in reason:
        fail(f"stage 3 offload_param nvme (refused): {refused}")
    if refused[0]["peak"] is not None or refused[0]["step_s"] is not None:
        fail("a refused configuration has figures")
    if rows[1]["status"] != "killed" or "signal 9" not in rows[1]["reason"] \
            or "about to crash" not in rows[1]["reason"]:
        fail(f"stage 1: {rows[1]['status']} {rows[1].get('reason')}")
    if rows[2]["status"] != "killed" or "timed out after 3 s" not in rows[2]["reason"]:
        fail(f"stage 2: {rows[2]['status']} {rows[2].get('reason')}")
    for s in (0, 3):
        if rows[s]["status"] != "ok":
            fail(f"stage {s} after the crash: {rows[s]['status']} {rows[s].get('reason')}")
    if rows[1]["peak"] is not None or rows[1]["step_s"] is not None:
        fail("a killed configuration has figures")
    check_files(out, order)
    print(f"# crash, hang and refusal reported, the others ran ({dt:.1f} s)")

    # SIGTERM while a configuration runs: the bench kills its child, removes
    # its own directory and dies of the signal; what finished is kept.
    out = os.path.join(tmp, "stopped")
    env["ZC_TEST_PIDDIR"] = tmp
    cmd = [zeroc, "bench", "train", "--out", out, "--json", "--steps", "3", "--warmup", "1",
           "--workload", wrapper, "--only", "stage=0,2", "--timeout", "600"]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pidfile = os.path.join(tmp, "hung.pid")
    for _ in range(600):
        if os.path.exists(pidfile) and os.path.getsize(pidfile) > 0:
            break
        time.sleep(0.05)
    else:
        p.kill()
        fail("the hanging configuration never started")
    hung = int(open(pidfile).read())
    p.send_signal(signal.SIGTERM)
    so, se = p.communicate(timeout=60)
    if p.returncode != -signal.SIGTERM:
        fail(f"after SIGTERM: exit {p.returncode}, {se!r}")
    try:
        os.kill(hung, 0)
        fail(f"the running configuration (pid {hung}) outlived the bench")
    except ProcessLookupError:
        pass
    left = [n for n in os.listdir(out) if n.startswith("zeroc-bench-train.")]
    if left:
        fail(f"SIGTERM left the bench's directory: {left}")
    done = [json.loads(l) for l in open(os.path.join(out, "results.jsonl")) if l.strip()]
    if [r["config"]["stage"] for r in done] != [0] or done[0]["status"] != "ok":
        fail(f"results kept after SIGTERM: {done}")
    print("# SIGTERM: child killed, directory removed, finished results kept")


def write_script(path, body):
    with open(path, "w") as f:
        f.write(f"#!{sys.executable}\n{body}")
    os.chmod(path, 0o700)


def plot_python_and_data(zeroc, train_gpt, tmp):
    """The plot's interpreter: a python3 first on PATH without matplotlib (a
    stand-in that records it ran) is tried, then Debian's /usr/bin/python3,
    then gnuplot, and the bench says which drew it; --plot-with gnuplot and
    none; no plotter at all costs the plot, not the sweep; --data reaches
    the workload."""
    fakebin = os.path.join(tmp, "fakebin")
    os.mkdir(fakebin)
    seen = os.path.join(tmp, "python3-ran")
    write_script(os.path.join(fakebin, "python3"),
                 f"import sys\nopen({seen!r}, 'a').write(repr(sys.argv) + '\\n')\n"
                 "sys.exit(\"ModuleNotFoundError: No module named 'matplotlib'\")\n")
    argv_file = os.path.join(tmp, "workload-argv")
    wrapper = os.path.join(tmp, "argv-workload.py")
    write_script(wrapper, "import json, os, sys\n"
                 f"open({argv_file!r}, 'w').write(json.dumps(sys.argv))\n"
                 f"os.execv({train_gpt!r}, [{train_gpt!r}] + sys.argv[1:])\n")
    data = os.path.join(tmp, "text.txt")
    with open(data, "w") as f:
        f.write("the quick brown fox jumps over the lazy dog. " * 200)
    env = dict(os.environ, PATH=fakebin + os.pathsep + os.environ.get("PATH", ""))
    deb, gp = has_matplotlib("/usr/bin/python3"), shutil.which("gnuplot", path=env["PATH"])

    def bench(name, *extra, data_arg=True):
        out = os.path.join(tmp, name)
        p, _ = run([zeroc, "bench", "train", "--out", out, "--steps", "2", "--warmup", "1",
                    "--world", "1", "--batch", "2", "--only", "stage=0", "--workload", wrapper]
                   + (["--data", data] if data_arg else []) + list(extra), env=env)
        if p.returncode != 0:
            fail(f"{name}: exit {p.returncode} (the plot must not fail the sweep): {p.stderr}")
        rows = [json.loads(l) for l in open(os.path.join(out, "results.jsonl")) if l.strip()]
        if len(rows) != 1 or rows[0]["status"] != "ok":
            fail(f"{name}: results {rows}")
        return p, out, rows

    p, out, rows = bench("auto")
    if not os.path.exists(seen):
        fail("the plot did not try the python3 found in PATH")
    if deb or gp:
        check_plot(p, out, rows, "/usr/bin/python3" if deb else "gnuplot")
        if "has no matplotlib" not in p.stderr:
            fail(f"the python3 on PATH without matplotlib is not named: {p.stderr!r}")
    elif "no plot" not in p.stderr or "has no matplotlib" not in p.stderr:
        fail(f"the missing plot is not explained: {p.stderr!r}")
    argv = json.load(open(argv_file))
    if "--data" not in argv or argv[argv.index("--data") + 1] != data:
        fail(f"--data did not reach the workload: {argv}")
    p, out, rows = bench("gnuplot", "--plot-with", "gnuplot", data_arg=False)
    if gp:
        check_plot(p, out, rows, "gnuplot")
    elif "no gnuplot on PATH" not in p.stderr or os.path.exists(
            os.path.join(out, "memory_vs_time.png")):
        fail(f"--plot-with gnuplot without gnuplot: {p.stderr!r}")
    p, out, rows = bench("none", "--plot-with", "none", data_arg=False)
    if {"memory_vs_time.svg", "memory_vs_time.png"} & set(os.listdir(out)) or \
            "plot" in p.stderr.replace("--plot", ""):
        fail(f"--plot-with none drew or mentioned a plot: {os.listdir(out)} {p.stderr!r}")
    # Nothing to draw with: neither interpreter has matplotlib (a PATH with
    # only the stand-in and gnuplot hidden, --plot-with matplotlib with the
    # stand-in's PATH when Debian's has none).
    if not deb:
        p, out, rows = bench("nothing", "--plot-with", "matplotlib", data_arg=False)
        if "no plot" not in p.stderr or os.path.exists(os.path.join(out, "memory_vs_time.png")):
            fail(f"no matplotlib anywhere: {p.stderr!r}")
    b, _ = run([zeroc, "bench", "train", "--out", os.path.join(tmp, "bad-plot"), "--plot-with",
                "pgfplots"])
    if b.returncode != 2 or "--plot-with" not in b.stderr:
        fail(f"--plot-with pgfplots: exit {b.returncode}, {b.stderr!r}")
    print(f"# plot: python3 on PATH without matplotlib, then {'/usr/bin/python3' if deb else 'gnuplot' if gp else 'nothing'}; "
          f"--plot-with gnuplot ({'drawn' if gp else 'no gnuplot'}), none; --data forwarded")


def budgets(zeroc, train_gpt, tmp):
    """--max-memory: the budgets are the sweep. Three points for the sweep's
    model at stage 3 - ample (all on the device), and two that the planner
    (`zeroc estimate --max-memory`) says split the state over the device,
    pinned memory and NVMe - each run holds the library's device, pinned and
    NVMe peaks to its per-rank budgets and the swap files on disk (every
    rank's) to world x the nvme budget; one bad spec is refused."""
    model = "gpt:2,64,4,64,256"

    def plan(spec):
        p, _ = run([zeroc, "estimate", "--model", model, "--chunks", "per-block", "--device",
                    "host", "--world", str(WORLD), "--micro-batch", "2", "--json",
                    "--max-memory", spec, "--nvme-path", tmp])
        rows = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
        st3 = [r for r in rows if r.get("stage") == 3]
        return st3[0] if st3 and st3[0].get("fits") else None

    full = plan("device=1GiB,cpu=1GiB,nvme=1GiB")
    if not full:
        fail("budgets: no stage-3 plan with ample budgets")
    dall = full["budgets"]["device"]["used"]
    specs = ["device=1GiB,cpu=1GiB,nvme=1GiB"]
    for d, c in ((d, c) for d in range(70, 20, -5) for c in range(50, 5, -5)):
        spec = "device=%d,cpu=%d,nvme=64MiB" % (dall * d // 100, dall * c // 100)
        got = plan(spec)
        if got and got["placement"]["optimizer"]["NVMe"]["chunks"] > 0 and \
                got["placement"]["optimizer"]["pinned host"]["chunks"] > 0:
            specs.append(spec)
        if len(specs) == 3:
            break
    if len(specs) != 3:
        fail(f"budgets: found only {specs} for {model}")
    out = os.path.join(tmp, "budgets")
    cmd = [zeroc, "bench", "train", "--out", out, "--json", "--steps", "3", "--warmup", "1",
           "--world", str(WORLD), "--batch", "2", "--workload", train_gpt, "--timeout", "120"]
    for s in specs:
        cmd += ["--max-memory", s]
    p, _ = run(cmd)
    if p.returncode != 0:
        fail(f"budgets: exit {p.returncode}: {p.stderr}")
    rows = lines_of(p)
    if len(rows) != 3:
        fail(f"budgets: {len(rows)} configurations, want 3")
    offloaded = 0
    for r, s in zip(rows, specs):
        b = r["max_memory"]
        want = {k: int(v) if v.isdigit() else 1 << 30 if v == "1GiB" else 64 << 20
                for k, v in (kv.split("=") for kv in s.split(","))}
        if r["status"] != "ok" or b != want or r["config"]["stage"] != 3 or \
                r["config"]["offload_optimizer"] != "auto":
            fail(f"budgets {s}: {r}")
        pk, files = r["peak"], r["process"]["nvme_files"]
        held = pk["device"] <= b["device"] and pk["pinned"] <= b["cpu"] and \
            pk["nvme"] <= b["nvme"] and files <= WORLD * b["nvme"]
        if not held or r["within_budget"] is not True:
            fail(f"budgets {s}: peaks {pk}, files {files}, within_budget {r['within_budget']}")
        offloaded += pk["pinned"] > 0 and pk["nvme"] > 0 and files > 0
    if offloaded != 2:
        fail(f"budgets: {offloaded} runs offloaded to pinned memory and NVMe, want 2")
    check_files(out, rows)
    check_plot(p, out, rows, None)
    p, _ = run([zeroc, "bench", "train", "--out", os.path.join(tmp, "bad"), "--max-memory",
                "device=1GiB,gpu=2GiB"])
    if p.returncode != 2 or "gpu=2GiB" not in p.stderr:
        fail(f"budgets: a bad spec: exit {p.returncode}, {p.stderr!r}")
    print(f"# budgets {specs}: peaks within them")


def check_acts(r, base, more):
    """The activations object of one point of the axis against the point
    without checkpointing (base) and the peaks' differences (more)."""
    act = r["config"]["checkpoint_activations"]
    a, a0 = r["activations"], base["activations"]
    if not a or not a0 or not a["planned"]:
        fail(f"activation axis {act}: no activations object: {a}")
        return
    dev = a["model"] + a["store"]["device"]
    if a["device_side"] != dev or a["planned"]["device_side"] != \
            a["planned"]["model"] + a["planned"]["store"]["device"]:
        fail(f"activation axis {act}: device_side {a}")
    # The plan line plans what the engine reserves and what the example
    # allocates, byte for byte.
    if a["device_side_over_plan"] != 1.0 or a["store"] != a["planned"]["store"]:
        fail(f"activation axis {act}: measured {a['store']}, planned {a['planned']}")
    # The store's bytes are what the peaks grew by, kind by kind (device:
    # the example's buffers are not the library's).
    for k in ("device", "pinned", "nvme"):
        if a["store"][k] != more[k]:
            fail(f"activation axis {act}: the store holds {a['store'][k]} {k} bytes, the peak "
                 f"grew by {more[k]}")
    if act == "none":
        if any(a[k] is not None for k in ("step_over_none", "device_side_over_none",
                                           "exposed_fraction", "store_s")):
            fail(f"activation axis none: figures against itself: {a}")
        return
    if not a["model"] < a0["model"]:
        fail(f"activation axis {act}: the example keeps {a['model']} bytes, "
             f"{a0['model']} without checkpointing")
    ratio = r["step_s"]["median"] / base["step_s"]["median"]
    if abs(a["step_over_none"] - ratio) > 1e-9 * ratio:
        fail(f"activation axis {act}: step_over_none {a['step_over_none']}, want {ratio}")
    ratio = dev / a0["device_side"]
    if abs(a["device_side_over_none"] - ratio) > 1e-9 * ratio:
        fail(f"activation axis {act}: device_side_over_none {a['device_side_over_none']}")
    if not (0 <= a["exposed_fraction"] <= 1 and a["store_s"] >= 0):
        fail(f"activation axis {act}: store time {a['store_s']}, {a['exposed_fraction']}")


def activation_axis(zeroc, train_gpt, tmp):
    """--only checkpoint_activations=...: the activation axis. Each point
    trains with --checkpoint-activations block and the store where the value
    says; the estimate (the store planned in its kind, train_gpt's fp32
    activations) holds to the peak within 10% as elsewhere; the store's
    reservation lands in its kind, and x DDP is over stage 0 without
    checkpointing."""
    out = os.path.join(tmp, "acts")
    cmd = [zeroc, "bench", "train", "--out", out, "--json", "--steps", "3", "--warmup", "1",
           "--world", str(WORLD), "--batch", str(BATCH), "--workload", train_gpt,
           "--only", "stage=0", "--only", "checkpoint_activations=none,device,cpu,nvme",
           "--timeout", "120"]
    p, _ = run(cmd)
    rows = lines_of(p)
    got = [r["config"]["checkpoint_activations"] for r in rows]
    if p.returncode != 0 or got != ["none", "device", "cpu", "nvme"]:
        fail(f"activation axis: exit {p.returncode}, {got}: {p.stderr[-500:]}")
        return
    base = rows[0]
    for r in rows:
        if r["status"] != "ok":
            fail(f"activation axis {r['config']}: {r['status']}: {r.get('reason')}")
            continue
        check_ok(r)
        act = r["config"]["checkpoint_activations"]
        more = {k: r["peak"][k] - base["peak"][k] for k in KINDS}
        kind = {"none": None, "device": "device", "cpu": "pinned", "nvme": "nvme"}[act]
        if kind and not more[kind] > 0:
            fail(f"activation axis {act}: the store is not in {kind}: {more}")
        if act in ("cpu", "nvme") and more["device"] != 0:
            fail(f"activation axis {act}: device bytes moved by {more['device']}")
        want = r["step_s"]["median"] / base["step_s"]["median"]
        if abs(r["step_over_ddp"] - want) > 1e-9 * want:
            fail(f"activation axis {act}: step_over_ddp {r['step_over_ddp']}, want {want}")
        check_acts(r, base, more)
    md = open(os.path.join(out, "results.md")).read()
    if any(f"| {WORLD} | bf16 | {v} | " not in md
           for v in ("none (every activation)", "device", "cpu", "nvme")) or "store time" not in md:
        fail(f"activation axis: results.md lacks the activations table:\n{md}")
    p, _ = run(cmd[:-4] + ["--only", "checkpoint_activations=all"])
    if p.returncode != 2 or "none, device, cpu or nvme" not in p.stderr:
        fail(f"activation axis: a bad value: exit {p.returncode}, {p.stderr!r}")


# The state axis's bytes saved per parameter against fp32 master and moments
# (12 bytes): master and moments in bf16, the master alone, the moments alone.
STATE_SAVED = {"bf16": 6, "bf16_master": 2, "bf16_moments": 4}


def shard_elems(layers, dim, seq, vocab, world):
    """Rank 0's elements of optimizer state under --chunks per-block: one chunk
    for the embeddings (tokens and positions), one per block, one for the final
    LayerNorm (the head is tied), each padded to a multiple of world x 64
    elements (ZC_CHUNK_ALIGN) and split evenly."""
    block = 2 * 2 * dim + (dim * 3 * dim + 3 * dim) + (dim * dim + dim) + \
        (dim * 4 * dim + 4 * dim) + (4 * dim * dim + dim)
    chunks = [vocab * dim + seq * dim] + [block] * layers + [2 * dim]
    align = world * 64
    return sum((c + align - 1) // align * align for c in chunks) // world


def state_axis(zeroc, train_gpt, tmp):
    """--only optimizer_state=...: the state-precision axis at stage 2 with
    the optimizer at home, in pinned memory and on NVMe. Each point trains
    with the bf16 keys (DeepSpeed's and zeroc's moment dtypes); the estimate
    holds to the peak as elsewhere; the bytes saved against fp32 state are
    rank 0's shard times the bytes saved per parameter, in the optimizer's
    kind (a formula from the model's shape), wherever the state is not on
    NVMe; on NVMe the pinned staging shrinks in the order of the bytes per
    parameter; the estimate saves what the peaks save; the points DeepSpeed
    refuses are not in the sweep."""
    out = os.path.join(tmp, "states")
    cmd = [zeroc, "bench", "train", "--out", out, "--json", "--steps", "3", "--warmup", "1",
           "--world", str(WORLD), "--batch", str(BATCH), "--workload", train_gpt,
           "--only", "stage=2", "--only", "offload_optimizer=none,cpu,nvme",
           "--only", "optimizer_state=bf16_moments,bf16,fp32,bf16_master",
           "--plot-with", "none", "--timeout", "120"]
    p, _ = run(cmd)
    rows = lines_of(p)
    got = [(r["config"]["offload_optimizer"], r["config"]["optimizer_state"]) for r in rows]
    want = [(o, s) for o in ("none", "cpu", "nvme")
            for s in ("fp32", "bf16_moments", "bf16", "bf16_master")
            if not (s == "bf16_master" and o == "none")]
    if p.returncode != 0 or got != want:
        fail(f"state axis: exit {p.returncode}, {got}, want {want}: {p.stderr[-500:]}")
        return
    shard = shard_elems(2, 64, 64, 256, WORLD)
    kind = {"none": "device", "cpu": "pinned", "nvme": "pinned"}
    staged = {}
    for r in rows:
        off, st = r["config"]["offload_optimizer"], r["config"]["optimizer_state"]
        if r["status"] != "ok":
            fail(f"state axis {off} {st}: {r['status']}: {r.get('reason')}")
            continue
        check_ok(r)
        base = next(b for b in rows if b["config"] == dict(r["config"], optimizer_state="fp32"))
        so = r["state_over_fp32"]
        if st == "fp32":
            if so is not None:
                fail(f"state axis {off} fp32: figures against itself: {so}")
            continue
        saved = {k: base["peak"][k] - r["peak"][k] for k in KINDS}
        if so is None or so["saved_peak"] != saved or so["saved_estimate"] != \
                {k: base["estimate"][k] - r["estimate"][k] for k in KINDS}:
            fail(f"state axis {off} {st}: {so}, the peaks save {saved}")
            continue
        if so["saved_estimate"] != saved:
            fail(f"state axis {off} {st}: the estimate saves {so['saved_estimate']}, "
                 f"the peaks {saved}")
        if off == "nvme":
            staged[st] = saved["pinned"]
            if saved["device"] != 0 or saved["nvme"] < 0 or so["saved_nvme_files"] < 0:
                fail(f"state axis nvme {st}: saved {saved}, files {so['saved_nvme_files']}")
        else:
            formula = {k: (STATE_SAVED[st] * shard if k == kind[off] else 0) for k in KINDS}
            if saved != formula:
                fail(f"state axis {off} {st}: saved {saved}, want {formula} (shard {shard})")
        ratio = r["step_s"]["median"] / base["step_s"]["median"]
        if abs(so["step"] - ratio) > 1e-9 * ratio:
            fail(f"state axis {off} {st}: step {so['step']}, want {ratio}")
    if not staged.get("bf16", 0) > staged.get("bf16_moments", 0) > \
            staged.get("bf16_master", 0) > 0:
        fail(f"state axis nvme: the pinned staging saved {staged}, want 6 > 4 > 2 bytes' order")
    md = open(os.path.join(out, "results.md")).read()
    if "Optimizer state against" not in md or \
            any(f"| bf16 | {s} | " not in md for s in STATE_SAVED) or ", state bf16 |" not in md:
        fail(f"state axis: results.md lacks the state table:\n{md}")
    for extra, msg in ((["--only", "optimizer_state=fp16"], "bf16_master or bf16_moments"),
                       (["--only", "optimizer_state=bf16", "--dtype", "fp32"],
                        "need --dtype bf16")):
        k = cmd.index("optimizer_state=bf16_moments,bf16,fp32,bf16_master")
        p, _ = run(cmd[:k - 1] + cmd[k + 1:] + extra)
        if p.returncode != 2 or msg not in p.stderr:
            fail(f"state axis {extra}: exit {p.returncode}, {p.stderr!r}")


def main():
    zeroc, train_gpt = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="zc-bench-train-", dir=".") as tmp:
        plot_python_and_data(zeroc, train_gpt, tmp)
        budgets(zeroc, train_gpt, tmp)
        activation_axis(zeroc, train_gpt, tmp)
        state_axis(zeroc, train_gpt, tmp)
        sweep(zeroc, train_gpt, tmp)
        crash_and_hang(zeroc, train_gpt, tmp)
    print("ok")


if __name__ == "__main__":
    main()
