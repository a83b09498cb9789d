/* Adam/AdamW with AVX-512 (16 lanes), one fused pass per shard.
 *
 * Built twice, each as its own static library with only its flags
 * (meson.build):
 *   zc__adam_avx512      -mavx512f -mavx512bw: bf16 copy by integer rounding;
 *   zc__adam_avx512bf16  adds -mavx512dq -mavx512bf16 and ZC_ADAM_BF16_INSN:
 *                        bf16 copy by vcvtneps2bf16.
 * As in adam_avx2.c the body evaluates exactly zc__adam_elem's operations in
 * its order without FMA, so both agree with the scalar reference bitwise; the
 * DeepSpeed arithmetic's bodies (adam.h) evaluate zc__adam_elem_ds's
 * operations with vfmadd where it has fmaf, bitwise alike too. */
#include <immintrin.h>
#include <string.h>

#include "optim/adam_elem.h"
#include "optim/adam_isa.h"

#ifdef ZC_ADAM_BF16_INSN
#define KERNEL_NAME zc__adam_avx512bf16
#else
#define KERNEL_NAME zc__adam_avx512
#endif

#define ZC_INLINE static inline __attribute__((always_inline))

#ifndef ZC_ADAM_AVX512_PREFETCH
#define ZC_ADAM_AVX512_PREFETCH 512
#endif

typedef struct k16 {
    __m512 b1, b2, omb1, omb2, eps, ss, bc2r, dd, l2, gs;
    __m512 nss, ndd; /* -step_size, -decoupled_decay: the DeepSpeed arithmetic's */
} k16;

enum { WD_L2 = 1, WD_DECOUPLED = 2 }; /* mask of the non-zero decay terms */

ZC_INLINE __m512 load_grad(const void *g, size_t i, zc_dtype gdt)
{
    if (gdt == ZC_DTYPE_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)g + i)));
    if (gdt == ZC_DTYPE_BF16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)g + i));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    return _mm512_loadu_ps((const float *)g + i);
}

/* fp32 -> bf16, round to nearest even, every NaN -> 0x7FC0 (base/dtype.h). */
ZC_INLINE __m256i to_bf16_int(__m512 p)
{
    __m512i x = _mm512_castps_si512(p);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    r = _mm512_srli_epi32(r, 16);
    __mmask16 nan = _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fc0));
    return _mm512_cvtepi32_epi16(r);
}

ZC_INLINE __m256i to_bf16(__m512 p)
{
#ifdef ZC_ADAM_BF16_INSN
    /* vcvtneps2bf16 rounds to nearest even but flushes denormal inputs to
     * zero and keeps NaN payloads; those (rare) vectors take the integer path
     * so the result matches base/dtype.h. fpclass: 0x01 QNaN, 0x20 denormal,
     * 0x80 SNaN. */
    if (_mm512_fpclass_ps_mask(p, 0xa1))
        return to_bf16_int(p);
    __m256bh h = _mm512_cvtneps_pbh(p);
    __m256i r;
    memcpy(&r, &h, sizeof r);
    return r;
#else
    return to_bf16_int(p);
#endif
}

ZC_INLINE void store_f32(float *dst, __m512 x, bool nt)
{
    if (nt)
        _mm512_stream_ps(dst, x);
    else
        _mm512_storeu_ps(dst, x);
}

ZC_INLINE void store_h16(void *dst, size_t i, __m256i h, bool nt)
{
    __m256i *q = (__m256i *)((uint16_t *)dst + i);
    if (nt)
        _mm256_stream_si256(q, h);
    else
        _mm256_storeu_si256(q, h);
}

ZC_INLINE void body(const zc_adam_shard *s, const k16 *kp, size_t lo, size_t hi, zc_dtype gdt,
                    int odt, int wd, bool nt, bool ds)
{
    float *restrict mp = s->master, *restrict mm = s->m, *restrict vv = s->v;
    const void *restrict gp = s->grad;
    void *restrict op = s->param_out;
    const k16 k = *kp;
    for (size_t i = lo; i < hi; i += 16) {
        /* One 64-byte line of each fp32 stream per iteration: prefetch the
         * line ZC_ADAM_AVX512_PREFETCH bytes ahead (the distance measured best
         * for the AVX2 body; not yet measured on an AVX-512 machine). */
        const size_t pf = ZC_ADAM_AVX512_PREFETCH / sizeof(float);
        _mm_prefetch((const char *)(mp + i + pf), _MM_HINT_T0);
        _mm_prefetch((const char *)(mm + i + pf), _MM_HINT_T0);
        _mm_prefetch((const char *)(vv + i + pf), _MM_HINT_T0);
        _mm_prefetch((const char *)gp + (i + pf) * (gdt == ZC_DTYPE_F32 ? 4 : 2), _MM_HINT_T0);
        __m512 p = _mm512_load_ps(mp + i);
        __m512 g = _mm512_mul_ps(load_grad(gp, i, gdt), k.gs);
        __m512 m, v;
        if (ds) {
            /* zc__adam_elem_ds: fmaf(a, b, c) is _mm512_fmadd_ps(a, b, c). */
            if (wd & WD_L2)
                g = _mm512_fmadd_ps(p, k.l2, g);
            m = _mm512_fmadd_ps(g, k.omb1, _mm512_mul_ps(_mm512_loadu_ps(mm + i), k.b1));
            v = _mm512_fmadd_ps(_mm512_mul_ps(g, g), k.omb2,
                                _mm512_mul_ps(_mm512_loadu_ps(vv + i), k.b2));
            __m512 d = _mm512_fmadd_ps(_mm512_sqrt_ps(v), k.bc2r, k.eps);
            __m512 u = _mm512_div_ps(m, d);
            if (wd & WD_DECOUPLED)
                p = _mm512_fmadd_ps(p, k.ndd, p);
            p = _mm512_fmadd_ps(u, k.nss, p);
        } else {
            if (wd & WD_L2)
                g = _mm512_add_ps(g, _mm512_mul_ps(k.l2, p));
            m = _mm512_add_ps(_mm512_mul_ps(k.b1, _mm512_loadu_ps(mm + i)),
                              _mm512_mul_ps(k.omb1, g));
            v = _mm512_add_ps(_mm512_mul_ps(k.b2, _mm512_loadu_ps(vv + i)),
                              _mm512_mul_ps(_mm512_mul_ps(k.omb2, g), g));
            __m512 d = _mm512_add_ps(_mm512_mul_ps(_mm512_sqrt_ps(v), k.bc2r), k.eps);
            if (wd & WD_DECOUPLED)
                p = _mm512_sub_ps(p, _mm512_mul_ps(k.dd, p));
            p = _mm512_sub_ps(p, _mm512_mul_ps(k.ss, _mm512_div_ps(m, d)));
        }
        store_f32(mm + i, m, nt);
        store_f32(vv + i, v, nt);
        store_f32(mp + i, p, nt);
        if (odt == ZC_DTYPE_F32)
            store_f32((float *)op + i, p, nt);
        else if (odt == ZC_DTYPE_F16)
            store_h16(op, i, _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                      nt);
        else if (odt == ZC_DTYPE_BF16)
            store_h16(op, i, to_bf16(p), nt);
    }
}

typedef void (*body_fn)(const zc_adam_shard *s, const k16 *k, size_t lo, size_t hi);

/* One specialisation per (arithmetic, gradient dtype, decay mode, store kind,
 * copy dtype); A is the arithmetic (ZC_ADAM_ARITH_*), O the copy dtype + 1
 * (0: no copy). */
_Static_assert(ZC_DTYPE_F32 == 0 && ZC_DTYPE_F16 == 1 && ZC_DTYPE_BF16 == 2, "dtype values");
_Static_assert(ZC_ADAM_ARITH_ZEROC == 0 && ZC_ADAM_ARITH_DEEPSPEED == 1, "arith values");
#define ZC_BODY(A, G, W, NT, O)                                                          \
    static void body_##A##_##G##_##W##_##NT##_##O(const zc_adam_shard *s, const k16 *k, \
                                                  size_t lo, size_t hi)                 \
    {                                                                                   \
        body(s, k, lo, hi, ZC_DTYPE_##G, (O) - 1, W, NT, A);                            \
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

void KERNEL_NAME(const zc_adam_shard *s, const zc_adam_coeffs *c, unsigned flags)
{
    size_t n = s->n;
    /* Head: up to the first 64-byte aligned master address. */
    size_t head = ((64u - ((uintptr_t)s->master & 63u)) & 63u) / sizeof(float);
    if (head > n)
        head = n;
    size_t vec_end = head + (n - head) / 16 * 16;
    int odt = s->param_out ? (int)s->param_out_dtype : -1;

    bool nt = (flags & ZC_ADAM_NT) != 0;
    if (nt) {
        nt = ((uintptr_t)(s->m + head) & 63u) == 0 && ((uintptr_t)(s->v + head) & 63u) == 0;
        if (nt && s->param_out) {
            uintptr_t o = (uintptr_t)s->param_out + head * zc_dtype_size(s->param_out_dtype);
            nt = (o & (s->param_out_dtype == ZC_DTYPE_F32 ? 63u : 31u)) == 0;
        }
    }

    k16 k = {
        .b1 = _mm512_set1_ps(c->beta1), .b2 = _mm512_set1_ps(c->beta2),
        .omb1 = _mm512_set1_ps(c->one_minus_beta1), .omb2 = _mm512_set1_ps(c->one_minus_beta2),
        .eps = _mm512_set1_ps(c->eps), .ss = _mm512_set1_ps(c->step_size),
        .bc2r = _mm512_set1_ps(c->bc2_rsqrt), .dd = _mm512_set1_ps(c->decoupled_decay),
        .l2 = _mm512_set1_ps(c->l2_decay), .gs = _mm512_set1_ps(s->grad_scale),
        .nss = _mm512_set1_ps(-c->step_size), .ndd = _mm512_set1_ps(-c->decoupled_decay),
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
