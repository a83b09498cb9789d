/* Double-precision reference of the GPT (ref.h). */
#include "ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint64_t ref_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double ref_uniform(uint64_t *s) { return (double)(ref_rand(s) >> 11) * 0x1p-52 - 1.0; }

void ref_linear(double *out, const double *inp, const double *w, const double *b, int N, int IC,
                int OC)
{
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = b ? b[o] : 0.0;
            for (int i = 0; i < IC; i++) s += inp[n * IC + i] * w[o * IC + i];
            out[n * OC + o] = s;
        }
}

void ref_layernorm(double *out, const double *inp, const double *w, const double *b, int N,
                   int C)
{
    for (int n = 0; n < N; n++) {
        const double *x = inp + n * C;
        double m = 0, v = 0;
        for (int i = 0; i < C; i++) m += x[i];
        m /= C;
        for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
        v /= C; /* biased variance, eps 1e-5, as torch.nn.LayerNorm */
        for (int i = 0; i < C; i++) out[n * C + i] = (x[i] - m) / sqrt(v + 1e-5) * w[i] + b[i];
    }
}

void ref_gelu(double *out, const double *inp, int n)
{
    for (int i = 0; i < n; i++) {
        double x = inp[i];
        out[i] = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    }
}

void ref_attention(double *out, const double *qkv, int B, int T, int C, int NH)
{
    int hs = C / NH;
    double *p = malloc(sizeof(double) * (size_t)T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + (b * T + t) * 3 * C + h * hs;
                double mx = -INFINITY, sum = 0;
                for (int u = 0; u <= t; u++) {
                    const double *k = qkv + (b * T + u) * 3 * C + C + h * hs;
                    double s = 0;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    p[u] = s / sqrt((double)hs);
                    if (p[u] > mx) mx = p[u];
                }
                for (int u = 0; u <= t; u++) sum += (p[u] = exp(p[u] - mx));
                for (int i = 0; i < hs; i++) {
                    double o = 0;
                    for (int u = 0; u <= t; u++)
                        o += p[u] / sum * qkv[(b * T + u) * 3 * C + 2 * C + h * hs + i];
                    out[(b * T + t) * C + h * hs + i] = o;
                }
            }
    free(p);
}

double ref_xent(const double *logits, const int *target, int N, int V)
{
    double loss = 0;
    for (int n = 0; n < N; n++) {
        const double *z = logits + n * V;
        double mx = z[0], s = 0;
        for (int i = 1; i < V; i++) if (z[i] > mx) mx = z[i];
        for (int i = 0; i < V; i++) s += exp(z[i] - mx);
        loss += log(s) + mx - z[target[n]];
    }
    return loss / N;
}

double ref_gpt_loss(const gpt_config *c, const double *params, const int *tok, const int *tgt,
                    int B)
{
    const int T = c->seq, C = c->dim, V = c->vocab, N = B * T, nt = gpt_num_tensors(c);
    const double **P = malloc(sizeof(double *) * (size_t)nt);
    size_t off = 0;
    for (int i = 0; i < nt; i++) {
        char name[64];
        int64_t shape[2];
        int ndim, piece;
        size_t n;
        gpt_tensor_info(c, i, name, shape, &ndim, &n, &piece);
        P[i] = params + off;
        off += n;
    }
    double *x = malloc(sizeof(double) * (size_t)N * C), *h = malloc(sizeof(double) * (size_t)N * C);
    double *qkv = malloc(sizeof(double) * (size_t)N * 3 * C), *y = malloc(sizeof(double) * (size_t)N * C);
    double *f = malloc(sizeof(double) * (size_t)N * 4 * C), *g = malloc(sizeof(double) * (size_t)N * 4 * C);
    double *logits = malloc(sizeof(double) * (size_t)N * V);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < C; i++) x[n * C + i] = P[0][tok[n] * C + i] + P[1][(n % T) * C + i];
    for (int l = 0; l < c->layers; l++) {
        const double **w = P + 2 + 12 * l;
        ref_layernorm(h, x, w[0], w[1], N, C);
        ref_linear(qkv, h, w[2], w[3], N, C, 3 * C);
        ref_attention(y, qkv, B, T, C, c->heads);
        ref_linear(h, y, w[4], w[5], N, C, C);
        for (int i = 0; i < N * C; i++) x[i] += h[i];
        ref_layernorm(h, x, w[6], w[7], N, C);
        ref_linear(f, h, w[8], w[9], N, C, 4 * C);
        ref_gelu(g, f, N * 4 * C);
        ref_linear(h, g, w[10], w[11], N, 4 * C, C);
        for (int i = 0; i < N * C; i++) x[i] += h[i];
    }
    ref_layernorm(h, x, P[nt - 2], P[nt - 1], N, C);
    ref_linear(logits, h, P[0], NULL, N, C, V); /* tied: the head is wte */
    double loss = ref_xent(logits, tgt, N, V);
    free(x); free(h); free(qkv); free(y); free(f); free(g); free(logits); free(P);
    return loss;
}
