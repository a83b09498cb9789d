#!/usr/bin/env python3
"""The zeroc CLI loads no CUDA library, and `zeroc bench adam --device cuda`
still reaches the GPU bench (issue 21, item 1: one build serves both).

- `zeroc config keys` and `zeroc bench adam --device cpu` run with the
  dynamic loader's trace (LD_DEBUG=libs): no CUDA runtime, cuBLAS, NCCL or
  driver library is searched for or initialised. A CLI linked against the
  CUDA runtime would not even start where the runtime is missing.
- In a CUDA build, `zeroc bench adam --device cuda` runs bench_gpu_adam with
  the arguments given: `--n 100` is refused by that program's own check
  (a multiple of 64), `--n 1M --reps 1 --warmup 0` either benches (a GPU:
  JSON lines) or says why it cannot (no GPU: the driver library or device
  named), and a copy of the CLI with no bench beside it or below names the
  installed path it tried. In a build without CUDA the subcommand says it is
  not part of the build.

Usage: check_cli_cuda.py ZEROC yes|no (whether the build has CUDA). Prints TAP.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

RESULTS = []
CUDA_LIB = re.compile(r"lib(cudart|cublas|cublasLt|nccl|cuda)\.so")


def check(name, problems):
    RESULTS.append((name, problems))
    n = len(RESULTS)
    if problems:
        print("not ok %d - %s\n#   %s" % (n, name, "\n#   ".join(problems)), flush=True)
    else:
        print("ok %d - %s" % (n, name), flush=True)


def run(cmd, env=None, timeout=120):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL)


def loader_trace(cmd):
    """Runs cmd with LD_DEBUG=libs; returns (process, trace lines naming a CUDA library)."""
    env = dict(os.environ, LD_DEBUG="libs")
    p = run(cmd, env)
    hits = [l.strip() for l in p.stderr.splitlines() if CUDA_LIB.search(l)]
    return p, hits


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("yes", "no"):
        sys.exit("usage: check_cli_cuda.py ZEROC yes|no")
    zeroc, cuda = sys.argv[1], sys.argv[2] == "yes"

    for args in (["config", "keys"], ["bench", "adam", "--device", "cpu", "--n", "4K",
                                      "--reps", "1", "--threads", "1", "--variant", "scalar"]):
        p, hits = loader_trace([zeroc] + args)
        probs = []
        if p.returncode != 0:
            probs.append("exit %d: %s" % (p.returncode, p.stderr[-400:]))
        if "find library=" not in p.stderr:
            probs.append("no loader trace: LD_DEBUG=libs had no effect, nothing was checked")
        probs += ["loads a CUDA library: " + h for h in hits[:5]]
        check("zeroc %s loads no CUDA library" % " ".join(args), probs)

    p = run([zeroc, "bench", "adam", "--help"])
    check("bench adam --help names --device",
          [] if p.returncode == 0 and "--device cpu|cuda" in p.stdout
          else ["exit %d, stdout %r" % (p.returncode, p.stdout[-300:])])

    if not cuda:
        p = run([zeroc, "bench", "adam", "--device", "cuda", "--n", "1M"])
        check("a build without CUDA says --device cuda is not part of it",
              [] if p.returncode == 2 and "not part of this build" in p.stderr
              else ["exit %d: %s" % (p.returncode, p.stderr[-400:])])
        return

    p = run([zeroc, "bench", "adam", "--device", "cuda", "--help"])
    check("bench adam --device cuda --help is the GPU bench's",
          [] if p.returncode == 0 and "usage: bench_gpu_adam" in p.stdout
          else ["exit %d, stdout %r" % (p.returncode, p.stdout[-300:])])

    p = run([zeroc, "bench", "adam", "--device", "cuda", "--n", "100"])
    check("--device cuda hands its arguments to bench_gpu_adam",
          [] if p.returncode == 2 and "bench_gpu_adam: --n item 100 is not a multiple of 64"
          in p.stderr and not p.stdout else
          ["exit %d, stdout %r, stderr %s" % (p.returncode, p.stdout[:200], p.stderr[-400:])])

    p = run([zeroc, "bench", "adam", "--device", "cuda", "--n", "1M", "--reps", "1",
             "--warmup", "0"], timeout=300)
    probs = []
    if p.returncode == 0:
        lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
        if not lines:
            probs.append("exit 0 without a JSON line: %r" % p.stdout[:300])
    elif p.returncode == 1:
        # The bench's own reason (no driver, no device, the runtime's), not
        # a usage error about the arguments it was handed.
        if "bench_gpu_adam:" not in p.stderr or "option" in p.stderr or "cannot run" in p.stderr:
            probs.append("exit 1 without the bench's reason: %s" % p.stderr[-400:])
    else:
        probs.append("exit %d: %s" % (p.returncode, p.stderr[-400:]))
    check("--device cuda runs the GPU bench or says why it cannot", probs)

    with tempfile.TemporaryDirectory(prefix="zc-cli-cuda.") as d:
        alone = os.path.join(d, "zeroc")
        shutil.copy2(zeroc, alone)
        p = run([alone, "bench", "adam", "--device", "cuda", "--n", "1M"])
        m = re.search(r"cannot run (\S+): ", p.stderr)
        probs = []
        if m and os.path.exists(m.group(1)):
            probs.append("says it cannot run %s, which exists" % m.group(1))
        elif m:
            if p.returncode != 1 or not m.group(1).endswith("/zeroc/bench_gpu_adam"):
                probs.append("exit %d, tried %s" % (p.returncode, m.group(1)))
        elif "bench_gpu_adam:" not in p.stderr:
            # zeroc is installed here, and its bench ran
            probs.append("exit %d, neither ran nor named what it tried: %s"
                         % (p.returncode, p.stderr[-400:]))
        check("a CLI with no bench beside it names the installed path it tried", probs)


main()
print("1..%d" % len(RESULTS))
sys.exit(1 if any(p for _, p in RESULTS) else 0)
