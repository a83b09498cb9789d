/* Adagrad with AVX2 (8 lanes), one fused pass per shard.
 *
 * Built in the AVX2 library with -mavx2 -mfma -mf16c -ffp-contract=off
 * (meson.build); the dispatcher calls it only when the CPU has them. The
 * vector body evaluates zc__adagrad_elem's operations in its order without
 * FMA, with the correctly rounded vsqrtps and vdivps (adagrad.h), so it
 * agrees with the scalar reference bitwise; the tail shorter than a vector
 * uses zc__adagrad_elem itself. */
#include "optim/adagrad.h"
#include "optim/adagrad_elem.h"
#include "optim/ew_avx2.h"

typedef struct ak8 {
    __m256 ss, eps, l2;
    bool l2_on, decayed_num;
} ak8;

ZC_EW_INLINE void body(const zc_adagrad_shard *s, const ak8 *kp, size_t lo, size_t hi,
                       zc_dtype gdt, int odt)
{
    float *restrict mp = s->master, *restrict sp = s->sum;
    const void *restrict gp = s->grad;
    void *restrict op = s->param_out;
    const ak8 k = *kp;
    const __m256 gs = _mm256_set1_ps(s->grad_scale);
    for (size_t i = lo; i < hi; i += 8) {
        __m256 p = _mm256_loadu_ps(mp + i);
        __m256 g = _mm256_mul_ps(zc__ew8_load(gp, i, gdt), gs);
        __m256 gd = g;
        if (k.l2_on)
            gd = _mm256_add_ps(g, _mm256_mul_ps(k.l2, p));
        __m256 sum = _mm256_add_ps(_mm256_loadu_ps(sp + i), _mm256_mul_ps(gd, gd));
        __m256 d = _mm256_add_ps(_mm256_sqrt_ps(sum), k.eps);
        __m256 num = k.decayed_num ? gd : g;
        p = _mm256_sub_ps(p, _mm256_mul_ps(k.ss, _mm256_div_ps(num, d)));
        _mm256_storeu_ps(mp + i, p);
        _mm256_storeu_ps(sp + i, sum);
        zc__ew8_store_copy(op, i, p, odt);
    }
}

/* One specialisation per (gradient dtype, copy dtype) keeps the loads and
 * stores free of per-vector branches. */
#define ZC_ADAGRAD_BODY(G, O)                                                         \
    static void body_##G##_##O(const zc_adagrad_shard *s, const ak8 *k, size_t lo, \
                               size_t hi)                                         \
    {                                                                             \
        body(s, k, lo, hi, ZC_DTYPE_##G, (O) - 1);                                \
    }
#define ZC_ADAGRAD_BODIES(G) \
    ZC_ADAGRAD_BODY(G, 0) ZC_ADAGRAD_BODY(G, 1) ZC_ADAGRAD_BODY(G, 2) ZC_ADAGRAD_BODY(G, 3)
_Static_assert(ZC_DTYPE_F32 == 0 && ZC_DTYPE_F16 == 1 && ZC_DTYPE_BF16 == 2, "dtype values");
ZC_ADAGRAD_BODIES(F32)
ZC_ADAGRAD_BODIES(F16)
ZC_ADAGRAD_BODIES(BF16)
typedef void (*body_fn)(const zc_adagrad_shard *s, const ak8 *k, size_t lo, size_t hi);
/* [grad dtype][copy dtype + 1] */
static const body_fn bodies[3][4] = {
    {body_F32_0, body_F32_1, body_F32_2, body_F32_3},
    {body_F16_0, body_F16_1, body_F16_2, body_F16_3},
    {body_BF16_0, body_BF16_1, body_BF16_2, body_BF16_3},
};

void zc__adagrad_avx2(const zc_adagrad_shard *s, const zc_adagrad_coeffs *c)
{
    const size_t vec_end = s->n / 8 * 8;
    const int odt = s->param_out ? (int)s->param_out_dtype : -1;
    const ak8 k = {
        .ss = _mm256_set1_ps(c->step_size), .eps = _mm256_set1_ps(c->eps),
        .l2 = _mm256_set1_ps(c->l2_decay), .l2_on = c->l2_decay != 0.0f,
        .decayed_num = c->numerator == ZC_ADAGRAD_NUM_DECAYED,
    };
    if (vec_end > 0)
        bodies[s->grad_dtype][odt + 1](s, &k, 0, vec_end);
    for (size_t i = vec_end; i < s->n; i++)
        zc__adagrad_elem(s, c, i);
}
