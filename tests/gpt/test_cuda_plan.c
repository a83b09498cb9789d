/* The CUDA layers' plan (examples/gpt/cuda_plan.h) on the host, no GPU:
 *
 *  - The attention's six GEMM descriptions, run by a plain column-major
 *    strided-batched GEMM written here from cuBLAS's definition (bf16
 *    operands emulated by rounding), with the kernels' permutations and
 *    causal softmax around them, reproduce the CPU attention (layers_cpu.c)
 *    forward and backward: a swapped transpose, leading dimension, stride or
 *    buffer gives errors of the order of the values themselves.
 *  - The head-major index helpers are a bijection onto qkv's q, k, v parts.
 *  - The attention's workspace regions are disjoint, aligned and inside the
 *    stated size; the size formula of layers_cuda.h holds; overflow is
 *    refused.
 *  - The column sums' slices cover the rows once, in order. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cuda_plan.h"
#include "layers_cpu.h"
#include "ref.h"

/* x rounded to bf16 (nearest even), as __float2bfloat16_rn does for finite x. */
static float bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* cuBLAS's C_j = op(A_j) op(B_j) (alpha 1, beta 0), column-major, with the
 * products summed in double (the GPU sums exact bf16 products in fp32). */
static void ref_gemm(const gpt_gemm *g, const float *A, const float *B, float *C)
{
    for (int j = 0; j < g->batch; j++) {
        const float *a = A + (size_t)j * g->sa, *b = B + (size_t)j * g->sb;
        float *c = C + (size_t)j * g->sc;
        for (int col = 0; col < g->n; col++)
            for (int row = 0; row < g->m; row++) {
                double s = 0;
                for (int l = 0; l < g->k; l++) {
                    double x = g->ta ? a[l + (size_t)row * g->lda] : a[row + (size_t)l * g->lda];
                    double y = g->tb ? b[col + (size_t)l * g->ldb] : b[l + (size_t)col * g->ldb];
                    s += x * y;
                }
                c[row + (size_t)col * g->ldc] = (float)s;
            }
    }
}

/* Largest |got - want| over n values, relative to the largest |want|. */
static double rel_err(const float *got, const float *want, size_t n)
{
    double mx = 0, e = 0;
    for (size_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs(want[i]));
        e = fmax(e, fabs((double)got[i] - want[i]));
    }
    return e / (mx > 0 ? mx : 1);
}

Test(gpt_cuda_plan, attention_gemms_reproduce_the_cpu_attention)
{
    static const int SH[][4] = {{2, 37, 48, 4}, {1, 64, 32, 2}, {3, 5, 24, 3}};
    for (size_t c = 0; c < sizeof SH / sizeof SH[0]; c++) {
        const int B = SH[c][0], T = SH[c][1], C = SH[c][2], NH = SH[c][3];
        const size_t btc = (size_t)B * T * C, nq = 3 * btc, btt = (size_t)B * NH * T * T;
        uint64_t s = 1234 + c;
        /* bf16-representable inputs: the device's rounding of them is exact,
         * so only the bf16 copies of P, dY and dS are approximations. */
        float *qkv = malloc(nq * 4), *dout = malloc(btc * 4);
        for (size_t i = 0; i < nq; i++) qkv[i] = bf16_round((float)(1.5 * ref_uniform(&s)));
        for (size_t i = 0; i < btc; i++) dout[i] = bf16_round((float)ref_uniform(&s));
        float *buf[GPT_ATT_NBUF];
        for (int b = 0; b < GPT_ATT_NBUF; b++) buf[b] = calloc(btt > btc ? btt : btc, 4);
        /* permute_qkv_k and permute_btc_k */
        for (size_t e = 0; e < btc; e++) {
            int b, h, t, i;
            gpt_head_major_split(e, T, C, NH, &b, &h, &t, &i);
            for (int w = 0; w < 3; w++)
                buf[GPT_ATT_Q + w][e] = bf16_round(qkv[gpt_qkv_index(w, b, h, t, i, T, C, NH)]);
            buf[GPT_ATT_DY][e] = bf16_round(dout[gpt_btc_index(b, h, t, i, T, C, NH)]);
        }
        const float scale = 1.0f / sqrtf((float)(C / NH));
        gpt_gemm gs[GPT_NGEMM];
        for (int k = 0; k < GPT_NGEMM; k++) gs[k] = gpt_att_gemm(k, B, T, C, NH);
        ref_gemm(&gs[GPT_GEMM_S], buf[gs[GPT_GEMM_S].a], buf[gs[GPT_GEMM_S].b],
                 buf[gs[GPT_GEMM_S].c]);
        /* softmax_fwd_k over S's rows */
        float *att = buf[GPT_ATT_S];
        for (size_t r = 0; r < (size_t)B * NH * T; r++) {
            const int t = (int)(r % T);
            float *a = att + r * T, mx = -INFINITY, sum = 0;
            for (int j = 0; j <= t; j++) mx = fmaxf(mx, a[j] * scale);
            for (int j = 0; j <= t; j++) sum += (a[j] = expf(a[j] * scale - mx));
            for (int j = 0; j < T; j++) {
                a[j] = j <= t ? a[j] * (1.0f / sum) : 0.0f;
                buf[GPT_ATT_P][r * T + j] = bf16_round(a[j]);
            }
        }
        ref_gemm(&gs[GPT_GEMM_Y], buf[gs[GPT_GEMM_Y].a], buf[gs[GPT_GEMM_Y].b],
                 buf[gs[GPT_GEMM_Y].c]);
        float *out = malloc(btc * 4), *want_out = malloc(btc * 4), *want_att = malloc(btt * 4);
        for (size_t e = 0; e < btc; e++) { /* unpermute_k */
            int b, h, t, i;
            gpt_head_major_split(e, T, C, NH, &b, &h, &t, &i);
            out[gpt_btc_index(b, h, t, i, T, C, NH)] = buf[GPT_ATT_Y][e];
        }
        gpt_attention_forward(want_out, want_att, qkv, B, T, C, NH);
        double ea = rel_err(att, want_att, btt), eo = rel_err(out, want_out, btc);
        cr_assert_leq(ea, 1e-5, "shape %zu: probabilities off by %g", c, ea);
        cr_assert_leq(eo, 1e-2, "shape %zu: output off by %g of its largest value", c, eo);

        /* backward: dP, dV, softmax_bwd_k into dS (P's place), dQ, dK */
        ref_gemm(&gs[GPT_GEMM_DP], buf[gs[GPT_GEMM_DP].a], buf[gs[GPT_GEMM_DP].b],
                 buf[gs[GPT_GEMM_DP].c]);
        ref_gemm(&gs[GPT_GEMM_DV], buf[gs[GPT_GEMM_DV].a], buf[gs[GPT_GEMM_DV].b],
                 buf[gs[GPT_GEMM_DV].c]);
        for (size_t r = 0; r < (size_t)B * NH * T; r++) {
            const int t = (int)(r % T);
            const float *a = att + r * T, *d = buf[GPT_ATT_DP] + r * T;
            float dot = 0;
            for (int j = 0; j <= t; j++) dot += a[j] * d[j];
            for (int j = 0; j < T; j++)
                buf[GPT_ATT_DS][r * T + j] =
                    bf16_round(j <= t ? a[j] * (d[j] - dot) * scale : 0.0f);
        }
        ref_gemm(&gs[GPT_GEMM_DQ], buf[gs[GPT_GEMM_DQ].a], buf[gs[GPT_GEMM_DQ].b],
                 buf[gs[GPT_GEMM_DQ].c]);
        ref_gemm(&gs[GPT_GEMM_DK], buf[gs[GPT_GEMM_DK].a], buf[gs[GPT_GEMM_DK].b],
                 buf[gs[GPT_GEMM_DK].c]);
        float *dqkv = malloc(nq * 4), *want_dqkv = malloc(nq * 4);
        for (size_t i = 0; i < nq; i++) dqkv[i] = want_dqkv[i] = (float)(0.1 * ref_uniform(&s));
        for (size_t e = 0; e < btc; e++) { /* accumulate_dqkv_k */
            int b, h, t, i;
            gpt_head_major_split(e, T, C, NH, &b, &h, &t, &i);
            for (int w = 0; w < 3; w++)
                dqkv[gpt_qkv_index(w, b, h, t, i, T, C, NH)] += buf[GPT_ATT_DQ + w][e];
        }
        gpt_attention_backward(want_dqkv, dout, qkv, want_att, B, T, C, NH);
        for (int w = 0; w < 3; w++) {
            /* q, k and v's parts separately: each has its own scale */
            float *g = malloc(btc * 4), *wg = malloc(btc * 4);
            size_t k = 0;
            for (size_t row = 0; row < (size_t)B * T; row++)
                for (int i = 0; i < C; i++, k++) {
                    g[k] = dqkv[row * 3 * C + (size_t)w * C + i];
                    wg[k] = want_dqkv[row * 3 * C + (size_t)w * C + i];
                }
            double e = rel_err(g, wg, btc);
            cr_assert_leq(e, 1e-2, "shape %zu: d%c off by %g of its largest value", c, "qkv"[w],
                          e);
            free(g), free(wg);
        }
        for (int b = 0; b < GPT_ATT_NBUF; b++) free(buf[b]);
        free(qkv), free(dout), free(out), free(want_out), free(want_att), free(dqkv),
            free(want_dqkv);
    }
}

Test(gpt_cuda_plan, head_major_indices_are_a_bijection)
{
    const int B = 2, T = 7, C = 12, NH = 3;
    const size_t btc = (size_t)B * T * C;
    unsigned char *seen = calloc(3 * btc, 1);
    for (size_t e = 0; e < btc; e++) {
        int b, h, t, i;
        gpt_head_major_split(e, T, C, NH, &b, &h, &t, &i);
        cr_assert(b < B && h < NH && t < T && i < C / NH);
        /* the head-major order: i fastest, then t, h, b */
        cr_assert_eq((((size_t)b * NH + h) * T + t) * (C / NH) + i, e);
        size_t o = gpt_btc_index(b, h, t, i, T, C, NH);
        cr_assert_eq(o, ((size_t)b * T + t) * C + h * (C / NH) + i);
        for (int w = 0; w < 3; w++) seen[gpt_qkv_index(w, b, h, t, i, T, C, NH)]++;
    }
    for (size_t k = 0; k < 3 * btc; k++) cr_assert_eq(seen[k], 1, "qkv element %zu", k);
    free(seen);
}

Test(gpt_cuda_plan, attention_workspace_layout)
{
    gpt_att_ws w;
    const int B = 4, T = 1024, C = 768, NH = 12;
    cr_assert(gpt_att_ws_layout(B, T, C, NH, &w));
    const size_t btc = (size_t)B * T * C, tt = (size_t)B * NH * T * T;
    const size_t at[5] = {w.qkv16, w.p16, w.f32, w.dp, w.dy16};
    const size_t len[5] = {3 * btc * 2, tt * 2, 3 * btc * 4, tt * 4, btc * 2};
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(at[i] % GPT_WS_ALIGN, 0);
        cr_assert_leq(at[i] + len[i], w.bytes);
        for (int j = 0; j < 5; j++)
            if (i != j)
                cr_assert(at[i] + len[i] <= at[j] || at[j] + len[j] <= at[i], "regions %d, %d",
                          i, j);
    }
    /* layers_cuda.h: 20 B T C + 6 B NH T^2 bytes plus alignment */
    cr_assert_geq(w.bytes, 20 * btc + 6 * tt);
    cr_assert_leq(w.bytes, 20 * btc + 6 * tt + 5 * GPT_WS_ALIGN);
    cr_assert_eq(gpt_att_ws_layout(1 << 30, 1024, 1 << 30, 1, &w), 0);
    cr_assert_eq(gpt_att_ws_layout(1, 8, 10, 3, &w), 0, "C not a multiple of NH");
}

Test(gpt_cuda_plan, colsum_slices_cover_the_rows_once)
{
    static const int NS[] = {1, 33, 63, 64, 65, 300, 2047, 2048, 2049, 8192, 65536};
    for (size_t c = 0; c < sizeof NS / sizeof NS[0]; c++) {
        const int N = NS[c], S = gpt_colsum_slices(N);
        cr_assert(S >= 1 && S <= GPT_COLSUM_MAX_SLICES);
        cr_assert(S == GPT_COLSUM_MAX_SLICES || (S - 1) * GPT_COLSUM_ROWS_PER_SLICE < N);
        int next = 0;
        for (int s = 0; s < S; s++) {
            int lo, hi;
            gpt_colsum_rows(N, S, s, &lo, &hi);
            cr_assert_eq(lo, next, "N %d slice %d", N, s);
            cr_assert_geq(hi, lo);
            next = hi;
        }
        cr_assert_eq(next, N);
        cr_assert_eq(gpt_colsum_scratch_bytes(N, 768, 2), (size_t)S * 768 * 4 * 2);
    }
}
