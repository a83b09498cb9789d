#!/usr/bin/env python3
"""`zeroc config check` says what zc_engine_build will say (issue 25, item 5).

For every configuration value the engine can refuse - the aio settings NVMe
offload takes (aio.block_size: a power of two from a page to 1 GiB;
aio.queue_depth; aio.intra_op_parallelism: at most 64), the swap buffer
counts (offload_optimizer.buffer_count >= 4, offload_param.buffer_count 2 to
256), offload_optimizer.ratio in (0, 1], optimizer offload at stage 0,
nvme_path that is missing or not a directory, fp16 with bf16, optimizer.type
Lion and Adagrad (parsed, not yet run by the engine's step), and values
beyond the schema's ranges - and for the same values where the engine does
not take them (no NVMe offload, parameter offload below stage 3), the test
writes the configuration, runs `zeroc config check --json` on it and
build_helper (load, create and build a small model on the host, world 1),
and requires the same verdict and, when refused, the same message: the
check's errors joined as zc_last_error joins them ("key: text; key: text")
are the build's message without its location and call prefix.

Usage: check_config_vs_build.py ZEROC BUILD_HELPER. Prints TAP.
"""
import json
import os
import re
import subprocess
import sys
import tempfile


def cases(swap, afile):
    """(name, configuration) pairs; swap is a writable directory."""
    def cfg(stage, opt=None, par=None, aio=None, extra=None):
        z = {"stage": stage}
        if opt is not None:
            z["offload_optimizer"] = opt
        if par is not None:
            z["offload_param"] = par
        c = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": z}
        if aio is not None:
            c["aio"] = aio
        c.update(extra or {})
        return c

    onvme = {"device": "nvme", "nvme_path": swap}
    pnvme = {"device": "nvme", "nvme_path": swap}
    out = [("valid, no offload", cfg(2)),
           ("valid, optimizer on nvme", cfg(2, onvme)),
           ("valid, parameters and optimizer on nvme", cfg(3, onvme, pnvme))]
    for stage, opt, par, where in ((1, onvme, None, "optimizer nvme, stage 1"),
                                   (2, onvme, None, "optimizer nvme, stage 2"),
                                   (3, None, pnvme, "parameter nvme, stage 3"),
                                   (3, onvme, pnvme, "both nvme, stage 3")):
        for bs in (4097, 2048, 1536, 6144, 1, 3 << 20, 1 << 31):
            out.append(("aio.block_size %d, %s" % (bs, where),
                        cfg(stage, opt, par, {"block_size": bs})))
        for iop in (65, 1024, 1025, 0):
            out.append(("aio.intra_op_parallelism %d, %s" % (iop, where),
                        cfg(stage, opt, par, {"intra_op_parallelism": iop})))
        for qd in (0, 4097, -1):
            out.append(("aio.queue_depth %d, %s" % (qd, where),
                        cfg(stage, opt, par, {"queue_depth": qd})))
        out.append(("three aio keys at once, %s" % where,
                    cfg(stage, opt, par, {"block_size": 4097, "intra_op_parallelism": 65})))
    # The same aio values where the engine does not take them.
    for bs in (4097, 2048):
        out.append(("aio.block_size %d without NVMe offload" % bs,
                    cfg(2, None, None, {"block_size": bs})))
        out.append(("aio.block_size %d, optimizer on cpu" % bs,
                    cfg(2, {"device": "cpu"}, None, {"block_size": bs})))
        out.append(("aio.block_size %d, parameter nvme below stage 3" % bs,
                    cfg(2, None, pnvme, {"block_size": bs})))
    for n in (3, 0, 1, 2):
        out.append(("offload_optimizer.buffer_count %d" % n,
                    cfg(2, dict(onvme, buffer_count=n))))
        out.append(("offload_optimizer.buffer_count %d, stage 3" % n,
                    cfg(3, dict(onvme, buffer_count=n))))
    for n in (1, 257, 300000, 1 << 21, 0, 2, 256):
        out.append(("offload_param.buffer_count %d" % n,
                    cfg(3, None, dict(pnvme, buffer_count=n))))
        out.append(("offload_param.buffer_count %d below stage 3" % n,
                    cfg(1, None, dict(pnvme, buffer_count=n))))
    for r in (0, 0.5, 1.5, -0.1, 1e-9):
        for dev in ("cpu", "nvme"):
            opt = {"device": dev, "ratio": r}
            if dev == "nvme":
                opt["nvme_path"] = swap
            out.append(("offload_optimizer.ratio %g, %s, stage 3" % (r, dev), cfg(3, opt)))
            out.append(("offload_optimizer.ratio %g, %s, stage 2" % (r, dev), cfg(2, opt)))
    for dev in ("cpu", "nvme"):
        out.append(("offload_optimizer %s at stage 0" % dev, cfg(0, dict(onvme, device=dev))))
    for p, what in ((os.path.join(swap, "missing"), "missing"), (afile, "a regular file")):
        out.append(("offload_optimizer.nvme_path %s" % what,
                    cfg(2, {"device": "nvme", "nvme_path": p})))
        out.append(("offload_param.nvme_path %s" % what,
                    cfg(3, None, {"device": "nvme", "nvme_path": p})))
        out.append(("offload_optimizer.nvme_path list with one %s" % what,
                    cfg(2, {"device": "nvme", "nvme_path": [swap, p]})))
    out.append(("fp16 and bf16", cfg(2, extra={"fp16": {"enabled": True},
                                               "bf16": {"enabled": True}})))
    # optimizer.type Lion and Adagrad: parsed, refused by zc_engine_create.
    for t, params in (("Lion", {"lr": 1e-4, "betas": [0.9, 0.99], "weight_decay": 0.1}),
                      ("adagrad", {"lr": 0.1, "initial_accumulator_value": 0.1}),
                      ("AdamW", {"lr": 1e-4})):
        out.append(("optimizer.type %s" % t,
                    cfg(2, extra={"optimizer": {"type": t, "params": params}})))
        out.append(("optimizer.type %s, optimizer on cpu" % t,
                    cfg(2, {"device": "cpu"}, extra={"optimizer": {"type": t}})))
    out.append(("stage 4", cfg(4)))
    out.append(("stage -1", cfg(-1)))
    return out


LOCATION = re.compile(r"^(?:[\w.+-]+/)?[\w.+-]+\.c:\d+ ")


def strip_build(msg, path):
    """The build's message without location prefixes and its call."""
    while True:
        m = LOCATION.match(msg)
        if not m:
            break
        msg = msg[m.end():]
    for lead in ("zc_engine_create: ", "zc_engine_build: ", path + ": "):
        if msg.startswith(lead):
            msg = msg[len(lead):]
    return msg


def main():
    zeroc, helper = sys.argv[1], sys.argv[2]
    n = bad = 0
    with tempfile.TemporaryDirectory(prefix="zc-vs-build-") as work:
        swap = os.path.join(work, "swap")
        os.mkdir(swap)
        afile = os.path.join(work, "a-file")
        with open(afile, "w") as f:
            f.write("x")
        all_cases = cases(swap, afile)
        for name, c in all_cases:
            n += 1
            path = os.path.join(work, "case%d.json" % n)
            with open(path, "w") as f:
                json.dump(c, f)
            chk = subprocess.run([zeroc, "config", "check", "--json", path],
                                 capture_output=True, text=True, timeout=60)
            bld = subprocess.run([helper, path], capture_output=True, text=True, timeout=120)
            problems = []
            try:
                verdict = json.loads(chk.stdout)
            except ValueError:
                verdict = None
                problems.append("config check printed no JSON (exit %d): %s" %
                                (chk.returncode, chk.stderr.strip()))
            lines = bld.stdout.split("\n")
            if bld.returncode != 0 or len(lines) < 2:
                problems.append("build_helper failed (exit %d): %s" %
                                (bld.returncode, bld.stderr.strip()))
            elif verdict is not None:
                phase, message = lines[0], lines[1]
                built = phase == "ok"
                if verdict["valid"] != built:
                    problems.append("config check says %s, the engine %s: %s" %
                                    ("valid" if verdict["valid"] else "invalid",
                                     "builds it" if built else "refuses it at " + phase,
                                     message or json.dumps(verdict["errors"])))
                elif (chk.returncode == 0) != built:
                    problems.append("config check exits %d" % chk.returncode)
                elif not built:
                    said = "; ".join((e["path"] + ": " if e["path"] else "") + e["message"]
                                     for e in verdict["errors"])
                    if strip_build(message, path) != said:
                        problems.append("messages differ:\n#   config check: %s\n#   %-12s  %s" %
                                        (said, phase + ":", message))
            if problems:
                bad += 1
                print("not ok %d - %s\n#   %s" % (n, name, "\n#   ".join(problems)))
            else:
                print("ok %d - %s" % (n, name))
    print("1..%d" % n)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
