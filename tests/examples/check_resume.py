#!/usr/bin/env python3
"""--save-every / --save-dir / --resume of a training example, end to end in
fresh processes: a run of 20 steps and a run of 10 steps (saving every 5)
followed by a --resume run of 10 more end with the same params_sha256 (the
final --json line), for the configurations given.
Usage: check_resume.py EXE CONFIG [CONFIG...]   (CONFIG: space-separated flags)
Everything it writes is in one temporary directory, removed at the end."""
import json
import os
import subprocess
import sys
import tempfile


def final(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (" ".join(cmd), p.returncode, p.stderr[-2000:]))
    for line in p.stdout.splitlines():
        if line.startswith("{") and json.loads(line).get("final"):
            return json.loads(line)
    raise RuntimeError("%s: no final --json line" % " ".join(cmd))


def main():
    exe, configs = sys.argv[1], sys.argv[2:]
    bad = 0
    with tempfile.TemporaryDirectory(prefix="zc_resume_") as tmp:
        for i, cfg in enumerate(configs):
            flags = cfg.split()
            d = os.path.join(tmp, "ck%d" % i)
            try:
                whole = final([exe, "--json", "--steps", "20", *flags])
                final([exe, "--json", "--steps", "10", "--save-every", "5", "--save-dir", d, *flags])
                resumed = final([exe, "--json", "--steps", "10", "--resume", "--save-dir", d, *flags])
            except RuntimeError as e:
                print("FAIL [%s]: %s" % (cfg, e))
                bad += 1
                continue
            same = whole["params_sha256"] == resumed["params_sha256"]
            print("%s [%s]: 20 steps %s, 10 + resume 10 %s" % ("ok" if same else "FAIL", cfg,
                  whole["params_sha256"][:16], resumed["params_sha256"][:16]), flush=True)
            bad += not same
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
