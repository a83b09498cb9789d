/* Lion with AVX2 (8 lanes), one fused pass per shard.
 *
 * Built in the AVX2 library with -mavx2 -mfma -mf16c -ffp-contract=off
 * (meson.build); the dispatcher calls it only when the CPU has them. The
 * vector body evaluates zc__lion_elem's operations in its order without FMA
 * (lion.h), the sign rules with bit operations and compares that give the
 * same bits as copysignf and `c > 0`, so it agrees with the scalar reference
 * bitwise; the tail shorter than a vector uses zc__lion_elem itself. */
#include "optim/ew_avx2.h"
#include "optim/lion.h"
#include "optim/lion_elem.h"

typedef struct lk8 {
    __m256 b1, b2, omb1, omb2, lr, nlr, decay, sign;
    bool decayed, gt0;
} lk8;

ZC_EW_INLINE void body(const zc_lion_shard *s, const lk8 *kp, size_t lo, size_t hi,
                       zc_dtype gdt, int odt)
{
    float *restrict mp = s->master, *restrict mm = s->m;
    const void *restrict gp = s->grad;
    void *restrict op = s->param_out;
    const lk8 k = *kp;
    const __m256 gs = _mm256_set1_ps(s->grad_scale);
    for (size_t i = lo; i < hi; i += 8) {
        __m256 p = _mm256_loadu_ps(mp + i);
        __m256 m = _mm256_loadu_ps(mm + i);
        __m256 g = _mm256_mul_ps(zc__ew8_load(gp, i, gdt), gs);
        __m256 c = _mm256_add_ps(_mm256_mul_ps(k.b1, m), _mm256_mul_ps(k.omb1, g));
        __m256 u;
        if (k.gt0) /* c > 0 (ordered: false for NaN) ? lr : -lr */
            u = _mm256_blendv_ps(k.nlr, k.lr, _mm256_cmp_ps(c, _mm256_setzero_ps(), _CMP_GT_OQ));
        else /* copysignf(lr, c): |lr| with c's sign bit */
            u = _mm256_or_ps(_mm256_andnot_ps(k.sign, k.lr), _mm256_and_ps(k.sign, c));
        u = _mm256_blendv_ps(u, k.nlr, _mm256_cmp_ps(c, c, _CMP_UNORD_Q)); /* NaN c: -lr */
        if (k.decayed)
            p = _mm256_mul_ps(p, k.decay);
        p = _mm256_sub_ps(p, u);
        m = _mm256_add_ps(_mm256_mul_ps(k.b2, m), _mm256_mul_ps(k.omb2, g));
        _mm256_storeu_ps(mp + i, p);
        _mm256_storeu_ps(mm + i, m);
        zc__ew8_store_copy(op, i, p, odt);
    }
}

/* One specialisation per (gradient dtype, copy dtype) keeps the loads and
 * stores free of per-vector branches. */
#define ZC_LION_BODY(G, O)                                                             \
    static void body_##G##_##O(const zc_lion_shard *s, const lk8 *k, size_t lo, size_t hi) \
    {                                                                                  \
        body(s, k, lo, hi, ZC_DTYPE_##G, (O) - 1);                                     \
    }
#define ZC_LION_BODIES(G) ZC_LION_BODY(G, 0) ZC_LION_BODY(G, 1) ZC_LION_BODY(G, 2) ZC_LION_BODY(G, 3)
_Static_assert(ZC_DTYPE_F32 == 0 && ZC_DTYPE_F16 == 1 && ZC_DTYPE_BF16 == 2, "dtype values");
ZC_LION_BODIES(F32)
ZC_LION_BODIES(F16)
ZC_LION_BODIES(BF16)
typedef void (*body_fn)(const zc_lion_shard *s, const lk8 *k, size_t lo, size_t hi);
/* [grad dtype][copy dtype + 1] */
static const body_fn bodies[3][4] = {
    {body_F32_0, body_F32_1, body_F32_2, body_F32_3},
    {body_F16_0, body_F16_1, body_F16_2, body_F16_3},
    {body_BF16_0, body_BF16_1, body_BF16_2, body_BF16_3},
};

void zc__lion_avx2(const zc_lion_shard *s, const zc_lion_coeffs *c)
{
    const size_t vec_end = s->n / 8 * 8;
    const int odt = s->param_out ? (int)s->param_out_dtype : -1;
    const lk8 k = {
        .b1 = _mm256_set1_ps(c->beta1), .b2 = _mm256_set1_ps(c->beta2),
        .omb1 = _mm256_set1_ps(c->one_minus_beta1), .omb2 = _mm256_set1_ps(c->one_minus_beta2),
        .lr = _mm256_set1_ps(c->lr), .nlr = _mm256_set1_ps(-c->lr),
        .decay = _mm256_set1_ps(c->decay), .sign = _mm256_set1_ps(-0.0f),
        .decayed = c->decay != 1.0f, .gt0 = c->sign_rule == ZC_LION_SIGN_GT0,
    };
    if (vec_end > 0)
        bodies[s->grad_dtype][odt + 1](s, &k, 0, vec_end);
    for (size_t i = vec_end; i < s->n; i++)
        zc__lion_elem(s, c, i);
}
