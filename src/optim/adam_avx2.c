/* Adam/AdamW with AVX2, FMA and F16C (8 lanes), one fused pass per shard.
 *
 * Built as its own static library with -mavx2 -mfma -mf16c -ffp-contract=off
 * (meson.build): only this file may contain those instructions, and the
 * dispatcher calls it only when the CPU has them. The vector body evaluates
 * exactly the operations of zc__adam_elem in the same order, without FMA (a
 * fused m or p update can differ from the reference by many ulp when its two
 * terms cancel), and sqrt/div are correctly rounded, so this variant agrees
 * with the scalar reference bitwise; heads and tails use zc__adam_elem itself.
 * The DeepSpeed arithmetic (adam.h) has bodies of its own that evaluate
 * zc__adam_elem_ds's operations with vfmadd where it has fmaf, so they too
 * agree with the reference bitwise.
 *
 * Memory: the loop streams master, m, v (read and write), the gradient (read)
 * and the 16-bit copy (write). With ZC_ADAM_NT (shards larger than the caches)
 * the outputs use non-temporal stores, which skip the read-for-ownership of the
 * write-only copy and keep the written lines from evicting what is still to be
 * read. */
#include <immintrin.h>

#include "optim/adam_elem.h"
#include "optim/adam_isa.h"

#define ZC_INLINE static inline __attribute__((always_inline))

typedef struct k8 {
    __m256 b1, b2, omb1, omb2, eps, ss, bc2r, dd, l2, gs;
    __m256 nss, ndd; /* -step_size, -decoupled_decay: the DeepSpeed arithmetic's */
    bool scaled;     /* grad_scale != 1 */
} k8;

/* Weight-decay mode: a mask of the decay terms that are non-zero
 * (zc__adam_elem skips a zero one; so do the vector bodies). */
enum { WD_L2 = 1, WD_DECOUPLED = 2 };

ZC_INLINE __m256 load_grad(const void *g, size_t i, zc_dtype gdt)
{
    if (gdt == ZC_DTYPE_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)g + i)));
    if (gdt == ZC_DTYPE_BF16) {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)g + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    return _mm256_loadu_ps((const float *)g + i);
}

/* fp32 -> bf16 in the low half of each 32-bit lane, round to nearest even
 * (add 0x7fff plus the lowest kept bit); NaN lanes are not handled here. */
ZC_INLINE __m256i bf16_round(__m256 p)
{
    __m256i x = _mm256_castps_si256(p);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    return _mm256_srli_epi32(r, 16);
}

/* Every NaN lane -> 0x7FC0 (base/dtype.h's rule). */
ZC_INLINE __m256i bf16_fix_nan(__m256i r, __m256 p)
{
    __m256 nan = _mm256_cmp_ps(p, p, _CMP_UNORD_Q);
    return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), _mm256_castps_si256(nan));
}

ZC_INLINE __m128i to_bf16(__m256 p)
{
    __m256i r = bf16_fix_nan(bf16_round(p), p);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

/* Sixteen bf16 values (p0 then p1) in one register: the lane-wise pack
 * interleaves 128-bit halves, the permute puts them back in order. One
 * unordered compare of p0 with p1 finds a NaN in either, so the NaN fix-up
 * (two more vector operations per vector, on the ports the divider also
 * needs) runs only for the rare vectors that hold one. */
ZC_INLINE __m256i to_bf16x2(__m256 p0, __m256 p1)
{
    __m256i r0 = bf16_round(p0), r1 = bf16_round(p1);
    if (__builtin_expect(_mm256_movemask_ps(_mm256_cmp_ps(p0, p1, _CMP_UNORD_Q)) != 0, 0)) {
        r0 = bf16_fix_nan(r0, p0);
        r1 = bf16_fix_nan(r1, p1);
    }
    return _mm256_permute4x64_epi64(_mm256_packus_epi32(r0, r1), 0xd8);
}

ZC_INLINE void store_f32(float *dst, __m256 x, bool nt)
{
    if (nt)
        _mm256_stream_ps(dst, x);
    else
        _mm256_storeu_ps(dst, x);
}

ZC_INLINE void store_h16(void *dst, size_t i, __m128i h, bool nt)
{
    __m128i *q = (__m128i *)((uint16_t *)dst + i);
    if (nt)
        _mm_stream_si128(q, h);
    else
        _mm_storeu_si128(q, h);
}

/* Software prefetch distance in bytes of the fp32 streams (0: none). 512
 * (8 iterations ahead) measured best of 0/256/512/1024 on the 2-core Zen 3
 * VM at 64M parameters, 1 and 2 threads (bench/RESULTS.md). */
#ifndef ZC_ADAM_AVX2_PREFETCH
#define ZC_ADAM_AVX2_PREFETCH 512
#endif

/* One vector of 8 elements: the Adam update of master/m/v at i, returning
 * the new parameter (for the copy). ds: the DeepSpeed arithmetic. */
ZC_INLINE __m256 step8(float *restrict mp, float *restrict mm, float *restrict vv,
                       const void *restrict gp, size_t i, const k8 *k, zc_dtype gdt, int wd,
                       bool nt, bool ds)
{
    __m256 p = _mm256_load_ps(mp + i);
    __m256 g = load_grad(gp, i, gdt);
    if (k->scaled) /* x * 1.0f is x exactly: skip it (a branch, not a vector op) */
        g = _mm256_mul_ps(g, k->gs);
    if (ds) {
        /* zc__adam_elem_ds: fmaf(a, b, c) is _mm256_fmadd_ps(a, b, c). */
        if (wd & WD_L2)
            g = _mm256_fmadd_ps(p, k->l2, g);
        __m256 m = _mm256_fmadd_ps(g, k->omb1, _mm256_mul_ps(_mm256_loadu_ps(mm + i), k->b1));
        __m256 v = _mm256_fmadd_ps(_mm256_mul_ps(g, g), k->omb2,
                                   _mm256_mul_ps(_mm256_loadu_ps(vv + i), k->b2));
        __m256 d = _mm256_fmadd_ps(_mm256_sqrt_ps(v), k->bc2r, k->eps);
        __m256 u = _mm256_div_ps(m, d);
        if (wd & WD_DECOUPLED)
            p = _mm256_fmadd_ps(p, k->ndd, p);
        p = _mm256_fmadd_ps(u, k->nss, p);
        store_f32(mm + i, m, nt);
        store_f32(vv + i, v, nt);
        store_f32(mp + i, p, nt);
        return p;
    }
    if (wd & WD_L2)
        g = _mm256_add_ps(g, _mm256_mul_ps(k->l2, p));
    __m256 m = _mm256_add_ps(_mm256_mul_ps(k->b1, _mm256_loadu_ps(mm + i)),
                             _mm256_mul_ps(k->omb1, g));
    __m256 v = _mm256_add_ps(_mm256_mul_ps(k->b2, _mm256_loadu_ps(vv + i)),
                             _mm256_mul_ps(_mm256_mul_ps(k->omb2, g), g));
    __m256 d = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(v), k->bc2r), k->eps);
    if (wd & WD_DECOUPLED)
        p = _mm256_sub_ps(p, _mm256_mul_ps(k->dd, p));
    p = _mm256_sub_ps(p, _mm256_mul_ps(k->ss, _mm256_div_ps(m, d)));
    store_f32(mm + i, m, nt);
    store_f32(vv + i, v, nt);
    store_f32(mp + i, p, nt);
    return p;
}

/* Two vectors (16 elements, one 64-byte line of each fp32 stream) per
 * iteration: one prefetch per line, and the 16-bit copy of both vectors
 * packed into one 32-byte store. */
ZC_INLINE void body(const zc_adam_shard *s, const k8 *kp, size_t lo, size_t hi, zc_dtype gdt,
                    int odt, int wd, bool nt, bool ds)
{
    /* Everything the loop touches in locals: stores through the buffers could
     * alias *s and *kp as far as the compiler knows. */
    float *restrict mp = s->master, *restrict mm = s->m, *restrict vv = s->v;
    const void *restrict gp = s->grad;
    void *restrict op = s->param_out;
    const k8 k = *kp;
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
#if ZC_ADAM_AVX2_PREFETCH
        const size_t pf = ZC_ADAM_AVX2_PREFETCH / sizeof(float);
        _mm_prefetch((const char *)(mp + i + pf), _MM_HINT_T0);
        _mm_prefetch((const char *)(mm + i + pf), _MM_HINT_T0);
        _mm_prefetch((const char *)(vv + i + pf), _MM_HINT_T0);
        _mm_prefetch((const char *)gp + (i + pf) * (gdt == ZC_DTYPE_F32 ? 4 : 2), _MM_HINT_T0);
#endif
        __m256 p0 = step8(mp, mm, vv, gp, i, &k, gdt, wd, nt, ds);
        __m256 p1 = step8(mp, mm, vv, gp, i + 8, &k, gdt, wd, nt, ds);
        if (odt == ZC_DTYPE_F32) {
            store_f32((float *)op + i, p0, nt);
            store_f32((float *)op + i + 8, p1, nt);
        } else if (odt == ZC_DTYPE_F16) {
            store_h16(op, i, _mm256_cvtps_ph(p0, _MM_FROUND_TO_NEAREST_INT), nt);
            store_h16(op, i + 8, _mm256_cvtps_ph(p1, _MM_FROUND_TO_NEAREST_INT), nt);
        } else if (odt == ZC_DTYPE_BF16) {
            __m256i *q = (__m256i *)((uint16_t *)op + i);
            if (nt && ((uintptr_t)q & 31u) == 0)
                _mm256_stream_si256(q, to_bf16x2(p0, p1));
            else
                _mm256_storeu_si256(q, to_bf16x2(p0, p1));
        }
    }
    for (; i < hi; i += 8) {
        __m256 p = step8(mp, mm, vv, gp, i, &k, gdt, wd, nt, ds);
        if (odt == ZC_DTYPE_F32)
            store_f32((float *)op + i, p, nt);
        else if (odt == ZC_DTYPE_F16)
            store_h16(op, i, _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT), nt);
        else if (odt == ZC_DTYPE_BF16)
            store_h16(op, i, to_bf16(p), nt);
    }
}

typedef void (*body_fn)(const zc_adam_shard *s, const k8 *k, size_t lo, size_t hi);

/* One specialisation per (arithmetic, gradient dtype, decay mode, store kind,
 * copy dtype), so the inner loop carries no branches. A is the arithmetic
 * (ZC_ADAM_ARITH_*), O the copy dtype + 1 (0: no copy). */
_Static_assert(ZC_DTYPE_F32 == 0 && ZC_DTYPE_F16 == 1 && ZC_DTYPE_BF16 == 2, "dtype values");
_Static_assert(ZC_ADAM_ARITH_ZEROC == 0 && ZC_ADAM_ARITH_DEEPSPEED == 1, "arith values");
#define ZC_BODY(A, G, W, NT, O)                                                         \
    static void body_##A##_##G##_##W##_##NT##_##O(const zc_adam_shard *s, const k8 *k, \
                                                  size_t lo, size_t hi)                \
    {                                                                                  \
        body(s, k, lo, hi, ZC_DTYPE_##G, (O) - 1, W, NT, A);                           \
    }
#define ZC_BODIES2(A, G, W, NT) \
    ZC_BODY(A, G, W, NT, 0) ZC_BODY(A, G, W, NT, 1) ZC_BODY(A, G, W, NT, 2) ZC_BODY(A, G, W, NT, 3)
#define ZC_BODIES(A, G)                                                                         \
    ZC_BODIES2(A, G, 0, 0) ZC_BODIES2(A, G, 1, 0) ZC_BODIES2(A, G, 2, 0) ZC_BODIES2(A, G, 3, 0) \
    ZC_BODIES2(A, G, 0, 1) ZC_BODIES2(A, G, 1, 1) ZC_BODIES2(A, G, 2, 1) ZC_BODIES2(A, G, 3, 1)
ZC_BODIES(0, F32)
ZC_BODIES(0, F16)
ZC_BODIES(0, BF16)
ZC_BODIES(1, F32)
ZC_BODIES(1, F16)
ZC_BODIES(1, BF16)

#define ZC_ROW2(A, G, W, NT)                                                           \
    {body_##A##_##G##_##W##_##NT##_0, body_##A##_##G##_##W##_##NT##_1,                \
     body_##A##_##G##_##W##_##NT##_2, body_##A##_##G##_##W##_##NT##_3}
#define ZC_ROW(A, G)                                                                   \
    {{ZC_ROW2(A, G, 0, 0), ZC_ROW2(A, G, 0, 1)}, {ZC_ROW2(A, G, 1, 0), ZC_ROW2(A, G, 1, 1)}, \
     {ZC_ROW2(A, G, 2, 0), ZC_ROW2(A, G, 2, 1)}, {ZC_ROW2(A, G, 3, 0), ZC_ROW2(A, G, 3, 1)}}
/* [arithmetic][grad dtype][decay mode][nt][copy dtype + 1] */
static const body_fn bodies[2][3][4][2][4] = {
    {ZC_ROW(0, F32), ZC_ROW(0, F16), ZC_ROW(0, BF16)},
    {ZC_ROW(1, F32), ZC_ROW(1, F16), ZC_ROW(1, BF16)},
};

void zc__adam_avx2(const zc_adam_shard *s, const zc_adam_coeffs *c, unsigned flags)
{
    size_t n = s->n;
    /* Head: elements up to the first 32-byte aligned master address, so the
     * vector loop's master loads and stores are aligned. */
    size_t head = ((32u - ((uintptr_t)s->master & 31u)) & 31u) / sizeof(float);
    if (head > n)
        head = n;
    size_t vec_end = head + (n - head) / 8 * 8;
    int odt = s->param_out ? (int)s->param_out_dtype : -1;

    /* Non-temporal stores need every output aligned at the loop start; the
     * engine's shards are (64-byte aligned buffers, 64-element shards). */
    bool nt = (flags & ZC_ADAM_NT) != 0;
    if (nt) {
        uintptr_t a = (uintptr_t)(s->master + head);
        nt = ((uintptr_t)(s->m + head) & 31u) == 0 && ((uintptr_t)(s->v + head) & 31u) == 0 &&
             (a & 31u) == 0;
        if (nt && s->param_out) {
            uintptr_t o = (uintptr_t)s->param_out + head * zc_dtype_size(s->param_out_dtype);
            nt = (o & (s->param_out_dtype == ZC_DTYPE_F32 ? 31u : 15u)) == 0;
        }
    }

    k8 k = {
        .b1 = _mm256_set1_ps(c->beta1), .b2 = _mm256_set1_ps(c->beta2),
        .omb1 = _mm256_set1_ps(c->one_minus_beta1), .omb2 = _mm256_set1_ps(c->one_minus_beta2),
        .eps = _mm256_set1_ps(c->eps), .ss = _mm256_set1_ps(c->step_size),
        .bc2r = _mm256_set1_ps(c->bc2_rsqrt), .dd = _mm256_set1_ps(c->decoupled_decay),
        .l2 = _mm256_set1_ps(c->l2_decay), .gs = _mm256_set1_ps(s->grad_scale),
        .nss = _mm256_set1_ps(-c->step_size), .ndd = _mm256_set1_ps(-c->decoupled_decay),
        .scaled = s->grad_scale != 1.0f,
    };
    const int ar = c->arith == ZC_ADAM_ARITH_DEEPSPEED ? 1 : 0;
    int wd = (c->l2_decay != 0.0f ? WD_L2 : 0) | (c->decoupled_decay != 0.0f ? WD_DECOUPLED : 0);
    for (size_t i = 0; i < head; i++)
        zc__adam_elem_any(s, c, i);
    if (vec_end > head)
        bodies[ar][s->grad_dtype][wd][nt][odt + 1](s, &k, head, vec_end);
    for (size_t i = vec_end; i < n; i++)
        zc__adam_elem_any(s, c, i);
    if (nt)
        _mm_sfence(); /* order the streaming stores before the pool's completion signal */
}
