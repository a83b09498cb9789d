/* The GPU Adam bench, shared by the bench_gpu_adam executable and
 * `zeroc bench adam --device cuda`. */
#ifndef ZC_BENCH_GPU_ADAM_H
#define ZC_BENCH_GPU_ADAM_H

#include <stdint.h>

#include "device/device.h"

/* argv[0] is skipped like a program name. Returns a process exit code. */
int zc__bench_gpu_adam_main(int argc, char **argv);

/* Median ms (CUDA events on the legacy stream) of `reps` runs of fn after
 * `warmup` untimed ones; fn returns 0 or -1. 0, or -1 when a run or the
 * timing failed. */
typedef int (*zc__bench_work_fn)(void *arg);
int zc__bench_time_median(zc__bench_work_fn fn, void *arg, int warmup, int reps, float *ms);

/* One Adam call of the device backend (arg: zc__bench_adam_arg) on the
 * legacy stream. */
typedef struct zc__bench_adam_arg {
    zc_device *d;
    zc_adam_shard s;
    zc_adam_coeffs c;
} zc__bench_adam_arg;
int zc__bench_run_adam(void *arg);

/* --engine (bench_gpu_step.c): the engine's zc_step at `stage`, world 1 on
 * cuda:dev_index, for each of the nns sizes, with a model of dtype dt, next
 * to one Adam call over as many parameters; one JSON line per size. Returns
 * a process exit code. */
int zc__bench_gpu_step(const uint64_t *ns, int nns, zc_dtype dt, int stage, int dev_index,
                       int warmup, int reps);

#endif
