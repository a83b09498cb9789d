#!/usr/bin/env python3
"""train_gpt with one rank per process under mpirun (its --launcher auto
path, zc_comm_init_env): for W = 2, 3 and stages 0 and 3, the params_sha256
equals the thread run's (`--launcher threads --world W`).

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


def final_hash(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    finals = [json.loads(l) for l in p.stdout.splitlines() if '"final"' in l]
    if p.returncode != 0 or len(finals) != 1:
        failures.append(f"{' '.join(cmd)}: status {p.returncode}, {len(finals)} final lines\n"
                        f"{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
        return None
    return finals[0]["params_sha256"]


for world in (2, 3):
    for stage in (0, 3):
        args = TINY + ["--stage", str(stage)]
        want = final_hash([exe, *args, "--launcher", "threads", "--world", str(world)])
        got = final_hash([MPIRUN, *MPI_ARGS, "-np", str(world), exe, *args])
        if not (want and got):
            continue  # the failure is recorded
        if got != want:
            failures.append(f"W={world} stage {stage}: mpirun {got} != threads {want}")
        else:
            print(f"ok W={world} stage {stage}: processes and threads give {want[:16]}...")
if failures:
    print("\n".join(failures))
    sys.exit(1)
