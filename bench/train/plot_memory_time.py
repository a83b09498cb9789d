#!/usr/bin/python3
"""memory_vs_time.svg and .png for `zeroc bench train`.

usage: plot_memory_time.py RESULTS.jsonl OUT.svg OUT.png

One point per configuration that ran (status "ok"): the median step time
against the library's peak memory per rank (device + pinned + pageable host;
NVMe swap files are not memory), with a horizontal bar from the fastest to
the slowest timed step (the spread of the measured steps). Points carry
numbers, placed so that no two overlap, and the key beside the axes names
each number's configuration. The Pareto front - the configurations no other
one beats on both memory and time - is drawn as a line through its points.
Failed or killed configurations are listed under the axes. Under
`--max-memory` (rows with "max_memory") the budgets are the axis: the median
step time (bars: fastest to slowest step) against the device budget per
rank, each budget point a filled square joined to a hollow circle at the
device memory the run used, and the key giving each point's cpu and NVMe
budgets and its measured peaks. The images are created here and never
overwrite a file (mode "xb").
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Text stays text in the SVG: the key can be searched and read.
plt.rcParams["svg.fonttype"] = "none"


def label(c):
    s = f"s{c['stage']}"
    if c["offload_optimizer"] != "none":
        s += f" opt:{c['offload_optimizer']}"
    if c["offload_param"] != "none":
        s += f" par:{c['offload_param']}"
    return s + f" w{c['world']} {c['dtype']}"


def size(b):
    """Bytes in the largest binary unit that keeps a digit before the point."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= scale:
            v = b / scale
            return ("%.2f %s" if v < 10 else "%.1f %s" if v < 100 else "%.0f %s") % (v, unit)
    return "%d B" % b


def pareto(points):
    """Indices of the points no other point beats on both axes, by time."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    front, best = [], float("inf")
    for i in order:
        if points[i][1] < best:
            front.append(i)
            best = points[i][1]
    return front


# Where a number may go around its point (points of offset), nearest first.
OFFSETS = [(6, 5), (6, -11), (-14, 5), (-14, -11), (6, 14), (-14, 14), (6, -20), (-14, -20),
           (16, -3), (-24, -3), (0, 20), (0, -26), (22, 12), (-30, 12), (22, -18), (-30, -18)]


def place_numbers(fig, ax, pts):
    """Numbers 1..N beside the points, each at the first offset whose box
    overlaps no number placed before it and no point; returns the texts."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    boxes, texts = [], []
    disp = [ax.transData.transform(p) for p in pts]
    for i, (x, y) in enumerate(pts):
        t = None
        for k, (dx, dy) in enumerate(OFFSETS):
            if t is not None:
                t.remove()
            t = ax.annotate(str(i + 1), (x, y), textcoords="offset points", xytext=(dx, dy),
                            fontsize=8, fontweight="bold", color="0.15")
            bb = t.get_window_extent(renderer=r).expanded(1.1, 1.15)
            clash = any(bb.overlaps(b) for b in boxes) or any(
                bb.contains(px, py) for j, (px, py) in enumerate(disp) if j != i)
            if not clash or k == len(OFFSETS) - 1:
                break
        boxes.append(t.get_window_extent(renderer=r))
        texts.append(t)
    return texts


def key_text(fig, entries, title):
    """The key beside the axes: one line per number."""
    lines = [title]
    for i, e in enumerate(entries):
        first, *more = e.split("\n")
        lines += [f"{i + 1:>2}  {first}"] + [f"      {m}" for m in more]
    fig.text(0.695, 0.95, "\n".join(lines), fontsize=7, family="monospace", va="top",
             ha="left")


def figure(n, bad):
    """A figure tall enough for a key of n lines beside the axes (7 pt
    monospace: about 0.135 inch a line), the axes on its left."""
    h = max(6.5, 0.135 * (n + 2) + 1.2)
    fig = plt.figure(figsize=(13, h))
    bottom = (0.75 if bad else 0.6) / h
    ax = fig.add_axes((0.07, bottom, 0.6, 1 - bottom - 0.5 / h))
    return fig, ax


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    rows = [json.loads(line) for line in open(argv[1]) if line.strip()]
    ok = [r for r in rows if r["status"] == "ok" and r["peak"] and r["step_s"]]
    bad = [r for r in rows if r["status"] != "ok"]
    if any(r.get("max_memory") for r in ok):
        return budgets(argv, ok, bad)
    # By memory, then time: numbers read down the chart.
    ok.sort(key=lambda r: (-(r["peak"]["device"] + r["peak"]["pinned"] + r["peak"]["host"]),
                           r["step_s"]["median"]))
    pts = [(1e3 * r["step_s"]["median"],
            (r["peak"]["device"] + r["peak"]["pinned"] + r["peak"]["host"]) / 2**20) for r in ok]
    fig, ax = figure(len(pts), bad)
    if pts:
        lo = [max(p[0] - 1e3 * r["step_s"]["min"], 0) for p, r in zip(pts, ok)]
        hi = [max(1e3 * r["step_s"]["max"] - p[0], 0) for p, r in zip(pts, ok)]
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts], xerr=[lo, hi], fmt="o",
                    color="tab:blue", ecolor="tab:blue", elinewidth=1, capsize=3, zorder=3,
                    label="configuration (bar: fastest to slowest timed step)")
        front = pareto(pts)
        ax.plot([pts[i][0] for i in front], [pts[i][1] for i in front], color="tab:red",
                marker="o", markersize=10, markerfacecolor="none", linewidth=1.5, zorder=2,
                label="Pareto front (less memory or less time)")
        ax.margins(0.08)
        place_numbers(fig, ax, pts)
        key_text(fig, [f"{label(r['config'])}  {p[0]:.1f} ms  {p[1]:.1f} MiB"
                       for p, r in zip(pts, ok)], "key: configuration, median step, peak")
    ax.set_xlabel("step time, median after warm-up (ms)")
    return finish(argv, fig, ax, bad,
                  "peak memory per rank: device + pinned + host (MiB)",
                  "zeroc bench train: memory against step time")


def budgets(argv, ok, bad):
    """Budgets on the x axis: step time against the device budget."""
    rows = sorted((r for r in ok if r.get("max_memory")),
                  key=lambda r: r["max_memory"]["device"])
    fig, ax = figure(2 * len(rows), bad)
    pts, entries = [], []
    first = True
    for key in sorted({(r["config"]["world"], r["config"]["dtype"]) for r in rows}):
        sel = [r for r in rows if (r["config"]["world"], r["config"]["dtype"]) == key]
        xs = [r["max_memory"]["device"] / 2**20 for r in sel]
        ys = [1e3 * r["step_s"]["median"] for r in sel]
        lo = [max(y - 1e3 * r["step_s"]["min"], 0) for y, r in zip(ys, sel)]
        hi = [max(1e3 * r["step_s"]["max"] - y, 0) for y, r in zip(ys, sel)]
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="s-", markersize=7, capsize=3,
                    label="world %d %s: budget point (bar: fastest to slowest step)" % key)
        used = [r["peak"]["device"] / 2**20 for r in sel]
        for x, u, y in zip(xs, used, ys):
            ax.plot([u, x], [y, y], color="0.6", linewidth=1, linestyle=":", zorder=1)
        ax.plot(used, ys, "o", markerfacecolor="none", color="0.35", markersize=7,
                label="device memory the run used" if first else None)
        first = False
        for x, y, r in zip(xs, ys, sel):
            m, p = r["max_memory"], r["peak"]
            pts.append((x, y))
            entries.append("w%d %s: device %s, cpu %s, nvme %s\nused %s device, %s pinned; "
                           "%.1f ms" % (r["config"]["world"], r["config"]["dtype"],
                                        size(m["device"]), size(m["cpu"]), size(m["nvme"]),
                                        size(p["device"]), size(p["pinned"]), y))
    # Budgets often span orders of magnitude (an ample one beside tight
    # ones): a log axis then keeps the tight ones apart.
    xs_all = [x for x, _ in pts] + [r["peak"]["device"] / 2**20 for r in rows]
    if xs_all and min(xs_all) > 0 and max(xs_all) / min(xs_all) > 20:
        ax.set_xscale("log")
    ax.margins(0.08)
    if pts:
        place_numbers(fig, ax, pts)
        key_text(fig, entries, "key (stage 3): the budgets, what the run used, its step")
    ax.set_xlabel("device budget per rank, zero_optimization.max_memory.device (MiB)")
    return finish(argv, fig, ax, bad, "step time, median after warm-up (ms)",
                  "zeroc bench train: step time against the memory budget")


def finish(argv, fig, ax, bad, ylabel, title):
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    # The legend under the key, outside the axes: it covers no point.
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower left", bbox_to_anchor=(0.69, 0.02), fontsize=7,
               frameon=False)
    if bad:
        text = "not run to the end: " + "; ".join(
            f"{label(r['config'])} {r['status']}" for r in bad)
        fig.text(0.01, 0.01, text, fontsize=6, wrap=True)
    for path, fmt in ((argv[2], "svg"), (argv[3], "png")):
        with open(path, "xb") as f:
            fig.savefig(f, format=fmt, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
