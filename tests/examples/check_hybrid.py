#!/usr/bin/env python3
"""Hybrid sharding through train_mlp (MiCS, hpZ), as a user runs it.

  1. Four ranks as threads on "two nodes of two" (ZC_RANKS_PER_NODE=2): MiCS
     S=2 at stages 1-3 gives one params_sha256 (bitwise across stages), hpZ
     S=2 gives flat stage 3's; the final line's comm_bytes_per_step_by_link
     has both links, MiCS's inter-node bytes are the fp32 all-reduce of half
     the model (4 x padded / 2), hpZ's below flat's.
  2. Under mpirun -np 4 (with ZC_RANKS_PER_NODE=2 passed on): the same hashes,
     losses and bytes by link as the threads (skipped, saying why, without
     mpirun or an MPI build).
  3. Save -> resume: 4 steps == 2 steps, save, resume 2 (fresh processes),
     with MiCS S=2, threads and mpirun.
  4. `zeroc ckpt reshard` of the MiCS checkpoint for 3 ranks, resumed by a
     flat 3-rank run: the same as resuming the original checkpoint flat.
  5. Refusals, as threads and under mpirun: mics_shard_size 3 of 4 ranks
     (naming both), a hierarchical gather inside one node (every rank says
     so) - exit status 1, no hang.

Usage: check_hybrid.py TRAIN_MLP ZEROC [mpi]. Every run is an argv list.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

failures = []
MPI_ARGS = ["--oversubscribe", "--allow-run-as-root", "--mca", "btl", "self,vader"]


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, flush=True)


def env_for(rpn=True):
    env = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "ZC_COMM", "ZC_RANKS_PER_NODE"):
        env.pop(k, None)
    if rpn:
        env["ZC_RANKS_PER_NODE"] = "2"
    return env


def run(argv, mpi_np=0):
    if mpi_np:
        argv = [shutil.which("mpirun"), *MPI_ARGS, "-x", "ZC_RANKS_PER_NODE", "-np",
                str(mpi_np), *argv]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env_for())
    finals = [json.loads(l) for l in p.stdout.splitlines() if '"final"' in l]
    losses = [json.loads(l)["loss"] for l in p.stdout.splitlines() if l.startswith('{"step"')]
    if p.returncode or len(finals) != 1:
        fail("%s: exit %d, %d final lines\n%s" % (" ".join(argv), p.returncode, len(finals),
                                                 p.stderr[-2000:]))
        return None, None
    return finals[0], losses


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__)
        return 2
    train, zeroc = sys.argv[1], sys.argv[2]
    mpirun = shutil.which("mpirun") if len(sys.argv) == 4 and sys.argv[3] == "mpi" else None
    t0 = time.monotonic()
    base = ["--json", "--dtype", "bf16", "--steps", "3", "--seed", "9", "--batch", "8",
            "--persistence-threshold", "0", "--reuse-distance", "0"]
    flat, _ = run([train, "--world", "4", "--stage", "3", *base])
    runs = {}
    for stage in (1, 2, 3):
        runs[("mics", stage)] = run([train, "--world", "4", "--stage", str(stage),
                                     "--mics-shard-size", "2", *base])
    runs[("hpz", 3)] = run([train, "--world", "4", "--stage", "3", "--hpz-partition-size", "2",
                            *base])
    if flat is None or any(v[0] is None for v in runs.values()):
        return 1
    shas = {runs[("mics", s)][0]["params_sha256"] for s in (1, 2, 3)}
    if len(shas) != 1:
        fail("MiCS S=2: stages 1-3 hash differently: %s" % shas)
    m3 = runs[("mics", 3)][0]
    link = m3["comm_bytes_per_step_by_link"]
    if link["inter_node"] != 4 * m3["padded_params"] // 2 or m3["shard_world"] != 2:
        fail("MiCS S=2 stage 3: %s, padded %d, shard world %d" %
             (link, m3["padded_params"], m3["shard_world"]))
    h = runs[("hpz", 3)][0]
    if h["params_sha256"] != flat["params_sha256"]:
        fail("hpZ S=2: %s, flat stage 3 %s" % (h["params_sha256"], flat["params_sha256"]))
    if not h["comm_bytes_per_step_by_link"]["inter_node"] < \
            flat["comm_bytes_per_step_by_link"]["inter_node"]:
        fail("hpZ sends %s, flat %s" % (h["comm_bytes_per_step_by_link"],
                                        flat["comm_bytes_per_step_by_link"]))
    print("threads: MiCS %s (stages 1-3), hpZ = flat %s; bytes by link MiCS %s hpZ %s flat %s"
          % (shas.pop()[:12], h["params_sha256"][:12], link, h["comm_bytes_per_step_by_link"],
             flat["comm_bytes_per_step_by_link"]), flush=True)
    if mpirun is None:
        print("SKIP mpirun: not installed or no MPI build", flush=True)
    else:
        for (kind, stage), (want, want_losses) in sorted(runs.items()):
            extra = ["--mics-shard-size", "2"] if kind == "mics" else ["--hpz-partition-size", "2"]
            got, losses = run([train, "--stage", str(stage), *extra, *base], mpi_np=4)
            if got is None:
                continue
            for k in ("params_sha256", "comm_bytes_per_step_by_link", "comm_bytes_per_step",
                      "nodes"):
                if got[k] != want[k]:
                    fail("mpirun %s stage %d: %s %s, threads %s" % (kind, stage, k, got[k],
                                                                    want[k]))
            if losses != want_losses:
                fail("mpirun %s stage %d: losses %s, threads %s" % (kind, stage, losses,
                                                                    want_losses))
        print("mpirun -np 4: MiCS stages 1-3 and hpZ = threads", flush=True)

    for argv, words in ((["--mics-shard-size", "3"], ("mics_shard_size 3", "world of 4 ranks")),
                        (["--mics-shard-size", "2", "--mics-hierarchical"],
                         ("mics_hierarchical_params_gather", "within one node"))):
        for mpi in ([0, 4] if mpirun else [0]):
            cmd = [train, *([] if mpi else ["--world", "4"]), "--stage", "2", *argv, *base]
            if mpi:
                cmd = [mpirun, *MPI_ARGS, "-x", "ZC_RANKS_PER_NODE", "-np", "4", *cmd]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env_for())
            said = [l for l in p.stderr.splitlines() if all(w in l for w in words)]
            if p.returncode == 0 or not said:
                fail("%s: exit %d, expected a refusal naming %s\n%s" %
                     (" ".join(cmd), p.returncode, words, p.stderr[-2000:]))
    print("refusals: as threads%s" % (" and under mpirun" if mpirun else ""), flush=True)

    with tempfile.TemporaryDirectory(prefix="zc_hybrid_") as tmp:
        four = base[:]
        four[four.index("--steps") + 1] = "4"
        two = base[:]
        two[two.index("--steps") + 1] = "2"
        m = ["--world", "4", "--stage", "3", "--mics-shard-size", "2"]
        want, _ = run([train, *m, *four])
        for mpi in ([0, 4] if mpirun else [0]):
            d = os.path.join(tmp, "ck%d" % mpi)
            os.mkdir(d)
            mm = m[2:] if mpi else m
            run([train, *mm, *two, "--save-every", "2", "--save-dir", d], mpi_np=mpi)
            got, _ = run([train, *mm, *two, "--save-dir", d, "--resume"], mpi_np=mpi)
            if want and got and got["params_sha256"] != want["params_sha256"]:
                fail("MiCS save -> resume%s: %s, uninterrupted %s" %
                     (" under mpirun" if mpi else "", got["params_sha256"],
                      want["params_sha256"]))
        src = os.path.join(tmp, "ck0")
        out = os.path.join(tmp, "resharded")
        os.mkdir(out)
        p = subprocess.run([zeroc, "ckpt", "reshard", src, out, "--world", "3"],
                           capture_output=True, text=True, timeout=60)
        if p.returncode:
            fail("zeroc ckpt reshard: exit %d\n%s" % (p.returncode, p.stderr[-2000:]))
        else:
            flat3 = ["--world", "3", "--stage", "2", *two, "--resume"]
            a, _ = run([train, *flat3, "--save-dir", out])
            b, _ = run([train, *flat3, "--save-dir", src])
            if a and b and a["params_sha256"] != b["params_sha256"]:
                fail("resharded MiCS checkpoint resumed flat: %s, the original %s" %
                     (a["params_sha256"], b["params_sha256"]))
            elif a:
                print("MiCS checkpoint: resume bitwise; resharded for 3 ranks = original (%s)"
                      % a["params_sha256"][:12], flush=True)
    print("total %.1f s" % (time.monotonic() - t0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
