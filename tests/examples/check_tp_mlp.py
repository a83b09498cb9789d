#!/usr/bin/env python3
"""examples/tp_mlp: 2 tensor-parallel x 2 data-parallel ranks with ZeRO over
each data-parallel group, against the 2-rank run of each half alone.

  1. Threads, stages 0-3 x fp32/bf16: `tp_mlp --tp 2 --dp 2` (four rank
     threads, the data-parallel groups split from their world) prints, per
     half, the params_sha256 of its group; `tp_mlp --tp 1 --dp 2` (two
     ranks, each half trained by an engine of its own over a 2-rank world)
     prints the same hashes and the same losses, bit for bit.
  2. mpirun -np 4 (skipped, saying so, without mpirun or an MPI build): the
     program initialises MPI, all-reduces its tensor-parallel partials with
     MPI_Allreduce and hands zeroc its data-parallel MPI_Comm
     (--dp-from mpi) or lets zeroc split the world (--dp-from split): the
     same hashes as the threads.
  3. Each half's group has 2 ranks (group_world), and the two halves differ.

Usage: check_tp_mlp.py TP_MLP [mpi]. Exits non-zero after printing every
failure. Every run is an argv list, never a shell command line.
"""
import json
import os
import shutil
import subprocess
import sys
import time

failures = []
MPI_ARGS = ["--oversubscribe", "--allow-run-as-root", "--mca", "btl", "self,vader"]


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, flush=True)


def parse(out):
    steps = [json.loads(l)["loss"] for l in out.splitlines() if l.startswith('{"step"')]
    finals = {}
    for l in out.splitlines():
        if '"final"' in l:
            j = json.loads(l)
            finals[j["half"]] = j
    return steps, finals


def run(argv, mpi_np=0):
    env = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "ZC_COMM", "OMPI_COMM_WORLD_SIZE"):
        env.pop(k, None)
    if mpi_np:
        argv = [shutil.which("mpirun"), *MPI_ARGS, "-np", str(mpi_np), *argv]
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    return p, time.monotonic() - t0, " ".join(argv)


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__)
        return 2
    exe = sys.argv[1]
    with_mpi = len(sys.argv) == 3 and sys.argv[2] == "mpi"
    mpirun = shutil.which("mpirun") if with_mpi else None
    t0 = time.monotonic()
    for stage in range(4):
        for dtype in ("fp32", "bf16"):
            common = ["--json", "--stage", str(stage), "--dtype", dtype, "--steps", "6",
                      "--seed", "3"]
            p, dt, cmd = run([exe, "--tp", "2", "--dp", "2", *common])
            q, dt1, cmd1 = run([exe, "--tp", "1", "--dp", "2", *common])
            if p.returncode or q.returncode:
                fail("%s / %s: exit %d / %d\n%s\n%s" % (cmd, cmd1, p.returncode, q.returncode,
                                                        p.stderr[-2000:], q.stderr[-2000:]))
                continue
            tp_steps, tp = parse(p.stdout)
            al_steps, alone = parse(q.stdout)
            ok = sorted(tp) == [0, 1] and sorted(alone) == [0, 1]
            for h in (0, 1):
                if not ok:
                    break
                if tp[h]["params_sha256"] != alone[h]["params_sha256"]:
                    fail("stage %d %s half %d: tp x dp %s, the half alone %s" %
                         (stage, dtype, h, tp[h]["params_sha256"], alone[h]["params_sha256"]))
                if tp[h]["group_world"] != 2 or alone[h]["group_world"] != 2:
                    fail("stage %d %s half %d: groups of %d and %d ranks" %
                         (stage, dtype, h, tp[h]["group_world"], alone[h]["group_world"]))
            if not ok:
                fail("%s: final lines %s; %s: %s" % (cmd, sorted(tp), cmd1, sorted(alone)))
                continue
            if tp[0]["params_sha256"] == tp[1]["params_sha256"]:
                fail("stage %d %s: the two halves hash alike" % (stage, dtype))
            if tp_steps != al_steps or len(tp_steps) != 6:
                fail("stage %d %s: losses %s, the halves alone %s" %
                     (stage, dtype, tp_steps, al_steps))
            print("threads stage %d %s: halves %s %s = alone (%.1f s + %.1f s)" %
                  (stage, dtype, tp[0]["params_sha256"][:12], tp[1]["params_sha256"][:12],
                   dt, dt1), flush=True)
            if not with_mpi or stage not in (1, 3):
                continue
            if mpirun is None:
                print("SKIP mpirun: not installed", flush=True)
                continue
            for dp_from in ("mpi", "split"):
                m, dtm, cmdm = run([exe, "--tp", "2", "--dp", "2", "--dp-from", dp_from,
                                    *common], mpi_np=4)
                _, mf = parse(m.stdout)
                if m.returncode or sorted(mf) != [0, 1]:
                    fail("%s: exit %d, final lines %s\n%s" % (cmdm, m.returncode, sorted(mf),
                                                             m.stderr[-2000:]))
                    continue
                for h in (0, 1):
                    if mf[h]["params_sha256"] != tp[h]["params_sha256"]:
                        fail("%s: half %d %s, the threads %s" %
                             (cmdm, h, mf[h]["params_sha256"], tp[h]["params_sha256"]))
                print("mpirun -np 4 stage %d %s --dp-from %s: = threads (%.1f s)" %
                      (stage, dtype, dp_from, dtm), flush=True)
    print("total %.1f s" % (time.monotonic() - t0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
