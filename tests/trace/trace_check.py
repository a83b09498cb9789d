#!/usr/bin/env python3
"""Checks zeroc timeline files (Chrome trace-event JSON, docs/trace.md) and
prints where each traced step's time went.

    trace_check.py FILE [FILE ...]

For every file: the JSON object format ("traceEvents", "displayTimeUnit",
"otherData"), complete events ("X") with name, cat, ts, dur >= 0, pid, tid
and args, or metadata ("M"); every track's spans in order of their start and
properly nested (each inside the one open before it, or after its end); every
span of the rank's track (tid 0) inside a step or a loop call, the others
beginning inside one; each step's top-level spans adding up to the step (to
a nanosecond per span: ts and dur are microseconds with three decimals).
Then a table per file: per step, its duration and its top-level spans, and the
largest kinds of work inside it.

Exit status 0 when every file passes, 1 naming the first breach, 2 for usage.
Used by tests/gpt/check_trace_gpt.py; needs only Python."""
import json
import sys
from collections import defaultdict


class Bad(Exception):
    pass


def ns(v):
    return int(round(v * 1000))


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        raise Bad("%s: not readable as JSON: %s" % (path, e))
    if not isinstance(d, dict) or not isinstance(d.get("traceEvents"), list):
        raise Bad("%s: no traceEvents array" % path)
    if d.get("displayTimeUnit") not in ("ms", "ns"):
        raise Bad("%s: displayTimeUnit %r" % (path, d.get("displayTimeUnit")))
    spans = []
    for i, e in enumerate(d["traceEvents"]):
        ph = e.get("ph")
        for k in ("name", "pid", "tid"):
            if k not in e:
                raise Bad("%s: event %d has no %s" % (path, i, k))
        if ph == "M":
            continue
        if ph != "X":
            raise Bad("%s: event %d (%s) has ph %r; every span is a complete event"
                      % (path, i, e["name"], ph))
        for k in ("cat", "ts", "dur", "args"):
            if k not in e:
                raise Bad("%s: event %d (%s) has no %s" % (path, i, e["name"], k))
        if e["dur"] < 0:
            raise Bad("%s: %s has a negative duration" % (path, e["name"]))
        t0 = ns(e["ts"])
        spans.append(dict(name=e["name"], cat=e["cat"], t0=t0, t1=t0 + ns(e["dur"]),
                          tid=e["tid"], pid=e["pid"], args=e["args"]))
    return d, spans


def container(s):
    return s["cat"] in ("step", "loop")


def check(path, d, spans):
    by_tid = defaultdict(list)
    for s in spans:
        by_tid[s["tid"]].append(s)
    for tid, v in by_tid.items():
        stack = []
        last = None
        for s in v:
            if last is not None and s["t0"] < last:
                raise Bad("%s: track %d: '%s' starts before the span above it" % (path, tid,
                                                                                   s["name"]))
            last = s["t0"]
            while stack and s["t0"] >= stack[-1]["t1"] and not (
                    s["t0"] == stack[-1]["t1"] and s["t1"] == s["t0"]):
                stack.pop()
            if stack:
                p = stack[-1]
                if not (s["t0"] >= p["t0"] and s["t1"] <= p["t1"]):
                    raise Bad("%s: track %d: '%s' overlaps '%s' without nesting in it"
                              % (path, tid, s["name"], p["name"]))
                s["parent"] = p
            elif tid == 0 and not container(s):
                raise Bad("%s: '%s' on the rank's track is in no step" % (path, s["name"]))
            stack.append(s)
    conts = [s for s in by_tid.get(0, []) if container(s)]
    for s in spans:
        if s["tid"] != 0 and not any(c["t0"] <= s["t0"] <= c["t1"] for c in conts):
            raise Bad("%s: '%s' on track %d begins outside every step" % (path, s["name"],
                                                                        s["tid"]))
    steps = []
    for s in by_tid.get(0, []):
        if s["cat"] != "step":
            continue
        top = [c for c in by_tid[0] if c.get("parent") is s]
        total = sum(c["t1"] - c["t0"] for c in top)
        if any(c["cat"] != "phase" for c in top):
            raise Bad("%s: step %s has %s at its top level" % (
                path, s["args"].get("step"), [c["name"] for c in top if c["cat"] != "phase"]))
        if total != s["t1"] - s["t0"]:
            raise Bad("%s: step %s: its top-level spans add up to %d ns, the step is %d ns"
                      % (path, s["args"].get("step"), total, s["t1"] - s["t0"]))
        steps.append((s, top))
    return steps


def describe(path, d, spans, steps):
    od = d.get("otherData", {})
    print("%s: rank %s of %s, stage %s, %s on %s, steps %s, %d spans, %s dropped"
          % (path, od.get("rank"), od.get("world"), od.get("stage"), od.get("dtype"),
             od.get("device"), od.get("steps"), len(spans), od.get("dropped")))
    for s, top in steps:
        inside = defaultdict(int)
        for x in spans:
            if x is not s and x["cat"] not in ("step", "phase") and x["tid"] == 0 and \
                    x["t0"] >= s["t0"] and x["t1"] <= s["t1"] and \
                    x.get("parent") is not None and x["parent"]["cat"] in ("phase",):
                inside[x["name"]] += x["t1"] - x["t0"]
        parts = ", ".join("%s %.3f" % (c["name"], (c["t1"] - c["t0"]) / 1e6) for c in top)
        work = ", ".join("%s %.3f" % (k, v / 1e6)
                         for k, v in sorted(inside.items(), key=lambda kv: -kv[1])[:5])
        print("  step %s: %.3f ms = %s; in them (ms): %s"
              % (s["args"].get("step"), (s["t1"] - s["t0"]) / 1e6, parts, work))


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2 if len(argv) < 2 else 0
    for path in argv[1:]:
        try:
            d, spans = load(path)
            steps = check(path, d, spans)
        except Bad as e:
            print("trace_check.py: %s" % e, file=sys.stderr)
            return 1
        describe(path, d, spans, steps)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
