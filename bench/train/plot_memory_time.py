#!/usr/bin/python3
"""memory_vs_time.svg and .png for `zeroc bench train`.

usage: plot_memory_time.py RESULTS.jsonl OUT.svg OUT.png

One point per configuration that ran (status "ok"): the median step time
against the library's peak memory per rank (device + pinned + pageable host;
NVMe swap files are not memory), labelled with its configuration. The Pareto
front - the configurations no other one beats on both memory and time - is
drawn as a line through its points. Failed or killed configurations are
listed under the axes. Under `--max-memory` (rows with "max_memory") the
budgets are the axis: the median step time against the device budget per
rank, each point labelled with its cpu and NVMe budgets and its measured
peaks (device / pinned MiB). The images are created here and never
overwrite a file (mode "xb").
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def label(c):
    s = f"s{c['stage']}"
    if c["offload_optimizer"] != "none":
        s += f" opt:{c['offload_optimizer']}"
    if c["offload_param"] != "none":
        s += f" par:{c['offload_param']}"
    return s + f" w{c['world']} {c['dtype']}"


def pareto(points):
    """Indices of the points no other point beats on both axes, by time."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    front, best = [], float("inf")
    for i in order:
        if points[i][1] < best:
            front.append(i)
            best = points[i][1]
    return front


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    rows = [json.loads(line) for line in open(argv[1]) if line.strip()]
    ok = [r for r in rows if r["status"] == "ok" and r["peak"] and r["step_s"]]
    bad = [r for r in rows if r["status"] != "ok"]
    if any(r.get("max_memory") for r in ok):
        return budgets(argv, ok, bad)
    pts = [(1e3 * r["step_s"]["median"],
            (r["peak"]["device"] + r["peak"]["pinned"] + r["peak"]["host"]) / 2**20) for r in ok]
    fig, ax = plt.subplots(figsize=(9, 6))
    if pts:
        front = pareto(pts)
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], color="tab:blue", zorder=3,
                   label="configuration")
        fx = [pts[i][0] for i in front]
        fy = [pts[i][1] for i in front]
        ax.plot(fx, fy, color="tab:red", marker="o", markersize=9, markerfacecolor="none",
                linewidth=1.5, zorder=2, label="Pareto front (less memory or less time)")
        for (x, y), r in zip(pts, ok):
            ax.annotate(label(r["config"]), (x, y), textcoords="offset points", xytext=(5, 4),
                        fontsize=7)
    ax.set_xlabel("step time, median after warm-up (ms)")
    return finish(argv, fig, ax, bad,
                  "peak memory per rank: device + pinned + host (MiB)",
                  "zeroc bench train: memory against step time")


def budgets(argv, ok, bad):
    """Budgets on the x axis: step time against the device budget."""
    fig, ax = plt.subplots(figsize=(9, 6))
    rows = sorted((r for r in ok if r.get("max_memory")),
                  key=lambda r: r["max_memory"]["device"])
    for key in sorted({(r["config"]["world"], r["config"]["dtype"]) for r in rows}):
        sel = [r for r in rows if (r["config"]["world"], r["config"]["dtype"]) == key]
        xs = [r["max_memory"]["device"] / 2**20 for r in sel]
        ys = [1e3 * r["step_s"]["median"] for r in sel]
        ax.plot(xs, ys, marker="o", label="world %d %s" % key)
        for x, y, r in zip(xs, ys, sel):
            m, p = r["max_memory"], r["peak"]
            ax.annotate("cpu %.1f nvme %.1f; peak %.1f / %.1f"
                        % (m["cpu"] / 2**20, m["nvme"] / 2**20, p["device"] / 2**20,
                           p["pinned"] / 2**20), (x, y), textcoords="offset points",
                        xytext=(5, 4), fontsize=7)
    ax.set_xlabel("device budget per rank, zero_optimization.max_memory.device (MiB)")
    return finish(argv, fig, ax, bad, "step time, median after warm-up (ms)",
                  "zeroc bench train: step time against the memory budget")


def finish(argv, fig, ax, bad, ylabel, title):
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    if bad:
        text = "not run to the end: " + "; ".join(
            f"{label(r['config'])} {r['status']}" for r in bad)
        fig.text(0.01, 0.01, text, fontsize=6, wrap=True)
    fig.tight_layout(rect=(0, 0.05 if bad else 0, 1, 1))
    for path, fmt in ((argv[2], "svg"), (argv[3], "png")):
        with open(path, "xb") as f:
            fig.savefig(f, format=fmt, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
