/* Host Adam over 16-bit optimizer state (src/optim/adam.h, "Adam over
 * 16-bit state") against its same-pattern streaming ceiling.
 *
 * For each N, each usable variant, each thread count and each state layout
 * - bf16 master and moments (DeepSpeed's bf16_master_weights_and_grads +
 * bf16_optimizer_states), an fp32 master with bf16 moments (torchtitan's
 * bf16 optimizer states), a bf16 master with fp32 moments (DeepSpeed's
 * master-only mode), and all fp32 for reference - with bf16 gradients and a
 * bf16 copy, stochastic rounding on and off, it times zc__adam_lp_host_run
 * and, on the same buffers with the same threads and static split, a
 * streaming loop with exactly the case's reads and writes (each state
 * tensor read and written at its width, the gradient read, the copy
 * written) and trivial arithmetic: the bound no Adam can beat. The two
 * alternate, so noise hits both alike; medians of the repetitions after
 * one warm-up.
 *
 * Bytes counted per parameter: 2 x (master + m + v widths) + 2 (gradient)
 * + 2 (copy): 16 with all three in bf16, 28 with all in fp32.
 *
 * Output: one JSON object per case
 * {"bench":"cpu_adam_lp","variant","threads","n","state","stochastic",
 *  "seconds","params_per_s","bytes_per_s","stream_bytes_per_s",
 *  "ratio_to_stream","bytes_per_param"}
 * and a final {"summary":...} line with the best ratio of each layout at
 * the largest N (the target: >= 0.90). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "base/alloc.h"
#include "base/dtype.h"
#include "cliarg.h"
#include "optim/adam_isa.h"
#include "optim/threadpool.h"

#define MAX_N_LIST 8
#define MAX_REPS 100
#define MAX_N (UINT64_C(1) << 33)

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- the streaming ceiling ------------------------------------------------ */

/* x += g on one state tensor of n elements, at its width. */
static void stream_tensor_generic(void *x, zc_dtype dt, const uint16_t *g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const float gi = zc__bf16_to_f32(g[i]);
        if (dt == ZC_DTYPE_BF16)
            ((uint16_t *)x)[i] = (uint16_t)(zc__f32_bits(zc__bf16_to_f32(((uint16_t *)x)[i]) + gi) >> 16);
        else
            ((float *)x)[i] += gi;
    }
}

#if defined(__x86_64__)
/* The case's reads and writes with AVX2, 8 elements per step: each state
 * tensor loaded, added to, stored at its width; the gradient read once;
 * the copy the master's top half. */
__attribute__((target("avx2"))) static void stream_avx2(const zc_adam_lp_shard *s)
{
    const uint16_t *g = s->grad;
    uint16_t *o = s->param_out;
    void *t[3] = {s->master, s->m, s->v};
    const bool bf[3] = {s->master_dtype == ZC_DTYPE_BF16, s->m_dtype == ZC_DTYPE_BF16,
                        s->v_dtype == ZC_DTYPE_BF16};
    size_t i = 0;
    for (; i + 8 <= s->n; i += 8) {
        const __m256 gv = _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(g + i))), 16));
        __m128i top = _mm_setzero_si128();
        for (int k = 0; k < 3; k++) {
            if (bf[k]) {
                __m128i *q = (__m128i *)((uint16_t *)t[k] + i);
                const __m256 x = _mm256_add_ps(
                    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(q)), 16)),
                    gv);
                const __m256i h = _mm256_srli_epi32(_mm256_castps_si256(x), 16);
                const __m128i p = _mm_packus_epi32(_mm256_castsi256_si128(h),
                                                   _mm256_extracti128_si256(h, 1));
                _mm_storeu_si128(q, p);
                if (k == 0)
                    top = p;
            } else {
                float *q = (float *)t[k] + i;
                const __m256 x = _mm256_add_ps(_mm256_loadu_ps(q), gv);
                _mm256_storeu_ps(q, x);
                if (k == 0) {
                    const __m256i h = _mm256_srli_epi32(_mm256_castps_si256(x), 16);
                    top = _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
                }
            }
        }
        _mm_storeu_si128((__m128i *)(o + i), top);
    }
    const zc_adam_lp_shard rest = zc__adam_lp_slice(s, i, s->n);
    stream_tensor_generic(rest.master, s->master_dtype, rest.grad, rest.n);
    stream_tensor_generic(rest.m, s->m_dtype, rest.grad, rest.n);
    stream_tensor_generic(rest.v, s->v_dtype, rest.grad, rest.n);
}
#endif

static void stream_generic(const zc_adam_lp_shard *s)
{
    stream_tensor_generic(s->master, s->master_dtype, s->grad, s->n);
    stream_tensor_generic(s->m, s->m_dtype, s->grad, s->n);
    stream_tensor_generic(s->v, s->v_dtype, s->grad, s->n);
    for (size_t i = 0; i < s->n; i++)
        ((uint16_t *)s->param_out)[i] = zc__f32_to_bf16(zc__load_f32(s->master, s->master_dtype, i));
}

typedef void (*stream_fn)(const zc_adam_lp_shard *s);

typedef struct job {
    const zc_adam_lp_shard *s;
    stream_fn stream;
    int what; /* 0 stream, 1 init */
} job;

static void job_part(void *arg, int k, int nparts)
{
    const job *j = arg;
    const size_t ntiles = (j->s->n + ZC_ADAM_TILE - 1) / ZC_ADAM_TILE;
    const size_t t0 = ntiles * (size_t)k / (size_t)nparts, t1 = ntiles * (size_t)(k + 1) / (size_t)nparts;
    const size_t lo = t0 * ZC_ADAM_TILE, hi = t1 * ZC_ADAM_TILE < j->s->n ? t1 * ZC_ADAM_TILE : j->s->n;
    if (lo >= hi)
        return;
    const zc_adam_lp_shard part = zc__adam_lp_slice(j->s, lo, hi);
    if (j->what == 0) {
        j->stream(&part);
        return;
    }
    for (size_t i = 0; i < part.n; i++) {
        const size_t e = lo + i;
        const float x = (float)((int)(e % 2001) - 1000) * 1e-5f;
        zc__store_f32(part.master, part.master_dtype, i, x);
        zc__store_f32(part.m, part.m_dtype, i, x * 1e-2f);
        zc__store_f32(part.v, part.v_dtype, i, 1e-6f + x * x);
        ((uint16_t *)part.grad)[i] = zc__f32_to_bf16(x * 1e-3f);
    }
}

typedef struct layout {
    const char *name;
    zc_dtype master, m, v;
} layout;

static const layout LAYOUTS[] = {
    {"bf16_master_bf16_moments", ZC_DTYPE_BF16, ZC_DTYPE_BF16, ZC_DTYPE_BF16},
    {"fp32_master_bf16_moments", ZC_DTYPE_F32, ZC_DTYPE_BF16, ZC_DTYPE_BF16},
    {"bf16_master_fp32_moments", ZC_DTYPE_BF16, ZC_DTYPE_F32, ZC_DTYPE_F32},
    {"fp32", ZC_DTYPE_F32, ZC_DTYPE_F32, ZC_DTYPE_F32},
};
#define NLAYOUTS ((int)(sizeof LAYOUTS / sizeof LAYOUTS[0]))

static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s [--n LIST] [--variant NAME] [--threads LIST] [--reps R]\n"
            "  --n LIST        parameter counts, comma separated, K/M/G suffixes,\n"
            "                  each 1..2^33 (default 16M,64M)\n"
            "  --variant NAME  only this variant (scalar, avx2, avx512, avx512bf16)\n"
            "  --threads LIST  thread counts, each 1..%d (default 1..physical cores)\n"
            "  --reps R        timed repetitions per case, 1..%d (default 5)\n"
            "Prints one JSON object per case and a summary line.\n",
            prog, ZC_POOL_MAX_THREADS, MAX_REPS);
}

int main(int argc, char **argv)
{
    const char *prog = argc > 0 ? argv[0] : "bench_cpu_adam_lp";
    size_t ns[MAX_N_LIST] = {16u << 20, 64u << 20};
    int nn = 2, reps = 5, nthr = 0, threads[64];
    const char *only = NULL;
    char err[ZC_ARG_ERRLEN];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout, prog);
            return 0;
        } else if (!strcmp(a, "--n") && val) {
            uint64_t v[MAX_N_LIST];
            int k;
            if (!zc__arg_u64_list("--n", val, 1, MAX_N, ZC_ARG_SUFFIX, v, MAX_N_LIST, &k, err,
                                  sizeof err)) {
                fprintf(stderr, "%s: %s\n", prog, err);
                return 2;
            }
            for (int q = 0; q < k; q++)
                ns[q] = (size_t)v[q];
            nn = k;
            i++;
        } else if (!strcmp(a, "--variant") && val) {
            only = val;
            i++;
        } else if (!strcmp(a, "--threads") && val) {
            uint64_t v[64];
            int k;
            if (!zc__arg_u64_list("--threads", val, 1, ZC_POOL_MAX_THREADS, 0, v, 64, &k, err,
                                  sizeof err)) {
                fprintf(stderr, "%s: %s\n", prog, err);
                return 2;
            }
            for (int q = 0; q < k; q++)
                threads[q] = (int)v[q];
            nthr = k;
            i++;
        } else if (!strcmp(a, "--reps") && val) {
            if (!zc__arg_int("--reps", val, 1, MAX_REPS, &reps, err, sizeof err)) {
                fprintf(stderr, "%s: %s\n", prog, err);
                return 2;
            }
            i++;
        } else {
            fprintf(stderr, "%s: unknown or incomplete option '%s'\n", prog, a);
            usage(stderr, prog);
            return 2;
        }
    }
    const int cores = zc__pool_physical_cores();
    if (!nthr)
        for (int t = 1; t <= cores && t <= 64; t++)
            threads[nthr++] = t;
    int variants[8], nv = 0;
    for (int i = 0; i < zc__adam_variant_count(); i++) {
        const char *why;
        const bool usable = zc__adam_variant_usable(i, &why);
        if (only && strcmp(only, zc__adam_variant(i)->name))
            continue;
        if (!usable) {
            if (only) {
                fprintf(stderr, "%s: variant %s: %s\n", prog, only, why);
                return 1;
            }
            continue;
        }
        variants[nv++] = i;
    }
    if (!nv) {
        fprintf(stderr, "%s: no variant named '%s'\n", prog, only ? only : "?");
        return 2;
    }
    size_t nmax = 0;
    for (int i = 0; i < nn; i++)
        nmax = ns[i] > nmax ? ns[i] : nmax;
    /* master, m, v at fp32 width, gradient and copy: 16 bytes a parameter. */
    uint64_t total, avail;
    if (!zc__mul_u64(nmax, 16, &total) ||
        (zc__mem_available(&avail) && total > avail - avail / 8)) {
        fprintf(stderr, "%s: --n %zu needs %.2f GiB of buffers (16 bytes per parameter), more "
                "than 7/8 of the memory available\n", prog, nmax, (double)total / 1073741824.0);
        return 1;
    }
    void *bufs[5] = {NULL};
    const size_t bytes[5] = {nmax * 4, nmax * 4, nmax * 4, nmax * 2, nmax * 2};
    int rc = 0;
    for (int i = 0; i < 5; i++)
        if (zc__host_alloc(NULL, ZC_MEM_OTHER, bytes[i], "cpu_adam_lp buffer", &bufs[i]) != ZC_OK) {
            fprintf(stderr, "%s: %s\n", prog, zc_last_error());
            rc = 1;
            goto out;
        }
    stream_fn stream = stream_generic;
    const char *stream_name = "generic";
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) {
        stream = stream_avx2;
        stream_name = "avx2";
    }
#endif
    fprintf(stderr, "%s: cores %d, ceiling loop %s\n", prog, cores, stream_name);
    const zc_adam_hparams hp = {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                .weight_decay = 0.01, .adamw = true, .bias_correction = true};
    double best[NLAYOUTS] = {0};
    char best_desc[NLAYOUTS][160] = {{0}};
    int64_t step = 1;
    for (int ni = 0; ni < nn; ni++)
        for (int ti = 0; ti < nthr; ti++)
            for (int vi = 0; vi < nv; vi++)
                for (int li = 0; li < NLAYOUTS; li++)
                    for (int sr = 1; sr >= 0; sr--) {
                        const size_t n = ns[ni];
                        const int t = threads[ti];
                        const layout *L = &LAYOUTS[li];
                        zc_adam_lp_shard s = {.master = bufs[0], .m = bufs[1], .v = bufs[2],
                                              .master_dtype = L->master, .m_dtype = L->m,
                                              .v_dtype = L->v, .grad = bufs[3],
                                              .grad_dtype = ZC_DTYPE_BF16, .grad_scale = 1.0f,
                                              .param_out = bufs[4],
                                              .param_out_dtype = ZC_DTYPE_BF16, .n = n,
                                              .seed = 1, .stochastic = sr};
                        job init = {.s = &s, .what = 1}, sj = {.s = &s, .stream = stream};
                        zc__pool_run(t, job_part, &init, bufs[0]);
                        const double bpp = 2.0 * (double)(zc_dtype_size(L->master) +
                                                          zc_dtype_size(L->m) +
                                                          zc_dtype_size(L->v)) + 4.0;
                        double ta[MAX_REPS], ts[MAX_REPS];
                        for (int r = -1; r < reps; r++) {
                            s.step = step;
                            const zc_adam_coeffs c = zc__adam_coeffs(&hp, step++);
                            const double t0 = now_s();
                            const zc_status st = zc__adam_lp_host_run(&s, &c, variants[vi], t);
                            const double t1 = now_s();
                            if (st != ZC_OK) {
                                fprintf(stderr, "%s: %s\n", prog, zc_last_error());
                                rc = 1;
                                goto out;
                            }
                            zc__pool_run(t, job_part, &sj, bufs[0]);
                            const double t2 = now_s();
                            if (r >= 0) {
                                ta[r] = t1 - t0;
                                ts[r] = t2 - t1;
                            }
                        }
                        const double sec = median(ta, reps), ssec = median(ts, reps);
                        const double ratio = ssec / sec;
                        const char *vname = zc__adam_variant(variants[vi])->name;
                        printf("{\"bench\":\"cpu_adam_lp\",\"variant\":\"%s\",\"threads\":%d,"
                               "\"n\":%zu,\"state\":\"%s\",\"stochastic\":%s,\"seconds\":%.6f,"
                               "\"params_per_s\":%.4e,\"bytes_per_s\":%.4e,"
                               "\"stream_bytes_per_s\":%.4e,\"ratio_to_stream\":%.3f,"
                               "\"bytes_per_param\":%.0f}\n",
                               vname, t, n, L->name, sr ? "true" : "false", sec,
                               (double)n / sec, bpp * (double)n / sec, bpp * (double)n / ssec,
                               ratio, bpp);
                        fflush(stdout);
                        if (n == nmax && sr && ratio > best[li]) {
                            best[li] = ratio;
                            snprintf(best_desc[li], sizeof best_desc[li],
                                     "{\"variant\":\"%s\",\"threads\":%d,\"ratio_to_stream\":%.3f,"
                                     "\"params_per_s\":%.4e}", vname, t, ratio, (double)n / sec);
                        }
                    }
    printf("{\"summary\":\"cpu_adam_lp\",\"n\":%zu,\"stochastic\":true,"
           "\"target_ratio_ge_0.90\":{", nmax);
    for (int li = 0; li < NLAYOUTS; li++)
        printf("%s\"%s\":%s", li ? "," : "", LAYOUTS[li].name,
               best_desc[li][0] ? best_desc[li] : "null");
    printf("}}\n");
out:
    for (int i = 0; i < 5; i++)
        if (bufs[i])
            zc__host_free(NULL, ZC_MEM_OTHER, bufs[i], bytes[i]);
    zc__pool_shutdown();
    return rc;
}
