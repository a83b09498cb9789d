#!/usr/bin/env python3
"""The agreement table of tests/oracle/README.md, from a replay run.

    build/tests/oracle/test_replay --jobs=1 2> replay.log
    python3 tests/oracle/report.py replay.log [tests/oracle/fixtures/index.json]

Reads the "oracle CASE ..." lines test_replay.c prints for every run and
prints one markdown row per case and kind of run: the zeroc stages it covers,
the largest master distance over them (o_ulp_dist), the distance after the first
step, the first step beyond 4 ulp, and whether the loss scale, skip, lr and
norm sequences were DeepSpeed's. Standard library only.
"""
import json
import os
import re
import sys

LINE = re.compile(
    r"^oracle (?P<case>\S+)\s+(?P<dtype>\S+)\s+zeroc stage (?P<zs>\d) vs DeepSpeed stage "
    r"(?P<ds>\d) \((?P<kind>[^)]*)\): masters max (?P<max>[0-9.inf]+) ulp \(step (?P<wstep>-?\d+), "
    r"(?P<where>[^:]*): zeroc (?P<zv>\S+), DeepSpeed (?P<dv>\S+)\), max \|diff\| (?P<abs>\S+), "
    r"initial (?P<init>[0-9.inf]+) ulp, step 1 (?P<s1>[0-9.inf]+) ulp, first beyond \S+ ulp: "
    r"step (?P<first>-?\d+); scalar tail max (?P<tail>-?[0-9.inf]+) ulp; bitwise (?P<bits>\d+) "
    r"of (?P<of>\d+); bound used (?P<bound>\S+); loss scale (?P<ls>\w+), skipped (?P<sk>\w+), "
    r"lr (?P<lr>\w+), norm (?P<norm>\w+) \(rel (?P<rel>\S+)\)$")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    index = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "fixtures", "index.json")
    with open(index) as f:
        cases = {c["name"]: c for c in json.load(f)["cases"]}
    rows = {}
    order = []
    with open(sys.argv[1]) as f:
        for line in f:
            m = LINE.match(line.strip())
            if not m:
                continue
            key = (m["case"], m["kind"])
            if key not in rows:
                rows[key] = []
                order.append(key)
            rows[key].append(m)
    print("| case | dtype | DS stage | world | accum | run | zeroc stages | max ulp | "
          "step 1 | first > 4 | worst at | DS tail | bitwise | bound used | scale | skip | lr "
          "| norm |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for key in order:
        ms = sorted(rows[key], key=lambda m: int(m["zs"]))
        c = cases.get(key[0], {})
        stages = ",".join(m["zs"] for m in ms)
        mx = "%g" % max(float(m["max"]) for m in ms)
        worst = max(ms, key=lambda m: float(m["max"]))
        s1 = max(float(m["s1"]) for m in ms)
        first = sorted(set(m["first"] for m in ms))

        def seq(field, extra=None):
            vals = set(m[field] for m in ms)
            s = "same" if vals == {"same"} else "differ"
            if extra and s == "differ":
                s += " (%s)" % extra(ms)
            return s

        lr = seq("lr")
        norm = seq("norm", lambda ms: "rel %s" % max(float(m["rel"]) for m in ms))
        if norm == "same":
            norm += " (rel <= %.2g)" % max(float(m["rel"]) for m in ms)
        tail = max(float(m["tail"]) for m in ms)
        bits = min(int(m["bits"]) / int(m["of"]) for m in ms)
        bound = max(float(m["bound"]) for m in ms)
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %g | %s | step %s %s | %s | %.4f | %.3g "
              "| %s | %s | %s | %s |"
              % (key[0], ms[0]["dtype"], ms[0]["ds"], c.get("world", "?"), c.get("accum", "?"),
                 key[1], stages, mx, s1, "/".join(first), worst["wstep"], worst["where"],
                 "-" if tail < 0 else "%g" % tail, bits, bound, seq("ls"), seq("sk"), lr,
                 norm))


if __name__ == "__main__":
    main()
