#!/usr/bin/env python3
"""The zeroc ckpt CLI on a checkpoint saved by ckpt_helper (stage 3, 2 ranks):

  - `inspect` prints the manifest readably and `--json` as JSON (step, world);
  - `export` writes safetensors in fp32, bf16 and fp16, and refuses to
    overwrite; the files are loaded with the Python `safetensors` package,
    pip-installed into this test's own virtual environment, and every tensor
    is compared with zc_param_gather_master's values (the helper's refs):
    fp32 bitwise, fp16 equal to numpy's round-to-nearest-even of the fp32
    value, bf16 equal to the round-to-nearest-even bf16 bits computed here;
    names, shapes, dtypes and the {"format": "pt"} metadata are checked;
  - `reshard --world 3` then `inspect` shows 3 files; bad arguments fail
    with a message.
Skips (exit 77) only when pip cannot reach a package index. Everything it
creates lives in one temporary directory, removed at the end.
Usage: check_ckpt_cli.py CKPT_HELPER ZEROC
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

STEPS = 5
NETWORK_HINTS = ("NewConnectionError", "Temporary failure in name resolution",
                 "Network is unreachable", "Could not find a version that satisfies",
                 "No matching distribution found", "ConnectTimeout", "ReadTimeout",
                 "Failed to establish a new connection", "ProxyError")
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, flush=True)


def run(cmd, ok=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    if ok and p.returncode != 0:
        fail("%s exited %d: %s" % (" ".join(cmd), p.returncode, p.stderr[-2000:]))
    return p


CHECK = r'''
import json, struct, sys
import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file

path, dtype, refdir, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
with safe_open(path, framework="np") as f:
    meta = f.metadata()
    keys = list(f.keys())
assert meta == {"format": "pt"}, meta
assert sorted(keys) == sorted(names), (keys, names)

def bf16_bits(x):
    u = x.view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return r.astype(np.uint16)

if dtype == "bf16":
    # numpy has no bfloat16: the raw bytes, located through the header.
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    tensors = {}
    for k in names:
        t = head[k]
        assert t["dtype"] == "BF16", t
        a, b = t["data_offsets"]
        tensors[k] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=np.uint16).reshape(t["shape"])
else:
    tensors = load_file(path)
for k in names:
    ref = np.fromfile("%s/%s.f32" % (refdir, k), dtype=np.float32)
    t = tensors[k]
    assert t.size == ref.size, (k, t.shape, ref.size)
    if dtype == "fp32":
        assert t.dtype == np.float32 and np.array_equal(t.reshape(-1).view(np.uint32), ref.view(np.uint32)), k
    elif dtype == "fp16":
        assert t.dtype == np.float16 and np.array_equal(t.reshape(-1), ref.astype(np.float16)), k
    else:
        assert np.array_equal(t.reshape(-1), bf16_bits(ref)), k
print("ok %d tensors %s" % (len(names), dtype))
'''


def main():
    helper, zeroc = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="zc_ckpt_cli_") as tmp:
        ck = os.path.join(tmp, "ck")
        run([helper, "train", ck, str(STEPS), "3", "2"])
        if failures:
            return 1
        names = sorted(f[:-4] for f in os.listdir(os.path.join(ck, "ref")))

        p = run([zeroc, "ckpt", "inspect", ck])
        for want in ("step         %d" % STEPS, "saved by     2 ranks, ZeRO stage 3", "p7"):
            if want not in p.stdout:
                fail("inspect output lacks %r:\n%s" % (want, p.stdout))
        p = run([zeroc, "ckpt", "inspect", ck, "--json"])
        try:
            m = json.loads(p.stdout)
            if m["step"] != STEPS or m["world_size"] != 2 or len(m["params"]) != len(names):
                fail("inspect --json: %s" % {k: m[k] for k in ("step", "world_size")})
        except ValueError as e:
            fail("inspect --json is not JSON: %s" % e)

        outs = {}
        for dt in ("fp32", "bf16", "fp16"):
            outs[dt] = os.path.join(tmp, "model_%s.safetensors" % dt)
            run([zeroc, "ckpt", "export", ck, outs[dt], "--dtype", dt])
        p = run([zeroc, "ckpt", "export", ck, outs["fp32"]], ok=False)
        if p.returncode == 0 or "does not overwrite" not in p.stderr:
            fail("export over an existing file: rc %d, %s" % (p.returncode, p.stderr))
        p = run([zeroc, "ckpt", "export", ck, os.path.join(tmp, "x.st"), "--dtype", "int8"], ok=False)
        if p.returncode == 0 or "--dtype 'int8'" not in p.stderr or os.path.exists(os.path.join(tmp, "x.st")):
            fail("export --dtype int8: rc %d, %s" % (p.returncode, p.stderr))
        p = run([zeroc, "ckpt", "export", os.path.join(tmp, "none"), os.path.join(tmp, "y.st")], ok=False)
        if p.returncode == 0 or "latest" not in p.stderr or os.path.exists(os.path.join(tmp, "y.st")):
            fail("export of a missing checkpoint: rc %d, %s; output left: %s"
                 % (p.returncode, p.stderr, os.path.exists(os.path.join(tmp, "y.st"))))

        rs = os.path.join(tmp, "w3")
        p = run([zeroc, "ckpt", "reshard", ck, rs, "--world", "3"])
        if "for 3 ranks" not in p.stdout:
            fail("reshard output: %s" % p.stdout)
        p = run([zeroc, "ckpt", "inspect", rs])
        if "saved by     3 ranks" not in p.stdout or "rank_00002.bin" not in p.stdout:
            fail("inspect of the resharded checkpoint:\n%s" % p.stdout)
        p = run([zeroc, "ckpt", "reshard", ck, os.path.join(tmp, "w0"), "--world", "0"], ok=False)
        if p.returncode == 0 or "--world" not in p.stderr:
            fail("reshard --world 0: rc %d, %s" % (p.returncode, p.stderr))

        venv = os.path.join(tmp, "venv")
        p = run([sys.executable, "-m", "venv", venv])
        if failures:
            return 1
        py = os.path.join(venv, "bin", "python")
        p = run([py, "-m", "pip", "install", "--disable-pip-version-check", "-q",
                 "safetensors", "numpy"], ok=False)
        if p.returncode != 0:
            text = p.stdout + p.stderr
            if any(h in text for h in NETWORK_HINTS):
                print("SKIP: pip cannot reach a package index to install safetensors: %s"
                      % text.strip().splitlines()[-1])
                return 77
            fail("pip install safetensors numpy failed: %s" % text[-2000:])
            return 1
        script = os.path.join(tmp, "check_st.py")
        with open(script, "w") as f:
            f.write(CHECK)
        for dt, path in outs.items():
            p = run([py, script, path, dt, os.path.join(ck, "ref"), ",".join(names)])
            print(p.stdout.strip())
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
