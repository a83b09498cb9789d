#!/usr/bin/env python3
"""A stand-in for fio in the bench io tests: no disk traffic, a known answer.

`--version` prints a version. Otherwise it appends {"argv", "cwd", "pid"} as
one JSON line to $FAKE_FIO_LOG (when set), checks that the --filename it was
given exists (relative to its working directory, as fio would open it),
sleeps $FAKE_FIO_SLEEP seconds (when set) so a test can interrupt the bench
while fio runs, and prints a note and then fio's JSON shape with
bw_bytes = 1e9 for reads and writes.
"""
import json
import os
import sys
import time


def main():
    args = sys.argv[1:]
    if args == ["--version"]:
        print("fio-3.33")
        return 0
    log = os.environ.get("FAKE_FIO_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "pid": os.getpid()}) + "\n")
    names = [a[len("--filename="):] for a in args if a.startswith("--filename=")]
    if len(names) != 1 or not os.path.isfile(names[0]):
        print("fake fio: --filename %r is not a file in %s" % (names, os.getcwd()),
              file=sys.stderr)
        return 1
    time.sleep(float(os.environ.get("FAKE_FIO_SLEEP", "0")))
    print("note: both iodepth and numjobs are small")
    print(json.dumps({"jobs": [{"jobname": "zc", "read": {"bw_bytes": 1e9},
                                "write": {"bw_bytes": 1e9}}]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
