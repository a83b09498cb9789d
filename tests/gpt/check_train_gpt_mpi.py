#!/usr/bin/env python3
"""train_gpt with one rank per process under mpirun (its --launcher auto
path, zc_comm_init_env): for W = 2, 3 and stages 0 and 3, the params_sha256
and every step's printed loss - the mean over ranks, by zc_all_reduce_f64 -
equal the thread run's (`--launcher threads --world W`); the same with the
optimizer state in bf16 (master and moments, stochastic rounding: the random
bits are a function of the element's global index, so processes and threads
round alike) at W = 3, stages 1 and 3. And each rank's BLAS
threads: with the ranks not bound to cores (`--bind-to none`), the CPUs this
process may use split between the two ranks, at least one; bound, one; the
user's OPENBLAS_NUM_THREADS as given.

Usage: check_train_gpt_mpi.py TRAIN_GPT DATA_FILE. Exits 77 (meson: skipped)
when mpirun is not installed. Each mpirun is an argv list, never a shell.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

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
env["OPENBLAS_NUM_THREADS"] = "1"  # the same BLAS threads on any machine, for the sha
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


tmp = tempfile.TemporaryDirectory(prefix="zc-gpt-mpi-", dir=".")
BF16_STATE = os.path.join(tmp.name, "bf16_state.json")
with open(BF16_STATE, "x") as f:
    json.dump({"train_micro_batch_size_per_gpu": "auto", "gradient_clipping": 1.0,
               "bf16": {"enabled": True, "bf16_master_weights_and_grads": True,
                        "bf16_optimizer_states": True},
               "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
               "zero_optimization": {"stage": 1}}, f)
shas = {}
for world, stage, cfg in ((2, 0, None), (2, 3, None), (3, 0, None), (3, 3, None),
                          (3, 1, BF16_STATE), (3, 3, BF16_STATE)):
    args = TINY + ["--stage", str(stage)] + (["--config", cfg] if cfg else [])
    what = f"W={world} stage {stage}{' bf16 state' if cfg else ''}"
    want = outcome([exe, *args, "--launcher", "threads", "--world", str(world)])
    got = outcome([MPIRUN, *MPI_ARGS, "-np", str(world), exe, *args])
    if not (want and got):
        continue  # the failure is recorded
    shas[(world, stage, cfg)] = want[0]
    if got[0] != want[0]:
        failures.append(f"{what}: mpirun {got[0]} != threads {want[0]}")
    elif got[1] != want[1] or len(got[1]) != 3:
        failures.append(f"{what}: mpirun printed losses {got[1]}, threads {want[1]}")
    else:
        print(f"ok {what}: processes and threads give {want[0][:16]}... "
              f"and losses {want[1]}")
# The bf16 state is what trained: its parameters are not the fp32 state's.
if shas.get((3, 3, None)) and shas.get((3, 3, None)) == shas.get((3, 3, BF16_STATE)):
    failures.append("W=3 stage 3: the bf16-state run gives the fp32-state run's parameters")


def cpu_threads(extra_env, bind):
    """The final line's cpu_threads of a 2-rank mpirun with env + extra_env."""
    e = {k: v for k, v in env.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    e.update(extra_env)
    cmd = [MPIRUN, *MPI_ARGS, "--bind-to", bind, "-np", "2", exe, *TINY, "--stage", "2"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=e)
    finals = [json.loads(l) for l in p.stdout.splitlines() if l.startswith('{"final"')]
    if p.returncode != 0 or len(finals) != 1:
        failures.append(f"{' '.join(cmd)}: status {p.returncode}\n{p.stderr[-2000:]}")
        return None
    return finals[0].get("cpu_threads")


cpus = len(os.sched_getaffinity(0))
for extra, bind, want in (({}, "none", max(1, cpus // 2)), ({}, "core", 1),
                          ({"OPENBLAS_NUM_THREADS": "2"}, "none", 2)):
    got = cpu_threads(extra, bind)
    if got is None:
        continue
    if got != want:
        failures.append(f"mpirun --bind-to {bind} {extra or ''} on {cpus} CPUs: "
                        f"cpu_threads {got}, want {want}")
    else:
        print(f"ok --bind-to {bind} {extra or ''}: {got} BLAS thread(s) per rank on {cpus} CPUs")
tmp.cleanup()
if failures:
    print("\n".join(failures))
    sys.exit(1)
