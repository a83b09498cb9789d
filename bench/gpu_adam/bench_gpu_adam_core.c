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
#include "device/device.h"
#include "optim/adam.h"

#define COPY_CHUNK ((size_t)1 << 30)

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    double v = strtod(s, &end);
    double mul = 1;
    if (*end == 'K' || *end == 'k')
        mul = 1024, end++;
    else if (*end == 'M' || *end == 'm')
        mul = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g')
        mul = 1024.0 * 1024 * 1024, end++;
    if (end == s || *end || v <= 0)
        return -1;
    *out = (size_t)(v * mul);
    return 0;
}

static int parse_dtype(const char *s, zc_dtype *dt)
{
    if (!strcmp(s, "fp32"))
        *dt = ZC_DTYPE_F32;
    else if (!strcmp(s, "fp16"))
        *dt = ZC_DTYPE_F16;
    else if (!strcmp(s, "bf16"))
        *dt = ZC_DTYPE_BF16;
    else
        return -1;
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_gpu_adam [--sizes 16M,64M,256M,1G] [--grad fp32,bf16,fp16]\n"
               "                      [--out bf16|fp16|fp32|none] [--reps 20] [--warmup 3]\n"
               "                      [--gpu 0]\n");
}

/* Median ms of `reps` timed runs of fn after `warmup` untimed ones. */
typedef int (*work_fn)(void *arg);

static int time_median(work_fn fn, void *arg, int warmup, int reps, float *ms)
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

typedef struct adam_arg {
    zc_device *d;
    zc_adam_shard s;
    zc_adam_coeffs c;
} adam_arg;

static int run_adam(void *p)
{
    adam_arg *a = p;
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
    const char *sizes = "16M,64M,256M,1G", *grads = "fp32,bf16,fp16", *out_s = "bf16";
    int reps = 20, warmup = 3, dev_index = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            usage(stderr);
            return 2;
        }
        if (!strcmp(a, "--sizes"))
            sizes = v;
        else if (!strcmp(a, "--grad"))
            grads = v;
        else if (!strcmp(a, "--out"))
            out_s = v;
        else if (!strcmp(a, "--reps"))
            reps = atoi(v);
        else if (!strcmp(a, "--warmup"))
            warmup = atoi(v);
        else if (!strcmp(a, "--gpu"))
            dev_index = atoi(v);
        else {
            fprintf(stderr, "bench_gpu_adam: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        i++;
    }
    if (reps < 1 || warmup < 0) {
        fprintf(stderr, "bench_gpu_adam: --reps must be >= 1 and --warmup >= 0\n");
        return 2;
    }
    zc_dtype odt = ZC_DTYPE_BF16;
    int has_out = strcmp(out_s, "none") != 0;
    if (has_out && parse_dtype(out_s, &odt)) {
        fprintf(stderr, "bench_gpu_adam: --out '%s': want bf16, fp16, fp32 or none\n", out_s);
        return 2;
    }
    zc_device *d = NULL;
    if (zc__device_open(ZC_DEVICE_CUDA, dev_index, &d) != ZC_OK) {
        fprintf(stderr, "bench_gpu_adam: %s\n", zc_last_error());
        return 1;
    }
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, d->index);

    copy_arg cp = {0};
    if (cudaMalloc(&cp.src, COPY_CHUNK) != cudaSuccess ||
        cudaMalloc(&cp.dst, COPY_CHUNK) != cudaSuccess) {
        fprintf(stderr, "bench_gpu_adam: cannot allocate the 2 x 1 GiB copy buffers\n");
        return 1;
    }
    int rc = 0;
    char sbuf[256], gbuf[64];
    snprintf(sbuf, sizeof sbuf, "%s", sizes);
    for (char *ss = NULL, *st = strtok_r(sbuf, ",", &ss); st && !rc; st = strtok_r(NULL, ",", &ss)) {
        size_t n;
        if (parse_size(st, &n)) {
            fprintf(stderr, "bench_gpu_adam: bad size '%s'\n", st);
            rc = 2;
            break;
        }
        n &= ~(size_t)63; /* shards are 64-element aligned */
        snprintf(gbuf, sizeof gbuf, "%s", grads);
        for (char *gs = NULL, *gt = strtok_r(gbuf, ",", &gs); gt && !rc;
             gt = strtok_r(NULL, ",", &gs)) {
            zc_dtype gdt;
            if (parse_dtype(gt, &gdt)) {
                fprintf(stderr, "bench_gpu_adam: bad gradient dtype '%s'\n", gt);
                rc = 2;
                break;
            }
            size_t gsz = zc_dtype_size(gdt), osz = has_out ? zc_dtype_size(odt) : 0;
            adam_arg a = {.d = d};
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
                if (time_median(run_adam, &a, warmup, reps, &ms_adam) ||
                    time_median(run_copy, &cp, warmup, reps, &ms_copy)) {
                    fprintf(stderr, "bench_gpu_adam: timing failed: %s\n",
                            cudaGetErrorString(cudaGetLastError()));
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
