/* The gradient norm's sum of squares on the GPU next to a device-to-device
 * copy of the same bytes, measured in the same run.
 *
 * For each size and dtype: the CUDA backend's sumsq_async (the engine's
 * path: the groups kernel and the tree kernel, result left on the device)
 * over random values, and cudaMemcpyAsync D2D of the same n * esz bytes into
 * a second buffer. The norm reads n * esz bytes and writes next to nothing;
 * the copy reads as many and writes as many. The bar (issue 17) compares the
 * norm's read rate with the copy's read rate (bytes read / time): >= 0.8 for
 * >= 10^8 bf16 elements. Times are the median of --reps CUDA-event-timed
 * runs after --warmup. Before timing, the device result is checked bitwise
 * against the host backend's sum of the same values.
 *
 * One JSON object per line:
 *   {"bench":"gpu_norm","device":...,"elements":N,"dtype":"bf16","ms":..,
 *    "read_gbps":..,"copy_ms":..,"copy_read_gbps":..,"fraction_of_copy_read":..,
 *    "bitwise_host":true} */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "base/dtype.h"
#include "cliarg.h"
#include "device/device.h"

#define MAX_SIZES 16
/* Largest --sizes item: 2^33 fp32 elements and the copy's twin are 64 GiB. */
#define MAX_ELEMS (UINT64_C(1) << 33)
/* Host values are made and uploaded this many elements at a time. */
#define FILL_CHUNK ((size_t)1 << 24)

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_gpu_norm [--sizes 16M,128M,512M] [--dtype bf16,fp32,fp16]\n"
               "                      [--reps 20] [--warmup 3] [--gpu 0]\n"
               "  --sizes LIST   element counts in [1, 2^33], K/M/G suffixes (binary)\n"
               "  --reps 1..10000, --warmup 0..10000, --gpu 0..1023\n");
}

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef int (*work_fn)(void *arg);

/* Median ms of `reps` event-timed runs of fn after `warmup` untimed ones. */
static int time_median(work_fn fn, void *arg, int warmup, int reps, float *ms)
{
    cudaEvent_t a, b;
    if (cudaEventCreate(&a) != cudaSuccess)
        return -1;
    if (cudaEventCreate(&b) != cudaSuccess) {
        cudaEventDestroy(a);
        return -1;
    }
    float *t = calloc((size_t)reps, sizeof *t);
    int rc = t ? 0 : -1;
    for (int i = 0; i < warmup && !rc; i++)
        rc = fn(arg);
    for (int i = 0; i < reps && !rc; i++) {
        if (cudaEventRecord(a, 0) != cudaSuccess || (rc = fn(arg)) != 0 ||
            cudaEventRecord(b, 0) != cudaSuccess || cudaEventSynchronize(b) != cudaSuccess ||
            cudaEventElapsedTime(&t[i], a, b) != cudaSuccess)
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

typedef struct norm_arg {
    zc_device *d;
    const void *x;
    zc_dtype dt;
    size_t n;
    double *scratch, *out;
} norm_arg;

static int run_norm(void *p)
{
    norm_arg *a = p;
    if (a->d->ops->sumsq_async(a->d, a->x, a->dt, a->n, a->scratch, a->out, NULL) != ZC_OK) {
        fprintf(stderr, "bench_gpu_norm: %s\n", zc_last_error());
        return -1;
    }
    return 0;
}

typedef struct copy_arg {
    void *dst;
    const void *src;
    size_t bytes;
} copy_arg;

static int run_copy(void *p)
{
    copy_arg *a = p;
    return cudaMemcpyAsync(a->dst, a->src, a->bytes, cudaMemcpyDeviceToDevice, 0) == cudaSuccess
               ? 0
               : -1;
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

/* Values over 2^-20 .. 2^13 of both signs (finite in every dtype), built
 * from the bits of a xorshift seeded per size: never zeros, which could hide
 * unread elements. */
static void fill(void *h, zc_dtype dt, size_t n, uint64_t *s)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t z = *s;
        z ^= z << 13, z ^= z >> 7, z ^= z << 17;
        *s = z;
        uint32_t bits = (uint32_t)(z & 0x807fffffu) | (uint32_t)(107 + (z >> 32) % 33) << 23;
        zc__store_f32(h, dt, i, zc__bits_f32(bits));
    }
}

/* One size and dtype; 0, or -1 after saying why. */
static int bench_one(zc_device *d, const char *devname, size_t n, zc_dtype dt, int warmup,
                     int reps)
{
    const size_t esz = zc_dtype_size(dt), bytes = n * esz, ng = zc__sumsq_scratch_elems(n);
    void *x = NULL, *twin = NULL, *scratch = NULL, *dout = NULL;
    void *h = malloc(bytes);
    int rc = h ? 0 : -1;
    if (rc)
        fprintf(stderr, "bench_gpu_norm: cannot allocate %zu host bytes\n", bytes);
    void **bufs[4] = {&x, &twin, &scratch, &dout};
    size_t sz[4] = {bytes, bytes, ng * sizeof(double), sizeof(double)};
    for (int k = 0; k < 4 && !rc; k++)
        if (d->ops->alloc(d, NULL, ZC_MEM_BUFFERS, sz[k], "bench", bufs[k]) != ZC_OK) {
            fprintf(stderr, "bench_gpu_norm: %s\n", zc_last_error());
            rc = -1;
        }
    uint64_t seed = 0x9e3779b97f4a7c15ull ^ n;
    for (size_t i = 0; i < n && !rc; i += FILL_CHUNK) {
        size_t m = n - i < FILL_CHUNK ? n - i : FILL_CHUNK;
        void *at = (unsigned char *)h + i * esz;
        fill(at, dt, m, &seed);
        if (d->ops->copy(d, (unsigned char *)x + i * esz, at, m * esz, ZC_COPY_H2D, NULL) != ZC_OK) {
            fprintf(stderr, "bench_gpu_norm: %s\n", zc_last_error());
            rc = -1;
        }
    }
    norm_arg na = {d, x, dt, n, scratch, dout};
    double want = -1, got = -2;
    if (!rc) {
        zc_device *host = zc__device_host();
        if (run_norm(&na) || d->ops->copy(d, &got, dout, sizeof got, ZC_COPY_D2H, NULL) != ZC_OK ||
            d->ops->stream_sync(d, NULL) != ZC_OK ||
            host->ops->sumsq(host, h, dt, n, &want, NULL) != ZC_OK) {
            fprintf(stderr, "bench_gpu_norm: the check run failed: %s\n", zc_last_error());
            rc = -1;
        }
    }
    copy_arg cp = {twin, x, bytes};
    float ms = 0, ms_copy = 0;
    if (!rc && (time_median(run_norm, &na, warmup, reps, &ms) ||
                time_median(run_copy, &cp, warmup, reps, &ms_copy))) {
        fprintf(stderr, "bench_gpu_norm: timing failed: %s\n",
                cudaGetErrorString(cudaGetLastError()));
        rc = -1;
    }
    if (!rc && (!(ms > 0) || !(ms_copy > 0))) {
        /* A zero event time would print inf, which is not JSON. */
        fprintf(stderr, "bench_gpu_norm: %zu elements: an event time of 0 ms (norm %.4f, "
                "copy %.4f); use larger --sizes\n", n, ms, ms_copy);
        rc = -1;
    }
    if (!rc) {
        double gbps = (double)bytes / (ms * 1e-3) / 1e9;
        double cgbps = (double)bytes / (ms_copy * 1e-3) / 1e9;
        printf("{\"bench\":\"gpu_norm\",\"device\":\"%s\",\"elements\":%zu,\"dtype\":\"%s\","
               "\"ms\":%.4f,\"read_gbps\":%.1f,\"copy_ms\":%.4f,\"copy_read_gbps\":%.1f,"
               "\"fraction_of_copy_read\":%.3f,\"bitwise_host\":%s}\n",
               devname, n, zc_dtype_name(dt), ms, gbps, ms_copy, cgbps, gbps / cgbps,
               memcmp(&want, &got, sizeof want) == 0 ? "true" : "false");
        fflush(stdout);
        if (memcmp(&want, &got, sizeof want) != 0) {
            fprintf(stderr, "bench_gpu_norm: %s n=%zu: device %a, host %a\n", zc_dtype_name(dt),
                    n, got, want);
            rc = -1;
        }
    }
    for (int k = 0; k < 4; k++)
        if (*bufs[k])
            d->ops->free(d, NULL, ZC_MEM_BUFFERS, *bufs[k], sz[k]);
    free(h);
    return rc;
}

int main(int argc, char **argv)
{
    const char *sizes = "16M,128M,512M", *dts = "bf16,fp32,fp16";
    int reps = 20, warmup = 3, dev_index = 0;
    char err[ZC_ARG_ERRLEN];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        bool ok = true;
        if (!v) {
            fprintf(stderr, "bench_gpu_norm: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (!strcmp(a, "--sizes"))
            sizes = v;
        else if (!strcmp(a, "--dtype"))
            dts = v;
        else if (!strcmp(a, "--reps"))
            ok = zc__arg_int(a, v, 1, 10000, &reps, err, sizeof err);
        else if (!strcmp(a, "--warmup"))
            ok = zc__arg_int(a, v, 0, 10000, &warmup, err, sizeof err);
        else if (!strcmp(a, "--gpu"))
            ok = zc__arg_int(a, v, 0, 1023, &dev_index, err, sizeof err);
        else {
            fprintf(stderr, "bench_gpu_norm: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "bench_gpu_norm: %s\n", err);
            return 2;
        }
        i++;
    }
    /* Every list is checked before the device is opened. */
    uint64_t ns[MAX_SIZES];
    int nns = 0;
    if (!zc__arg_u64_list("--sizes", sizes, 1, MAX_ELEMS, ZC_ARG_SUFFIX, ns, MAX_SIZES, &nns, err,
                          sizeof err)) {
        fprintf(stderr, "bench_gpu_norm: %s\n", err);
        return 2;
    }
    zc_dtype dt[8];
    int ndt = 0;
    for (const char *g = dts;;) {
        const char *c = strchr(g, ',');
        size_t len = c ? (size_t)(c - g) : strlen(g);
        if (ndt == 8 || parse_dtype(g, len, &dt[ndt]) != 0) {
            fprintf(stderr, "bench_gpu_norm: --dtype '%.200s': expected a list of at most 8 of "
                    "fp32, bf16, fp16\n", dts);
            return 2;
        }
        ndt++;
        if (!c)
            break;
        g = c + 1;
    }
    zc_device *d = NULL;
    if (zc__device_open(ZC_DEVICE_CUDA, dev_index, &d) != ZC_OK) {
        fprintf(stderr, "bench_gpu_norm: %s\n", zc_last_error());
        return 1;
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, d->index) != cudaSuccess)
        snprintf(prop.name, sizeof prop.name, "cuda:%d", d->index);
    int rc = 0;
    for (int si = 0; si < nns && !rc; si++)
        for (int k = 0; k < ndt && !rc; k++)
            rc = bench_one(d, prop.name, (size_t)ns[si], dt[k], warmup, reps);
    d->ops->destroy(d);
    return rc ? 1 : 0;
}
