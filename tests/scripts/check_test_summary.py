#!/usr/bin/env python3
"""scripts/test_summary.py: counts over meson logs, and a clear error (never a
traceback, never a pass) when a log is missing, empty or malformed."""
import json
import os
import subprocess
import sys
import tempfile

SUMMARY = sys.argv[1]
failures = []


def run(*args):
    p = subprocess.run([sys.executable, SUMMARY, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def check(name, cond, detail):
    if not cond:
        failures.append("%s: %s" % (name, detail))


with tempfile.TemporaryDirectory() as d:
    good = os.path.join(d, "unit.json")
    with open(good, "w") as f:
        for r in ["OK", "OK", "SKIP", "EXPECTEDFAIL"]:
            f.write(json.dumps({"name": "t", "result": r}) + "\n")
    bad = os.path.join(d, "bad.json")
    with open(bad, "w") as f:
        f.write(json.dumps({"result": "OK"}) + "\n" + json.dumps({"result": "FAIL"}) + "\n")
    empty = os.path.join(d, "empty.json")
    open(empty, "w").close()
    junk = os.path.join(d, "junk.json")
    with open(junk, "w") as f:
        f.write("not json\n")
    missing = os.path.join(d, "missing.json")

    rc, out, err = run("--fuzz-passed", "1", good)
    check("counts", rc == 0 and out.strip() == "zeroc: 4 passed, 0 failed, 1 skipped",
          "rc=%d out=%r" % (rc, out))
    rc, out, err = run(good, bad)
    check("failure", rc == 1 and out.strip() == "zeroc: 4 passed, 1 failed, 1 skipped",
          "rc=%d out=%r" % (rc, out))
    for name, args, needle in [
        ("missing log", [good, missing], missing + ": cannot read the suite's log"),
        ("empty log", [empty], empty + ": the suite ran no test"),
        ("malformed log", [junk], junk + ":1: not a meson test result line"),
        ("no log at all", [], "no test log given"),
        ("bad fuzz flag", ["--fuzz-passed", "yes", good], "--fuzz-passed takes 0 or 1"),
    ]:
        rc, out, err = run(*args)
        check(name, rc == 1 and needle in err and "Traceback" not in err and out == "",
              "rc=%d out=%r err=%r" % (rc, out, err))

for f in failures:
    print("FAIL " + f)
print("%d passed, %d failed" % (7 - len(failures), len(failures)))
sys.exit(1 if failures else 0)
