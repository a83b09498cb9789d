#!/usr/bin/env python3
"""Command-line argument fuzz for every zeroc subcommand and train_mlp.

For a bounded time it runs the programs with random flags, hostile values
(NaN, infinities, 2^31, 2^64, exponents, empty and malformed lists, suffixes,
control bytes, shell syntax, very long text) and hostile paths (quotes, $(...),
FIFOs, devices, directories where files are expected), then holds every run to:
  - exit status 0, 1 or 2 (train_mlp also 3, its documented loss-scale
    failure): no signal, no sanitizer abort, within 30 s;
  - no sanitizer report (AddressSanitizer, LeakSanitizer, UBSan "runtime error");
  - a failure says why (stderr not empty, no message cut off after "name: ");
  - every stdout line that starts with '{' is strict JSON (no nan, no inf);
  - the files are as they were: nothing created (an injected command's
    CANARY, a bench file left behind), deleted or changed in the work
    directory, which is also the programs' working directory.
A valid run is kept cheap by a tail of small, valid flags appended after the
random ones: the programs read flags in order, so a refused value before the
tail is still refused, while a valid one is overridden by the tail.

Usage: fuzz_cli.py --zeroc PATH --train-mlp PATH --fake-fio PATH
                   [--seconds S] [--seed N]
S defaults to $ZC_CLI_FUZZ_SECONDS or 40. Every failure prints the command
line that reproduces it (run it in the printed work directory layout).
Exits 0 when nothing was found, 1 otherwise.
"""
import argparse
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

SAN = re.compile(r"AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:|"
                 r"ThreadSanitizer|MemorySanitizer")

NUMBERS = [
    "", "0", "-0", "1", "-1", "2", "3", "7", "8", "63", "64", "100", "101", "1000", "4096",
    "65536", "65537", "2147483647", "2147483648", "-2147483649", "4294967296", "4294967297",
    "9007199254740993", "9223372036854775807", "9223372036854775808", "-9223372036854775809",
    "18446744073709551615", "18446744073709551616", "1e30", "1e308", "1e309", "-1e309",
    "1e-300", "1e-400", "5e8", "2.5e1", "1.5", "0.5", "0.5K", "1K", "4K", "128K", "1M", "1G",
    "1T", "1P", "16E", "1e", "e5", ".", "-", "+", "--", " 1", "1 ", "\t1", "1\n", "nan", "NaN",
    "-nan", "inf", "-inf", "Infinity", "0x10", "0X1p3", "010", "1_000", "1,000", "\uff11",
    "\x01", "%s%n%x", "9" * 400, "1" + "0" * 30, "0." + "0" * 300 + "1", "1e99999999999",
    "1e-99999999999", "$(touch CANARY)", "'; touch CANARY; '", "`touch CANARY`",
]


# For runs whose random flags are not overridden by the tail: values that no
# flag accepts, and small ones that every flag that accepts them runs
# quickly with, so an absurd value the program wrongly accepts is used (and
# shows) instead of being masked by a valid one later on the command line.
ABSURD = [
    "", "-1", "-2147483649", "-9223372036854775809", "18446744073709551616",
    "99999999999999999999999", "1e30", "1e308", "1e309", "-1e309", "1e-400", "1.5", "1e", "e5",
    ".", "-", "+", "--", " 1", "1 ", "\t1", "1\n", "nan", "NaN", "-nan", "inf", "-inf",
    "Infinity", "0x10", "0X1p3", "1_000", "1,000", "\uff11", "\x01", "%s%n%x", "9" * 400,
    "1" + "0" * 30, "1e99999999999", "1e-99999999999", "$(touch CANARY)", "'; touch CANARY; '",
    "`touch CANARY`", "16E", "1P", "1,,2", ",", "1,",
]
SMALL = ["0", "-0", "1", "2", "3", "4", "4e0", "0.4e1", "4.0", "1,2", "2,1,1"]


def cheap_number(rng):
    return rng.choice(ABSURD) if rng.random() < 0.6 else rng.choice(SMALL)


def hostile_number(rng):
    r = rng.random()
    if r < 0.75:
        return rng.choice(NUMBERS)
    if r < 0.85:
        return str(rng.randint(-2 ** 70, 2 ** 70))
    if r < 0.95:  # a list
        return ",".join(rng.choice(NUMBERS[:60]) for _ in range(rng.randint(0, 20)))
    return "".join(chr(rng.randint(1, 0x2ff)) for _ in range(rng.randint(1, 40)))


class Fixtures:
    """Paths the fuzz hands to programs; all under the work directory."""

    def __init__(self, w, fake_fio):
        self.w = w
        j = lambda *p: os.path.join(w, *p)
        os.mkdir(j("dir_ok"))
        os.mkdir(j("quote'dir"))
        os.mkdir(j("$(touch CANARY)"))
        os.mkdir(j("ro_dir"), 0o500)
        with open(j("regular"), "w") as f:
            f.write("not a config\n")
        os.mkfifo(j("fifo"))
        fio = j("quote'dir", "fio")
        shutil.copy(fake_fio, fio)
        os.chmod(fio, 0o755)
        shutil.copy(fake_fio, j("fake_fio"))
        os.chmod(j("fake_fio"), 0o755)
        configs = {
            "ok.json": {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3}},
            "auto.json": {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                          "gradient_accumulation_steps": "auto"},
            "mb_2p31.json": {"train_micro_batch_size_per_gpu": 2 ** 31},
            "mb_2p31m1.json": {"train_micro_batch_size_per_gpu": 2 ** 31 - 1},
            "mb_2p62.json": {"train_micro_batch_size_per_gpu": 2 ** 62,
                             "gradient_accumulation_steps": 4},
            "mb_neg.json": {"train_micro_batch_size_per_gpu": -1},
            "mb_float.json": {"train_micro_batch_size_per_gpu": 2.5},
            "mb_huge.json": {"train_micro_batch_size_per_gpu": 1e300},
            "dotted.json": {"zero_optimization.stage": 3, "train_micro_batch_size_per_gpu": 1},
            "offload.json": {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {
                "stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/nonexistent"}}},
            "fp16.json": {"train_micro_batch_size_per_gpu": 1,
                          "fp16": {"enabled": True, "initial_scale_power": 1000}},
            "stage9.json": {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 9}},
            "unknown.json": {("k%d" % i): i for i in range(2000)},
        }
        for n, c in configs.items():
            with open(j(n), "w") as f:
                json.dump(c, f)
        with open(j("deep.json"), "w") as f:
            f.write("[" * 100000 + "]" * 100000)
        with open(j("garbage.json"), "wb") as f:
            f.write(b'{"train_micro_batch_size_per_gpu": 1e999, "\x00": NaN, }')
        with open(j("empty.json"), "w") as f:
            pass
        with open(j("bignum.json"), "w") as f:
            f.write('{"train_micro_batch_size_per_gpu": 1' + "0" * 5000 + "}")
        self.configs = [j(n) for n in sorted(configs)] + [
            j("deep.json"), j("garbage.json"), j("empty.json"), j("bignum.json"), j("fifo"),
            j("dir_ok"), j("regular"), j("missing.json"), "/dev/null", "/dev/zero", "", "-",
            "x" * 5000, j("quote'dir"), "/proc/self/mem"]
        self.dirs = [w, j("dir_ok"), j("quote'dir"), j("$(touch CANARY)"), j("regular"),
                     j("missing"), j("ro_dir"), j("fifo"), "", "/proc", "/dev/null",
                     "x" * 5000, j("dir_ok") + "/" + "y" * 380, j("dir_ok", "..", "dir_ok")]
        self.fios = [j("fake_fio"), fio, j("missing"), j("regular"), "/bin/false", "/bin/true",
                     "", "fio", "./fake_fio", "../" * 3, j("dir_ok")]
        # Only paths where nothing can be created: a valid --dump-params
        # would (rightly) leave a file the snapshot check would report.
        self.dumps = [j("missing", "x"), j("dir_ok"), "/dev/full", "", "/proc/nope/x",
                      j("fifo") + "/x"]


def pick(rng, xs):
    return rng.choice(xs)


def flag_args(rng, spec, fx, cheap=False):
    """Random flags from spec {flag: kind}; kind None means no value."""
    number = cheap_number if cheap else hostile_number
    out = []
    for _ in range(rng.randint(0, 6)):
        r = rng.random()
        if r < 0.08:
            out.append(pick(rng, ["--", "-", "-h", "--bogus", "-x", "--" + "a" * 300, "\x7f",
                                  "--n=", "--size=inf", "-zzz", "junk"]))
            continue
        flag = pick(rng, list(spec))
        kind = spec[flag]
        if kind is None:
            out.append(flag)
            continue
        if kind == "num":
            v = number(rng)
        elif kind == "dir":
            v = pick(rng, fx.dirs)
        elif kind == "fio":
            v = pick(rng, fx.fios)
        elif kind == "config":
            v = pick(rng, fx.configs)
        elif kind == "dump":
            v = pick(rng, fx.dumps)
        else:
            v = pick(rng, kind) if rng.random() < 0.7 else number(rng)
        r = rng.random()
        if r < 0.1 and kind != "dump":
            # Value missing (or the next flag taken as it). Not for
            # --dump-params: any next word is a file name it may write.
            out.append(flag)
        elif r < 0.25:
            out.append(flag + "=" + v)
        else:
            out += [flag, v]
    return out


ADAM_CPU = {"--n": "num", "--threads": "num", "--reps": "num", "--quick": None,
            "--variant": ["scalar", "avx2", "avx512", "avx512bf16", "", "none"], "--help": None,
            "--optimizer": ["adam", "lion", "adagrad", "", "sgd", "lion,adagrad"]}
ADAM_CUDA = {"--sizes": "num", "--reps": "num", "--warmup": "num", "--gpu": "num",
             "--grad": ["fp32", "bf16", "fp16", "fp32,bf16", "", "fp8", ",", "bf16,,fp16"],
             "--out": ["bf16", "fp16", "fp32", "none", "", "int8"]}
IO = {"--dir": "dir", "--size": "num", "--block": "num", "--depth": "num", "--reps": "num",
      "--op": ["read", "write", "read,write", "write,read", "", "readwrite", "read,read"],
      "--no-fio": None, "--fio": "fio", "--sqpoll": None, "--no-hugepage": None,
      "--fio-hugepage": None, "--help": None}
TRAIN = {"--stage": "num", "--world": "num", "--steps": "num", "--accum": "num",
         "--batch": "num", "--seed": "num", "--clip": "num", "--lr": "num", "--bucket": "num",
         "--persistence-threshold": "num", "--prefetch": "num", "--dump-params": "dump",
         "--json": None, "--config": "config",
         "--dtype": ["fp32", "bf16", "fp16", "", "fp64", "BF16"], "--help": None}
CONFIG = {"--world": "num", "--lenient": None, "--json": None, "--help": None}
ESTIMATE = {"--params": "num", "--world": "num", "--gpus-per-node": "num",
            "--micro-batch": "num", "--json": None, "--help": None, "--config": "config",
            "--dtype": ["fp32", "bf16", "fp16", "", "fp8", "BF16"],
            "--model": ["gpt:12,768,12,1024,50257", "gpt:1,64,1,8,8", "gpt:", "gpt:1,2",
                        "gpt:1,2,3,4,5,6", "gpt:1,,1,8,8", "llama:1,2,3,4,5", "",
                        "gpt:4096,65536,4096,1048576,16777216", "gpt:1,64,3,8,8"]}


def with_tail(rng, head, spec, fx, tail):
    """The random flags and the tail that keeps a valid run cheap. Most runs
    put the tail last, so a valid random value is overridden by it. The
    others draw only from ABSURD and SMALL and put the tail first: a value
    that is wrongly accepted is then the one used (and shows), not masked."""
    if rng.random() < 0.4:
        # --quick brings back 16M parameters: not cheap.
        args = [x for x in flag_args(rng, spec, fx, cheap=True) if x != "--quick"]
        return head + tail + args
    return head + flag_args(rng, spec, fx) + tail


def make_case(rng, a, fx):
    """Returns the argv of one run."""
    z, t = a.zeroc, a.train_mlp
    r = rng.random()
    if r < 0.22:
        return with_tail(rng, [z, "bench", "adam", "--device", "cpu"], ADAM_CPU, fx,
                         ["--n", "4K", "--reps", "1", "--threads", "1"])
    if r < 0.28:
        return with_tail(rng, [z, "bench", "adam", "--device", "cuda"], ADAM_CUDA, fx,
                         ["--sizes", "64", "--reps", "1", "--warmup", "0"])
    if r < 0.52:
        tail = ["--size", "1M", "--block", "128K", "--depth", "1", "--reps", "1"]
        if rng.random() < 0.5:
            tail.append("--no-fio")
        return with_tail(rng, [z, "bench", "io"], IO, fx, tail)
    if r < 0.78:
        return with_tail(rng, [t], TRAIN, fx, ["--steps", "1", "--world", "1", "--batch", "1"])
    if r < 0.86:
        return with_tail(rng, [z, "estimate"], ESTIMATE, fx, ["--params", "1M", "--world", "2"])
    if r < 0.93:
        args = flag_args(rng, CONFIG, fx)
        args.insert(rng.randint(0, len(args)), pick(rng, fx.configs))
        return [z, "config", "check"] + args
    heads = [["version"], ["--version"], ["help"], ["-h"], ["config"], ["config", "keys"],
             ["config", "bogus"], ["bench"], ["bench", "nope"], ["bench", "adam", "--device"],
             ["bench", "adam", "--device", "tpu"], ["bench", "adam", "--device="], [""],
             ["\x01"], ["x" * 5000]]
    return [z] + pick(rng, heads) + [hostile_number(rng) for _ in range(rng.randint(0, 2))]


def snapshot(root):
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            isdir = os.path.isdir(p) and not os.path.islink(p)
            out[os.path.relpath(p, root)] = (st.st_mode,) if isdir else \
                (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def check(cmd, p, before, w):
    """Returns a list of problems with one run."""
    probs = []
    if p.returncode == "timeout":
        return ["no answer within 30 s (hang)"]
    out, err = p.stdout, p.stderr
    # train_mlp documents 3: the fp16 loss scale fell below its minimum.
    allowed = (0, 1, 2, 3) if os.path.basename(cmd[0]) == "train_mlp" else (0, 1, 2)
    if p.returncode not in allowed:
        probs.append("exit status %d" % p.returncode)
    m = SAN.search(err)
    if m:
        probs.append("sanitizer report: " + err[max(0, m.start() - 200):m.start() + 1500])
    if p.returncode in (1, 2):
        # The reason is on stderr, or on stdout for a report such as
        # `config check`, which prints the errors it found.
        text = err.strip() or out.strip()
        last = text.splitlines()[-1] if text else ""
        if not last or re.search(r":\s*$", last):
            probs.append("failure with an empty or cut-off message: %r" % text[-300:])

    def bad_constant(c):
        raise ValueError(c)
    try:  # one JSON document (config check --json) ...
        json.loads(out, parse_constant=bad_constant)
    except ValueError:  # ... or one object per line (benches, train_mlp --json)
        for line in out.splitlines():
            if line.startswith("{"):
                try:
                    json.loads(line, parse_constant=bad_constant)
                except ValueError as e:
                    probs.append("stdout line is not strict JSON (%s): %s" % (e, line[:300]))
                    break
    after = snapshot(w)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    if changed:
        probs.append("files created, deleted or changed: %s" % changed[:10])
    return probs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zeroc", required=True)
    ap.add_argument("--train-mlp", required=True)
    ap.add_argument("--fake-fio", required=True)
    ap.add_argument("--seconds", type=float,
                    default=float(os.environ.get("ZC_CLI_FUZZ_SECONDS", "40")))
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    # The programs run in the work directory: absolute paths.
    a.zeroc, a.train_mlp, a.fake_fio = map(os.path.abspath, (a.zeroc, a.train_mlp, a.fake_fio))
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(2 ** 32)
    rng = random.Random(seed)
    print("fuzz_cli: seed %d, %.0f s" % (seed, a.seconds), flush=True)
    problems = 0
    runs = 0
    by_prog = {}
    with tempfile.TemporaryDirectory(prefix="zc_cli_fuzz.") as w:
        fx = Fixtures(w, a.fake_fio)
        env = dict(os.environ, FAKE_FIO_LOG=os.devnull)
        end = time.time() + a.seconds
        while time.time() < end and problems < 5:
            cmd = make_case(rng, a, fx)
            before = snapshot(w)
            try:
                p = subprocess.run(cmd, cwd=w, env=env, stdin=subprocess.DEVNULL,
                                   capture_output=True, text=True, errors="replace", timeout=30)
            except subprocess.TimeoutExpired as e:
                p = subprocess.CompletedProcess(cmd, "timeout", "", "")
            except ValueError as e:  # an argument with a NUL byte cannot be passed at all
                continue
            runs += 1
            if cmd[0] == a.train_mlp:
                key = "train_mlp"
            elif cmd[1:2] == ["estimate"]:
                key = "zeroc estimate"
            elif cmd[1:3] in (["bench", "io"], ["config", "check"]):
                key = "zeroc " + " ".join(cmd[1:3])
            elif cmd[1:5] in (["bench", "adam", "--device", "cpu"], ["bench", "adam", "--device", "cuda"]):
                key = "zeroc " + " ".join(cmd[1:5])
            else:
                key = "zeroc (other)"
            by_prog[key] = by_prog.get(key, 0) + 1
            probs = check(cmd, p, before, w)
            if probs:
                problems += 1
                print("FAIL (exit %s): %s" % (p.returncode, shlex.join(cmd)))
                print("  argv exactly: %s" % json.dumps(cmd))
                for pr in probs:
                    print("  - " + pr)
                print("  stderr tail: %r" % (p.stderr or "")[-500:], flush=True)
                # Put the work directory back for the next runs.
                for k in set(snapshot(w)) - set(before):
                    path = os.path.join(w, k)
                    if os.path.isdir(path) and not os.path.islink(path):
                        shutil.rmtree(path, ignore_errors=True)
                    elif os.path.lexists(path):
                        os.unlink(path)
        os.chmod(os.path.join(w, "ro_dir"), 0o700)
    print("fuzz_cli: %d runs, %d problem(s); runs per program: %s"
          % (runs, problems, json.dumps(by_prog, sort_keys=True)))
    if problems:
        print("fuzz_cli: FAILED; rerun with --seed %d to reproduce" % seed)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
