/* The engine's zc_step on a GPU next to the bare Adam it runs
 * (bench_gpu_adam --engine STAGE).
 *
 * The bar (issue 17 of the GPU work): the step's optimizer phase reaches at
 * least 0.9 of one bare Adam call's rate over as many parameters - what the
 * engine adds around the kernel (the norm, the per-segment launches, the
 * gradient reset, the agreement on the outcome) costs at most a tenth.
 *
 * Per size n: a world-1 engine on the GPU at the stage, n parameters of the
 * model's dtype in TENSORS tensors of nearly equal size, wall_clock_breakdown
 * on. Each repetition requests and readies every gradient buffer (left at
 * zero: the values do not change the work), drains the device, then times
 * zc_step up to a device synchronisation after it on the host clock:
 * "step_ms", all the step costs the GPU and the host. "optimizer_ms" is the
 * breakdown's optimizer phase of the same step: on CUDA, work still queued
 * when zc_step returns falls outside it, so it can be less than step_ms.
 * "adam_ms" is bench_gpu_adam's own measurement of one Adam call over n
 * parameters with gradients and a parameter copy of the model's dtype (the
 * engine's stage-0 Adam), and "fraction_of_adam" = adam_ms / step_ms; the
 * medians of --reps repetitions after --warmup.
 *
 * One JSON object per line:
 *   {"bench":"gpu_step","device":...,"stage":0,"params":N,"tensors":16,
 *    "dtype":"bf16","step_ms":..,"optimizer_ms":..,"adam_ms":..,
 *    "fraction_of_adam":..} */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "bench/gpu_adam/bench_gpu_adam.h"
#include "optim/adam.h"
#include "zeroc/zeroc.h"

#define TENSORS 16

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n / 2];
}

static int fail(const char *what)
{
    fprintf(stderr, "bench_gpu_adam --engine: %s: %s\n", what, zc_last_error());
    return 1;
}

/* The engine of one case: config, communicator, engine, parameters. */
typedef struct step_case {
    zc_config *cfg;
    zc_comm *comm;
    zc_engine *e;
    zc_param *p[TENSORS];
} step_case;

static void case_close(step_case *k)
{
    zc_engine_destroy(k->e);
    if (k->comm)
        zc_comm_destroy(k->comm);
    zc_config_destroy(k->cfg);
}

static int case_open(step_case *k, size_t n, zc_dtype dt, int stage, int dev_index)
{
    memset(k, 0, sizeof *k);
    if (zc_config_create(&k->cfg) != ZC_OK ||
        zc_config_set_int(k->cfg, "zero_optimization.stage", stage) != ZC_OK ||
        zc_config_set_bool(k->cfg, "wall_clock_breakdown", true) != ZC_OK ||
        zc_config_set_double(k->cfg, "gradient_clipping", 1.0) != ZC_OK ||
        (dt == ZC_DTYPE_BF16 && zc_config_set_bool(k->cfg, "bf16.enabled", true) != ZC_OK) ||
        (dt == ZC_DTYPE_F16 && zc_config_set_bool(k->cfg, "fp16.enabled", true) != ZC_OK))
        return fail("configuration");
    if (zc_comm_local_world(1, &k->comm) != ZC_OK)
        return fail("communicator");
    zc_engine_options eo = ZC_ENGINE_OPTIONS_INIT;
    eo.device = ZC_DEVICE_CUDA;
    eo.device_index = dev_index;
    if (zc_engine_create(&k->e, k->cfg, k->comm, &eo) != ZC_OK)
        return fail("zc_engine_create");
    const int64_t base = (int64_t)(n / TENSORS);
    for (int t = 0; t < TENSORS; t++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", t);
        const int64_t numel = t < TENSORS - 1 ? base : (int64_t)n - base * (TENSORS - 1);
        k->p[t] = zc_param_add(k->e, name, &numel, 1, 0);
        if (!k->p[t])
            return fail("zc_param_add");
    }
    if (zc_engine_build(k->e) != ZC_OK)
        return fail("zc_engine_build");
    return 0;
}

/* One step: gradients readied (zeros), the device drained, zc_step timed to
 * the device's end. */
static int case_step(step_case *k, double *step_s, double *opt_s)
{
    for (int t = TENSORS - 1; t >= 0; t--) {
        if (!zc_param_acquire(k->e, k->p[t], NULL) || !zc_grad_buffer(k->e, k->p[t]) ||
            zc_grad_ready(k->e, k->p[t]) != ZC_OK ||
            zc_param_release(k->e, k->p[t], NULL) != ZC_OK)
            return fail("the backward pass");
    }
    if (cudaDeviceSynchronize() != cudaSuccess)
        return fail("cudaDeviceSynchronize");
    const double t0 = now_s();
    zc_step_info info;
    if (zc_step(k->e, &info) != ZC_OK)
        return fail("zc_step");
    if (cudaDeviceSynchronize() != cudaSuccess)
        return fail("cudaDeviceSynchronize");
    *step_s = now_s() - t0;
    zc_timers tm = {.size = sizeof tm};
    if (zc_engine_timers(k->e, &tm) != ZC_OK)
        return fail("zc_engine_timers");
    *opt_s = tm.last[ZC_TIMER_OPTIMIZER];
    return 0;
}

/* One Adam call over n parameters: gradients and a copy of dtype dt. */
static int bare_adam_ms(size_t n, zc_dtype dt, int dev_index, int warmup, int reps, float *ms)
{
    zc_device *d = NULL;
    if (zc__device_open(ZC_DEVICE_CUDA, dev_index, &d) != ZC_OK)
        return fail("opening the device");
    const size_t sz[5] = {n * 4, n * 4, n * 4, n * zc_dtype_size(dt), n * zc_dtype_size(dt)};
    void *bufs[5] = {0};
    int rc = 0;
    for (int k = 0; k < 5 && !rc; k++)
        if (d->ops->alloc(d, NULL, ZC_MEM_BUFFERS, sz[k], "bench", &bufs[k]) != ZC_OK)
            rc = fail("allocating the Adam buffers");
    if (!rc) {
        zc_adam_hparams hp = {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                              .weight_decay = 0.01, .adamw = true, .bias_correction = true};
        zc__bench_adam_arg a = {.d = d, .c = zc__adam_coeffs(&hp, 10)};
        a.s = (zc_adam_shard){bufs[0], bufs[1], bufs[2], bufs[3], dt, 1.0f, bufs[4], dt, n};
        if (zc__bench_time_median(zc__bench_run_adam, &a, warmup, reps, ms))
            rc = fail("timing the bare Adam");
    }
    for (int k = 0; k < 5; k++)
        if (bufs[k])
            d->ops->free(d, NULL, ZC_MEM_BUFFERS, bufs[k], sz[k]);
    d->ops->destroy(d);
    return rc;
}

int zc__bench_gpu_step(const uint64_t *ns, int nns, zc_dtype dt, int stage, int dev_index,
                       int warmup, int reps)
{
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev_index) != cudaSuccess) {
        fprintf(stderr, "bench_gpu_adam --engine: no CUDA device %d\n", dev_index);
        return 1;
    }
    double *step_s = calloc((size_t)reps, sizeof *step_s);
    double *opt_s = calloc((size_t)reps, sizeof *opt_s);
    int rc = step_s && opt_s ? 0 : 1;
    for (int i = 0; i < nns && !rc; i++) {
        const size_t n = (size_t)ns[i];
        if (n < TENSORS * 64) {
            fprintf(stderr, "bench_gpu_adam --engine: %zu parameters is fewer than %d "
                    "tensors of 64\n", n, TENSORS);
            rc = 2;
            break;
        }
        step_case k;
        rc = case_open(&k, n, dt, stage, dev_index);
        for (int r = 0; r < warmup + reps && !rc; r++) {
            double s = 0, o = 0;
            rc = case_step(&k, &s, &o);
            if (r >= warmup) {
                step_s[r - warmup] = s;
                opt_s[r - warmup] = o;
            }
        }
        case_close(&k);
        float adam_ms = 0;
        if (!rc)
            rc = bare_adam_ms(n, dt, dev_index, warmup, reps, &adam_ms);
        if (rc)
            break;
        const double sm = 1e3 * median(step_s, reps), om = 1e3 * median(opt_s, reps);
        printf("{\"bench\":\"gpu_step\",\"device\":\"%s\",\"stage\":%d,\"params\":%zu,"
               "\"tensors\":%d,\"dtype\":\"%s\",\"step_ms\":%.4f,\"optimizer_ms\":%.4f,"
               "\"adam_ms\":%.4f,\"fraction_of_adam\":%.3f}\n",
               prop.name, stage, n, TENSORS, zc_dtype_name(dt), sm, om, (double)adam_ms,
               sm > 0 ? (double)adam_ms / sm : 0.0);
        fflush(stdout);
    }
    free(step_s);
    free(opt_s);
    return rc;
}
