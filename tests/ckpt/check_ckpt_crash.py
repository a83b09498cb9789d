#!/usr/bin/env python3
"""Crash safety: a process saving a checkpoint after every step (two ranks,
ZeRO-2) is SIGKILLed at random moments, ROUNDS times, in one directory.
After each kill, DIR/latest names a complete checkpoint that a fresh process
loads bitwise equal to a fresh run of as many steps, and the next process's
saves succeed beside the staging directory the killed save may have left
(each round's tags are its own; clearing a stale staging directory of the
same tag: test_ckpt_bad_input stale_staging_*).
The seed is printed (ZC_TEST_SEED reproduces a run).
Usage: check_ckpt_crash.py CKPT_HELPER
"""
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

ROUNDS = 12


def main():
    helper = sys.argv[1]
    seed = int(os.environ.get("ZC_TEST_SEED", str(int(time.time()))))
    print("seed %d" % seed, flush=True)
    rng = random.Random(seed)
    failures = 0
    with tempfile.TemporaryDirectory(prefix="zc_ckpt_crash_") as tmp:
        d = os.path.join(tmp, "ck")
        for rnd in range(ROUNDS):
            p = subprocess.Popen([helper, "crash", d, "r%d" % rnd], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            # The first save of this round must complete, then the kill
            # lands anywhere in the following saves.
            line = p.stdout.readline()
            if not line.startswith("saved"):
                p.kill()
                print("FAIL round %d: no save completed: %s %s" % (rnd, line, p.stderr.read()))
                return 1
            time.sleep(rng.uniform(0.0, 0.25))
            p.send_signal(signal.SIGKILL)
            p.wait()
            p.stdout.close()
            p.stderr.close()
            v = subprocess.run([helper, "verify", d], capture_output=True, text=True, timeout=300)
            if v.returncode != 0:
                failures += 1
                print("FAIL round %d: %s" % (rnd, v.stderr.strip()))
            else:
                print("round %d: killed, latest %s" % (rnd, v.stdout.strip()), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
