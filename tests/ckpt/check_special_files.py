#!/usr/bin/env python3
"""Every path a zeroc program reads, given something that is not a regular
file: a directory, a FIFO without a writer, a listening Unix socket, and a
character device (/dev/null, /dev/zero where it is read as a file).

Each program must exit with a failure status within TIMEOUT seconds (a FIFO
without a writer blocks a plain open forever), and its message must name the
path and what it is ("... is a named pipe (FIFO); expected ..."); nothing it
was given may change. A checkpoint shard that is a directory must not be
called "truncated".

Read sites: `zeroc config check FILE`, `zeroc estimate --config FILE`,
`zeroc bench train --data FILE` (checked before any workload starts),
`zeroc ckpt inspect/export/reshard` (DIR/latest, DIR/TAG/manifest.json,
DIR/TAG/rank_00000.bin), train_mlp --config and --resume (DIR/latest),
train_gpt --data and --config. And the one file train_mlp writes
(--dump-params) is created, never written over (an existing file or link).
Usage: check_special_files.py CKPT_HELPER ZEROC TRAIN_MLP [TRAIN_GPT]
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile

TIMEOUT = 20
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, flush=True)


def run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None


class Specials:
    """Makes each kind of special file at a path, and undoes it."""

    def __init__(self):
        self.sock = None

    def make(self, kind, path):
        if kind == "dir":
            os.mkdir(path)
            return "a directory"
        if kind == "fifo":
            os.mkfifo(path)
            return "a named pipe (FIFO)"
        if kind == "socket":
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind(path)
            self.sock.listen(1)
            return "a socket"
        if kind == "chardev":
            os.symlink("/dev/zero", path)
            return "a character device"
        raise ValueError(kind)

    def undo(self, path):
        if self.sock:
            self.sock.close()
            self.sock = None
        if os.path.isdir(path) and not os.path.islink(path):
            os.rmdir(path)
        elif os.path.lexists(path):
            os.unlink(path)


KINDS = ("dir", "fifo", "socket", "chardev")


def expect_refused(name, cmd, path, kind_text, rc_ok=(1, 2)):
    p = run(cmd)
    if p is None:
        fail("%s: blocked for %d s" % (name, TIMEOUT))
        return
    text = p.stdout + p.stderr
    if p.returncode not in rc_ok:
        fail("%s: exit %d (want %s): %s" % (name, p.returncode, rc_ok, text[-500:]))
    want = "%s is %s" % (path, kind_text)
    if want not in text:
        fail("%s: the message lacks %r: %s" % (name, want, text[-500:]))
    if "truncated" in text:
        fail("%s: called truncated: %s" % (name, text[-500:]))
    if "Sanitizer" in text or "runtime error" in text:
        fail("%s: sanitizer report: %s" % (name, text[-1500:]))


def each_kind(name, path, cmd, before=None):
    """Replaces `path` (saved aside when it exists) by each special kind."""
    aside = path + ".aside"
    had = os.path.lexists(path)
    if had:
        os.rename(path, aside)
    sp = Specials()
    try:
        for kind in KINDS:
            text = sp.make(kind, path)
            try:
                expect_refused("%s (%s)" % (name, kind), cmd, path, text)
            finally:
                sp.undo(path)
    finally:
        if had:
            os.rename(aside, path)


def main():
    helper, zeroc, train_mlp = sys.argv[1:4]
    train_gpt = sys.argv[4] if len(sys.argv) > 4 else None
    with tempfile.TemporaryDirectory(prefix="zc_special_") as tmp:
        x = os.path.join(tmp, "input")
        each_kind("zeroc config check", x, [zeroc, "config", "check", x])
        each_kind("zeroc estimate --config", x,
                  [zeroc, "estimate", "--params", "1M", "--world", "2", "--config", x])
        each_kind("train_mlp --config", x,
                  [train_mlp, "--config", x, "--steps", "1", "--world", "1"])
        each_kind("zeroc bench train --data", x,
                  [zeroc, "bench", "train", "--out", os.path.join(tmp, "bench_out"), "--data", x])
        if os.path.lexists(os.path.join(tmp, "bench_out")):
            fail("zeroc bench train with a refused --data made its --out directory")
        if train_gpt:
            each_kind("train_gpt --data", x,
                      [train_gpt, "--data", x, "--steps", "1", "--launcher", "threads"])
            each_kind("train_gpt --config", x,
                      [train_gpt, "--config", x, "--steps", "1", "--launcher", "threads"])

        # A file train_mlp writes (--dump-params) is created, never written
        # over: an existing file, and a link to one, stay as they were.
        victim = os.path.join(tmp, "victim")
        with open(victim, "w") as f:
            f.write("precious")
        link = os.path.join(tmp, "link")
        os.symlink(victim, link)
        for path in (victim, link):
            p = run([train_mlp, "--steps", "1", "--world", "1", "--batch", "1",
                     "--dump-params", path])
            if p is None or p.returncode != 1 or "does not overwrite" not in p.stderr:
                fail("train_mlp --dump-params onto %s: %s" % (path, p and p.stderr))
            with open(victim) as f:
                if f.read() != "precious":
                    fail("train_mlp --dump-params wrote through %s" % path)

        ck = os.path.join(tmp, "ck")
        p = subprocess.run([helper, "train", ck, "2", "2", "2"], capture_output=True, text=True,
                           timeout=300)
        if p.returncode != 0:
            fail("ckpt_helper train: %s" % p.stderr)
            return 1
        shutil.rmtree(os.path.join(ck, "ref"))
        tag = "t2"
        latest = os.path.join(ck, "latest")
        manifest = os.path.join(ck, tag, "manifest.json")
        shard = os.path.join(ck, tag, "rank_00000.bin")
        n = [0]

        def out_path():
            n[0] += 1
            return os.path.join(tmp, "out%d" % n[0])

        for what, path in (("latest", latest), ("manifest", manifest), ("shard", shard)):
            for sub in ("inspect", "export", "reshard"):
                each_kind_cmd = {
                    "inspect": lambda: [zeroc, "ckpt", "inspect", ck],
                    "export": lambda: [zeroc, "ckpt", "export", ck, out_path()],
                    "reshard": lambda: [zeroc, "ckpt", "reshard", ck, out_path(), "--world", "3"],
                }[sub]
                aside = path + ".aside"
                os.rename(path, aside)
                sp = Specials()
                try:
                    for kind in KINDS:
                        text = sp.make(kind, path)
                        try:
                            expect_refused("zeroc ckpt %s with %s %s" % (sub, what, kind),
                                           each_kind_cmd(), path, text)
                        finally:
                            sp.undo(path)
                finally:
                    os.rename(aside, path)
            # The examples resume from DIR/latest through zc_checkpoint_load.
            each_kind("train_mlp --resume with %s" % what, path,
                      [train_mlp, "--save-dir", ck, "--resume", "--steps", "1", "--world", "2"])
        # Nothing a refused command was given changed, and no output remains.
        for i in range(1, n[0] + 1):
            o = os.path.join(tmp, "out%d" % i)
            if os.path.lexists(o):
                fail("a refused command left %s" % o)
        p = subprocess.run([zeroc, "ckpt", "inspect", ck], capture_output=True, text=True,
                           timeout=60)
        if p.returncode != 0:
            fail("the checkpoint no longer reads: %s" % p.stderr)
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
