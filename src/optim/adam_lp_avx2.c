/* Adam over 16-bit state with AVX2 and F16C (8 lanes): adam.h's update.
 *
 * Built in the AVX2 library with its flags and -ffp-contract=off
 * (meson.build). The vector body evaluates zc__adam_lp_elem's operations in
 * its order (no FMA; sqrt and div correctly rounded), widens bf16 state by
 * a shift and rounds it back in integers - stochastically with sround.h's
 * hash evaluated on eight counters at once, or to nearest even - so it
 * agrees with the scalar reference bitwise; heads and tails are the
 * reference's element. One specialisation per (master, m, v dtype,
 * rounding, gradient dtype) keeps the state's loads and stores free of
 * branches; the decay terms and the copy's dtype are tested per vector
 * (the same way every time, so the branch costs next to nothing). The
 * all-16-bit layout (bf16 state and gradient, the copy none or bf16) has a
 * body of its own that takes sixteen elements as their even and odd halves
 * (step16): at 16 bytes a parameter the eight-element path is bound by its
 * widening and narrowing shuffles, not by memory. */
#include <immintrin.h>

#include "optim/adam.h"
#include "optim/adam_lp_elem.h"

#define ZC_INLINE static inline __attribute__((always_inline))

typedef struct lp8 {
    __m256 b1, b2, omb1, omb2, eps, ss, bc2r, dd, l2, gs;
    bool scaled, l2_on, dd_on;
    __m256i key[ZC_SR__DRAWS];
    __m256i iota;
} lp8;

ZC_INLINE __m256 widen_bf16(__m128i h)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

ZC_INLINE __m256 load_state(const void *p, size_t i, bool bf)
{
    if (bf)
        return widen_bf16(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
    return _mm256_loadu_ps((const float *)p + i);
}

ZC_INLINE __m256 load_grad(const void *g, size_t i, zc_dtype gdt)
{
    if (gdt == ZC_DTYPE_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)g + i)));
    if (gdt == ZC_DTYPE_BF16)
        return widen_bf16(_mm_loadu_si128((const __m128i *)((const uint16_t *)g + i)));
    return _mm256_loadu_ps((const float *)g + i);
}

/* sround.h's zc__sr_mix32 on eight lanes. */
ZC_INLINE __m256i mix32(__m256i x)
{
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0x7feb352du));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0x846ca68bu));
    return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

/* x as bf16 in the low half of each lane: stochastically with the random
 * bits `bits` (each lane below 2^16: zc__sr_bf16's 16 bits), else to
 * nearest even (zc__f32_to_bf16); every NaN lane 0x7FC0. */
ZC_INLINE __m256i round_bf16(__m256 x, bool sr, __m256i bits)
{
    const __m256i u = _mm256_castps_si256(x);
    __m256i add;
    if (sr)
        add = bits;
    else
        add = _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                               _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1)));
    __m256i h = _mm256_srli_epi32(_mm256_add_epi32(u, add), 16);
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    return _mm256_blendv_epi8(h, _mm256_set1_epi32(0x7fc0), _mm256_castps_si256(nan));
}

ZC_INLINE __m128i pack16(__m256i h)
{
    return _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* Stores state x at i; returns the value kept (x, or its bf16 rounding
 * widened back) and the eight packed bf16 values in *h when bf. */
ZC_INLINE __m256 store_state(void *p, size_t i, __m256 x, bool bf, bool sr, __m256i bits,
                             __m128i *h)
{
    if (!bf) {
        _mm256_storeu_ps((float *)p + i, x);
        return x;
    }
    const __m256i r = round_bf16(x, sr, bits);
    *h = pack16(r);
    _mm_storeu_si128((__m128i *)((uint16_t *)p + i), *h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(r, 16));
}

/* zc__adam_lp_elem's arithmetic on eight elements: p, m, v updated from
 * their widened values and the gradient g (in fp32, unscaled). */
ZC_INLINE void adam8(const lp8 *k, __m256 *pp, __m256 g, __m256 *mp, __m256 *vp)
{
    __m256 p = *pp;
    if (k->scaled)
        g = _mm256_mul_ps(g, k->gs);
    if (k->l2_on)
        g = _mm256_add_ps(g, _mm256_mul_ps(k->l2, p));
    const __m256 m = _mm256_add_ps(_mm256_mul_ps(k->b1, *mp), _mm256_mul_ps(k->omb1, g));
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(k->b2, *vp),
                                   _mm256_mul_ps(_mm256_mul_ps(k->omb2, g), g));
    const __m256 d = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(v), k->bc2r), k->eps);
    if (k->dd_on)
        p = _mm256_sub_ps(p, _mm256_mul_ps(k->dd, p));
    *pp = _mm256_sub_ps(p, _mm256_mul_ps(k->ss, _mm256_div_ps(m, d)));
    *mp = m;
    *vp = v;
}

/* sround.h's draws for the eight counters ctr: draw 0 for the master (its
 * low half) and m (its high half), draw 1 for v (low half); only those a
 * bf16 tensor rounds with are hashed. */
ZC_INLINE void draws8(const lp8 *k, __m256i ctr, bool sr, bool pm, bool vb, __m256i *bp,
                      __m256i *bm, __m256i *bv)
{
    const __m256i lo16 = _mm256_set1_epi32(0xffff);
    *bp = *bm = *bv = _mm256_setzero_si256();
    if (sr && pm) {
        const __m256i d0 = mix32(_mm256_xor_si256(ctr, k->key[ZC_SR_DRAW_PM]));
        *bp = _mm256_and_si256(d0, lo16);
        *bm = _mm256_srli_epi32(d0, 16);
    }
    if (sr && vb)
        *bv = _mm256_and_si256(mix32(_mm256_xor_si256(ctr, k->key[ZC_SR_DRAW_V])), lo16);
}

/* ctr: the eight elements' counters (the low word of their global index). */
ZC_INLINE void step8(const zc_adam_lp_shard *s, const lp8 *k, size_t i, __m256i ctr, bool mb,
                     bool mmb, bool vb, bool sr, zc_dtype gdt)
{
    __m256 p = load_state(s->master, i, mb);
    __m256 m = load_state(s->m, i, mmb), v = load_state(s->v, i, vb);
    adam8(k, &p, load_grad(s->grad, i, gdt), &m, &v);
    __m256i bp, bm, bv;
    draws8(k, ctr, sr, mb || mmb, vb, &bp, &bm, &bv);
    __m128i hm, hv, hp = _mm_setzero_si128();
    store_state(s->m, i, m, mmb, sr, bm, &hm);
    store_state(s->v, i, v, vb, sr, bv, &hv);
    const __m256 kept = store_state(s->master, i, p, mb, sr, bp, &hp);
    if (!s->param_out)
        return;
    if (s->param_out_dtype == ZC_DTYPE_F32) {
        _mm256_storeu_ps((float *)s->param_out + i, kept);
    } else if (s->param_out_dtype == ZC_DTYPE_F16) {
        _mm_storeu_si128((__m128i *)((uint16_t *)s->param_out + i),
                         _mm256_cvtps_ph(kept, _MM_FROUND_TO_NEAREST_INT));
    } else {
        /* A bf16 master is its own copy; an fp32 one rounds to nearest. */
        const __m128i h = mb ? hp : pack16(round_bf16(kept, false, bp));
        _mm_storeu_si128((__m128i *)((uint16_t *)s->param_out + i), h);
    }
}

ZC_INLINE void body(const zc_adam_lp_shard *s, const lp8 *kp, size_t lo, size_t hi, bool mb,
                    bool mmb, bool vb, bool sr, zc_dtype gdt)
{
    const zc_adam_lp_shard sh = *s;
    const lp8 k = *kp;
    /* The counters run with i (wrapping as the 32-bit words do). */
    __m256i ctr = _mm256_add_epi32(_mm256_set1_epi32((int)((uint32_t)sh.index0 + (uint32_t)lo)),
                                   k.iota);
    const __m256i eight = _mm256_set1_epi32(8);
    for (size_t i = lo; i < hi; i += 8) {
        step8(&sh, &k, i, ctr, mb, mmb, vb, sr, gdt);
        ctr = _mm256_add_epi32(ctr, eight);
    }
}

/* ---- the all-16-bit layout: sixteen elements as their even and odd halves */

/* bf16 master, m, v and gradient, the copy none or bf16 (the master's own
 * bits): sixteen elements are loaded as one vector of 16-bit words and
 * widened in place, the even elements by a shift, the odd ones by a mask;
 * each half runs adam8 with its own counters, and the two roundings are
 * put back together by a word blend. No shuffle crosses a lane, where the
 * eight-element path spends two per tensor each way; the arithmetic and
 * the random bits are the same, element by element. */
ZC_INLINE __m256 widen_even(__m256i x) { return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16)); }

ZC_INLINE __m256 widen_odd(__m256i x)
{
    return _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32((int)0xffff0000u)));
}

/* round_bf16's value in the high half of each lane (the low half is left
 * over): the rounding's sum, every NaN lane 0x7FC0 above. */
ZC_INLINE __m256i round_hi(__m256 x, bool sr, __m256i bits)
{
    const __m256i u = _mm256_castps_si256(x);
    const __m256i add =
        sr ? bits
           : _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                              _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1)));
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    return _mm256_blendv_epi8(_mm256_add_epi32(u, add), _mm256_set1_epi32(0x7fc00000),
                              _mm256_castps_si256(nan));
}

/* The sixteen bf16 values in order from the even and the odd roundings. */
ZC_INLINE __m256i pack_pair(__m256i even, __m256i odd)
{
    return _mm256_blend_epi16(_mm256_srli_epi32(even, 16), odd, 0xAA);
}

ZC_INLINE void step16(const zc_adam_lp_shard *s, const lp8 *k, size_t i, __m256i ce, __m256i co,
                      bool sr)
{
    __m256i *const P = (__m256i *)((uint16_t *)s->master + i);
    __m256i *const M = (__m256i *)((uint16_t *)s->m + i);
    __m256i *const V = (__m256i *)((uint16_t *)s->v + i);
    const __m256i p16 = _mm256_loadu_si256(P), m16 = _mm256_loadu_si256(M),
                  v16 = _mm256_loadu_si256(V),
                  g16 = _mm256_loadu_si256((const __m256i *)((const uint16_t *)s->grad + i));
    __m256 pe = widen_even(p16), me = widen_even(m16), ve = widen_even(v16);
    __m256 po = widen_odd(p16), mo = widen_odd(m16), vo = widen_odd(v16);
    adam8(k, &pe, widen_even(g16), &me, &ve);
    adam8(k, &po, widen_odd(g16), &mo, &vo);
    __m256i bpe, bme, bve, bpo, bmo, bvo;
    draws8(k, ce, sr, true, true, &bpe, &bme, &bve);
    draws8(k, co, sr, true, true, &bpo, &bmo, &bvo);
    _mm256_storeu_si256(M, pack_pair(round_hi(me, sr, bme), round_hi(mo, sr, bmo)));
    _mm256_storeu_si256(V, pack_pair(round_hi(ve, sr, bve), round_hi(vo, sr, bvo)));
    const __m256i hp = pack_pair(round_hi(pe, sr, bpe), round_hi(po, sr, bpo));
    _mm256_storeu_si256(P, hp);
    if (s->param_out)
        _mm256_storeu_si256((__m256i *)((uint16_t *)s->param_out + i), hp);
}

/* The all-16-bit body: sixteen at a time, the last eight (if any) by step8. */
ZC_INLINE void body16(const zc_adam_lp_shard *s, const lp8 *kp, size_t lo, size_t hi, bool sr)
{
    const zc_adam_lp_shard sh = *s;
    const lp8 k = *kp;
    const __m256i base = _mm256_set1_epi32((int)((uint32_t)sh.index0 + (uint32_t)lo));
    __m256i ce = _mm256_add_epi32(base, _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
    __m256i co = _mm256_add_epi32(ce, _mm256_set1_epi32(1));
    const __m256i sixteen = _mm256_set1_epi32(16);
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        step16(&sh, &k, i, ce, co, sr);
        ce = _mm256_add_epi32(ce, sixteen);
        co = _mm256_add_epi32(co, sixteen);
    }
    if (i < hi) /* hi - lo is a multiple of 8 */
        step8(&sh, &k, i,
              _mm256_add_epi32(_mm256_set1_epi32((int)((uint32_t)sh.index0 + (uint32_t)i)),
                               k.iota),
              true, true, true, sr, ZC_DTYPE_BF16);
}

typedef void (*body_fn)(const zc_adam_lp_shard *s, const lp8 *k, size_t lo, size_t hi);

_Static_assert(ZC_DTYPE_F32 == 0 && ZC_DTYPE_F16 == 1 && ZC_DTYPE_BF16 == 2, "dtype values");
#define ZC_LP_BODY(MB, MM, VB, SR, G)                                                        \
    static void body_##MB##MM##VB##SR##_##G(const zc_adam_lp_shard *s, const lp8 *k,        \
                                            size_t lo, size_t hi)                          \
    {                                                                                        \
        body(s, k, lo, hi, MB, MM, VB, SR, ZC_DTYPE_##G);                                    \
    }
#define ZC_LP_G(MB, MM, VB, SR) \
    ZC_LP_BODY(MB, MM, VB, SR, F32) ZC_LP_BODY(MB, MM, VB, SR, F16) ZC_LP_BODY(MB, MM, VB, SR, BF16)
#define ZC_LP_SR(MB, MM, VB) ZC_LP_G(MB, MM, VB, 0) ZC_LP_G(MB, MM, VB, 1)
ZC_LP_SR(0, 0, 0)
ZC_LP_SR(0, 0, 1)
ZC_LP_SR(0, 1, 0)
ZC_LP_SR(0, 1, 1)
ZC_LP_SR(1, 0, 0)
ZC_LP_SR(1, 0, 1)
ZC_LP_SR(1, 1, 0)
ZC_LP_SR(1, 1, 1)

#define ZC_LP_ROWG(MB, MM, VB, SR) \
    {body_##MB##MM##VB##SR##_F32, body_##MB##MM##VB##SR##_F16, body_##MB##MM##VB##SR##_BF16}
#define ZC_LP_ROW(MB, MM, VB) {ZC_LP_ROWG(MB, MM, VB, 0), ZC_LP_ROWG(MB, MM, VB, 1)}
static void body16_sr(const zc_adam_lp_shard *s, const lp8 *k, size_t lo, size_t hi)
{
    body16(s, k, lo, hi, true);
}

static void body16_rne(const zc_adam_lp_shard *s, const lp8 *k, size_t lo, size_t hi)
{
    body16(s, k, lo, hi, false);
}

/* [master bf16][m bf16][v bf16][stochastic][grad dtype] */
static const body_fn bodies[2][2][2][2][3] = {
    {{ZC_LP_ROW(0, 0, 0), ZC_LP_ROW(0, 0, 1)}, {ZC_LP_ROW(0, 1, 0), ZC_LP_ROW(0, 1, 1)}},
    {{ZC_LP_ROW(1, 0, 0), ZC_LP_ROW(1, 0, 1)}, {ZC_LP_ROW(1, 1, 0), ZC_LP_ROW(1, 1, 1)}},
};

void zc__adam_lp_avx2(const zc_adam_lp_shard *s, const zc_adam_coeffs *c)
{
    const zc_lp_keys keys = zc__lp_keys(s);
    const size_t vec_end = s->n / 8 * 8;
    lp8 k = {
        .b1 = _mm256_set1_ps(c->beta1), .b2 = _mm256_set1_ps(c->beta2),
        .omb1 = _mm256_set1_ps(c->one_minus_beta1), .omb2 = _mm256_set1_ps(c->one_minus_beta2),
        .eps = _mm256_set1_ps(c->eps), .ss = _mm256_set1_ps(c->step_size),
        .bc2r = _mm256_set1_ps(c->bc2_rsqrt), .dd = _mm256_set1_ps(c->decoupled_decay),
        .l2 = _mm256_set1_ps(c->l2_decay), .gs = _mm256_set1_ps(s->grad_scale),
        .scaled = s->grad_scale != 1.0f, .l2_on = c->l2_decay != 0.0f,
        .dd_on = c->decoupled_decay != 0.0f,
        .iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    };
    for (int i = 0; i < ZC_SR__DRAWS; i++)
        k.key[i] = _mm256_set1_epi32((int)keys.k[i]);
    const bool all16 = s->master_dtype == ZC_DTYPE_BF16 && s->m_dtype == ZC_DTYPE_BF16 &&
                       s->v_dtype == ZC_DTYPE_BF16 && s->grad_dtype == ZC_DTYPE_BF16 &&
                       (!s->param_out || s->param_out_dtype == ZC_DTYPE_BF16);
    if (vec_end && all16 && s->stochastic)
        body16_sr(s, &k, 0, vec_end);
    else if (vec_end && all16)
        body16_rne(s, &k, 0, vec_end);
    else if (vec_end)
        bodies[s->master_dtype == ZC_DTYPE_BF16][s->m_dtype == ZC_DTYPE_BF16]
              [s->v_dtype == ZC_DTYPE_BF16][s->stochastic][s->grad_dtype](s, &k, 0, vec_end);
    for (size_t i = vec_end; i < s->n; i++)
        zc__adam_lp_elem(s, c, &keys, i);
}
