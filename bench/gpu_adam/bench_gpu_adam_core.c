/* GPU fused Adam throughput next to a device-to-device copy of the same
 * bytes, measured in the same run.
 *
 * For each shard size and gradient dtype: fp32 master, m, v, a gradient of
 * that dtype and (optionally) a 16-bit parameter copy, updated by the CUDA
 * backend's adam op (the engine's path). Bytes counted per parameter: read
 * master, m, v (12) and the gradient (2 or 4), write master, m, v (12) and the
 * copy (0 or 2): 26-30 bytes. The ceiling is cudaMemcpy D2D moving the same
 * number of bytes (half read, half written) through a pair of 1 GiB buffers.
 * Times are the median of --reps CUDA-event-timed launches after --warmup.
 *
 * One JSON object per line:
 *   {"bench":"gpu_adam","device":...,"params":N,"grad":"bf16","out":"bf16",
 *    "bytes_per_param":28,"ms":..,"gbps":..,"copy_gbps":..,"fraction_of_copy":..}
 * Compare with torch.optim.AdamW(fused=True): bench/gpu_adam/torch_adam.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "bench/gpu_adam/bench_gpu_adam.h"
#include "cliarg.h"
#include "device/device.h"
#include "optim/adam.h"

#define COPY_CHUNK ((size_t)1 << 30)
#define MAX_SIZES 16
/* Largest --sizes item: 2^33 parameters is 240 GiB of buffers, beyond any GPU. */
#define MAX_PARAMS (UINT64_C(1) << 33)

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* s[0..len) is one of fp32, fp16, bf16. */
static int parse_dtype(const char *s, size_t len, zc_dtype *dt)
{
    static const struct { const char *name; zc_dtype dt; } t[] = {
        {"fp32", ZC_DTYPE_F32}, {"fp16", ZC_DTYPE_F16}, {"bf16", ZC_DTYPE_BF16}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (len == strlen(t[i].name) && !memcmp(s, t[i].name, len)) {
            *dt = t[i].dt;
            return 0;
        }
    return -1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_gpu_adam [--sizes 16M,64M,256M,1G] [--grad fp32,bf16,fp16]\n"
               "                      [--out bf16|fp16|fp32|none] [--reps 20] [--warmup 3]\n"
               "                      [--gpu 0] [--engine STAGE]\n"
               "  --sizes LIST   parameter counts, multiples of 64 in [64, 2^33], K/M/G suffixes\n"
               "                 (--n LIST is the same, as `zeroc bench adam` names it)\n"
               "  --reps 1..10000, --warmup 0..10000, --gpu 0..1023\n"
               "  --engine STAGE time the engine's zc_step at that ZeRO stage (0..3, world 1)\n"
               "                 with the first --grad dtype as the model's, next to one\n"
               "                 Adam call over the same parameters (bench_gpu_step.c)\n");
}

int zc__bench_time_median(zc__bench_work_fn fn, void *arg, int warmup, int reps, float *ms)
{
    cudaEvent_t a, b;
    if (cudaEventCreate(&a) != cudaSuccess || cudaEventCreate(&b) != cudaSuccess)
        return -1;
    float *t = calloc((size_t)reps, sizeof *t);
    int rc = 0;
    for (int i = 0; i < warmup && !rc; i++)
        rc = fn(arg);
    for (int i = 0; i < reps && !rc; i++) {
        cudaEventRecord(a, 0);
        rc = fn(arg);
        cudaEventRecord(b, 0);
        if (!rc && cudaEventSynchronize(b) == cudaSuccess)
            cudaEventElapsedTime(&t[i], a, b);
        else
            rc = -1;
    }
    if (!rc) {
        qsort(t, (size_t)reps, sizeof *t, cmp_f);
        *ms = t[reps / 2];
    }
    free(t);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return rc;
}

int zc__bench_run_adam(void *p)
{
    zc__bench_adam_arg *a = p;
    if (a->d->ops->adam(a->d, &a->s, &a->c, NULL) != ZC_OK) {
        fprintf(stderr, "bench_gpu_adam: %s\n", zc_last_error());
        return -1;
    }
    return 0;
}

typedef struct copy_arg {
    void *src, *dst;
    size_t bytes; /* bytes read (= bytes written) */
} copy_arg;

static int run_copy(void *p)
{
    copy_arg *a = p;
    for (size_t done = 0; done < a->bytes; done += COPY_CHUNK) {
        size_t n = a->bytes - done < COPY_CHUNK ? a->bytes - done : COPY_CHUNK;
        if (cudaMemcpyAsync(a->dst, a->src, n, cudaMemcpyDeviceToDevice, 0) != cudaSuccess)
            return -1;
    }
    return 0;
}

int zc__bench_gpu_adam_main(int argc, char **argv)
{
    const char *sizes = "16M,64M,256M,1G", *sizes_flag = "--sizes", *grads = "fp32,bf16,fp16", *out_s = "bf16";
    int reps = 20, warmup = 3, dev_index = 0, engine_stage = -1;
    char err[ZC_ARG_ERRLEN];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        bool ok = true;
        if (!v) {
            fprintf(stderr, "bench_gpu_adam: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (!strcmp(a, "--sizes") || !strcmp(a, "--n"))
            sizes = v, sizes_flag = a;
        else if (!strcmp(a, "--grad"))
            grads = v;
        else if (!strcmp(a, "--out"))
            out_s = v;
        else if (!strcmp(a, "--reps"))
            ok = zc__arg_int(a, v, 1, 10000, &reps, err, sizeof err);
        else if (!strcmp(a, "--warmup"))
            ok = zc__arg_int(a, v, 0, 10000, &warmup, err, sizeof err);
        else if (!strcmp(a, "--gpu"))
            ok = zc__arg_int(a, v, 0, 1023, &dev_index, err, sizeof err);
        else if (!strcmp(a, "--engine"))
            ok = zc__arg_int(a, v, 0, 3, &engine_stage, err, sizeof err);
        else {
            fprintf(stderr, "bench_gpu_adam: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "bench_gpu_adam: %s\n", err);
            return 2;
        }
        i++;
    }
    /* Every list is checked before the device is opened: a typo costs
     * nothing and no case runs on half a list. */
    uint64_t ns[MAX_SIZES];
    int nns = 0;
    if (!zc__arg_u64_list(sizes_flag, sizes, 64, MAX_PARAMS, ZC_ARG_SUFFIX, ns, MAX_SIZES, &nns,
                          err, sizeof err)) {
        fprintf(stderr, "bench_gpu_adam: %s\n", err);
        return 2;
    }
    for (int i = 0; i < nns; i++)
        if (ns[i] % 64) {
            fprintf(stderr, "bench_gpu_adam: %s item %llu is not a multiple of 64 (shards "
                    "are 64-element aligned)\n", sizes_flag, (unsigned long long)ns[i]);
            return 2;
        }
    zc_dtype gdts[8];
    int ngd = 0;
    for (const char *g = grads;;) {
        const char *c = strchr(g, ',');
        size_t len = c ? (size_t)(c - g) : strlen(g);
        if (ngd == 8 || parse_dtype(g, len, &gdts[ngd]) != 0) {
            fprintf(stderr, "bench_gpu_adam: --grad '%.200s': expected a list of at most 8 of "
                    "fp32, bf16, fp16\n", grads);
            return 2;
        }
        ngd++;
        if (!c)
            break;
        g = c + 1;
    }
    zc_dtype odt = ZC_DTYPE_BF16;
    int has_out = strcmp(out_s, "none") != 0;
    if (has_out && parse_dtype(out_s, strlen(out_s), &odt)) {
        fprintf(stderr, "bench_gpu_adam: --out '%.200s': want bf16, fp16, fp32 or none\n", out_s);
        return 2;
    }
    if (engine_stage >= 0)
        return zc__bench_gpu_step(ns, nns, gdts[0], engine_stage, dev_index, warmup, reps);
    zc_device *d = NULL;
    if (zc__device_open(ZC_DEVICE_CUDA, dev_index, &d) != ZC_OK) {
        fprintf(stderr, "bench_gpu_adam: %s\n", zc_last_error());
        return 1;
    }
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, d->index);

    copy_arg cp = {0};
    int rc = 0;
    if (cudaMalloc(&cp.src, COPY_CHUNK) != cudaSuccess ||
        cudaMalloc(&cp.dst, COPY_CHUNK) != cudaSuccess) {
        fprintf(stderr, "bench_gpu_adam: cannot allocate the 2 x 1 GiB copy buffers\n");
        rc = 1;
    }
    for (int si = 0; si < nns && !rc; si++) {
        size_t n = (size_t)ns[si]; /* <= 2^33: fits */
        for (int gi = 0; gi < ngd && !rc; gi++) {
            zc_dtype gdt = gdts[gi];
            size_t gsz = zc_dtype_size(gdt), osz = has_out ? zc_dtype_size(odt) : 0;
            zc__bench_adam_arg a = {.d = d};
            void *bufs[5] = {0};
            size_t sz[5] = {n * 4, n * 4, n * 4, n * gsz, n * osz};
            for (int k = 0; k < 5 && !rc; k++)
                if (sz[k] && d->ops->alloc(d, NULL, ZC_MEM_BUFFERS, sz[k], "bench", &bufs[k]) != ZC_OK) {
                    fprintf(stderr, "bench_gpu_adam: %s\n", zc_last_error());
                    rc = 1;
                }
            if (!rc) {
                zc_adam_hparams hp = {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                      .weight_decay = 0.01, .adamw = true, .bias_correction = true};
                a.c = zc__adam_coeffs(&hp, 10);
                a.s = (zc_adam_shard){bufs[0], bufs[1], bufs[2], bufs[3], gdt, 1.0f,
                                      has_out ? bufs[4] : NULL, odt, n};
                size_t bpp = 24 + gsz + osz;
                float ms_adam = 0, ms_copy = 0;
                cp.bytes = n * bpp / 2;
                if (zc__bench_time_median(zc__bench_run_adam, &a, warmup, reps, &ms_adam) ||
                    zc__bench_time_median(run_copy, &cp, warmup, reps, &ms_copy)) {
                    fprintf(stderr, "bench_gpu_adam: timing failed: %s\n",
                            cudaGetErrorString(cudaGetLastError()));
                    rc = 1;
                } else if (!(ms_adam > 0) || !(ms_copy > 0)) {
                    /* A zero event time would print inf, which is not JSON. */
                    fprintf(stderr, "bench_gpu_adam: %zu params: an event time of 0 ms "
                            "(adam %.4f, copy %.4f); use larger --sizes\n", n, ms_adam, ms_copy);
                    rc = 1;
                } else {
                    double gbps = (double)n * (double)bpp / (ms_adam * 1e-3) / 1e9;
                    double cgbps = 2.0 * (double)cp.bytes / (ms_copy * 1e-3) / 1e9;
                    printf("{\"bench\":\"gpu_adam\",\"device\":\"%s\",\"params\":%zu,"
                           "\"grad\":\"%s\",\"out\":\"%s\",\"bytes_per_param\":%zu,"
                           "\"ms\":%.4f,\"gbps\":%.1f,\"copy_ms\":%.4f,\"copy_gbps\":%.1f,"
                           "\"fraction_of_copy\":%.3f}\n",
                           prop.name, n, zc_dtype_name(gdt), has_out ? zc_dtype_name(odt) : "none",
                           bpp, ms_adam, gbps, ms_copy, cgbps, gbps / cgbps);
                    fflush(stdout);
                }
            }
            for (int k = 0; k < 5; k++)
                if (bufs[k])
                    d->ops->free(d, NULL, ZC_MEM_BUFFERS, bufs[k], sz[k]);
        }
    }
    cudaFree(cp.src);
    cudaFree(cp.dst);
    d->ops->destroy(d);
    return rc;
}
