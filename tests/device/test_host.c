/* Host device backend: conversions, elementwise kernels, reductions. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "base/dtype.h"
#include "device/device.h"
#include "helpers.h"

/* bf16 reference: the nearest of the two bf16 neighbours, ties to even,
 * computed in double from the truncated candidates. */
static uint16_t ref_bf16(float f)
{
    if (isnan(f))
        return 0x7fc0;
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t lo = (uint16_t)(u >> 16);
    uint16_t hi = (uint16_t)(lo + 1);
    if ((u & 0xffff) == 0)
        return lo;
    double dl = fabs((double)zc__bf16_to_f32(lo) - f);
    double dh = fabs((double)zc__bf16_to_f32(hi) - f);
    if ((hi & 0x7fff) == 0x7f80) /* rounding up reaches infinity */
        dh = fabs(ldexp(1.0, 128) * (f < 0 ? -1 : 1) - f);
    if (dl < dh)
        return lo;
    if (dh < dl)
        return hi;
    return (lo & 1) ? hi : lo;
}

Test(device_host, bf16_round_to_nearest_even)
{
    uint64_t s = t_seed("bf16_round_to_nearest_even");
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)t_rand_u64(&s);
        if (i < 1000)
            u = (u & 0xffff0000u) | 0x8000u; /* exact ties */
        float f;
        memcpy(&f, &u, 4);
        cr_assert_eq(zc__f32_to_bf16(f), ref_bf16(f), "bits 0x%08x", u);
    }
    cr_assert_eq(zc__f32_to_bf16(NAN), 0x7fc0);
    cr_assert_eq(zc__f32_to_bf16(-INFINITY), 0xff80);
}

Test(device_host, fp16_matches_compiler_conversion)
{
    /* _Float16 conversions are IEEE round-to-nearest-even in the compiler and
     * independent of our bit manipulation. */
    uint64_t s = t_seed("fp16_matches_compiler_conversion");
    for (int i = 0; i < 300000; i++) {
        uint32_t u = (uint32_t)t_rand_u64(&s);
        if (i % 3 == 0) /* concentrate on the fp16 range, subnormals included */
            u = (u & 0x80000000u) | (0x33000000u + (u % 0x14800000u));
        float f;
        memcpy(&f, &u, 4);
        if (isnan(f))
            continue;
        __extension__ _Float16 h = f; /* implicit conversion: IEEE RNE */
        uint16_t want;
        memcpy(&want, &h, 2);
        cr_assert_eq(zc__f32_to_f16(f), want, "bits 0x%08x", u);
        cr_assert_eq(zc__f16_to_f32(want), (float)h);
    }
    cr_assert_eq(zc__f32_to_f16(NAN) & 0x7e00, 0x7e00, "NaN stays a quiet NaN");
}

Test(device_host, cast_scale_accumulate)
{
    zc_device *d = zc__device_host();
    enum { N = 1000 };
    float src[N], back[N], acc[N];
    uint16_t h[N];
    uint64_t s = 7;
    for (int i = 0; i < N; i++) {
        src[i] = t_rand_range(&s, -3, 3);
        acc[i] = 1.0f;
    }
    cr_assert_eq(d->ops->cast(d, h, ZC_DTYPE_BF16, src, ZC_DTYPE_F32, N, NULL), ZC_OK);
    cr_assert_eq(d->ops->cast(d, back, ZC_DTYPE_F32, h, ZC_DTYPE_BF16, N, NULL), ZC_OK);
    for (int i = 0; i < N; i++)
        cr_assert_eq(h[i], ref_bf16(src[i]));
    cr_assert_eq(d->ops->scale(d, back, ZC_DTYPE_F32, N, 0.5f, NULL), ZC_OK);
    cr_assert_eq(d->ops->accumulate(d, acc, h, ZC_DTYPE_BF16, N, NULL), ZC_OK);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(back[i], zc__bf16_to_f32(h[i]) * 0.5f);
        cr_assert_eq(acc[i], 1.0f + zc__bf16_to_f32(h[i]));
    }
    cr_assert_eq(d->ops->cast(d, h, ZC_DTYPE_I32, src, ZC_DTYPE_F32, N, NULL),
                 ZC_ERR_INVALID_ARG);
}

/* accumulate_rounded keeps a 16-bit running sum in fp32 storage: the fp32
 * sum of the two values, rounded once to the 16-bit dtype (the references:
 * ref_bf16 and the compiler's _Float16), inf where fp16 overflows; with
 * F32 it is accumulate, bit for bit. */
Test(device_host, accumulate_rounded_holds_a_16bit_sum)
{
    zc_device *d = zc__device_host();
    enum { N = 4000 };
    static float acc[N], plain[N], src32[N];
    static uint16_t src16[N];
    uint64_t s = t_seed("accumulate_rounded_holds_a_16bit_sum");
    for (int k = 0; k < 2; k++) {
        const zc_dtype dt = k ? ZC_DTYPE_F16 : ZC_DTYPE_BF16;
        for (int i = 0; i < N; i++) {
            /* 16-bit values, the running sum's and the addend's, of unlike
             * magnitudes, so that most sums need more bits than dt holds. */
            const float top = dt == ZC_DTYPE_F16 ? 65000.0f : 40000.0f;
            const float a = t_rand_range(&s, -top, top);
            const float b = t_rand_range(&s, -4, 4) * (float)(1 << (i % 12));
            if (dt == ZC_DTYPE_BF16) {
                acc[i] = zc__bf16_to_f32(ref_bf16(a));
                src16[i] = ref_bf16(b);
            } else {
                acc[i] = (float)__extension__(_Float16)a;
                __extension__ _Float16 h = (_Float16)b;
                memcpy(&src16[i], &h, 2);
            }
        }
        if (dt == ZC_DTYPE_F16) { /* fp16's largest value plus 32: inf */
            acc[0] = 65504.0f;
            __extension__ _Float16 h = (_Float16)32.0f;
            memcpy(&src16[0], &h, 2);
        }
        memcpy(plain, acc, sizeof acc);
        cr_assert_eq(d->ops->accumulate_rounded(d, acc, src16, dt, dt, N, NULL), ZC_OK);
        int rounded = 0, overflowed = 0;
        for (int i = 0; i < N; i++) {
            const float sum = plain[i] + zc__load_f32(src16, dt, (size_t)i);
            float want;
            if (dt == ZC_DTYPE_BF16) {
                want = zc__bf16_to_f32(ref_bf16(sum));
            } else {
                want = (float)__extension__(_Float16)sum;
                overflowed += isinf(want) != 0;
            }
            rounded += want != sum;
            cr_assert(memcmp(&acc[i], &want, 4) == 0, "%s [%d]: %a + %a -> %a, want %a",
                      zc_dtype_name(dt), i, (double)plain[i],
                      (double)zc__load_f32(src16, dt, (size_t)i), (double)acc[i], (double)want);
        }
        cr_assert(rounded > N / 2, "%s: only %d of %d sums needed rounding", zc_dtype_name(dt),
                  rounded, N);
        cr_assert(dt == ZC_DTYPE_BF16 || overflowed > 0, "no fp16 sum overflowed");
    }
    /* F32: accumulate's own result. */
    for (int i = 0; i < N; i++) {
        acc[i] = plain[i] = t_rand_range(&s, -3, 3);
        src32[i] = t_rand_range(&s, -1e-3f, 1e-3f);
    }
    cr_assert_eq(d->ops->accumulate_rounded(d, acc, src32, ZC_DTYPE_F32, ZC_DTYPE_F32, N, NULL),
                 ZC_OK);
    cr_assert_eq(d->ops->accumulate(d, plain, src32, ZC_DTYPE_F32, N, NULL), ZC_OK);
    cr_assert(memcmp(acc, plain, sizeof acc) == 0);
    cr_assert_eq(d->ops->accumulate_rounded(d, acc, src32, ZC_DTYPE_F32, ZC_DTYPE_I32, N, NULL),
                 ZC_ERR_INVALID_ARG);
}

Test(device_host, sumsq_blocked_fp64)
{
    zc_device *d = zc__device_host();
    enum { N = 3 * ZC_SUMSQ_BLOCK + 17 };
    static float x[N];
    uint64_t s = 11;
    long double want = 0;
    for (int i = 0; i < N; i++) {
        x[i] = t_rand_range(&s, -2, 2);
        want += (long double)x[i] * x[i];
    }
    double got = -1;
    cr_assert_eq(d->ops->sumsq(d, x, ZC_DTYPE_F32, N, &got, NULL), ZC_OK);
    cr_assert(fabsl((long double)got - want) <= 1e-12L * want, "got %.17g want %.17Lg", got, want);
    int flag = -1;
    cr_assert_eq(d->ops->nonfinite(d, x, ZC_DTYPE_F32, N, &flag, NULL), ZC_OK);
    cr_assert_eq(flag, 0);
    x[N - 1] = INFINITY;
    cr_assert_eq(d->ops->nonfinite(d, x, ZC_DTYPE_F32, N, &flag, NULL), ZC_OK);
    cr_assert_eq(flag, 1);
    uint16_t hb[4] = {0x3f80, 0x7fc0, 0, 0};
    cr_assert_eq(d->ops->nonfinite(d, hb, ZC_DTYPE_BF16, 4, &flag, NULL), ZC_OK);
    cr_assert_eq(flag, 1);
    uint16_t hh[4] = {0x3c00, 0x7bff, 0, 0}; /* 1.0 and 65504: finite */
    cr_assert_eq(d->ops->nonfinite(d, hh, ZC_DTYPE_F16, 4, &flag, NULL), ZC_OK);
    cr_assert_eq(flag, 0);
}

Test(device_host, reduce_sum_in_order_fp32)
{
    zc_device *d = zc__device_host();
    /* 1e8 + 1 - 1e8 depends on order in fp32: (1e8 + 1) rounds to 1e8. */
    float a[1] = {1e8f}, b[1] = {1.0f}, c[1] = {-1e8f}, out[1];
    const void *srcs[3] = {a, b, c};
    cr_assert_eq(d->ops->reduce_sum(d, out, srcs, 3, ZC_DTYPE_F32, 1, NULL), ZC_OK);
    cr_assert_eq(out[0], (1e8f + 1.0f) + -1e8f);
    const void *srcs2[3] = {a, c, b};
    cr_assert_eq(d->ops->reduce_sum(d, out, srcs2, 3, ZC_DTYPE_F32, 1, NULL), ZC_OK);
    cr_assert_eq(out[0], 1.0f);
}

/* The fp32 reduction runs in chunks through a buffer: every element still
 * gets its sources' sum in source order, across chunk edges, with dst any
 * of the sources (here the second, which the first is read before). */
Test(device_host, reduce_sum_fp32_chunks_and_aliasing)
{
    zc_device *d = zc__device_host();
    enum { N = 3 * 512 + 77 };
    static float a[N], b[N], c[N], want[N];
    uint64_t s = 21;
    for (int i = 0; i < N; i++) {
        a[i] = t_rand_range(&s, -1e8, 1e8);
        b[i] = t_rand_range(&s, -2, 2);
        c[i] = -a[i];
        want[i] = (a[i] + b[i]) + c[i];
    }
    const void *srcs[3] = {a, b, c};
    cr_assert_eq(d->ops->reduce_sum(d, b, srcs, 3, ZC_DTYPE_F32, N, NULL), ZC_OK);
    cr_assert(memcmp(b, want, sizeof want) == 0, "in source order, in place");
}

/* Enough blocks for the side-by-side path (8 blocks at a time) twice and a
 * remainder of whole and partial blocks: the same bits as block partials
 * summed one after another (19 blocks: one run of the tree, the plain
 * left-to-right sum of the partials). */
Test(device_host, sumsq_many_blocks_in_order)
{
    zc_device *d = zc__device_host();
    enum { NB = 19, N = (NB - 1) * ZC_SUMSQ_BLOCK + 1000 };
    static float x[N];
    uint64_t s = 17;
    for (int i = 0; i < N; i++)
        x[i] = t_rand_range(&s, -3, 3) * (i % 5 == 0 ? 1e3f : 1.0f);
    double p[NB] = {0};
    for (int i = 0; i < N; i++)
        p[i / ZC_SUMSQ_BLOCK] += (double)x[i] * (double)x[i];
    double plain = p[0];
    for (int k = 1; k < NB; k++)
        plain += p[k];
    double got = -1;
    cr_assert_eq(d->ops->sumsq(d, x, ZC_DTYPE_F32, N, &got, NULL), ZC_OK);
    cr_assert(memcmp(&plain, &got, sizeof got) == 0, "sumsq %a, blocks in order %a", got, plain);
}

Test(device_host, allocator_counts_and_fault_injection)
{
    zc_device *d = zc__device_host();
    zc_mem_account acct;
    memset(&acct, 0, sizeof acct);
    void *p = NULL, *q = NULL;
    cr_assert_eq(d->ops->alloc(d, &acct, ZC_MEM_MASTER, 1000, "test", &p), ZC_OK);
    cr_assert_eq(acct.bytes[ZC_MEM_MASTER], 1000);
    /* Host memory standing for device memory: counted as the device kind
     * (docs/placement.md), while malloc's fault injection still applies. */
    cr_assert_eq(zc__mem_global_bytes(ZC_MEMKIND_DEVICE), 1000);
    cr_assert_eq(zc__mem_global_bytes(ZC_MEMKIND_HOST), 0);
    cr_assert_eq(acct.kind_bytes[ZC_MEMKIND_DEVICE][ZC_MEM_MASTER], 1000);
    zc__mem_fail_after(ZC_MEMKIND_HOST, 2);
    cr_assert_eq(d->ops->alloc(d, &acct, ZC_MEM_ADAM, 10, "first", &q), ZC_OK);
    void *r = (void *)1;
    cr_assert_eq(d->ops->alloc(d, &acct, ZC_MEM_ADAM, 10, "second", &r), ZC_ERR_NO_MEMORY);
    cr_assert_null(r);
    cr_assert(strstr(zc_last_error(), "second"), "message names the allocation: %s",
              zc_last_error());
    d->ops->free(d, &acct, ZC_MEM_ADAM, q, 10);
    d->ops->free(d, &acct, ZC_MEM_MASTER, p, 1000);
    cr_assert_eq(acct.peak[ZC_MEM_MASTER], 1000);
    cr_assert_eq(acct.bytes[ZC_MEM_MASTER], 0);
    t_assert_no_leaks();
}

/* The stream-ordered forms the engine uses for one host wait per step:
 * sumsq_async equals sumsq bitwise, with a scratch of one double per
 * ZC_SUMSQ_FANIN blocks; nonfinite_async ORs into a flag and never clears
 * it. The host backend runs them at once, so events are complete and a
 * non-blocking stream is as good as any. (The order itself:
 * test_sumsq_tile.c.) */
Test(device_host, stream_ordered_forms)
{
    zc_device *d = zc__device_host();
    enum { N = 2 * ZC_SUMSQ_BLOCK + 5 };
    static float x[N];
    uint64_t s = 5;
    for (int i = 0; i < N; i++)
        x[i] = t_rand_range(&s, -3, 3);
    cr_assert_eq(zc__sumsq_scratch_elems(N), 1);
    cr_assert_eq(zc__sumsq_scratch_elems(0), 0);
    cr_assert_eq(zc__sumsq_scratch_elems((size_t)ZC_SUMSQ_FANIN * ZC_SUMSQ_BLOCK), 1);
    cr_assert_eq(zc__sumsq_scratch_elems((size_t)ZC_SUMSQ_FANIN * ZC_SUMSQ_BLOCK + 1), 2);

    void *st = NULL, *ev = NULL;
    cr_assert_eq(d->ops->stream_create_nonblocking(d, &st), ZC_OK);
    cr_assert_not_null(st);
    double scratch[1] = {-1}, out = -1, want = -2;
    cr_assert_eq(d->ops->sumsq_async(d, x, ZC_DTYPE_F32, N, scratch, &out, st), ZC_OK);
    cr_assert_eq(d->ops->sumsq(d, x, ZC_DTYPE_F32, N, &want, st), ZC_OK);
    cr_assert(memcmp(&out, &want, sizeof out) == 0, "async %a vs sumsq %a", out, want);
    /* Three blocks, one run: the partials added left to right. */
    double p[3] = {0, 0, 0};
    for (int i = 0; i < N; i++)
        p[i / ZC_SUMSQ_BLOCK] += (double)x[i] * (double)x[i];
    double plain = (p[0] + p[1]) + p[2];
    cr_assert(memcmp(&plain, &want, sizeof want) == 0, "sumsq %a, blocks in order %a", want,
              plain);
    cr_assert_eq(d->ops->sumsq_async(d, x, ZC_DTYPE_F32, 0, NULL, &out, st), ZC_OK);
    cr_assert(out == 0.0 && !signbit(out));
    cr_assert_eq(d->ops->sumsq_async(d, x, ZC_DTYPE_I32, N, scratch, &out, st),
                 ZC_ERR_INVALID_ARG);
    cr_assert_eq(d->ops->sumsq_async(d, x, ZC_DTYPE_F32, N, NULL, &out, st), ZC_ERR_INVALID_ARG);

    int flag = 0;
    cr_assert_eq(d->ops->nonfinite_async(d, x, ZC_DTYPE_F32, N, &flag, st), ZC_OK);
    cr_assert_eq(flag, 0);
    float bad[3] = {1.0f, NAN, 2.0f};
    cr_assert_eq(d->ops->nonfinite_async(d, bad, ZC_DTYPE_F32, 3, &flag, st), ZC_OK);
    cr_assert_eq(flag, 1);
    /* A later clean chunk leaves the step's flag set. */
    cr_assert_eq(d->ops->nonfinite_async(d, x, ZC_DTYPE_F32, N, &flag, st), ZC_OK);
    cr_assert_eq(flag, 1);

    cr_assert_eq(d->ops->event_create(d, &ev), ZC_OK);
    cr_assert_eq(d->ops->event_record(d, ev, st), ZC_OK);
    int done = 0;
    cr_assert_eq(d->ops->event_query(d, ev, &done), ZC_OK);
    cr_assert_eq(done, 1);
    d->ops->event_destroy(d, ev);
    d->ops->stream_destroy(d, st);
    t_assert_no_leaks();
}

/* The host backend's Lion and Adagrad ops are the host entries
 * (optim/lion.h, adagrad.h): master, state and bf16 copy bitwise the scalar
 * references (held to torch's and the paper's arithmetic in tests/optim);
 * a shard those refuse is refused, nothing written. */
Test(device_host, lion_and_adagrad_ops_are_the_host_entries)
{
    zc_device *d = zc__device_host();
    enum { N = 1037 };
    static float p[2][N], st[2][N];
    static uint16_t g[N], out[2][N];
    uint64_t s = 11;
    for (int i = 0; i < N; i++) {
        p[0][i] = p[1][i] = t_rand_range(&s, -1, 1);
        st[0][i] = st[1][i] = t_rand_range(&s, 0, 0.01);
        g[i] = zc__f32_to_bf16(t_rand_range(&s, -2, 2));
    }
    const zc_lion_hparams lh = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1,
                                .sign_rule = ZC_LION_SIGN_BIT};
    const zc_lion_coeffs lc = zc__lion_coeffs(&lh);
    zc_lion_shard ls[2];
    for (int k = 0; k < 2; k++)
        ls[k] = (zc_lion_shard){.master = p[k], .m = st[k], .grad = g,
                                .grad_dtype = ZC_DTYPE_BF16, .grad_scale = 0.5f,
                                .param_out = out[k], .param_out_dtype = ZC_DTYPE_BF16, .n = N};
    cr_assert_eq(d->ops->lion(d, &ls[0], &lc, NULL), ZC_OK, "%s", zc_last_error());
    zc__lion_scalar(&ls[1], &lc);
    cr_assert(!memcmp(p[0], p[1], sizeof p[0]) && !memcmp(st[0], st[1], sizeof st[0]) &&
              !memcmp(out[0], out[1], sizeof out[0]), "lion op differs from the reference");
    const zc_adagrad_hparams ah = {.lr = 1e-2, .eps = 1e-10, .weight_decay = 0.1,
                                   .numerator = ZC_ADAGRAD_NUM_RAW};
    const zc_adagrad_coeffs ac = zc__adagrad_coeffs(&ah, 2);
    zc_adagrad_shard as[2];
    for (int k = 0; k < 2; k++)
        as[k] = (zc_adagrad_shard){.master = p[k], .sum = st[k], .grad = g,
                                   .grad_dtype = ZC_DTYPE_BF16, .grad_scale = 0.5f,
                                   .param_out = out[k], .param_out_dtype = ZC_DTYPE_BF16,
                                   .n = N};
    cr_assert_eq(d->ops->adagrad(d, &as[0], &ac, NULL), ZC_OK, "%s", zc_last_error());
    zc__adagrad_scalar(&as[1], &ac);
    cr_assert(!memcmp(p[0], p[1], sizeof p[0]) && !memcmp(st[0], st[1], sizeof st[0]) &&
              !memcmp(out[0], out[1], sizeof out[0]), "adagrad op differs from the reference");
    /* Refused before anything is written. */
    ls[0].grad_dtype = ZC_DTYPE_I32;
    as[0].grad_dtype = ZC_DTYPE_I32;
    cr_assert_eq(d->ops->lion(d, &ls[0], &lc, NULL), ZC_ERR_INVALID_ARG);
    cr_assert_eq(d->ops->adagrad(d, &as[0], &ac, NULL), ZC_ERR_INVALID_ARG);
    cr_assert(!memcmp(p[0], p[1], sizeof p[0]) && !memcmp(st[0], st[1], sizeof st[0]),
              "a refused shard was written");
}
