#!/usr/bin/env python3
"""The closing line of scripts/test.sh: one count over every suite it ran.

Usage: test_summary.py [--fuzz-passed 0|1] LOG.json...

Each LOG is a meson test JSON log (one result per line). A log that is
missing, unreadable, or that holds no test result is an error with the path
and the reason: a suite that ran nothing must never read as a pass.
"""
import json
import sys


def fail(msg):
    print("test summary: " + msg, file=sys.stderr)
    sys.exit(1)


def main(argv):
    fuzz = 0
    if len(argv) >= 2 and argv[0] == "--fuzz-passed":
        if argv[1] not in ("0", "1"):
            fail("--fuzz-passed takes 0 or 1, not %r" % argv[1])
        fuzz = int(argv[1])
        argv = argv[2:]
    if not argv:
        fail("no test log given: no suite ran")
    passed, failed, skipped = fuzz, 0, 0
    for path in argv:
        try:
            with open(path, encoding="utf-8") as f:
                lines = [ln for ln in f if ln.strip()]
        except OSError as e:
            fail("%s: cannot read the suite's log (%s); did its meson test run?"
                 % (path, e.strerror or e))
        if not lines:
            fail("%s: the suite ran no test" % path)
        for n, line in enumerate(lines, 1):
            try:
                r = json.loads(line)["result"]
            except (ValueError, KeyError, TypeError):
                fail("%s:%d: not a meson test result line" % (path, n))
            if r in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif r == "SKIP":
                skipped += 1
            else:
                failed += 1
    print("zeroc: %d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
