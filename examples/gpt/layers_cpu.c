/* CPU layers of the GPT example (see layers_cpu.h for layouts and the
 * accumulate-into-gradients contract). Formulas follow GPT-2 / llm.c. The
 * matmuls go through gpt_cpu_gemm (matmul_cpu.c); every other loop is written
 * for the vectoriser (vecmath_cpu.h: no libm calls inside, reductions marked
 * `omp simd`, so their order is the vector order, fixed for a machine). The
 * attention is in attention_cpu.c. */
#include "layers_cpu.h"

#include <math.h>
#include <string.h>

#include "matmul_cpu.h"
#include "vecmath_cpu.h"

/* out[n, :] = b for every row (the bias the GEMM then adds to). */
GPT_SIMD_CLONES
static void fill_rows(float *out, const float *b, int N, int OC)
{
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * OC;
#pragma omp simd
        for (int j = 0; j < OC; j++) o[j] = b[j];
    }
}

/* db[j] += sum over rows of d[n, j]. */
GPT_SIMD_CLONES
static void add_column_sums(float *db, const float *d, int N, int OC)
{
    for (int n = 0; n < N; n++) {
        const float *r = d + (size_t)n * OC;
#pragma omp simd
        for (int j = 0; j < OC; j++) db[j] += r[j];
    }
}

void gpt_linear_forward_mm(gpt_matmul mm, float *out, const float *inp, const float *w,
                           const float *b, int N, int IC, int OC)
{
    /* The bias first, then the product added to it: one pass fewer than a
     * product followed by a bias pass. */
    if (b) fill_rows(out, b, N, OC);
    gpt_cpu_gemm(mm, false, true, N, OC, IC, 1.0f, inp, IC, w, IC, b ? 1.0f : 0.0f, out, OC);
}

void gpt_linear_forward(float *out, const float *inp, const float *w, const float *b, int N,
                        int IC, int OC)
{
    gpt_linear_forward_mm(GPT_MATMUL_F32, out, inp, w, b, N, IC, OC);
}

/* dinp_beta 1: dinp accumulates (the input may feed other layers too); 0:
 * dinp is written (its first use), which saves zeroing it beforehand. */
static void linear_backward(gpt_matmul mm, float dinp_beta, float *dinp, float *dw, float *db,
                            const float *dout, const float *inp, const float *w, int N, int IC,
                            int OC)
{
    if (dinp)
        gpt_cpu_gemm(mm, false, false, N, IC, OC, 1.0f, dout, OC, w, IC, dinp_beta, dinp, IC);
    gpt_cpu_gemm(mm, true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
    if (db) add_column_sums(db, dout, N, OC);
}

void gpt_linear_backward_mm(gpt_matmul mm, float *dinp, float *dw, float *db,
                            const float *dout, const float *inp, const float *w, int N, int IC,
                            int OC)
{
    linear_backward(mm, 1.0f, dinp, dw, db, dout, inp, w, N, IC, OC);
}

void gpt_linear_backward_set_mm(gpt_matmul mm, float *dinp, float *dw, float *db,
                                const float *dout, const float *inp, const float *w, int N,
                                int IC, int OC)
{
    linear_backward(mm, 0.0f, dinp, dw, db, dout, inp, w, N, IC, OC);
}

GPT_SIMD_CLONES
void gpt_bias_residual(float *out, const float *b, const float *res, int N, int C)
{
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * C;
        const float *r = res + (size_t)n * C;
#pragma omp simd
        for (int j = 0; j < C; j++) o[j] = (o[j] + b[j]) + r[j];
    }
}

void gpt_linear_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                         const float *w, int N, int IC, int OC)
{
    gpt_linear_backward_mm(GPT_MATMUL_F32, dinp, dw, db, dout, inp, w, N, IC, OC);
}

GPT_SIMD_CLONES
void gpt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                           const float *w, const float *b, int N, int C)
{
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        /* Two passes over a row that stays in cache: the mean, then the
         * variance about it (no cancellation), then the output. */
        float m = 0.0f;
#pragma omp simd reduction(+ : m)
        for (int i = 0; i < C; i++) m += x[i];
        m /= (float)C;
        float v = 0.0f;
#pragma omp simd reduction(+ : v)
        for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
        v /= (float)C;
        const float s = 1.0f / sqrtf(v + 1e-5f);
#pragma omp simd
        for (int i = 0; i < C; i++) o[i] = (x[i] - m) * s * w[i] + b[i];
        mean[n] = m;
        rstd[n] = s;
    }
}

GPT_SIMD_CLONES
void gpt_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C)
{
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        const float m = mean[n], s = rstd[n];
        /* The two reductions of the normalisation's Jacobian in one pass,
         * then dx, dw and db in a second. */
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * s, dnorm = w[i] * d[i];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= (float)C;
        dnorm_norm_mean /= (float)C;
#pragma omp simd
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * s, dnorm = w[i] * d[i];
            db[i] += d[i];
            dw[i] += norm * d[i];
            dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
}

#define GELU_SCALE 0.7978845608028654f /* sqrt(2 / pi) */

GPT_SIMD_CLONES
void gpt_gelu_forward(float *out, const float *inp, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + gpt_tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
    }
}

/* d GELU(x) / dx. */
static inline float gelu_grad(float x)
{
    float th = gpt_tanhf(GELU_SCALE * (x + 0.044715f * x * x * x));
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

GPT_SIMD_CLONES
void gpt_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) dinp[i] += gelu_grad(inp[i]) * dout[i];
}

GPT_SIMD_CLONES
void gpt_gelu_backward_set(float *dinp, const float *inp, const float *dout, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) dinp[i] = gelu_grad(inp[i]) * dout[i];
}

GPT_SIMD_CLONES
void gpt_bias_gelu_forward(float *out, float *h, const float *b, int N, int C)
{
    for (int n = 0; n < N; n++) {
        float *x = h + (size_t)n * C, *o = out + (size_t)n * C;
#pragma omp simd
        for (int j = 0; j < C; j++) {
            float v = x[j] + b[j];
            x[j] = v;
            o[j] = 0.5f * v * (1.0f + gpt_tanhf(GELU_SCALE * (v + 0.044715f * v * v * v)));
        }
    }
}

GPT_SIMD_CLONES
void gpt_embed_forward(float *out, const int *tok, const float *wte, const float *wpe, int B,
                       int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *e = wte + (size_t)tok[b * T + t] * C, *p = wpe + (size_t)t * C;
#pragma omp simd
            for (int i = 0; i < C; i++) o[i] = e[i] + p[i];
        }
}

GPT_SIMD_CLONES
void gpt_embed_backward(float *dwte, float *dwpe, const float *dout, const int *tok, int B,
                        int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            float *de = dwte + (size_t)tok[b * T + t] * C, *dp = dwpe + (size_t)t * C;
            /* de and dp are different tensors (never the same row). */
#pragma omp simd
            for (int i = 0; i < C; i++) {
                de[i] += d[i];
                dp[i] += d[i];
            }
        }
}

GPT_SIMD_CLONES
double gpt_softmax_xent_forward(float *probs, const int *target, int N, int V)
{
    double loss = 0.0;
    for (int n = 0; n < N; n++) {
        float *p = probs + (size_t)n * V;
        float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
        for (int i = 0; i < V; i++) maxv = p[i] > maxv ? p[i] : maxv;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int i = 0; i < V; i++) {
            p[i] = gpt_expf(p[i] - maxv);
            sum += p[i];
        }
        const float inv = 1.0f / sum;
#pragma omp simd
        for (int i = 0; i < V; i++) p[i] *= inv;
        /* A probability that underflows gives -log of the smallest normal
         * float at most, a loss of about 87 nats. */
        float pt = p[target[n]];
        loss -= log(pt > 1.17549435e-38f ? (double)pt : 1.17549435e-38);
    }
    return loss / N;
}

GPT_SIMD_CLONES
void gpt_softmax_xent_backward(float *dlogits, const float *probs, const int *target, int N,
                               int V, float dscale)
{
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
#pragma omp simd
        for (int i = 0; i < V; i++) d[i] = p[i] * dscale;
        d[target[n]] -= dscale;
    }
}
