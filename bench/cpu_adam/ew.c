/* Host Lion and Adagrad (src/optim/lion.h, adagrad.h) against their
 * same-pattern streaming ceiling.
 *
 * Both optimizers keep one fp32 state tensor beside the fp32 master (Lion's
 * exp_avg, Adagrad's sum of squares), so both read master, state and the
 * gradient and write master, state and the optional 16-bit copy. For each N,
 * each optimizer, each usable variant, each thread count and each case
 * (gradient fp32/bf16 x bf16 copy off/on), it times zc__lion_host_run or
 * zc__adagrad_host_run and, on the same buffers with the same threads and
 * the same static split, a streaming loop with exactly those reads and
 * writes and trivial arithmetic (p += g, state += g * g, the copy the top
 * half of p): the bound no such optimizer can beat, taken as the fastest of
 * that loop with no software prefetch and with 512 and 1024 bytes ahead, as
 * bench_cpu_adam's. The two alternate so machine noise hits both alike; one
 * warm-up, then the median of the repetitions.
 *
 * Bytes counted per parameter (what the loop reads and writes, no
 * read-for-ownership): read master and state (8) + gradient (4 fp32, 2
 * bf16) + write master and state (8) + copy (2 if on): 20/22 with fp32
 * gradients, 18/20 with bf16 ones.
 *
 * Hyperparameters: Lion lr 1e-4, betas (0.9, 0.99), weight decay 0.01 (the
 * decay multiply runs), DeepSpeedCPULion's sign rule; Adagrad DeepSpeed's
 * defaults (lr 1e-2, eps 1e-10, no weight decay).
 *
 * Output: one JSON object per case
 * {"bench":"cpu_ew","optimizer","variant","threads","n","grad_dtype",
 *  "param_copy","seconds","params_per_s","bytes_per_s","stream_bytes_per_s",
 *  "ratio_to_stream","bytes_per_param"}
 * and a final {"summary":"cpu_ew",...} line with, for each optimizer,
 * variant, gradient dtype and copy at the largest N, the fastest thread
 * count and whether its ratio meets the 0.90 bar. */
#include "bench/cpu_adam/ew.h"

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

/* Largest --n: the five buffers take 16 bytes per parameter, 2^34 of them
 * 256 GiB; larger is refused as a typo rather than handed to the allocator. */
#define MAX_N (UINT64_C(1) << 34)
#define MAX_REPS 200
#define NPF 3 /* prefetch distances tried for the ceiling */
#define BAR 0.90

enum { OPT_LION, OPT_ADAGRAD, NOPT };
static const char *const OPT_NAMES[NOPT] = {"lion", "adagrad"};

/* What the ceiling streams: the buffers of one case. */
typedef struct ew_bufs {
    float *master, *state;
    const void *grad;
    zc_dtype grad_dtype;
    uint16_t *copy; /* NULL: no copy */
    size_t n;
} ew_bufs;

static ew_bufs ew_slice(const ew_bufs *b, size_t lo, size_t hi)
{
    ew_bufs r = *b;
    r.master += lo;
    r.state += lo;
    r.grad = (const char *)b->grad + lo * zc_dtype_size(b->grad_dtype);
    if (b->copy)
        r.copy += lo;
    r.n = hi - lo;
    return r;
}

/* ---- the streaming ceiling ------------------------------------------------ */

/* p += g, state += g * g (kept positive: Adagrad's steps read it next), copy
 * = the top half of p. */
static void stream_generic(const ew_bufs *b, size_t pf)
{
    (void)pf;
    for (size_t i = 0; i < b->n; i++) {
        const float g = zc__load_f32(b->grad, b->grad_dtype, i);
        const float x = b->master[i] + g;
        b->master[i] = x;
        b->state[i] += g * g;
        if (b->copy)
            b->copy[i] = (uint16_t)(zc__f32_bits(x) >> 16);
    }
}

#if defined(__x86_64__)
/* The same loads, stores and conversions as the AVX2 kernels, 16 elements
 * per iteration, with a software prefetch `pf` bytes ahead of each stream
 * (0: none). */
__attribute__((target("avx2,fma"))) static void stream_avx2(const ew_bufs *b, size_t pf)
{
    float *p = b->master, *st = b->state;
    const void *gp = b->grad;
    uint16_t *o = b->copy;
    const size_t n = b->n, gsz = zc_dtype_size(b->grad_dtype);
    size_t i = 0;
    pf /= sizeof(float);
    for (; i + 16 <= n; i += 16) {
        if (pf) {
            _mm_prefetch((const char *)(p + i + pf), _MM_HINT_T0);
            _mm_prefetch((const char *)(st + i + pf), _MM_HINT_T0);
            _mm_prefetch((const char *)gp + (i + pf) * gsz, _MM_HINT_T0);
        }
        __m256 x[2];
        for (int h = 0; h < 2; h++) {
            const size_t j = i + 8 * (size_t)h;
            __m256 g;
            if (b->grad_dtype == ZC_DTYPE_F32)
                g = _mm256_loadu_ps((const float *)gp + j);
            else
                g = _mm256_castsi256_ps(_mm256_slli_epi32(
                    _mm256_cvtepu16_epi32(
                        _mm_loadu_si128((const __m128i *)((const uint16_t *)gp + j))),
                    16));
            x[h] = _mm256_add_ps(_mm256_loadu_ps(p + j), g);
            _mm256_storeu_ps(p + j, x[h]);
            _mm256_storeu_ps(st + j, _mm256_fmadd_ps(g, g, _mm256_loadu_ps(st + j)));
        }
        if (o) {
            const __m256i h = _mm256_packus_epi32(_mm256_srli_epi32(_mm256_castps_si256(x[0]), 16),
                                                  _mm256_srli_epi32(_mm256_castps_si256(x[1]), 16));
            _mm256_storeu_si256((__m256i *)(o + i), _mm256_permute4x64_epi64(h, 0xd8));
        }
    }
    const ew_bufs rest = ew_slice(b, i, n);
    stream_generic(&rest, 0);
}
#endif

typedef void (*stream_fn)(const ew_bufs *b, size_t prefetch_bytes);

static stream_fn pick_stream(const char **name)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        *name = "avx2";
        return stream_avx2;
    }
#endif
    *name = "generic";
    return stream_generic;
}

/* ---- one case ------------------------------------------------------------- */

typedef struct ew_case {
    int opt; /* OPT_* */
    ew_bufs b;
    const zc_lion_coeffs *lion;
    const zc_adagrad_hparams *adagrad;
    int64_t *step;
    int variant, threads;
    stream_fn stream;
    size_t pf; /* the ceiling's prefetch distance, set per loop */
    float *g32;
    uint16_t *gbf;
    const char *prog;
} ew_case;

static void init_range(void *arg, size_t lo, size_t hi)
{
    const ew_case *k = arg;
    for (size_t i = lo; i < hi; i++) {
        const float x = (float)((int)(i % 2001) - 1000) * 1e-5f;
        k->b.master[i] = x;
        k->b.state[i] = k->opt == OPT_LION ? x * 1e-2f : 1e-6f + x * x;
        k->g32[i] = x * 1e-3f;
        k->gbf[i] = zc__f32_to_bf16(x * 1e-3f);
    }
}

static void stream_range(void *arg, size_t lo, size_t hi)
{
    const ew_case *k = arg;
    const ew_bufs part = ew_slice(&k->b, lo, hi);
    k->stream(&part, k->pf);
}

static bool ew_kernel(void *arg)
{
    ew_case *k = arg;
    const ew_bufs *b = &k->b;
    zc_status st;
    if (k->opt == OPT_LION) {
        const zc_lion_shard s = {.master = b->master, .m = b->state, .grad = b->grad,
                                 .grad_dtype = b->grad_dtype, .grad_scale = 1.0f,
                                 .param_out = b->copy, .param_out_dtype = ZC_DTYPE_BF16,
                                 .n = b->n};
        st = zc__lion_host_run(&s, k->lion, k->variant, k->threads);
    } else {
        const zc_adagrad_shard s = {.master = b->master, .sum = b->state, .grad = b->grad,
                                    .grad_dtype = b->grad_dtype, .grad_scale = 1.0f,
                                    .param_out = b->copy, .param_out_dtype = ZC_DTYPE_BF16,
                                    .n = b->n};
        const zc_adagrad_coeffs c = zc__adagrad_coeffs(k->adagrad, (*k->step)++);
        st = zc__adagrad_host_run(&s, &c, k->variant, k->threads);
    }
    if (st != ZC_OK) {
        fprintf(stderr, "%s: %s\n", k->prog, zc_last_error());
        return false;
    }
    return true;
}

static void ew_ceiling(void *arg, int q)
{
    static const size_t pfs[NPF] = {0, 512, 1024};
    ew_case *k = arg;
    k->pf = pfs[q];
    zc__bench_split(k->threads, k->b.n, stream_range, k, k->b.master);
}

/* ---- options -------------------------------------------------------------- */

static void usage(FILE *f, const char *prog, const zc_bench_opts *o)
{
    fprintf(f, "usage: %s [--optimizer lion|adagrad] [--n LIST] [--variant NAME]\n"
               "       [--threads LIST] [--reps R]\n"
               "  --optimizer NAME only this optimizer (default: lion and adagrad)\n", prog);
    zc__bench_opts_usage(f, o, "16M,64M", "5");
    fprintf(f, "Prints one JSON object per case and a summary line.\n");
}

/* The fastest thread count of one case at the largest N. */
typedef struct best_t {
    double pps, ratio;
    int threads;
} best_t;

int zc__bench_cpu_ew(int argc, char **argv)
{
    const char *prog = argc > 0 ? argv[0] : "bench_cpu_ew";
    zc_bench_opts o = {.ns = {16u << 20, 64u << 20}, .nn = 2, .reps = 5, .max_n = MAX_N,
                       .max_reps = MAX_REPS};
    bool run_opt[NOPT] = {true, true};
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
        } else if (!strcmp(a, "--optimizer") && i + 1 < argc) {
            const char *val = argv[++i];
            int which = -1;
            for (int q = 0; q < NOPT; q++)
                if (!strcmp(val, OPT_NAMES[q]))
                    which = q;
            if (which < 0) {
                fprintf(stderr, "%s: --optimizer '%s': expected lion or adagrad\n", prog, val);
                return 2;
            }
            for (int q = 0; q < NOPT; q++)
                run_opt[q] = q == which;
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
    /* Three fp32 and two 16-bit buffers of the largest N, all written. */
    rc = zc__bench_check_memory(prog, nmax, 16);
    if (rc)
        return rc;
    const size_t b4 = nmax * 4, b2 = nmax * 2; /* fit: zc__bench_check_memory */
    float *master = NULL, *state = NULL, *g32 = NULL;
    uint16_t *gbf = NULL, *copy = NULL;
    void **const bufs[5] = {(void **)&master, (void **)&state, (void **)&g32, (void **)&gbf,
                            (void **)&copy};
    const size_t bytes[5] = {b4, b4, b4, b2, b2};
    static const char *const what[5] = {"master", "state", "fp32 gradients", "bf16 gradients",
                                        "bf16 copy"};
    for (int i = 0; i < 5; i++)
        if (zc__host_alloc(NULL, ZC_MEM_OTHER, bytes[i], what[i], bufs[i]) != ZC_OK) {
            fprintf(stderr, "%s: %s\n", prog, zc_last_error());
            rc = 1;
            goto out;
        }
    const char *stream_name;
    const stream_fn stream = pick_stream(&stream_name);
    fprintf(stderr, "%s: cores %d, ceiling loop %s, variants:", prog, o.cores, stream_name);
    for (int i = 0; i < o.nv; i++)
        fprintf(stderr, " %s", zc__adam_variant(o.variants[i])->name);
    fprintf(stderr, "\n");

    const zc_lion_hparams lion_hp = {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.99,
                                     .weight_decay = 0.01, .sign_rule = ZC_LION_SIGN_BIT};
    const zc_lion_coeffs lion_c = zc__lion_coeffs(&lion_hp);
    const zc_adagrad_hparams adagrad_hp = {.lr = 1e-2, .eps = 1e-10, .weight_decay = 0,
                                           .numerator = ZC_ADAGRAD_NUM_RAW};
    static const zc_dtype gdts[2] = {ZC_DTYPE_F32, ZC_DTYPE_BF16};
    /* [optimizer][variant][gradient][copy] */
    best_t best[NOPT][ZC_BENCH_MAX_VARIANTS][2][2];
    memset(best, 0, sizeof best);
    int64_t step = 1;
    for (int ni = 0; ni < o.nn; ni++)
        for (int op = 0; op < NOPT; op++) {
            if (!run_opt[op])
                continue;
            for (int ti = 0; ti < o.nthr; ti++)
                for (int vi = 0; vi < o.nv; vi++)
                    for (int gi = 0; gi < 2; gi++)
                        for (int cp = 0; cp < 2; cp++) {
                            const size_t n = o.ns[ni];
                            const int t = o.threads[ti];
                            ew_case k = {.opt = op,
                                         .b = {.master = master, .state = state,
                                               .grad = gi ? (const void *)gbf : g32,
                                               .grad_dtype = gdts[gi], .copy = cp ? copy : NULL,
                                               .n = n},
                                         .lion = &lion_c, .adagrad = &adagrad_hp, .step = &step,
                                         .variant = o.variants[vi], .threads = t,
                                         .stream = stream, .g32 = g32, .gbf = gbf,
                                         .prog = prog};
                            /* Fresh values for each case: the ceiling loop
                             * moved master and state. */
                            zc__bench_split(t, n, init_range, &k, master);
                            const double bpp =
                                16.0 + (double)zc_dtype_size(gdts[gi]) + (cp ? 2.0 : 0.0);
                            const zc_bench_pair pair = {ew_kernel, ew_ceiling, NPF, &k};
                            double sec, ssec;
                            if (!zc__bench_measure(&pair, o.reps, &sec, &ssec)) {
                                rc = 1;
                                goto out;
                            }
                            const double pps = (double)n / sec, bps = bpp * pps;
                            const double sbps = bpp * (double)n / ssec, ratio = bps / sbps;
                            const char *vname = zc__adam_variant(o.variants[vi])->name;
                            const char *copyname = cp ? "bf16" : "none";
                            printf("{\"bench\":\"cpu_ew\",\"optimizer\":\"%s\",\"variant\":\"%s\","
                                   "\"threads\":%d,\"n\":%zu,\"grad_dtype\":\"%s\","
                                   "\"param_copy\":\"%s\",\"seconds\":%s,\"params_per_s\":%s,"
                                   "\"bytes_per_s\":%s,\"stream_bytes_per_s\":%s,"
                                   "\"ratio_to_stream\":%s,\"bytes_per_param\":%.0f}\n",
                                   OPT_NAMES[op], vname, t, n, zc_dtype_name(gdts[gi]),
                                   copyname, zc__bench_jnum("%.6f", sec).s,
                                   zc__bench_jnum("%.4e", pps).s, zc__bench_jnum("%.4e", bps).s,
                                   zc__bench_jnum("%.4e", sbps).s,
                                   zc__bench_jnum("%.3f", ratio).s, bpp);
                            fflush(stdout);
                            best_t *b = &best[op][vi][gi][cp];
                            if (n == nmax && pps > b->pps)
                                *b = (best_t){.pps = pps, .ratio = ratio, .threads = t};
                        }
        }
    printf("{\"summary\":\"cpu_ew\",\"n\":%zu,\"bar\":%.2f,\"best_threads\":[", nmax, BAR);
    const char *sep = "";
    for (int op = 0; op < NOPT; op++)
        for (int vi = 0; vi < o.nv && run_opt[op]; vi++)
            for (int gi = 0; gi < 2; gi++)
                for (int cp = 0; cp < 2; cp++) {
                    const best_t *b = &best[op][vi][gi][cp];
                    if (!b->threads)
                        continue;
                    printf("%s{\"optimizer\":\"%s\",\"variant\":\"%s\",\"grad_dtype\":\"%s\","
                           "\"param_copy\":\"%s\",\"threads\":%d,\"params_per_s\":%s,"
                           "\"ratio_to_stream\":%s,\"meets_bar\":%s}",
                           sep, OPT_NAMES[op], zc__adam_variant(o.variants[vi])->name,
                           zc_dtype_name(gdts[gi]), cp ? "bf16" : "none", b->threads,
                           zc__bench_jnum("%.4e", b->pps).s, zc__bench_jnum("%.3f", b->ratio).s,
                           b->ratio >= BAR ? "true" : "false");
                    sep = ",";
                }
    printf("]}\n");
out:
    for (int i = 0; i < 5; i++)
        if (*bufs[i])
            zc__host_free(NULL, ZC_MEM_OTHER, *bufs[i], bytes[i]);
    zc__pool_shutdown();
    return rc;
}
