/* Lion with AVX-512 (16 lanes), one fused pass per shard.
 *
 * Built in the AVX-512 library with -mavx512f -mavx512bw -ffp-contract=off
 * (meson.build); the dispatcher calls it only when the CPU has them. The
 * vector body evaluates zc__lion_elem's operations in its order without FMA
 * (lion.h), the sign rules with integer bit operations and mask compares
 * that give the same bits as copysignf and `c > 0`, so it agrees with the
 * scalar reference bitwise; the tail shorter than a vector uses zc__lion_elem itself. */
#include "optim/ew_avx512.h"
#include "optim/lion.h"
#include "optim/lion_elem.h"

typedef struct lk16 {
    __m512 b1, b2, omb1, omb2, lr, nlr, decay;
    __m512i sign;
    bool decayed, gt0;
} lk16;

ZC_EW_INLINE void body(const zc_lion_shard *s, const lk16 *kp, size_t lo, size_t hi,
                       zc_dtype gdt, int odt)
{
    float *restrict mp = s->master, *restrict mm = s->m;
    const void *restrict gp = s->grad;
    void *restrict op = s->param_out;
    const lk16 k = *kp;
    const __m512 gs = _mm512_set1_ps(s->grad_scale);
    for (size_t i = lo; i < hi; i += 16) {
        __m512 p = _mm512_loadu_ps(mp + i);
        __m512 m = _mm512_loadu_ps(mm + i);
        __m512 g = _mm512_mul_ps(zc__ew16_load(gp, i, gdt), gs);
        __m512 c = _mm512_add_ps(_mm512_mul_ps(k.b1, m), _mm512_mul_ps(k.omb1, g));
        __m512 u;
        if (k.gt0) /* c > 0 (ordered: false for NaN) ? lr : -lr */
            u = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(c, _mm512_setzero_ps(), _CMP_GT_OQ),
                                     k.nlr, k.lr);
        else /* copysignf(lr, c), in integer lanes (the float bit operations need DQ) */
            u = _mm512_castsi512_ps(_mm512_or_si512(
                _mm512_andnot_si512(k.sign, _mm512_castps_si512(k.lr)),
                _mm512_and_si512(k.sign, _mm512_castps_si512(c))));
        u = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q), u, k.nlr); /* NaN c */
        if (k.decayed)
            p = _mm512_mul_ps(p, k.decay);
        p = _mm512_sub_ps(p, u);
        m = _mm512_add_ps(_mm512_mul_ps(k.b2, m), _mm512_mul_ps(k.omb2, g));
        _mm512_storeu_ps(mp + i, p);
        _mm512_storeu_ps(mm + i, m);
        zc__ew16_store_copy(op, i, p, odt);
    }
}

/* One specialisation per (gradient dtype, copy dtype) keeps the loads and
 * stores free of per-vector branches. */
#define ZC_LION_BODY(G, O)                                                             \
    static void body_##G##_##O(const zc_lion_shard *s, const lk16 *k, size_t lo, size_t hi) \
    {                                                                                  \
        body(s, k, lo, hi, ZC_DTYPE_##G, (O) - 1);                                     \
    }
#define ZC_LION_BODIES(G) ZC_LION_BODY(G, 0) ZC_LION_BODY(G, 1) ZC_LION_BODY(G, 2) ZC_LION_BODY(G, 3)
_Static_assert(ZC_DTYPE_F32 == 0 && ZC_DTYPE_F16 == 1 && ZC_DTYPE_BF16 == 2, "dtype values");
ZC_LION_BODIES(F32)
ZC_LION_BODIES(F16)
ZC_LION_BODIES(BF16)
typedef void (*body_fn)(const zc_lion_shard *s, const lk16 *k, size_t lo, size_t hi);
/* [grad dtype][copy dtype + 1] */
static const body_fn bodies[3][4] = {
    {body_F32_0, body_F32_1, body_F32_2, body_F32_3},
    {body_F16_0, body_F16_1, body_F16_2, body_F16_3},
    {body_BF16_0, body_BF16_1, body_BF16_2, body_BF16_3},
};

void zc__lion_avx512(const zc_lion_shard *s, const zc_lion_coeffs *c)
{
    const size_t vec_end = s->n / 16 * 16;
    const int odt = s->param_out ? (int)s->param_out_dtype : -1;
    const lk16 k = {
        .b1 = _mm512_set1_ps(c->beta1), .b2 = _mm512_set1_ps(c->beta2),
        .omb1 = _mm512_set1_ps(c->one_minus_beta1), .omb2 = _mm512_set1_ps(c->one_minus_beta2),
        .lr = _mm512_set1_ps(c->lr), .nlr = _mm512_set1_ps(-c->lr),
        .decay = _mm512_set1_ps(c->decay), .sign = _mm512_set1_epi32((int)0x80000000u),
        .decayed = c->decay != 1.0f, .gt0 = c->sign_rule == ZC_LION_SIGN_GT0,
    };
    if (vec_end > 0)
        bodies[s->grad_dtype][odt + 1](s, &k, 0, vec_end);
    for (size_t i = vec_end; i < s->n; i++)
        zc__lion_elem(s, c, i);
}
