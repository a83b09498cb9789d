/* Each layer of examples/gpt: the fp32 forward against the double reference
 * (ref.c), and the fp32 backward against central finite differences of the
 * double reference, on tiny shapes. The loss differentiated is
 * sum(layer(x) * R) for a fixed random R, whose gradient with respect to the
 * layer's output is R: that is the dout given to the backward pass. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "layers_cpu.h"
#include "ref.h"

typedef double (*loss_fn)(const double *x, void *ctx);

/* Holds analytic[i] to the central difference of f at x, for every i: the
 * error may be 5e-4 of the largest gradient (fp32 against fp64 math). */
static void check_grad(const char *what, loss_fn f, void *ctx, double *x, const float *analytic,
                       int n)
{
    const double h = 1e-6;
    double *fd = malloc(sizeof(double) * (size_t)n), scale = 0;
    for (int i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + h;
        double lp = f(x, ctx);
        x[i] = keep - h;
        double lm = f(x, ctx);
        x[i] = keep;
        fd[i] = (lp - lm) / (2 * h);
        if (fabs(fd[i]) > scale) scale = fabs(fd[i]);
    }
    cr_assert_gt(scale, 1e-3, "%s: the reference gradient is all but zero", what);
    for (int i = 0; i < n; i++)
        cr_assert_leq(fabs(analytic[i] - fd[i]), 5e-4 * scale,
                      "%s: gradient %d is %.8g, finite differences give %.8g (scale %.3g)", what,
                      i, analytic[i], fd[i], scale);
    free(fd);
}

static void fill(double *d, float *f, int n, uint64_t *s, double amp)
{
    for (int i = 0; i < n; i++) {
        d[i] = (float)(amp * ref_uniform(s)); /* representable in fp32: same inputs both ways */
        if (f) f[i] = (float)d[i];
    }
}

static void check_close(const char *what, const float *got, const double *want, int n)
{
    for (int i = 0; i < n; i++)
        cr_assert_leq(fabs(got[i] - want[i]), 1e-5 * (1 + fabs(want[i])),
                      "%s: forward value %d is %.8g, the reference %.8g", what, i, got[i], want[i]);
}

/* The backward passes accumulate: gradients start at this value and the
 * check subtracts it again. */
#define PRE 0.5f

static void prefill(float *g, int n) { for (int i = 0; i < n; i++) g[i] = PRE; }
static void unprefill(float *g, int n) { for (int i = 0; i < n; i++) g[i] -= PRE; }

static double dot(const double *a, const double *b, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---- linear --------------------------------------------------------------- */

enum { LN_N = 5, LN_IC = 7, LN_OC = 6 };
typedef struct { double R[LN_N * LN_OC]; } lin_ctx;

static double lin_loss(const double *x, void *ctx)
{
    double out[LN_N * LN_OC];
    ref_linear(out, x, x + LN_N * LN_IC, x + LN_N * LN_IC + LN_OC * LN_IC, LN_N, LN_IC, LN_OC);
    return dot(out, ((lin_ctx *)ctx)->R, LN_N * LN_OC);
}

Test(gpt_layers, linear)
{
    enum { NX = LN_N * LN_IC + LN_OC * LN_IC + LN_OC };
    uint64_t s = 11;
    lin_ctx ctx;
    double x[NX], want[LN_N * LN_OC];
    float xf[NX], R[LN_N * LN_OC], out[LN_N * LN_OC], g[NX];
    fill(x, xf, NX, &s, 1.0);
    fill(ctx.R, R, LN_N * LN_OC, &s, 1.0);
    const float *inp = xf, *w = xf + LN_N * LN_IC, *b = w + LN_OC * LN_IC;
    gpt_linear_forward(out, inp, w, b, LN_N, LN_IC, LN_OC);
    ref_linear(want, x, x + LN_N * LN_IC, x + LN_N * LN_IC + LN_OC * LN_IC, LN_N, LN_IC, LN_OC);
    check_close("linear", out, want, LN_N * LN_OC);
    prefill(g, NX);
    gpt_linear_backward(g, g + LN_N * LN_IC, g + LN_N * LN_IC + LN_OC * LN_IC, R, inp, w, LN_N,
                        LN_IC, LN_OC);
    unprefill(g, NX);
    check_grad("linear", lin_loss, &ctx, x, g, NX);
}

/* ---- layernorm ------------------------------------------------------------ */

enum { LY_N = 4, LY_C = 8 };
typedef struct { double R[LY_N * LY_C]; } ly_ctx;

static double ly_loss(const double *x, void *ctx)
{
    double out[LY_N * LY_C];
    ref_layernorm(out, x, x + LY_N * LY_C, x + LY_N * LY_C + LY_C, LY_N, LY_C);
    return dot(out, ((ly_ctx *)ctx)->R, LY_N * LY_C);
}

Test(gpt_layers, layernorm)
{
    enum { NX = LY_N * LY_C + 2 * LY_C };
    uint64_t s = 12;
    ly_ctx ctx;
    double x[NX], want[LY_N * LY_C];
    float xf[NX], R[LY_N * LY_C], out[LY_N * LY_C], mean[LY_N], rstd[LY_N], g[NX];
    fill(x, xf, NX, &s, 2.0);
    fill(ctx.R, R, LY_N * LY_C, &s, 1.0);
    const float *inp = xf, *w = xf + LY_N * LY_C, *b = w + LY_C;
    gpt_layernorm_forward(out, mean, rstd, inp, w, b, LY_N, LY_C);
    ref_layernorm(want, x, x + LY_N * LY_C, x + LY_N * LY_C + LY_C, LY_N, LY_C);
    check_close("layernorm", out, want, LY_N * LY_C);
    prefill(g, NX);
    gpt_layernorm_backward(g, g + LY_N * LY_C, g + LY_N * LY_C + LY_C, R, inp, w, mean, rstd,
                           LY_N, LY_C);
    unprefill(g, NX);
    check_grad("layernorm", ly_loss, &ctx, x, g, NX);
}

/* ---- gelu ----------------------------------------------------------------- */

enum { GE_N = 24 };
typedef struct { double R[GE_N]; } ge_ctx;

static double ge_loss(const double *x, void *ctx)
{
    double out[GE_N];
    ref_gelu(out, x, GE_N);
    return dot(out, ((ge_ctx *)ctx)->R, GE_N);
}

Test(gpt_layers, gelu)
{
    uint64_t s = 13;
    ge_ctx ctx;
    double x[GE_N], want[GE_N];
    float xf[GE_N], R[GE_N], out[GE_N], g[GE_N];
    fill(x, xf, GE_N, &s, 4.0);
    fill(ctx.R, R, GE_N, &s, 1.0);
    gpt_gelu_forward(out, xf, GE_N);
    ref_gelu(want, x, GE_N);
    check_close("gelu", out, want, GE_N);
    prefill(g, GE_N);
    gpt_gelu_backward(g, xf, R, GE_N);
    unprefill(g, GE_N);
    check_grad("gelu", ge_loss, &ctx, x, g, GE_N);
}

/* ---- attention ------------------------------------------------------------ */

enum { AT_B = 2, AT_T = 5, AT_C = 8, AT_NH = 2, AT_NQ = AT_B * AT_T * 3 * AT_C,
       AT_NO = AT_B * AT_T * AT_C };
typedef struct { double R[AT_NO]; } at_ctx;

static double at_loss(const double *x, void *ctx)
{
    double out[AT_NO];
    ref_attention(out, x, AT_B, AT_T, AT_C, AT_NH);
    return dot(out, ((at_ctx *)ctx)->R, AT_NO);
}

Test(gpt_layers, attention)
{
    uint64_t s = 14;
    at_ctx ctx;
    double x[AT_NQ], want[AT_NO];
    float xf[AT_NQ], R[AT_NO], out[AT_NO], att[AT_B * AT_NH * AT_T * AT_T], g[AT_NQ];
    fill(x, xf, AT_NQ, &s, 1.5);
    fill(ctx.R, R, AT_NO, &s, 1.0);
    gpt_attention_forward(out, att, xf, AT_B, AT_T, AT_C, AT_NH);
    ref_attention(want, x, AT_B, AT_T, AT_C, AT_NH);
    check_close("attention", out, want, AT_NO);
    /* Causality: a row's probabilities above the diagonal are zero. */
    for (int r = 0; r < AT_B * AT_NH; r++)
        for (int t = 0; t < AT_T; t++)
            for (int u = t + 1; u < AT_T; u++)
                cr_assert_eq(att[(r * AT_T + t) * AT_T + u], 0.0f);
    prefill(g, AT_NQ);
    gpt_attention_backward(g, R, xf, att, AT_B, AT_T, AT_C, AT_NH);
    unprefill(g, AT_NQ);
    check_grad("attention", at_loss, &ctx, x, g, AT_NQ);
}

/* Sequences longer than one block of query rows (attention_cpu.c works on
 * blocks of up to 64 rows, fewer past T = 256): the block edges, the keys a
 * block sees and the causal zeros inside a block's last columns. */
typedef struct { int B, T, C, NH; const double *R; } atl_ctx;

static double atl_loss(const double *x, void *ctx)
{
    const atl_ctx *c = ctx;
    const int no = c->B * c->T * c->C;
    double *out = malloc(sizeof(double) * (size_t)no);
    ref_attention(out, x, c->B, c->T, c->C, c->NH);
    double l = dot(out, c->R, no);
    free(out);
    return l;
}

static void check_long_attention(int B, int T, int C, int NH, uint64_t seed)
{
    const int nq = B * T * 3 * C, no = B * T * C;
    double *x = malloc(sizeof(double) * (size_t)nq), *R = malloc(sizeof(double) * (size_t)no);
    double *want = malloc(sizeof(double) * (size_t)no);
    float *xf = malloc(sizeof(float) * (size_t)nq), *Rf = malloc(sizeof(float) * (size_t)no);
    float *out = malloc(sizeof(float) * (size_t)no), *g = malloc(sizeof(float) * (size_t)nq);
    float *att = malloc(sizeof(float) * (size_t)B * NH * T * T);
    uint64_t s = seed;
    fill(x, xf, nq, &s, 1.5);
    fill(R, Rf, no, &s, 1.0);
    gpt_attention_forward(out, att, xf, B, T, C, NH);
    ref_attention(want, x, B, T, C, NH);
    check_close("long attention", out, want, no);
    for (int r = 0; r < B * NH; r++)
        for (int t = 0; t < T; t++) {
            double sum = 0;
            for (int u = 0; u < T; u++) {
                float p = att[((size_t)r * T + t) * T + u];
                if (u > t) cr_assert_eq(p, 0.0f, "att[%d][%d][%d] above the diagonal", r, t, u);
                sum += p;
            }
            cr_assert_leq(fabs(sum - 1.0), 1e-5, "row %d of head %d sums to %.8g", t, r, sum);
        }
    prefill(g, nq);
    gpt_attention_backward(g, Rf, xf, att, B, T, C, NH);
    unprefill(g, nq);
    atl_ctx ctx = {B, T, C, NH, R};
    check_grad("long attention", atl_loss, &ctx, x, g, nq);
    free(x); free(R); free(want); free(xf); free(Rf); free(out); free(g); free(att);
}

Test(gpt_layers, attention_over_several_row_blocks)
{
    check_long_attention(2, 70, 8, 2, 31); /* blocks of 64 and 6 rows */
    check_long_attention(1, 300, 2, 1, 32); /* 54-row blocks, the last of 30 */
}

/* GELU over the range where tanh saturates and around 0, with more values
 * than a vector holds (the vector loop and its remainder). */
enum { GW_N = 203 };

static double gw_loss(const double *x, void *ctx)
{
    double out[GW_N];
    ref_gelu(out, x, GW_N);
    return dot(out, ctx, GW_N);
}

Test(gpt_layers, gelu_wide_range)
{
    uint64_t s = 33;
    double x[GW_N], want[GW_N], R[GW_N];
    float xf[GW_N], Rf[GW_N], out[GW_N], g[GW_N];
    for (int i = 0; i < GW_N; i++) {
        x[i] = (float)(-12.0 + 24.0 * i / (GW_N - 1));
        xf[i] = (float)x[i];
    }
    fill(R, Rf, GW_N, &s, 1.0);
    gpt_gelu_forward(out, xf, GW_N);
    ref_gelu(want, x, GW_N);
    check_close("gelu (wide)", out, want, GW_N);
    prefill(g, GW_N);
    gpt_gelu_backward(g, xf, Rf, GW_N);
    unprefill(g, GW_N);
    check_grad("gelu (wide)", gw_loss, R, x, g, GW_N);
}

/* ---- embedding ------------------------------------------------------------ */

enum { EM_B = 2, EM_T = 3, EM_C = 4, EM_V = 5, EM_NX = EM_V * EM_C + EM_T * EM_C,
       EM_NO = EM_B * EM_T * EM_C };
typedef struct { double R[EM_NO]; int tok[EM_B * EM_T]; } em_ctx;

static double em_loss(const double *x, void *ctx)
{
    em_ctx *e = ctx;
    double s = 0;
    for (int n = 0; n < EM_B * EM_T; n++)
        for (int i = 0; i < EM_C; i++)
            s += (x[e->tok[n] * EM_C + i] + x[EM_V * EM_C + (n % EM_T) * EM_C + i]) *
                 e->R[n * EM_C + i];
    return s;
}

Test(gpt_layers, embedding)
{
    uint64_t s = 15;
    /* token 1 twice, token 4 never: repeated rows must sum, unused stay 0 */
    em_ctx ctx = {.tok = {1, 0, 1, 3, 2, 1}};
    double x[EM_NX];
    float xf[EM_NX], R[EM_NO], out[EM_NO], g[EM_NX];
    fill(x, xf, EM_NX, &s, 1.0);
    fill(ctx.R, R, EM_NO, &s, 1.0);
    gpt_embed_forward(out, ctx.tok, xf, xf + EM_V * EM_C, EM_B, EM_T, EM_C);
    for (int n = 0; n < EM_B * EM_T; n++)
        for (int i = 0; i < EM_C; i++)
            cr_assert_eq(out[n * EM_C + i],
                         xf[ctx.tok[n] * EM_C + i] + xf[EM_V * EM_C + (n % EM_T) * EM_C + i]);
    prefill(g, EM_NX);
    gpt_embed_backward(g, g + EM_V * EM_C, R, ctx.tok, EM_B, EM_T, EM_C);
    unprefill(g, EM_NX);
    check_grad("embedding", em_loss, &ctx, x, g, EM_NX);
}

/* ---- softmax cross-entropy ------------------------------------------------ */

enum { XE_N = 6, XE_V = 7 };
typedef struct { int tgt[XE_N]; } xe_ctx;

static double xe_loss(const double *x, void *ctx)
{
    return ref_xent(x, ((xe_ctx *)ctx)->tgt, XE_N, XE_V);
}

Test(gpt_layers, softmax_xent)
{
    uint64_t s = 16;
    xe_ctx ctx = {.tgt = {0, 6, 3, 3, 1, 5}};
    double x[XE_N * XE_V];
    float probs[XE_N * XE_V], g[XE_N * XE_V];
    fill(x, probs, XE_N * XE_V, &s, 3.0);
    double loss = gpt_softmax_xent_forward(probs, ctx.tgt, XE_N, XE_V);
    cr_assert_leq(fabs(loss - ref_xent(x, ctx.tgt, XE_N, XE_V)), 1e-5,
                  "loss %.8g, the reference %.8g", loss, ref_xent(x, ctx.tgt, XE_N, XE_V));
    gpt_softmax_xent_backward(g, probs, ctx.tgt, XE_N, XE_V, 1.0f / XE_N);
    check_grad("softmax_xent", xe_loss, &ctx, x, g, XE_N * XE_V);
}

/* A vocabulary wider than a vector, logits spread over +-20 (probabilities
 * down to e^-40 relative): the vectorised exp and sums. */
enum { XW_N = 3, XW_V = 301 };

static double xw_loss(const double *x, void *ctx) { return ref_xent(x, ctx, XW_N, XW_V); }

Test(gpt_layers, softmax_xent_wide_vocabulary)
{
    uint64_t s = 34;
    int tgt[XW_N] = {0, 150, 300};
    static double x[XW_N * XW_V];
    static float probs[XW_N * XW_V], g[XW_N * XW_V];
    fill(x, probs, XW_N * XW_V, &s, 20.0);
    double loss = gpt_softmax_xent_forward(probs, tgt, XW_N, XW_V);
    double want = ref_xent(x, tgt, XW_N, XW_V);
    cr_assert_leq(fabs(loss - want), 1e-5 * (1 + want), "loss %.8g, the reference %.8g", loss,
                  want);
    gpt_softmax_xent_backward(g, probs, tgt, XW_N, XW_V, 1.0f / XW_N);
    check_grad("softmax_xent (wide)", xw_loss, tgt, x, g, XW_N * XW_V);
}

/* ---- the fused and write-once forms the model uses ------------------------ */

/* gpt_bias_residual and gpt_bias_gelu_forward against the double reference
 * (bias, then residual or GELU); the _set forms write what the accumulating
 * forms add to a zeroed buffer, bit for bit, whatever the buffer held. */
Test(gpt_layers, fused_and_set_forms)
{
    enum { N = 7, C = 37, IC = 5 };
    uint64_t s = 31;
    double hd[N * C], bd[C], rd[N * C], want[N * C];
    float h[N * C], b[C], r[N * C], out[N * C], pre[N * C];
    fill(hd, h, N * C, &s, 3.0);
    fill(bd, b, C, &s, 1.0);
    fill(rd, r, N * C, &s, 2.0);
    memcpy(out, h, sizeof out);
    gpt_bias_residual(out, b, r, N, C);
    for (int i = 0; i < N * C; i++) want[i] = hd[i] + bd[i % C] + rd[i];
    check_close("bias_residual", out, want, N * C);

    memcpy(pre, h, sizeof pre);
    gpt_bias_gelu_forward(out, pre, b, N, C);
    double sum[N * C];
    for (int i = 0; i < N * C; i++) sum[i] = hd[i] + bd[i % C];
    check_close("bias_gelu: pre-activation", pre, sum, N * C);
    ref_gelu(want, sum, N * C);
    check_close("bias_gelu", out, want, N * C);

    float acc[N * C] = {0}, set[N * C];
    for (int i = 0; i < N * C; i++) set[i] = NAN;
    gpt_gelu_backward(acc, h, r, N * C);
    gpt_gelu_backward_set(set, h, r, N * C);
    cr_assert(memcmp(acc, set, sizeof acc) == 0, "gelu_backward_set = gelu_backward on zeros");

    float w[C * IC], x[N * IC], dw1[C * IC] = {0}, dw2[C * IC] = {0}, db1[C] = {0}, db2[C] = {0};
    float dx1[N * IC] = {0}, dx2[N * IC];
    double scratch[C * IC > N * IC ? C * IC : N * IC];
    fill(scratch, w, C * IC, &s, 1.0);
    fill(scratch, x, N * IC, &s, 1.0);
    for (int i = 0; i < N * IC; i++) dx2[i] = NAN;
    gpt_linear_backward(dx1, dw1, db1, r, x, w, N, IC, C);
    gpt_linear_backward_set_mm(GPT_MATMUL_F32, dx2, dw2, db2, r, x, w, N, IC, C);
    cr_assert(memcmp(dx1, dx2, sizeof dx1) == 0, "linear_backward_set: dinp written");
    cr_assert(memcmp(dw1, dw2, sizeof dw1) == 0 && memcmp(db1, db2, sizeof db1) == 0,
              "linear_backward_set: dw, db as the accumulating form");
}
