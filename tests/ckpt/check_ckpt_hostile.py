#!/usr/bin/env python3
"""zeroc ckpt inspect / export / reshard against hostile directories.

Links: a "victim" directory holds files with the names a reshard writes and
must survive every case byte for byte:
  - `reshard` whose OUT/.TAG.partial is a link to the victim: refused, naming
    it, the victim untouched, no OUT/TAG, no OUT/latest;
  - `export` whose OUT is a link (to a victim file, or dangling): refused, the
    victim file untouched, the dangling link not followed into a new file;
  - `export` that fails (a damaged shard) removes its own output only;
  - `reshard` interrupted by SIGTERM at random moments: afterwards either a
    complete OUT/TAG or no staging directory, and the victim untouched;
  - `reshard` interrupted by SIGTERM at each exact point of its commit (before
    and after the rename of the staging directory, after the marker's
    removal; SIG_AT_CALL, an LD_PRELOAD interposer): no staging directory,
    and OUT/TAG either absent or complete without the marker.
Tampered manifests (every field out of range, inconsistent layouts,
duplicates): see TAMPER below; each must be refused by inspect, export and
reshard with a message naming manifest.json, leave no output, and never
crash or trip a sanitizer.
Usage: check_ckpt_hostile.py CKPT_HELPER ZEROC [SIG_AT_CALL]
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

failures = []
TIMEOUT = 120


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, flush=True)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL, **kw)


VICTIM = ["rank_00000.bin", "rank_00001.bin", "rank_00000.idx", "manifest.json",
          ".zeroc-staging", "notes.txt"]


def make_victim(root):
    v = os.path.join(root, "victim")
    os.mkdir(v)
    for i, n in enumerate(VICTIM):
        with open(os.path.join(v, n), "w") as f:
            f.write("precious %d" % i)
    return v


def victim_intact(v, what):
    names = sorted(os.listdir(v))
    if names != sorted(VICTIM):
        fail("%s: the victim directory now holds %s" % (what, names))
        return
    for i, n in enumerate(VICTIM):
        with open(os.path.join(v, n)) as f:
            got = f.read()
        if got != "precious %d" % i:
            fail("%s: %s was written (%r)" % (what, n, got[:40]))


def sanitizer(p):
    t = p.stdout + p.stderr
    return "Sanitizer" in t or "runtime error" in t


def check_links(tmp, zeroc, ck):
    v = make_victim(tmp)
    # reshard into OUT whose staging directory is a link to the victim.
    out = os.path.join(tmp, "rs_link")
    os.mkdir(out)
    os.symlink(v, os.path.join(out, ".t2.partial"))
    p = run([zeroc, "ckpt", "reshard", ck, out, "--world", "3"])
    if p.returncode != 1 or ".t2.partial is a symbolic link" not in p.stderr:
        fail("reshard with a linked staging directory: exit %d: %s" % (p.returncode, p.stderr))
    victim_intact(v, "reshard with a linked staging directory")
    if not os.path.islink(os.path.join(out, ".t2.partial")):
        fail("reshard removed the link")
    for n in ("t2", "latest"):
        if os.path.lexists(os.path.join(out, n)):
            fail("reshard with a linked staging directory wrote %s" % n)

    # export onto a link to a victim file, and onto a dangling link.
    target = os.path.join(v, "notes.txt")
    link = os.path.join(tmp, "export_link.safetensors")
    os.symlink(target, link)
    p = run([zeroc, "ckpt", "export", ck, link])
    if p.returncode != 1 or "cannot create" not in p.stderr:
        fail("export onto a link: exit %d: %s" % (p.returncode, p.stderr))
    victim_intact(v, "export onto a link")
    dangling = os.path.join(tmp, "dangling.safetensors")
    missing = os.path.join(tmp, "made_through_link.safetensors")
    os.symlink(missing, dangling)
    p = run([zeroc, "ckpt", "export", ck, dangling])
    if p.returncode != 1 or os.path.exists(missing):
        fail("export onto a dangling link: exit %d, %s created: %s"
             % (p.returncode, missing, p.stderr))

    # A failing export removes its own output and nothing else.
    bad = os.path.join(tmp, "damaged")
    shutil.copytree(ck, bad, symlinks=True)
    shard = os.path.join(bad, "t2", "rank_00001.bin")
    with open(shard, "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0x10]))
    o = os.path.join(tmp, "damaged.safetensors")
    p = run([zeroc, "ckpt", "export", bad, o])
    if p.returncode != 1 or "checksum mismatch" not in p.stderr or os.path.exists(o):
        fail("export of a damaged checkpoint: exit %d, output left %s: %s"
             % (p.returncode, os.path.exists(o), p.stderr))
    victim_intact(v, "failed export")

    # reshard interrupted by SIGTERM at random moments.
    rnd = random.Random(int(os.environ.get("ZC_TEST_SEED", "7")))
    for i in range(16):
        out = os.path.join(tmp, "rs_sig%d" % i)
        os.mkdir(out)
        q = subprocess.Popen([zeroc, "ckpt", "reshard", ck, out, "--world", "5"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(rnd.uniform(0.0, 0.05))
        q.send_signal(signal.SIGTERM)
        _, err = q.communicate(timeout=TIMEOUT)
        if "Sanitizer" in err or "runtime error" in err:
            fail("reshard under SIGTERM: sanitizer report: %s" % err[-1500:])
        left = sorted(os.listdir(out))
        # Either nothing, or the complete checkpoint (latest moves last: a
        # signal between the two leaves the checkpoint without it).
        if any(n not in ("t2", "latest") for n in left):
            fail("reshard killed by SIGTERM (exit %s) left %s" % (q.returncode, left))
        if "t2" in left and run([zeroc, "ckpt", "inspect", out, "--tag", "t2"]).returncode:
            fail("reshard killed by SIGTERM left an incomplete %s/t2" % out)
        victim_intact(v, "reshard under SIGTERM")


MAXSTEP = 1 << 62


def _p(m, i):
    return m["params"][i]


def _dup_name(m):
    m["params"][2]["name"] = m["params"][1]["name"]


def _counters(m, n):
    m["step"], m["skipped_steps"] = n, 0
    m["scheduler"]["optimizer_steps"], m["scheduler"]["last_batch_iteration"] = n, n - 1


def _huge_model(m):
    """1025 tensors of 2^50 elements, each its own chunk, each covered by
    one entry per kind: every field in range, the total past 2^60."""
    n, e = 1025, 1 << 50
    m["params"] = [{"name": "h%d" % i, "shape": [e], "dtype": "fp32", "group": 0,
                    "chunk": i, "offset": 0} for i in range(n)]
    m["chunks"] = [{"first": i, "count": 1, "used": e} for i in range(n)]
    m["tensors"] = [[i, k, 0, 0, e, 0, "0" * 16] for i in range(n)
                    for k in ("master", "exp_avg", "exp_avg_sq")]


def _huge_files(m):
    for f in m["files"]:
        f["bytes"] = 1 << 62


# (name, edit, needle): each edit makes one field out of range or
# inconsistent with the others.
TAMPER = [
    ("step over the limit", lambda m: _counters(m, MAXSTEP + 1), '"step" must be an integer'),
    ("skipped over step", lambda m: m.update(skipped_steps=m["step"] + 1), '"skipped_steps"'),
    ("counters disagree", lambda m: m.update(skipped_steps=1), "must add up"),
    ("cur_iter over the limit", lambda m: m["loss_scaler"].update(cur_iter=MAXSTEP + 1),
     '"cur_iter"'),
    ("scale 1e39", lambda m: m["loss_scaler"].update(scale=1e39), '"scale"'),
    ("world 0", lambda m: m.update(world_size=0), '"world_size"'),
    ("world 2^21", lambda m: m.update(world_size=1 << 21), '"world_size"'),
    ("stage 7", lambda m: m.update(stage=7), '"stage"'),
    ("dtype", lambda m: m.update(dtype="fp8"), '"dtype"'),
    ("version 99", lambda m: m.update(version=99), "newer than this zeroc reads"),
    ("duplicate tensor name", _dup_name, "appears twice"),
    ("shape 0", lambda m: _p(m, 0).update(shape=[0]), "shape dimension 0"),
    ("shape 2^80", lambda m: _p(m, 0).update(shape=[1 << 40, 1 << 40]), "too large"),
    ("offset shifted", lambda m: _p(m, 1).update(offset=_p(m, 1)["offset"] + 1),
     "do not match the chunks"),
    ("chunk used 2^49", lambda m: m["chunks"][0].update(used=1 << 49), '"used" is'),
    ("chunk count", lambda m: m["chunks"][0].update(count=m["chunks"][0]["count"] + 1),
     "do not match the chunks"),
    ("files for another world", lambda m: m.update(world_size=3), "files for a world of 3"),
    ("file bytes", lambda m: m["files"][0].update(bytes=m["files"][0]["bytes"] + 8),
     "multiple of 4096"),
    ("entry beyond its file", lambda m: m["tensors"][0].__setitem__(5, 1 << 40),
     "lies beyond the end"),
    ("entry duplicated", lambda m: m["tensors"].append(list(m["tensors"][0])), "cover its"),
    ("entry removed", lambda m: m["tensors"].pop(0), "cover its"),
    ("entry of no tensor", lambda m: m["tensors"][0].__setitem__(0, 10 ** 6), "tensors[0]"),
    ("checksum", lambda m: m["tensors"][0].__setitem__(6, "XYZ"), "checksum"),
    ("model of 2^60 elements", _huge_model, "the tensors hold more than"),
    ("files of 2^63 bytes", _huge_files, '"files" add up to more than'),
    ("2^20 + 1 files", lambda m: m.update(files=[m["files"][0]] * ((1 << 20) + 1)),
     '"files" has 1048577 entries, more than the 1048576 (2^20) ranks'),
]


def check_tampered(tmp, zeroc, ck):
    mpath = os.path.join(ck, "t2", "manifest.json")
    with open(mpath) as f:
        original = f.read()
    for name, edit, needle in TAMPER:
        m = json.loads(original)
        edit(m)
        with open(mpath, "w") as f:
            json.dump(m, f, indent=1)
        for sub in ("inspect", "export", "reshard"):
            out = os.path.join(tmp, "tampered_out")
            cmd = {"inspect": [zeroc, "ckpt", "inspect", ck],
                   "export": [zeroc, "ckpt", "export", ck, out],
                   "reshard": [zeroc, "ckpt", "reshard", ck, out, "--world", "3"]}[sub]
            p = run(cmd)
            what = "%s of a manifest with %s" % (sub, name)
            if p.returncode != 1:
                fail("%s: exit %d: %s" % (what, p.returncode, (p.stdout + p.stderr)[-400:]))
            if "manifest.json" not in p.stderr or needle not in p.stderr:
                fail("%s: the message lacks manifest.json / %r: %s" % (what, needle, p.stderr))
            if sanitizer(p):
                fail("%s: sanitizer report: %s" % (what, p.stderr[-1500:]))
            if os.path.lexists(out):
                fail("%s: left %s" % (what, out))
    with open(mpath, "w") as f:
        f.write(original)
    # The untouched manifest still reads everywhere.
    p = run([zeroc, "ckpt", "inspect", ck])
    if p.returncode != 0:
        fail("inspect of the restored manifest: %s" % p.stderr)


def check_reshard_tag(tmp, zeroc, ck):
    """A renamed checkpoint reshards under its directory's name, and the
    command says so."""
    src = os.path.join(tmp, "renamed_src")
    shutil.copytree(ck, src)
    os.rename(os.path.join(src, "t2"), os.path.join(src, "best"))
    with open(os.path.join(src, "latest"), "w") as f:
        f.write("best\n")
    out = os.path.join(tmp, "renamed_out")
    p = run([zeroc, "ckpt", "reshard", src, out, "--world", "3"])
    want = "into %s/best" % out
    if p.returncode != 0 or want not in p.stdout:
        fail("reshard of a renamed checkpoint: exit %d, %r lacks %r: %s"
             % (p.returncode, p.stdout, want, p.stderr))
    if not os.path.isfile(os.path.join(out, "best", "manifest.json")):
        fail("reshard of a renamed checkpoint: no %s/best" % out)
    with open(os.path.join(out, "latest")) as f:
        if f.read() != "best\n":
            fail("reshard of a renamed checkpoint: latest does not name best")


# Where SIG_AT_CALL interrupts the commit, and whether OUT/TAG exists then.
SIG_POINTS = [("before_rename", False), ("after_rename", True), ("after_unmark", True)]


def check_commit_points(tmp, zeroc, ck, preload):
    env = dict(os.environ)
    env["LD_PRELOAD"] = preload
    # The sanitizer runtime is not first in the list with a preload ahead.
    env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"),
                                                  "verify_asan_link_order=0"]))
    for point, published in SIG_POINTS:
        out = os.path.join(tmp, "rs_at_" + point)
        os.mkdir(out)
        env["ZC_TEST_SIG_AT"] = point
        p = run([zeroc, "ckpt", "reshard", ck, out, "--world", "3"], env=env)
        what = "reshard interrupted %s" % point.replace("_", " ")
        if p.returncode != -signal.SIGTERM:
            fail("%s: exit %s, not killed by SIGTERM: %s" % (what, p.returncode, p.stderr))
            continue
        left = sorted(os.listdir(out))
        if left != (["t2"] if published else []):
            fail("%s left %s" % (what, left))
            continue
        if published:
            inner = sorted(os.listdir(os.path.join(out, "t2")))
            if ".zeroc-staging" in inner:
                fail("%s: the published %s/t2 still holds the staging marker" % (what, out))
            q = run([zeroc, "ckpt", "inspect", out, "--tag", "t2"])
            if q.returncode != 0:
                fail("%s: %s/t2 does not inspect: %s" % (what, out, q.stderr))


def main():
    helper, zeroc = sys.argv[1], sys.argv[2]
    preload = sys.argv[3] if len(sys.argv) > 3 else None
    with tempfile.TemporaryDirectory(prefix="zc_ckpt_hostile_") as tmp:
        ck = os.path.join(tmp, "ck")
        p = run([helper, "train", ck, "2", "2", "2"])
        if p.returncode != 0:
            fail("ckpt_helper train: %s" % p.stderr)
            return 1
        shutil.rmtree(os.path.join(ck, "ref"))
        check_links(tmp, zeroc, ck)
        check_reshard_tag(tmp, zeroc, ck)
        check_tampered(tmp, zeroc, ck)
        if preload:
            check_commit_points(tmp, zeroc, ck, preload)
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
