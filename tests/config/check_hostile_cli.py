#!/usr/bin/env python3
"""`zeroc config check` on hostile input (issue 19): for each case the exit
status, the message text, and the absence of side effects (it runs in an
empty working directory that must stay empty; the inputs it was given must be
unchanged; a FIFO must not block it).

Usage: check_hostile_cli.py ZEROC EXAMPLES_DIR. Prints TAP.
"""
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ARROW = "\u2192"
LIMIT = 16 << 20  # ZC_CFG_MAX_BYTES


class Runner:
    def __init__(self, zeroc, work):
        self.zeroc, self.work, self.n, self.bad = zeroc, work, 0, 0
        self.cwd = os.path.join(work, "cwd")
        os.mkdir(self.cwd)

    def run(self, *args, timeout=120):
        t0 = time.monotonic()
        p = subprocess.run([self.zeroc, "config", "check"] + list(args), cwd=self.cwd,
                           capture_output=True, timeout=timeout)
        return p.returncode, p.stdout.decode("utf-8"), p.stderr.decode("utf-8"), \
            time.monotonic() - t0

    def check(self, name, problems):
        self.n += 1
        # No case may leave anything behind in its working directory.
        left = os.listdir(self.cwd)
        if left:
            problems.append("left files in the working directory: %s" % left)
            for f in left:
                os.unlink(os.path.join(self.cwd, f))
        if problems:
            self.bad += 1
            print("not ok %d - %s: %s" % (self.n, name, "; ".join(problems)))
        else:
            print("ok %d - %s" % (self.n, name))

    def write(self, name, text):
        path = os.path.join(self.work, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path


def expect(problems, cond, what):
    if not cond:
        problems.append(what)


def case_not_files(r):
    # A directory, a character device, a FIFO without a writer.
    d = os.path.join(r.work, "a_dir")
    os.mkdir(d)
    fifo = os.path.join(r.work, "fifo.json")
    os.mkfifo(fifo)
    for path, kind in ((d, "is a directory"), ("/dev/zero", "is a character device"),
                       (fifo, "is a named pipe (FIFO)")):
        p = []
        try:
            rc, out, err, _ = r.run(path, timeout=20)
        except subprocess.TimeoutExpired:
            r.check("%s: does not block" % path, ["blocked for 20 s"])
            continue
        want = "%s %s; expected a regular JSON file" % (path, kind)
        expect(p, rc == 1, "exit %d, want 1" % rc)
        expect(p, want in err, "stderr %r lacks %r" % (err, want))
        expect(p, "9223372036854775807" not in err, "the old size message")
        rc, out, err, _ = r.run(path, "--json", timeout=20)
        try:
            j = json.loads(out)
            expect(p, j["valid"] is False and want in j["errors"][0]["message"],
                   "--json: %r" % j)
        except ValueError:
            p.append("--json output is not JSON: %r" % out[:200])
        r.check("%s %s" % (path, kind), p)
    p = []
    expect(p, os.path.isdir(d) and not os.listdir(d), "the directory changed")
    expect(p, os.path.exists(fifo) and not os.path.isfile(fifo), "the FIFO changed")
    r.check("inputs that are not files are left as they were", p)


def case_too_large(r):
    # Sparse, 17 MiB: refused by its size, before a byte is parsed.
    path = os.path.join(r.work, "sparse.json")
    with open(path, "wb") as f:
        f.truncate(17 << 20)
    p = []
    rc, out, err, secs = r.run(path)
    expect(p, rc == 1, "exit %d" % rc)
    want = "is %d bytes; a config may be at most 16 MiB (%d bytes)" % (17 << 20, LIMIT)
    expect(p, want in err, "stderr %r lacks %r" % (err, want))
    r.check("a 17 MiB file is refused by its size", p)
    os.unlink(path)


def case_unknown_key_flood(r):
    # 60000 unknown keys (under the value cap): the listing keeps 64 and says
    # how many more there were; memory stays small (each unknown key kept a
    # message and cost a hint search before).
    n = 60000
    path = r.write("flood.json", "{" + ", ".join(['"train_batch_size": 8'] + [
        '"unknown_key_%08d": 0' % i for i in range(n)]) + "}")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    rc, out, err, secs = r.run(path)
    rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    p = []
    expect(p, rc == 0, "exit %d (unknown top-level keys only warn): %s" % (rc, err[-300:]))
    want = "\u2026 and %d more warnings (only the first 64 are kept)" % (n - 64)
    expect(p, want in out, "output lacks %r" % want)
    expect(p, out.count("unknown top-level key") == 64, "kept %d warnings, want 64" %
           out.count("unknown top-level key"))
    if rss_kib > before:
        expect(p, rss_kib < 128 * 1024, "peak RSS %d KiB" % rss_kib)
    r.check("%d unknown keys: %.2f s, peak RSS %d MiB" % (n, secs, rss_kib // 1024), p)
    os.unlink(path)

    # 16 MiB of tiny values: refused by their number before a tree is built
    # (it took ~925 MB and 30 s as unknown keys, and an array of 8 M zeros
    # ~350 MB as a parsed tree).
    # Written in pieces: a forked child starts as large as this process, and
    # ru_maxrss would count that, not zeroc.
    def tiny_keys(f):
        f.write("{")
        for base in range(0, 1600000, 10000):
            f.write(",".join('"%x":0' % i for i in range(base, base + 10000)))
            f.write("," if base + 10000 < 1600000 else "}")

    def zeros(f):
        f.write('{"x": [')
        for k in range(800):
            f.write(",".join(["0"] * 10000) + ("," if k < 799 else "]}"))

    for name, fill in (("tiny_keys.json", tiny_keys), ("zeros.json", zeros)):
        path = os.path.join(r.work, name)
        with open(path, "w") as f:
            fill(f)
        size = os.path.getsize(path)
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        rc, out, err, secs = r.run(path)
        rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        p = []
        expect(p, size <= LIMIT, "the case file itself is %d bytes" % size)
        expect(p, rc == 1, "exit %d" % rc)
        want = "more than 65536 JSON values; a config may hold at most 65536"
        expect(p, want in out, "output lacks %r: %s" % (want, out[:300]))
        if rss_kib > before:
            expect(p, rss_kib < 3 * size // 1024 + 16 * 1024,
                   "peak RSS %d KiB for a %d-byte file" % (rss_kib, size))
        r.check("%s (%d bytes of tiny values) is refused by their number" % (name, size), p)
        os.unlink(path)


def case_numbers(r):
    p = []
    path = r.write("b62.json", json.dumps({"train_micro_batch_size_per_gpu": 1 << 62,
                                           "gradient_accumulation_steps": 4}))
    rc, out, err, _ = r.run(path, "--world", "1")
    expect(p, rc == 1, "exit %d" % rc)
    want = "train_micro_batch_size_per_gpu: %d is out of range [1, 2147483647]" % (1 << 62)
    expect(p, want in out, "output lacks %r: %s" % (want, out[:300]))
    expect(p, "has to be greater than 0" not in out, "the wrapped product is reported")
    r.check("micro batch 2^62 names key, value and range", p)

    p = []
    m = (1 << 31) - 1
    path = r.write("prod.json", json.dumps({"train_micro_batch_size_per_gpu": m,
                                            "gradient_accumulation_steps": m}))
    rc, out, err, _ = r.run(path, "--world", str(m))
    expect(p, rc == 1, "exit %d" % rc)
    want = "%d * %d * %d does not fit in 64 bits" % (m, m, m)
    expect(p, want in out, "output lacks %r: %s" % (want, out[:300]))
    rc, out, err, _ = r.run(path, "--world", "1")
    want = "%d * %d * 1 = %d is out of range [1, %d]" % (m, m, m * m, m)
    expect(p, rc == 1 and want in out, "output lacks %r: %s" % (want, out[:300]))
    r.check("batch products beyond int64 and beyond the key's range", p)


def case_dotted(r):
    p = []
    path = r.write("dotted.json", '{"train_batch_size": 8, "zero_optimization.stage": 3}')
    rc, out, err, _ = r.run(path, "--json")
    j = json.loads(out)
    expect(p, rc == 1 and j["valid"] is False, "exit %d valid %r" % (rc, j["valid"]))
    msgs = {e["path"]: e["message"] for e in j["errors"]}
    m = msgs.get("zero_optimization.stage", "")
    expect(p, "unknown key" in m and "did you mean zero_optimization %s stage?" % ARROW in m,
           "errors %r" % msgs)
    r.check("a dotted top-level key is an unknown key, with the nesting meant", p)


def case_strings(r):
    # Long, non-ASCII and escaped strings in every field of --json.
    path_value = "/mnt/" + "\u00e9\u2192\"\\\t" * 400
    long_key = "k\u00fcy\n\"" * 200
    doc = {"train_batch_size": 8, long_key: 1,
           "zero_optimization": {"offload_param": {"nvme_path": path_value}}}
    path = r.write("long.json", json.dumps(doc))
    rc, out, err, _ = r.run(path, "--json")
    p = []
    try:
        j = json.loads(out)
    except ValueError:
        r.check("long strings round-trip in --json", ["not JSON: %r" % out[:200]])
        return
    expect(p, rc == 0, "exit %d" % rc)
    v = j["effective"]["zero_optimization.offload_param.nvme_path"]["value"]
    expect(p, v == path_value, "nvme_path came back as %r" % (v if v is None else v[:40]))
    expect(p, [w["path"] for w in j["warnings"]] == [long_key],
           "warning paths %r" % [w["path"][:40] for w in j["warnings"]])
    nulls = [k for k, e in j["effective"].items() if e["value"] is None and e["origin"] == "file"]
    expect(p, not nulls, "null values for keys given in the file: %s" % nulls)
    # A long unsupported optimizer name inside an error message.
    name = "Ad\u00e4m\u2192" * 100
    path = r.write("opt.json", json.dumps({"train_batch_size": 8,
                                           "optimizer": {"type": name}}))
    rc, out, err, _ = r.run(path, "--json")
    j = json.loads(out)
    msg = j["errors"][0].get("message") if j["errors"] else None
    expect(p, rc == 1 and msg is not None and '"%s" is not supported' % name in msg,
           "message %r" % (msg if msg is None else msg[:60]))
    # A FILE argument that is not UTF-8 is still a string, not null.
    bad = os.path.join(r.work.encode(), b"\xff\xfe.json")
    rc2 = subprocess.run([r.zeroc.encode(), b"config", b"check", bad, b"--json"], cwd=r.cwd,
                         capture_output=True)
    j = json.loads(rc2.stdout.decode("utf-8"))
    expect(p, isinstance(j.get("file"), str) and
           isinstance(j["errors"][0].get("message") if j["errors"] else None, str),
           "file %r message %r" % (j["file"], j["errors"]))
    r.check("long, non-ASCII and escaped strings round-trip in --json", p)


def case_engine_verdict(r):
    p = []
    # Optimizer offload at stage 0 is valid DeepSpeed that the engine refuses.
    path = r.write("offload.json", json.dumps({
        "train_batch_size": 8,
        "zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}}))
    rc, out, err, _ = r.run(path, "--json")
    j = json.loads(out)
    expect(p, rc == 1 and j["valid"] is False and j["deepspeed_valid"] is True,
           "exit %d valid %r deepspeed_valid %r" % (rc, j["valid"], j.get("deepspeed_valid")))
    paths = sorted(e["path"] for e in j["errors"])
    expect(p, paths == ["zero_optimization.offload_optimizer.device"], "error paths %s" % paths)
    expect(p, all("zc_engine_create refuses it" in e["message"] for e in j["errors"]),
           "messages %r" % j["errors"])
    expect(p, j["effective"], "no effective configuration for a valid DeepSpeed file")
    rc, out, err, _ = r.run(path)
    expect(p, "INVALID for zeroc (valid DeepSpeed)" in out, "text verdict: %r" % out[:200])
    # Parameter and optimizer offload at stage 3: the engine runs them.
    path = r.write("offload3.json", json.dumps({
        "train_batch_size": 8,
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                              "offload_param": {"device": "nvme", "nvme_path": r.work}}}))
    rc, out, err, _ = r.run(path, "--json")
    j = json.loads(out)
    expect(p, rc == 0 and j["valid"] is True and not j["errors"],
           "stage 3 offload: exit %d valid %r errors %r" % (rc, j["valid"], j["errors"]))
    r.check("offload: the checker says what zc_engine_create does", p)


def case_auto_template(r, examples):
    p = []
    path = os.path.join(examples, "ds_config_zero2.json")
    rc, out, err, _ = r.run(path, "--json")
    j = json.loads(out)
    expect(p, rc == 0 and j["valid"], "exit %d" % rc)
    expect(p, j["program_must_provide"] == ["train_micro_batch_size_per_gpu",
                                            "scheduler.params.total_num_steps"],
           "program_must_provide %r" % j.get("program_must_provide"))
    fields = {w["path"]: w["message"] for w in j["warnings"]}
    expect(p, "zc_program_values.micro_batch_per_gpu" in
           fields.get("train_micro_batch_size_per_gpu", ""), "warnings %r" % fields)
    expect(p, "zc_program_values.total_num_steps" in
           fields.get("scheduler.params.total_num_steps", ""), "warnings %r" % fields)
    rc, out, err, _ = r.run(path)
    want = ("a template: zc_engine_create refuses it until the program gives the 2 \"auto\" "
            "values listed under warnings")
    expect(p, want in out, "text output lacks %r" % want)
    r.check("an \"auto\" template lists every value the program must give", p)


def main():
    if len(sys.argv) != 3:
        print("usage: check_hostile_cli.py ZEROC EXAMPLES_DIR", file=sys.stderr)
        return 2
    zeroc, examples = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    work = tempfile.mkdtemp(prefix="zc_hostile_cfg.")
    print("1..14")
    r = Runner(zeroc, work)
    cases = [case_not_files, case_too_large, case_unknown_key_flood, case_numbers, case_dotted,
             case_strings, case_engine_verdict, lambda r: case_auto_template(r, examples)]
    try:
        for case in cases:
            try:
                case(r)
            except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
                # Output that is not what the contract says (missing fields,
                # not JSON) is a failure of that case, not of the harness.
                r.check("%s raised %r" % (getattr(case, "__name__", "case"), e), ["see name"])
    finally:
        shutil.rmtree(work)
    return 1 if r.bad else 0


if __name__ == "__main__":
    sys.exit(main())
