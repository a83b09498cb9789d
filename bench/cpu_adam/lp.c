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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "bench/cpu_adam/bench_opts.h"
#include "base/alloc.h"
#include "base/dtype.h"
#include "optim/adam_isa.h"
#include "optim/threadpool.h"

#define MAX_REPS 100
#define MAX_N (UINT64_C(1) << 33)

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

/* One case: the shard, its kernel's arguments and its ceiling loop, run on
 * the same static split as zc__adam_lp_host_run. */
typedef struct lp_case {
    zc_adam_lp_shard *s;
    const zc_adam_hparams *hp;
    int64_t *step;
    int variant, threads;
    stream_fn stream;
    const char *prog;
} lp_case;

static void stream_range(void *arg, size_t lo, size_t hi)
{
    const lp_case *k = arg;
    const zc_adam_lp_shard part = zc__adam_lp_slice(k->s, lo, hi);
    k->stream(&part);
}

static void init_range(void *arg, size_t lo, size_t hi)
{
    const lp_case *k = arg;
    const zc_adam_lp_shard part = zc__adam_lp_slice(k->s, lo, hi);
    for (size_t i = 0; i < part.n; i++) {
        const size_t e = lo + i;
        const float x = (float)((int)(e % 2001) - 1000) * 1e-5f;
        zc__store_f32(part.master, part.master_dtype, i, x);
        zc__store_f32(part.m, part.m_dtype, i, x * 1e-2f);
        zc__store_f32(part.v, part.v_dtype, i, 1e-6f + x * x);
        ((uint16_t *)part.grad)[i] = zc__f32_to_bf16(x * 1e-3f);
    }
}

static bool lp_kernel(void *arg)
{
    const lp_case *k = arg;
    k->s->step = *k->step;
    const zc_adam_coeffs c = zc__adam_coeffs(k->hp, (*k->step)++);
    if (zc__adam_lp_host_run(k->s, &c, k->variant, k->threads) != ZC_OK) {
        fprintf(stderr, "%s: %s\n", k->prog, zc_last_error());
        return false;
    }
    return true;
}

static void lp_ceiling(void *arg, int q)
{
    (void)q;
    lp_case *k = arg;
    zc__bench_split(k->threads, k->s->n, stream_range, k, k->s->master);
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

static void usage(FILE *f, const char *prog, const zc_bench_opts *o)
{
    fprintf(f, "usage: %s [--n LIST] [--variant NAME] [--threads LIST] [--reps R]\n", prog);
    zc__bench_opts_usage(f, o, "16M,64M", "5");
    fprintf(f, "Prints one JSON object per case and a summary line.\n");
}

int main(int argc, char **argv)
{
    const char *prog = argc > 0 ? argv[0] : "bench_cpu_adam_lp";
    zc_bench_opts o = {.ns = {16u << 20, 64u << 20}, .nn = 2, .reps = 5, .max_n = MAX_N,
                       .max_reps = MAX_REPS};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int got = zc__bench_opt(&o, argc, argv, &i, prog);
        if (got < 0)
            return 2;
        if (got)
            continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout, prog, &o);
            return 0;
        }
        fprintf(stderr, "%s: unknown or incomplete option '%s'\n", prog, a);
        usage(stderr, prog, &o);
        return 2;
    }
    int rc = zc__bench_resolve(&o, prog);
    if (rc)
        return rc;
    const size_t nmax = zc__bench_nmax(&o);
    /* master, m, v at fp32 width, gradient and copy: 16 bytes a parameter. */
    rc = zc__bench_check_memory(prog, nmax, 16);
    if (rc)
        return rc;
    void *bufs[5] = {NULL};
    const size_t bytes[5] = {nmax * 4, nmax * 4, nmax * 4, nmax * 2, nmax * 2};
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
    fprintf(stderr, "%s: cores %d, ceiling loop %s\n", prog, o.cores, stream_name);
    const zc_adam_hparams hp = {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                .weight_decay = 0.01, .adamw = true, .bias_correction = true};
    double best[NLAYOUTS] = {0};
    char best_desc[NLAYOUTS][160] = {{0}};
    int64_t step = 1;
    for (int ni = 0; ni < o.nn; ni++)
        for (int ti = 0; ti < o.nthr; ti++)
            for (int vi = 0; vi < o.nv; vi++)
                for (int li = 0; li < NLAYOUTS; li++)
                    for (int sr = 1; sr >= 0; sr--) {
                        const size_t n = o.ns[ni];
                        const int t = o.threads[ti];
                        const layout *L = &LAYOUTS[li];
                        zc_adam_lp_shard s = {.master = bufs[0], .m = bufs[1], .v = bufs[2],
                                              .master_dtype = L->master, .m_dtype = L->m,
                                              .v_dtype = L->v, .grad = bufs[3],
                                              .grad_dtype = ZC_DTYPE_BF16, .grad_scale = 1.0f,
                                              .param_out = bufs[4],
                                              .param_out_dtype = ZC_DTYPE_BF16, .n = n,
                                              .seed = 1, .stochastic = sr};
                        lp_case k = {.s = &s, .hp = &hp, .step = &step,
                                     .variant = o.variants[vi], .threads = t, .stream = stream,
                                     .prog = prog};
                        zc__bench_split(t, n, init_range, &k, bufs[0]);
                        const double bpp = 2.0 * (double)(zc_dtype_size(L->master) +
                                                          zc_dtype_size(L->m) +
                                                          zc_dtype_size(L->v)) + 4.0;
                        const zc_bench_pair pair = {lp_kernel, lp_ceiling, 1, &k};
                        double sec, ssec;
                        if (!zc__bench_measure(&pair, o.reps, &sec, &ssec)) {
                            rc = 1;
                            goto out;
                        }
                        const double ratio = ssec / sec;
                        const char *vname = zc__adam_variant(o.variants[vi])->name;
                        printf("{\"bench\":\"cpu_adam_lp\",\"variant\":\"%s\",\"threads\":%d,"
                               "\"n\":%zu,\"state\":\"%s\",\"stochastic\":%s,\"seconds\":%s,"
                               "\"params_per_s\":%s,\"bytes_per_s\":%s,"
                               "\"stream_bytes_per_s\":%s,\"ratio_to_stream\":%s,"
                               "\"bytes_per_param\":%.0f}\n",
                               vname, t, n, L->name, sr ? "true" : "false",
                               zc__bench_jnum("%.6f", sec).s,
                               zc__bench_jnum("%.4e", (double)n / sec).s,
                               zc__bench_jnum("%.4e", bpp * (double)n / sec).s,
                               zc__bench_jnum("%.4e", bpp * (double)n / ssec).s,
                               zc__bench_jnum("%.3f", ratio).s, bpp);
                        fflush(stdout);
                        if (n == nmax && sr && ratio > best[li]) {
                            best[li] = ratio;
                            snprintf(best_desc[li], sizeof best_desc[li],
                                     "{\"variant\":\"%s\",\"threads\":%d,\"ratio_to_stream\":%s,"
                                     "\"params_per_s\":%s}", vname, t,
                                     zc__bench_jnum("%.3f", ratio).s,
                                     zc__bench_jnum("%.4e", (double)n / sec).s);
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
