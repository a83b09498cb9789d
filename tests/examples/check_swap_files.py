#!/usr/bin/env python3
"""Swap files never outlive the process, however it ends.

train_mlp at stages 2 and 3 on four ranks, the optimizer state and (stage 3)
the parameter shards on NVMe, under one nvme_path:

  - while it trains, nvme_path holds nothing at all (the swap files have no
    name and their private directories are gone as soon as they are open);
  - killed with SIGKILL in the middle of its steps, it leaves nothing: no
    entry under nvme_path and `du` of it equals that of an empty directory;
  - ZC_FAULTS=io:RANK:K at K = 1, 3, 6, 10, ... up to the first K past the
    run's I/O (the run then succeeds), on every rank: every run, failed or
    not, leaves nothing under nvme_path;
  - with ZC_NVME_FAULTS=notmpfile,nounlink (a filesystem that neither has
    O_TMPFILE nor lets the open files be unlinked, so the names stay while
    the run lasts), a run that fails on ZC_FAULTS in a step (every rank
    fails it alike) still leaves nothing: the example destroys its engines on
    its error path, and that removes them.
train_gpt (when given) is held to the last point too.
Usage: check_swap_files.py TRAIN_MLP [TRAIN_GPT]
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, flush=True)


def below(d):
    """Every path under d, and the bytes they occupy on disk."""
    names, used = [], 0
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            p = os.path.join(root, n)
            names.append(p)
            used += os.lstat(p).st_blocks * 512
    return names, used


def du(d):
    return int(subprocess.run(["du", "-sk", d], capture_output=True, text=True,
                              check=True).stdout.split()[0])


def args(stage, nvme, steps):
    a = ["--stage", str(stage), "--world", "4", "--dtype", "bf16", "--steps", str(steps),
         "--offload-optimizer", "nvme", "--nvme-path", nvme, "--json"]
    if stage == 3:
        a += ["--offload-param", "nvme"]
    return a


def check_empty(what, nvme, empty_du):
    names, used = below(nvme)
    if names or used:
        fail("%s left %s (%d bytes)" % (what, names[:6], used))
    if du(nvme) != empty_du:
        fail("%s: du -sk %s is %d KiB, an empty directory's is %d" % (what, nvme, du(nvme),
                                                                       empty_du))


def check_while_running_and_sigkill(mlp, stage, nvme, empty_du):
    p = subprocess.Popen([mlp] + args(stage, nvme, 100000), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    steps, seen = 0, []
    deadline = time.time() + 120
    while steps < 4 and time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        if line.startswith('{"step"'):
            steps += 1
            names, used = below(nvme)
            if names:
                seen = names
    if steps < 4:
        fail("stage %d: train_mlp printed %d steps: %s" % (stage, steps, p.stderr.read()[-500:]))
    if seen:
        fail("stage %d: nvme_path held %s while training" % (stage, seen[:6]))
    # In the middle of a step: the steps are back to back.
    time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=60)
    p.stdout.close()
    p.stderr.close()
    check_empty("stage %d, SIGKILL after %d steps" % (stage, steps), nvme, empty_du)


def sweep(mlp, stage, nvme, empty_du, env_extra, what, ks=None):
    """ZC_FAULTS io:RANK:K on each rank, for K = 1, 3, 6, 10, ... until a run
    succeeds (or the given Ks). Returns the Ks of each rank whose failure was
    in zc_step (agreed: every rank fails it alike)."""
    agreed = {}
    for rank in range(4):
        agreed[rank] = []
        todo = list(ks[rank]) if ks else None
        k, step = 1, 2
        while True:
            if todo is not None:
                if not todo:
                    break
                k = todo.pop(0)
            env = dict(os.environ, ZC_FAULTS="io:%d:%d" % (rank, k), **env_extra)
            p = subprocess.run([mlp] + args(stage, nvme, 2), capture_output=True, text=True,
                               timeout=300, env=env)
            sweep.runs += 1
            tag = "%s stage %d io:%d:%d (exit %d)" % (what, stage, rank, k, p.returncode)
            if p.returncode not in (0, 1) or "Sanitizer" in p.stderr:
                fail("%s: %s" % (tag, p.stderr[-800:]))
            if "zc_step(eng, &info) failed" in p.stderr:
                agreed[rank].append(k)
            check_empty(tag, nvme, empty_du)
            if todo is None:
                if p.returncode == 0 or k > 1000:
                    break
                k, step = k + step, step + 1
    return agreed


sweep.runs = 0


def check_train_gpt(gpt, tmp, nvme, empty_du):
    """train_gpt's error path too: named swap files (notmpfile, nounlink),
    a fault in a step on rank 1 of 2, nothing left."""
    cfg = os.path.join(tmp, "gpt_nvme.json")
    with open(cfg, "w") as f:
        json.dump({"train_micro_batch_size_per_gpu": "auto",
                   "gradient_accumulation_steps": "auto", "bf16": {"enabled": True},
                   "zero_optimization": {
                       "stage": 3,
                       "offload_optimizer": {"device": "nvme", "nvme_path": nvme},
                       "offload_param": {"device": "nvme", "nvme_path": nvme}}}, f)
    failed_in_step = 0
    for k in range(12, 60, 4):
        env = dict(os.environ, ZC_FAULTS="io:1:%d" % k, ZC_NVME_FAULTS="notmpfile,nounlink")
        p = subprocess.run([gpt, "--config", cfg, "--steps", "3", "--eval-every", "0",
                            "--world", "2", "--launcher", "threads", "--layers", "1", "--dim",
                            "32", "--heads", "2", "--seq", "16"], capture_output=True,
                           text=True, timeout=300, env=env)
        if "zc_step(s.eng, &info) failed" not in p.stderr:
            for n in os.listdir(nvme):  # a fault outside the steps: not agreed
                subprocess.run(["rm", "-rf", "--", os.path.join(nvme, n)], check=True)
            continue
        failed_in_step += 1
        check_empty("train_gpt, named files, io:1:%d (exit %d)" % (k, p.returncode), nvme,
                    empty_du)
    if not failed_in_step:
        fail("train_gpt: no fault position failed a step")


def main():
    mlp = sys.argv[1]
    gpt = sys.argv[2] if len(sys.argv) > 2 else None
    with tempfile.TemporaryDirectory(prefix="zc_swap_", dir=os.environ.get("ZC_TEST_TMPDIR")) as tmp:
        nvme = os.path.join(tmp, "nvme")
        os.mkdir(nvme)
        empty_du = du(nvme)
        agreed = {}
        for stage in (2, 3):
            check_while_running_and_sigkill(mlp, stage, nvme, empty_du)
            agreed[stage] = sweep(mlp, stage, nvme, empty_du, {}, "")
        # Named swap files (the fallback of a filesystem without O_TMPFILE
        # whose unlink fails): the example's error path removes them. Only
        # failures every rank agrees on reach every rank's error path (a
        # fault in zc_param_load, which is not collective, fails one rank
        # while the others wait), so those positions are the ones replayed.
        ks = {r: agreed[3][r][:2] for r in range(4)}
        if not all(ks.values()):
            fail("no agreed failure on some rank at stage 3: %s" % agreed[3])
        sweep(mlp, 3, nvme, empty_du, {"ZC_NVME_FAULTS": "notmpfile,nounlink"},
              "named files,", ks)
        print("%d fault runs" % sweep.runs)
        if gpt:
            check_train_gpt(gpt, tmp, nvme, empty_du)
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
