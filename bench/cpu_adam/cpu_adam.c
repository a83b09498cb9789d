/* Host Adam throughput against the same-pattern streaming ceiling.
 *
 * For each N, each usable variant, each thread count 1..cores and each case
 * (gradient fp32/bf16/fp16 x 16-bit copy off/on; the copy is bf16 for fp32 and
 * bf16 gradients, fp16 for fp16 gradients), it times zc__adam_host_run and, on
 * the same buffers with the same threads and the same static split, a
 * streaming loop with exactly the case's reads and writes and trivial
 * arithmetic (the bound no Adam can beat: the fastest of that loop with no
 * software prefetch and with 512 and 1024 bytes ahead), alternating the two
 * so machine noise hits both alike; plus a STREAM triad for reference. One warm-up, then
 * the median of the repetitions.
 *
 * Bytes counted per parameter (what the loop reads and writes, no
 * read-for-ownership): read master, m, v (12) + gradient (4 fp32, 2 bf16/fp16)
 * + write master, m, v (12) + copy (2 if on): 28/30 with fp32 gradients,
 * 26/28 with 16-bit ones. Triad: 12 bytes per element (STREAM's count).
 *
 * Output: one JSON object per case
 * {"variant","threads","n","grad_dtype","param_copy","seconds","params_per_s",
 *  "bytes_per_s","stream_bytes_per_s","ratio_to_stream","triad_bytes_per_s"}
 * and a final {"summary":...} line naming the best case and the issue's
 * targets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "bench/cpu_adam/bench_opts.h"
#include "bench/cpu_adam/cpu_adam.h"
#include "base/alloc.h"
#include "base/dtype.h"
#include "optim/adam_isa.h"
#include "optim/threadpool.h"

/* Largest --n: the seven buffers take 22 bytes per parameter, so 2^34 is
 * 352 GiB, more than any host this runs on; larger is refused as a typo
 * rather than handed to the allocator. */
#define MAX_N (UINT64_C(1) << 34)
#define MAX_REPS 200
#define NPF 3 /* prefetch distances tried for the ceiling */

/* ---- the streaming ceiling ------------------------------------------------ */

/* p, m, v += g; copy = the top half (bf16) or F16C rounding (fp16) of p. */
static void stream_generic(const zc_adam_shard *s, size_t pf)
{
    (void)pf;
    float *p = s->master, *m = s->m, *v = s->v;
    for (size_t i = 0; i < s->n; i++) {
        float g = zc__load_f32(s->grad, s->grad_dtype, i);
        float x = p[i] + g;
        p[i] = x;
        m[i] += g;
        v[i] += g;
        if (s->param_out)
            ((uint16_t *)s->param_out)[i] = (uint16_t)(zc__f32_bits(x) >> 16);
    }
}

#if defined(__x86_64__)
/* The same loads, stores and 16-bit conversions as the AVX2 Adam body, 16
 * elements per iteration, with a software prefetch `pf` bytes ahead of each
 * stream (0: none); the bench takes the fastest of several distances, so the
 * ceiling is at least as well prefetched as the Adam loop. */
__attribute__((target("avx2,fma,f16c"))) static void stream_avx2(const zc_adam_shard *s,
                                                                 size_t pf)
{
    float *p = s->master, *m = s->m, *v = s->v;
    const void *gp = s->grad;
    uint16_t *o = s->param_out;
    size_t n = s->n, i = 0, gsz = zc_dtype_size(s->grad_dtype);
    pf /= sizeof(float);
    for (; i + 16 <= n; i += 16) {
        if (pf) {
            _mm_prefetch((const char *)(p + i + pf), _MM_HINT_T0);
            _mm_prefetch((const char *)(m + i + pf), _MM_HINT_T0);
            _mm_prefetch((const char *)(v + i + pf), _MM_HINT_T0);
            _mm_prefetch((const char *)gp + (i + pf) * gsz, _MM_HINT_T0);
        }
        __m256 x[2];
        for (int h = 0; h < 2; h++) {
            size_t j = i + 8 * (size_t)h;
            __m256 g;
            if (s->grad_dtype == ZC_DTYPE_F32)
                g = _mm256_loadu_ps((const float *)gp + j);
            else if (s->grad_dtype == ZC_DTYPE_F16)
                g = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)gp + j)));
            else
                g = _mm256_castsi256_ps(_mm256_slli_epi32(
                    _mm256_cvtepu16_epi32(
                        _mm_loadu_si128((const __m128i *)((const uint16_t *)gp + j))),
                    16));
            x[h] = _mm256_add_ps(_mm256_loadu_ps(p + j), g);
            _mm256_storeu_ps(p + j, x[h]);
            _mm256_storeu_ps(m + j, _mm256_add_ps(_mm256_loadu_ps(m + j), g));
            _mm256_storeu_ps(v + j, _mm256_add_ps(_mm256_loadu_ps(v + j), g));
        }
        if (o && s->param_out_dtype == ZC_DTYPE_F16) {
            _mm_storeu_si128((__m128i *)(o + i), _mm256_cvtps_ph(x[0], _MM_FROUND_TO_NEAREST_INT));
            _mm_storeu_si128((__m128i *)(o + i + 8),
                             _mm256_cvtps_ph(x[1], _MM_FROUND_TO_NEAREST_INT));
        } else if (o) {
            __m256i b = _mm256_packus_epi32(_mm256_srli_epi32(_mm256_castps_si256(x[0]), 16),
                                            _mm256_srli_epi32(_mm256_castps_si256(x[1]), 16));
            _mm256_storeu_si256((__m256i *)(o + i), _mm256_permute4x64_epi64(b, 0xd8));
        }
    }
    zc_adam_shard rest = zc__adam_shard_slice(s, i, n);
    stream_generic(&rest, 0);
}
#endif

/* STREAM triad a = b + s*c (s = 0.5), vectorised when the CPU has AVX2 so the
 * reference is not limited by the compiler's choice of vector width. */
static void triad_generic(float *restrict a, const float *restrict b, const float *restrict c,
                          size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] = b[i] + 0.5f * c[i];
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void triad_avx2(float *restrict a,
                                                           const float *restrict b,
                                                           const float *restrict c, size_t n)
{
    size_t i = 0;
    __m256 h = _mm256_set1_ps(0.5f);
    for (; i + 16 <= n; i += 16) {
        _mm256_storeu_ps(a + i, _mm256_add_ps(_mm256_loadu_ps(b + i),
                                              _mm256_mul_ps(h, _mm256_loadu_ps(c + i))));
        _mm256_storeu_ps(a + i + 8, _mm256_add_ps(_mm256_loadu_ps(b + i + 8),
                                                  _mm256_mul_ps(h, _mm256_loadu_ps(c + i + 8))));
    }
    triad_generic(a + i, b + i, c + i, n - i);
}
#endif

static void triad(float *a, const float *b, const float *c, size_t n)
{
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) {
        triad_avx2(a, b, c, n);
        return;
    }
#endif
    triad_generic(a, b, c, n);
}

typedef void (*stream_fn)(const zc_adam_shard *s, size_t prefetch_bytes);

static stream_fn pick_stream(const char **name)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) {
        *name = "avx2";
        return stream_avx2;
    }
#endif
    *name = "generic";
    return stream_generic;
}

/* ---- work on the pool (the same static split as zc__adam_host_run) ------ */

typedef struct stream_job {
    const zc_adam_shard *s;
    stream_fn stream;
    size_t pf;
} stream_job;

static void stream_range(void *arg, size_t lo, size_t hi)
{
    const stream_job *j = arg;
    zc_adam_shard part = zc__adam_shard_slice(j->s, lo, hi);
    j->stream(&part, j->pf);
}

typedef struct triad_job {
    float *a, *b, *c;
} triad_job;

static void triad_range(void *arg, size_t lo, size_t hi)
{
    const triad_job *j = arg;
    triad(j->a + lo, j->b + lo, j->c + lo, hi - lo);
}

typedef struct init_job {
    float *master, *m, *v, *g32;
    uint16_t *gbf, *gf16;
} init_job;

static void init_range(void *arg, size_t lo, size_t hi)
{
    const init_job *j = arg;
    for (size_t i = lo; i < hi; i++) {
        float x = (float)((int)(i % 2001) - 1000) * 1e-5f;
        j->master[i] = x;
        j->m[i] = x * 1e-2f;
        j->v[i] = 1e-6f + x * x;
        j->g32[i] = x * 1e-3f;
        j->gbf[i] = zc__f32_to_bf16(x * 1e-3f);
        j->gf16[i] = zc__f32_to_f16(x * 1e-3f);
    }
}

/* One case's kernel and ceiling loops for zc__bench_measure. */
typedef struct adam_case {
    const zc_adam_shard *s;
    const zc_adam_hparams *hp;
    int64_t *step;
    int variant, threads;
    stream_fn stream;
    const char *prog;
} adam_case;

static bool adam_kernel(void *arg)
{
    const adam_case *k = arg;
    zc_adam_coeffs c = zc__adam_coeffs(k->hp, (*k->step)++);
    if (zc__adam_host_run(k->s, &c, k->variant, k->threads) != ZC_OK) {
        fprintf(stderr, "%s: %s\n", k->prog, zc_last_error());
        return false;
    }
    return true;
}

/* The ceiling is the fastest of the streaming loop with each prefetch
 * distance. */
static void adam_ceiling(void *arg, int q)
{
    static const size_t pfs[NPF] = {0, 512, 1024};
    const adam_case *k = arg;
    stream_job sj = {.s = k->s, .stream = k->stream, .pf = pfs[q]};
    zc__bench_split(k->threads, k->s->n, stream_range, &sj, k->s->master);
}

/* ---- options -------------------------------------------------------------- */

static void usage(FILE *f, const char *prog, const zc_bench_opts *o)
{
    fprintf(f, "usage: %s [--n LIST] [--quick] [--variant NAME] [--threads LIST] [--reps R]\n",
            prog);
    zc__bench_opts_usage(f, o, "1M,16M,64M,256M", "5, more for small N");
    fprintf(f, "  --quick         1M,16M and 3 repetitions\n"
               "Prints one JSON object per case and a summary line.\n");
}

typedef struct best_t {
    double pps, ratio;
    char desc[200];
} best_t;

int zc__bench_cpu_adam(int argc, char **argv)
{
    const char *prog = argc > 0 ? argv[0] : "bench_cpu_adam";
    zc_bench_opts o = {.ns = {1u << 20, 16u << 20, 64u << 20, 256u << 20}, .nn = 4,
                       .max_n = MAX_N, .max_reps = MAX_REPS};
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
        } else if (!strcmp(a, "--quick")) {
            o.ns[0] = 1u << 20, o.ns[1] = 16u << 20, o.nn = 2;
            if (!o.reps)
                o.reps = 3;
        } else {
            fprintf(stderr, "%s: unknown or incomplete option '%s'\n", prog, a);
            usage(stderr, prog, &o);
            return 2;
        }
    }
    int rc = zc__bench_resolve(&o, prog);
    if (rc)
        return rc;
    const size_t nmax = zc__bench_nmax(&o);
    /* Four fp32 and three 16-bit buffers of the largest N, all written. */
    rc = zc__bench_check_memory(prog, nmax, 22);
    if (rc)
        return rc;
    const size_t b4 = nmax * 4, b2 = nmax * 2; /* fit: zc__bench_check_memory */

    const char *stream_name;
    stream_fn stream = pick_stream(&stream_name);
    /* Buffers for the largest N; smaller N use prefixes. */
    typedef struct buf_t {
        void **p;
        size_t bytes;
        const char *what;
    } buf_t;
    buf_t bufs[7];
    float *master = NULL, *m = NULL, *v = NULL, *g32 = NULL;
    uint16_t *gbf = NULL, *gf16 = NULL, *copy = NULL;
    bufs[0] = (buf_t){(void **)&master, b4, "master"};
    bufs[1] = (buf_t){(void **)&m, b4, "m"};
    bufs[2] = (buf_t){(void **)&v, b4, "v"};
    bufs[3] = (buf_t){(void **)&g32, b4, "fp32 gradients"};
    bufs[4] = (buf_t){(void **)&gbf, b2, "bf16 gradients"};
    bufs[5] = (buf_t){(void **)&gf16, b2, "fp16 gradients"};
    bufs[6] = (buf_t){(void **)&copy, b2, "16-bit copy"};
    for (int i = 0; i < 7; i++)
        if (zc__host_alloc(NULL, ZC_MEM_OTHER, bufs[i].bytes, bufs[i].what, bufs[i].p) != ZC_OK) {
            fprintf(stderr, "%s: %s\n", prog, zc_last_error());
            rc = 1;
            goto out;
        }
    init_job init = {.master = master, .m = m, .v = v, .g32 = g32, .gbf = gbf, .gf16 = gf16};
    zc__bench_split(o.threads[o.nthr - 1], nmax, init_range, &init, master);
    fprintf(stderr, "%s: cores %d, ceiling loop %s, variants:", prog, o.cores, stream_name);
    for (int i = 0; i < o.nv; i++)
        fprintf(stderr, " %s", zc__adam_variant(o.variants[i])->name);
    fprintf(stderr, "\n");

    zc_adam_hparams hp = {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                          .weight_decay = 0.01, .adamw = true, .bias_correction = true};
    int64_t step = 1;
    best_t best = {0}, best_copy[3] = {{0}}, fp32_2t = {0};
    static const zc_dtype gdts[3] = {ZC_DTYPE_F32, ZC_DTYPE_BF16, ZC_DTYPE_F16};
    void *gbuf[3] = {g32, gbf, gf16};
    for (int ni = 0; ni < o.nn; ni++) {
        size_t n = o.ns[ni];
        double bytes_target = 2e9; /* about a second of work per case at 40 GB/s... */
        int reps = o.reps ? o.reps : (int)(bytes_target / ((double)n * 28.0));
        if (reps < 5)
            reps = o.reps ? o.reps : 5;
        if (reps > MAX_REPS)
            reps = MAX_REPS;
        for (int ti = 0; ti < o.nthr; ti++) {
            int t = o.threads[ti];
            /* STREAM triad on master = m + 0.5 v: same threads and split. */
            double tt[MAX_REPS];
            triad_job tj = {.a = master, .b = m, .c = v};
            zc__bench_split(t, n, triad_range, &tj, master);
            for (int r = 0; r < reps; r++) {
                double t0 = zc__bench_now();
                zc__bench_split(t, n, triad_range, &tj, master);
                tt[r] = zc__bench_now() - t0;
            }
            double triad_bps = 12.0 * (double)n / zc__bench_median(tt, reps);
            /* Re-seed master after the triad overwrote it. */
            zc__bench_split(t, n, init_range, &init, master);

            for (int vi = 0; vi < o.nv; vi++)
                for (int gi = 0; gi < 3; gi++)
                    for (int cp = 0; cp < 2; cp++) {
                        zc_dtype odt = gdts[gi] == ZC_DTYPE_F16 ? ZC_DTYPE_F16 : ZC_DTYPE_BF16;
                        zc_adam_shard s = {.master = master, .m = m, .v = v, .grad = gbuf[gi],
                                           .grad_dtype = gdts[gi], .grad_scale = 1.0f,
                                           .param_out = cp ? copy : NULL,
                                           .param_out_dtype = odt, .n = n};
                        double bytes = (double)n * (24.0 + (double)zc_dtype_size(gdts[gi]) +
                                                    (cp ? 2.0 : 0.0));
                        adam_case k = {.s = &s, .hp = &hp, .step = &step,
                                       .variant = o.variants[vi], .threads = t,
                                       .stream = stream, .prog = prog};
                        const zc_bench_pair pair = {adam_kernel, adam_ceiling, NPF, &k};
                        double sec, ssec;
                        if (!zc__bench_measure(&pair, reps, &sec, &ssec)) {
                            rc = 1;
                            goto out;
                        }
                        /* The streaming loop added g to m and v: put v back
                         * in range so later Adam steps see normal values. */
                        zc__bench_split(t, n, init_range, &init, master);
                        double pps = (double)n / sec, bps = bytes / sec, sbps = bytes / ssec;
                        const char *vname = zc__adam_variant(o.variants[vi])->name;
                        const char *copyname = cp ? zc_dtype_name(odt) : "none";
                        printf("{\"variant\":\"%s\",\"threads\":%d,\"n\":%zu,\"grad_dtype\":\"%s\","
                               "\"param_copy\":\"%s\",\"seconds\":%s,\"params_per_s\":%s,"
                               "\"bytes_per_s\":%s,\"stream_bytes_per_s\":%s,"
                               "\"ratio_to_stream\":%s,\"triad_bytes_per_s\":%s,"
                               "\"bytes_per_param\":%s}\n",
                               vname, t, n, zc_dtype_name(gdts[gi]), copyname,
                               zc__bench_jnum("%.6f", sec).s, zc__bench_jnum("%.4e", pps).s,
                               zc__bench_jnum("%.4e", bps).s, zc__bench_jnum("%.4e", sbps).s,
                               zc__bench_jnum("%.3f", bps / sbps).s,
                               zc__bench_jnum("%.4e", triad_bps).s,
                               zc__bench_jnum("%.0f", bytes / (double)n).s);
                        fflush(stdout);
                        char desc[200];
                        snprintf(desc, sizeof desc,
                                 "{\"variant\":\"%s\",\"threads\":%d,\"n\":%zu,\"grad_dtype\":"
                                 "\"%s\",\"param_copy\":\"%s\",\"params_per_s\":%s,"
                                 "\"ratio_to_stream\":%s}",
                                 vname, t, n, zc_dtype_name(gdts[gi]), copyname,
                                 zc__bench_jnum("%.4e", pps).s,
                                 zc__bench_jnum("%.3f", bps / sbps).s);
                        if (pps > best.pps) {
                            best.pps = pps;
                            snprintf(best.desc, sizeof best.desc, "%s", desc);
                        }
                        /* The targets: per gradient dtype with the
                         * copy on, the fastest case at >= 64M (its thread
                         * count is the best one) and its ratio. */
                        if (cp && n >= (64u << 20) && pps > best_copy[gi].pps) {
                            best_copy[gi].pps = pps;
                            best_copy[gi].ratio = bps / sbps;
                            snprintf(best_copy[gi].desc, sizeof best_copy[gi].desc, "%s", desc);
                        }
                        if (gi == 0 && t == 2 && n >= (64u << 20) && pps > fp32_2t.pps) {
                            fp32_2t.pps = pps;
                            snprintf(fp32_2t.desc, sizeof fp32_2t.desc, "%s", desc);
                        }
                    }
        }
    }
    printf("{\"summary\":\"cpu_adam\",\"best\":%s", best.desc[0] ? best.desc : "null");
    static const char *gnames[3] = {"fp32", "bf16", "fp16"};
    printf(",\"target_copy_ratio_ge_0.90\":{");
    for (int gi = 0; gi < 3; gi++)
        printf("%s\"%s\":%s", gi ? "," : "", gnames[gi],
               best_copy[gi].desc[0] ? best_copy[gi].desc : "null");
    printf("},\"target_fp32_2threads_ge_1.7e9\":%s}\n", fp32_2t.desc[0] ? fp32_2t.desc : "null");
out:
    for (int i = 0; i < 7; i++)
        if (*bufs[i].p)
            zc__host_free(NULL, ZC_MEM_OTHER, *bufs[i].p, bufs[i].bytes);
    zc__pool_shutdown();
    return rc;
}
