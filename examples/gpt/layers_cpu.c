/* CPU layers of the GPT example (see layers_cpu.h for layouts and the
 * accumulate-into-gradients contract). Formulas follow GPT-2 / llm.c. */
#include "layers_cpu.h"

#include <math.h>
#include <string.h>

#include <cblas.h>

void gpt_linear_forward(float *out, const float *inp, const float *w, const float *b, int N,
                        int IC, int OC)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, w, IC, 0.0f,
                out, OC);
    if (b)
        for (int n = 0; n < N; n++) {
            float *o = out + (size_t)n * OC;
            for (int j = 0; j < OC; j++) o[j] += b[j];
        }
}

void gpt_linear_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                         const float *w, int N, int IC, int OC)
{
    /* beta 1: accumulate, since the input may feed other layers too. */
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, OC, w, IC,
                    1.0f, dinp, IC);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f,
                dw, IC);
    if (db)
        for (int n = 0; n < N; n++) {
            const float *d = dout + (size_t)n * OC;
            for (int j = 0; j < OC; j++) db[j] += d[j];
        }
}

void gpt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                           const float *w, const float *b, int N, int C)
{
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        float m = 0.0f;
        for (int i = 0; i < C; i++) m += x[i];
        m /= (float)C;
        float v = 0.0f;
        for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
        v /= (float)C;
        float s = 1.0f / sqrtf(v + 1e-5f);
        for (int i = 0; i < C; i++) o[i] = (x[i] - m) * s * w[i] + b[i];
        mean[n] = m;
        rstd[n] = s;
    }
}

void gpt_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C)
{
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        const float m = mean[n], s = rstd[n];
        /* The two reductions of the normalisation's Jacobian. */
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * s, dnorm = w[i] * d[i];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= (float)C;
        dnorm_norm_mean /= (float)C;
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * s, dnorm = w[i] * d[i];
            db[i] += d[i];
            dw[i] += norm * d[i];
            dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
}

#define GELU_SCALE 0.7978845608028654f /* sqrt(2 / pi) */

void gpt_gelu_forward(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
    }
}

void gpt_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float th = tanhf(GELU_SCALE * (x + 0.044715f * x * x * x));
        float sech2 = 1.0f - th * th;
        float g = 0.5f * (1.0f + th) +
                  0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += g * dout[i];
    }
}

void gpt_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                           int NH)
{
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                const float *q = qkv + ((size_t)b * T + t) * C3 + h * hs;
                float *a = att + (((size_t)b * NH + h) * T + t) * T;
                float maxv = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * C3 + C + h * hs;
                    float s = 0.0f;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    s *= scale;
                    a[t2] = s;
                    if (s > maxv) maxv = s;
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    a[t2] = expf(a[t2] - maxv);
                    sum += a[t2];
                }
                const float inv = 1.0f / sum;
                for (int t2 = 0; t2 <= t; t2++) a[t2] *= inv;
                for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0.0f; /* causal mask */
                float *o = out + ((size_t)b * T + t) * C + h * hs;
                memset(o, 0, (size_t)hs * sizeof(float));
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    for (int i = 0; i < hs; i++) o[i] += a[t2] * v[i];
                }
            }
}

void gpt_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att,
                            int B, int T, int C, int NH)
{
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    /* d(loss)/d(att[t2]) for one query row, then through the softmax; T is
     * at most GPT_MAX_SEQ (the model refuses longer sequences). */
    float datt[GPT_MAX_SEQ];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                const float *d = dout + ((size_t)b * T + t) * C + h * hs;
                const float *q = qkv + ((size_t)b * T + t) * C3 + h * hs;
                float *dq = dqkv + ((size_t)b * T + t) * C3 + h * hs;
                /* out = sum att[t2] v[t2] */
                float dot_ad = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    float *dv = dqkv + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    float s = 0.0f;
                    for (int i = 0; i < hs; i++) {
                        s += v[i] * d[i];
                        dv[i] += a[t2] * d[i];
                    }
                    datt[t2] = s;
                    dot_ad += a[t2] * s;
                }
                /* softmax: dpre[t2] = att[t2] (datt[t2] - sum att datt), then
                 * pre[t2] = scale q.k[t2]. */
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * C3 + C + h * hs;
                    float *dk = dqkv + ((size_t)b * T + t2) * C3 + C + h * hs;
                    float dpre = a[t2] * (datt[t2] - dot_ad) * scale;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += k[i] * dpre;
                        dk[i] += q[i] * dpre;
                    }
                }
            }
}

void gpt_embed_forward(float *out, const int *tok, const float *wte, const float *wpe, int B,
                       int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *e = wte + (size_t)tok[b * T + t] * C, *p = wpe + (size_t)t * C;
            for (int i = 0; i < C; i++) o[i] = e[i] + p[i];
        }
}

void gpt_embed_backward(float *dwte, float *dwpe, const float *dout, const int *tok, int B,
                        int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            float *de = dwte + (size_t)tok[b * T + t] * C, *dp = dwpe + (size_t)t * C;
            for (int i = 0; i < C; i++) {
                de[i] += d[i];
                dp[i] += d[i];
            }
        }
}

double gpt_softmax_xent_forward(float *probs, const int *target, int N, int V)
{
    double loss = 0.0;
    for (int n = 0; n < N; n++) {
        float *p = probs + (size_t)n * V;
        float maxv = -INFINITY;
        for (int i = 0; i < V; i++)
            if (p[i] > maxv) maxv = p[i];
        float sum = 0.0f;
        for (int i = 0; i < V; i++) {
            p[i] = expf(p[i] - maxv);
            sum += p[i];
        }
        const float inv = 1.0f / sum;
        for (int i = 0; i < V; i++) p[i] *= inv;
        /* A probability that underflows to 0 would give inf: clamp to the
         * smallest normal float, a loss of about 87 nats. */
        float pt = p[target[n]];
        loss -= log(pt > 1.17549435e-38f ? (double)pt : 1.17549435e-38);
    }
    return loss / N;
}

void gpt_softmax_xent_backward(float *dlogits, const float *probs, const int *target, int N,
                               int V, float dscale)
{
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
        for (int i = 0; i < V; i++) d[i] = p[i] * dscale;
        d[target[n]] -= dscale;
    }
}
