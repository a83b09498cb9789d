#!/usr/bin/env python3
"""train_gpt with one rank per process under mpirun (its --launcher auto
path, zc_comm_init_env): for W = 2, 3 and stages 0 and 3, the params_sha256
and every step's printed loss - the mean over ranks, by zc_all_reduce_f64 -
equal the thread run's (`--launcher threads --world W`).

Usage: check_train_gpt_mpi.py TRAIN_GPT DATA_FILE. Exits 77 (meson: skipped)
when mpirun is not installed. Each mpirun is an argv list, never a shell.
"""
import json
import os
import shutil
import subprocess
import sys

exe, data = sys.argv[1], sys.argv[2]
MPIRUN = shutil.which("mpirun")
if not MPIRUN:
    print("mpirun is not installed: skipped")
    sys.exit(77)
# --oversubscribe: 2 cores, up to 3 ranks; --allow-run-as-root: CI runs as
# root. Shared memory only, no network probing.
MPI_ARGS = ["--oversubscribe", "--allow-run-as-root", "--mca", "btl", "self,vader"]
TINY = ["--layers", "2", "--heads", "2", "--dim", "16", "--seq", "16", "--batch", "2",
        "--steps", "3", "--eval-every", "0", "--dtype", "bf16", "--data", data, "--json"]
env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
env["OPENBLAS_NUM_THREADS"] = "1"  # one BLAS thread per rank process on 2 cores
failures = []


def outcome(cmd):
    """The params_sha256 and the step lines' losses of one run."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    finals = [l for l in lines if l.get("final")]
    if p.returncode != 0 or len(finals) != 1:
        failures.append(f"{' '.join(cmd)}: status {p.returncode}, {len(finals)} final lines\n"
                        f"{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
        return None
    return finals[0]["params_sha256"], [l["loss"] for l in lines if "step" in l and "loss" in l]


for world in (2, 3):
    for stage in (0, 3):
        args = TINY + ["--stage", str(stage)]
        want = outcome([exe, *args, "--launcher", "threads", "--world", str(world)])
        got = outcome([MPIRUN, *MPI_ARGS, "-np", str(world), exe, *args])
        if not (want and got):
            continue  # the failure is recorded
        if got[0] != want[0]:
            failures.append(f"W={world} stage {stage}: mpirun {got[0]} != threads {want[0]}")
        elif got[1] != want[1] or len(got[1]) != 3:
            failures.append(f"W={world} stage {stage}: mpirun printed losses {got[1]}, "
                            f"threads {want[1]}")
        else:
            print(f"ok W={world} stage {stage}: processes and threads give {want[0][:16]}... "
                  f"and losses {want[1]}")
if failures:
    print("\n".join(failures))
    sys.exit(1)
