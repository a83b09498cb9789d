#!/usr/bin/env python3
"""Hostile and absurd input to the command-line programs (issue 14).

Each check runs a built program as a user would and asserts the exit status,
the message (it names the flag, the value and the range), and the side
effects: no file created by an injected command, none left behind, none
deleted or changed that existed before.

Usage: check_hostile.py --zeroc PATH --train-mlp PATH --fake-fio PATH --source DIR
Exits 0 when every check passes, 1 after printing every failure.
"""
import argparse
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

failures = []
A = None


def fail(name, msg):
    failures.append(name)
    print("FAIL %s: %s" % (name, msg), flush=True)


def run(cmd, timeout=120, **kw):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              errors="replace", **kw)
    except subprocess.TimeoutExpired as e:
        dec = lambda b: b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        return subprocess.CompletedProcess(cmd, "timeout", dec(e.stdout), dec(e.stderr))


def snapshot(root):
    """Every path under root; for files also size and modification time (a
    directory's own times change when the bench makes and removes its
    directory inside it, which is not a change to what the user had)."""
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            isdir = os.path.isdir(p) and not os.path.islink(p)
            out[os.path.relpath(p, root)] = (st.st_mode,) if isdir else \
                (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def diff(a, b):
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def expect(name, p, status, *needles, stdout_empty=False):
    """Exit status and message text; a failure message is never empty."""
    ok = True
    if p.returncode != status:
        fail(name, "exit status %r, expected %d; stderr: %s" % (p.returncode, status,
                                                                  p.stderr.strip()[-600:]))
        ok = False
    for n in needles:
        if n not in p.stderr:
            fail(name, "stderr lacks %r: %s" % (n, p.stderr.strip()[-600:]))
            ok = False
    if status != 0 and (not p.stderr.strip() or re.search(r":\s*$", p.stderr.strip())):
        fail(name, "empty or unfinished error message: %r" % p.stderr[-300:])
        ok = False
    if stdout_empty and p.stdout.strip():
        fail(name, "a refused run printed results: %s" % p.stdout[:300])
        ok = False
    return ok


def strict_json_lines(name, text):
    def bad_constant(c):
        raise ValueError("non-JSON number " + c)
    for line in text.splitlines():
        try:
            json.loads(line, parse_constant=bad_constant)
        except ValueError as e:
            fail(name, "stdout line is not strict JSON (%s): %s" % (e, line[:200]))
            return False
    return True


# ---- bench adam ---------------------------------------------------------------

def check_bench_adam():
    z = A.zeroc
    small = ["--reps", "1", "--threads", "1", "--variant", "scalar"]
    for val, why in [("nan", "is not a number"), ("inf", "is not a number"),
                     ("1e30", "is out of range"), ("-1", "is out of range"),
                     ("0", "is out of range"), ("1.5", "is not a whole number"),
                     ("1,,2", "is not a number"), ("0x10", "is not a number"),
                     ("99999999999999999999", "is out of range"), ("16E", "is not a number")]:
        p = run([z, "bench", "adam", "--n", val] + small)
        expect("bench adam --n %s" % val, p, 2, "--n '", why, "[1, 17179869184]",
               stdout_empty=True)
    for flag, val in [("--threads", "0"), ("--threads", "1,nan"), ("--threads", "100000"),
                      ("--reps", "1e9"), ("--reps", "2.5"), ("--reps", "")]:
        p = run([z, "bench", "adam", "--n", "1K", flag, val])
        expect("bench adam %s %s" % (flag, val), p, 2, flag + " '", stdout_empty=True)
    # A valid tiny run: every line is strict JSON (no -nan, no inf).
    p = run([z, "bench", "adam", "--n", "1", "--reps", "1", "--threads", "1"])
    if expect("bench adam --n 1", p, 0):
        strict_json_lines("bench adam --n 1", p.stdout)
    # Arguments past the 255th were dropped without a word: the refused value
    # at the end must still be seen.
    p = run([z, "bench", "adam"] + ["--variant", "scalar"] * 200 + ["--n", "nan"], timeout=60)
    expect("bench adam: 400 arguments then --n nan", p, 2, "--n 'nan'", stdout_empty=True)
    p = run([z, "bench"])
    expect("zeroc bench", p, 2, "expected 'io', 'adam' or 'train'")
    # A count that parses but whose buffers (352 GiB) exceed the free memory:
    # refused before allocating (overcommitted memory fails as an OOM kill).
    p = run([z, "bench", "adam", "--n", "16G"] + small)
    expect("bench adam --n 16G", p, 1, "GiB of buffers", "available", stdout_empty=True)


# ---- bench io -------------------------------------------------------------------

def io_cmd(d, *extra, fio=None):
    cmd = [A.zeroc, "bench", "io", "--dir", d, "--size", "1M", "--block", "128K",
           "--depth", "1", "--reps", "1"]
    cmd += ["--fio", fio] if fio else ["--no-fio"]
    return cmd + list(extra)


def check_bench_io(tmp):
    fio_log = os.path.join(tmp, "fio.log")
    env = dict(os.environ, FAKE_FIO_LOG=fio_log)

    # 1. A --dir and a --fio whose names hold quotes, $(...) and backquotes
    #    are paths, never shell text: nothing named INJECTED appears.
    work = os.path.join(tmp, "io")
    os.mkdir(work)
    evil = os.path.join(work, "a'; touch INJECTED; echo '$(touch INJECTED2)`touch INJECTED3`:b")
    os.mkdir(evil)
    fiodir = os.path.join(work, "fio' ; touch INJECTED4 ; '")
    os.mkdir(fiodir)
    fio = os.path.join(fiodir, "fio")
    shutil.copy(A.fake_fio, fio)
    os.chmod(fio, 0o755)
    before = snapshot(work)
    p = run(io_cmd(evil, fio=fio), env=env, cwd=work)
    if expect("bench io: quotes in --dir and --fio", p, 0):
        strict_json_lines("bench io: quotes in --dir and --fio", p.stdout)
        lines = [json.loads(l) for l in p.stdout.splitlines()]
        if not lines or any(l.get("fio_io_uring_gbps") != 1.0 for l in lines):
            fail("bench io: fio results", "fio's answer not used: %s" % p.stdout[:300])
    found = [n for n in snapshot(tmp) if os.path.basename(n).startswith("INJECTED")]
    found += [n for n in os.listdir(os.getcwd()) if n.startswith("INJECTED")]
    if found:
        fail("bench io: shell injection", "an injected command ran: %s" % found)
    if snapshot(work) != before:
        fail("bench io: quotes in --dir", "files left behind: %s" %
             diff(snapshot(work), before))
    try:
        calls = [json.loads(l) for l in open(fio_log, encoding="utf-8")]
    except OSError:
        calls = []
    if len(calls) < 2:
        fail("bench io: fio runs", "fio ran %d times" % len(calls))
    for c in calls:
        if c["argv"][0] != fio or "--filename=zeroc-r0-bench.swp" not in c["argv"] or \
                not os.path.basename(c["cwd"]).startswith("zeroc-bench-io."):
            fail("bench io: fio argv", "unexpected fio call %s" % c)
            break

    # 2. Sizes it cannot parse are refused, before anything is created.
    before = snapshot(work)
    for val, why in [("inf", "is not a number"), ("1e30", "is out of range"),
                     ("nan", "is not a number"), ("0", "is out of range"),
                     ("-5G", "is out of range"), ("1.5", "is not a whole number"),
                     ("2E", "is not a number")]:
        p = run(io_cmd(work, "--size", val), cwd=work)
        expect("bench io --size %s" % val, p, 2, "--size '%s'" % val, why, stdout_empty=True)
    for flag, val in [("--block", "1000"), ("--block", "128K,,1M"), ("--depth", "0"),
                      ("--depth", "1e9"), ("--reps", "nan"), ("--op", "readwrite"),
                      ("--block", "nan")]:
        p = run(io_cmd(work, flag, val), cwd=work)
        expect("bench io %s %s" % (flag, val), p, 2, flag, stdout_empty=True)
    # A size the disk cannot hold: refused, nothing left behind.
    p = run(io_cmd(work, "--size", str(1 << 50)), cwd=work)  # 1 PiB, the largest it takes
    expect("bench io --size 1 PiB", p, 1, "does not fit", stdout_empty=True)
    if snapshot(work) != before:
        fail("bench io: refused sizes", "files changed: %s" %
             diff(snapshot(work), before))

    # 3. A file of the store's name that existed before is not touched.
    mine = os.path.join(work, "zeroc-r0-bench.swp")
    with open(mine, "w") as f:
        f.write("user data\n")
    before = snapshot(work)
    p = run(io_cmd(work), cwd=work)
    expect("bench io beside a user's zeroc-r0-bench.swp", p, 0)
    if not os.path.exists(mine) or open(mine).read() != "user data\n":
        fail("bench io: user's file", "a file the bench did not create was deleted or changed")
    if snapshot(work) != before:
        fail("bench io: user's file", "files changed: %s" %
             diff(snapshot(work), before))

    # 4. --keep keeps the test file in the bench's own directory and says where.
    p = run(io_cmd(work, "--keep"), cwd=work)
    if expect("bench io --keep", p, 0, "kept the test file"):
        m = re.search(r"kept the test file '([^']+)'", p.stderr)
        kept = m.group(1) if m else ""
        if not os.path.isfile(kept) or os.path.dirname(os.path.dirname(kept)) != work:
            fail("bench io --keep", "no kept file at %r" % kept)
        else:
            os.unlink(kept)
            os.rmdir(os.path.dirname(kept))

    # A "fio" that never answers --version: refused by the bench's own
    # deadline - the message says so; a bench that waited for it would run
    # into this run's timeout (60 s, the stand-in sleeps 600), a failure.
    hang = os.path.join(tmp, "hang_fio")
    with open(hang, "w") as f:
        f.write("#!%s\nimport time\ntime.sleep(600)\n" % sys.executable)
    os.chmod(hang, 0o755)
    p = run(io_cmd(work, fio=hang), timeout=60, cwd=work)
    expect("bench io with a fio that hangs", p, 1, "no answer to --version", stdout_empty=True)

    # 5. A --dir that is not a usable directory: a clear error, nothing made.
    regular = os.path.join(work, "regular")
    open(regular, "w").close()
    before = snapshot(work)
    for d, needle in [(regular, "cannot make the bench's directory"),
                      (os.path.join(work, "missing"), "cannot examine"),
                      ("", "--dir must be"), ("x" * 600, "--dir must be")]:
        p = run(io_cmd(d), cwd=work)
        expect("bench io --dir %r" % d[:40], p, 2 if "--dir must" in needle else 1, needle,
               stdout_empty=True)
    if snapshot(work) != before:
        fail("bench io: bad --dir", "files changed")

    # 6. Interrupted (SIGINT, SIGTERM, SIGHUP), in our own I/O and while fio
    #    runs: the file and the directory are gone, the process dies of the
    #    signal, fio is stopped.
    for sig, with_fio in [(signal.SIGINT, False), (signal.SIGTERM, False),
                          (signal.SIGHUP, False), (signal.SIGTERM, True), (signal.SIGINT, True)]:
        name = "bench io interrupted by %s%s" % (sig.name, " during fio" if with_fio else "")
        before = snapshot(work)
        if os.path.exists(fio_log):
            os.unlink(fio_log)
        e = dict(env, FAKE_FIO_SLEEP="30")
        cmd = [A.zeroc, "bench", "io", "--dir", work, "--size", "512M", "--block", "1M",
               "--depth", "1", "--reps", "100"]
        cmd += ["--fio", fio] if with_fio else ["--no-fio"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e,
                                cwd=work)
        deadline = time.time() + 60
        started = False
        while time.time() < deadline and proc.poll() is None:
            dirs = [n for n in os.listdir(work) if n.startswith("zeroc-bench-io.")]
            files = [os.path.join(work, d, "zeroc-r0-bench.swp") for d in dirs]
            if with_fio:
                started = os.path.exists(fio_log) and os.path.getsize(fio_log) > 0
            else:
                started = any(os.path.exists(f) for f in files)
            if started:
                break
            time.sleep(0.02)
        if not started:
            proc.kill()
            proc.communicate()
            fail(name, "the bench did not start")
            continue
        time.sleep(0.2)
        proc.send_signal(sig)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            fail(name, "did not stop")
            continue
        if proc.returncode != -sig:
            fail(name, "exit status %r, expected death by %s; %s" % (proc.returncode, sig.name,
                                                                      err.decode()[-300:]))
        left = diff(snapshot(work), before)
        if left:
            fail(name, "left behind: %s" % left)
        if with_fio:
            pids = [json.loads(l)["pid"] for l in open(fio_log, encoding="utf-8")]
            time.sleep(0.2)
            alive = []
            for pid in pids:
                try:  # a zombie waiting for init to reap it has stopped
                    with open("/proc/%d/stat" % pid) as f:
                        if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                            alive.append(pid)
                except (OSError, IndexError):
                    pass
            if alive:
                fail(name, "fio still runs: %s" % alive)


def check_no_shell():
    """No program in the project runs a shell."""
    pat = re.compile(r"\b(system|popen)\s*\(|\"sh\"\s*,\s*\"-c\"|/bin/sh\"|sh -c")
    hits = []
    for top in ["src", "tools", "bench", "examples", "include", "kernels", "tests"]:
        for d, _, files in os.walk(os.path.join(A.source, top)):
            for n in files:
                if n.endswith((".c", ".h", ".cu", ".cc")):
                    p = os.path.join(d, n)
                    text = open(p, encoding="utf-8", errors="replace").read()
                    # Comments may say "file system (...)": blank them out,
                    # keeping the line structure for the report.
                    code = re.sub(r"/\*.*?\*/|//[^\n]*",
                                  lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
                    for i, line in enumerate(code.splitlines(), 1):
                        if pat.search(line):
                            hits.append("%s:%d: %s" % (os.path.relpath(p, A.source), i,
                                                       line.strip()))
    if hits:
        fail("no shell", "\n  ".join(hits))


# ---- train_mlp --------------------------------------------------------------------

def check_train_mlp(tmp):
    t = A.train_mlp
    quick = ["--steps", "1", "--world", "1", "--batch", "1"]
    for flag, val, why in [("--batch", "2147483648", "is out of range"),
                           ("--batch", "4294967297", "is out of range"),
                           ("--world", "1e30", "is out of range"),
                           ("--world", "nan", "is not a number"),
                           ("--steps", "1.5", "is not a whole number"),
                           ("--accum", "0x10", "is not a number"),
                           ("--seed", "-1", "is out of range"),
                           ("--lr", "nan", "is not a number"), ("--lr", "inf", "is not a number"),
                           ("--clip", "1e999", "is out of range"),
                           ("--bucket", "1e300", "is out of range")]:
        p = run([t] + quick + [flag, val])
        expect("train_mlp %s %s" % (flag, val), p, 2, "%s '%s'" % (flag, val), why,
               stdout_empty=True)
    p = run([t, "--world"])
    expect("train_mlp --world (no value)", p, 2, "--world needs a value")
    # A forgotten file name: the next flag is not taken as one (it wrote a
    # file named --json).
    p = run([t] + quick + ["--dump-params", "--json"])
    expect("train_mlp --dump-params --json", p, 2, "--dump-params needs a file name",
           stdout_empty=True)
    if os.path.exists("--json"):
        fail("train_mlp --dump-params --json", "wrote a file named --json")
        os.unlink("--json")

    # A config's micro batch near 2^31: refused with the key, the value and the
    # range; never printed as a negative number.
    for mb in [2147483647, 2147483648, 65537]:
        cfg = os.path.join(tmp, "mb%d.json" % mb)
        with open(cfg, "w") as f:
            json.dump({"train_micro_batch_size_per_gpu": mb}, f)
        p = run([t, "--config", cfg, "--steps", "1", "--world", "1"])
        expect("train_mlp config micro batch %d" % mb, p, 1, "train_micro_batch_size_per_gpu",
               stdout_empty=True)
        if re.search(r"-\d{6,}", p.stdout + p.stderr):
            fail("train_mlp config micro batch %d" % mb, "a negative batch was printed: %s"
                 % (p.stdout + p.stderr)[-300:])

    # More ranks and samples than the memory holds: a message, not the OOM
    # killer. Only where the machine is small enough for the largest case.
    avail = 0
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            avail = int(line.split()[1]) * 1024
    if avail and avail * 7 // 8 < 64 * (65536 * 1696 * 4 + (8 << 20)):
        p = run([t, "--world", "64", "--batch", "65536", "--steps", "1"])
        expect("train_mlp --world 64 --batch 65536", p, 1, "GiB available", stdout_empty=True)
    else:
        print("note: %.0f GiB available; the train_mlp memory check needs a smaller machine"
              % (avail / 2 ** 30))

    # Several ranks failing at once: one clean exit with a reason (two threads
    # in exit() at once crashed).
    cfg = os.path.join(tmp, "offload.json")
    with open(cfg, "w") as f:
        json.dump({"train_micro_batch_size_per_gpu": 2,
                   "zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}}, f)
    for i in range(12):
        p = run([t, "--config", cfg, "--world", "16", "--steps", "1"])
        if p.returncode != 1 or "offload" not in p.stderr:
            fail("train_mlp: 16 ranks failing together", "run %d: exit status %r, stderr %r"
                 % (i, p.returncode, p.stderr[-300:]))
            break

    # pthread_create failing (a 1 TiB default thread stack cannot be mapped):
    # the message gives the reason.
    def huge_stack():
        hard = resource.getrlimit(resource.RLIMIT_STACK)[1]
        want = 1 << 40
        if hard != resource.RLIM_INFINITY and hard < want:
            want = hard
        resource.setrlimit(resource.RLIMIT_STACK, (want, hard))
    p = run([t, "--steps", "1", "--world", "2", "--batch", "1"], preexec_fn=huge_stack)
    if p.returncode == 0:
        print("note: threads with a 1 TiB stack could be made here; pthread_create check skipped")
    else:
        expect("train_mlp: pthread_create fails", p, 1, "cannot start rank thread 0 of 2: ")
        if not re.search(r"cannot start rank thread 0 of 2: \S", p.stderr):
            fail("train_mlp: pthread_create fails", "no reason given: %r" % p.stderr[-300:])

    # A diverging run (lr 1e6, fp16) has NaN losses: --json stays JSON.
    p = run([t, "--lr", "1e6", "--steps", "3", "--world", "1", "--batch", "1", "--dtype", "fp16",
             "--json"])
    if expect("train_mlp --lr 1e6 --json", p, 0):
        strict_json_lines("train_mlp --lr 1e6 --json", p.stdout)

    # Output that cannot be written is a failure, not a success.
    with open("/dev/full", "w") as full:
        p = subprocess.run([t] + quick + ["--json"], stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=120)
    expect("train_mlp > /dev/full", p, 1, "cannot write the output")
    with open("/dev/full", "w") as full:
        p = subprocess.run([A.zeroc, "version"], stdout=full, stderr=subprocess.PIPE, text=True,
                           timeout=60)
    expect("zeroc version > /dev/full", p, 1, "cannot write the output")


def main():
    global A
    ap = argparse.ArgumentParser()
    for k in ["--zeroc", "--train-mlp", "--fake-fio", "--source"]:
        ap.add_argument(k, required=True)
    A = ap.parse_args()
    # The checks change directory: absolute paths.
    for k in ["zeroc", "train_mlp", "fake_fio", "source"]:
        setattr(A, k, os.path.abspath(getattr(A, k)))
    with tempfile.TemporaryDirectory(prefix="zc_hostile.") as tmp:
        cwd = os.path.join(tmp, "cwd")
        os.mkdir(cwd)
        os.chdir(cwd)  # an injected `touch` with a relative path would land here
        check_bench_adam()
        check_bench_io(tmp)
        check_no_shell()
        check_train_mlp(tmp)
        if os.listdir(cwd):
            fail("working directory", "files appeared: %s" % os.listdir(cwd))
        os.chdir("/")
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all hostile-input checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
