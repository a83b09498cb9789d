/* Causal self-attention on the CPU (layers_cpu.h for the layout): per
 * sequence and head, the scores, the weighted sum and every gradient are
 * matrix products (fp32 gpt_cpu_gemm: cblas_sgemm) on strided views of qkv, in blocks of
 * query rows so that a block only multiplies the keys it can see (rows t0 ..
 * t0+R-1 need keys 0 .. t0+R-1: about half the work of the full square). The
 * softmax and its gradient are row loops the compiler vectorises. */
#include <math.h>
#include <string.h>

#include "layers_cpu.h"
#include "matmul_cpu.h"
#include "vecmath_cpu.h"

/* Query rows per block: the backward's scratch is ROWS x T floats on the
 * stack (64 KiB), so blocks shrink for long sequences. */
enum { SCRATCH_FLOATS = 16384, MAX_ROWS = 64 };

static int block_rows(int T)
{
    int r = SCRATCH_FLOATS / T;
    return r < MAX_ROWS ? (r < 1 ? 1 : r) : MAX_ROWS;
}

/* Row t of the scores (s[0..t] valid) becomes the softmax over 0..t, and
 * s[t+1 .. width-1] zero (the causal mask). */
GPT_SIMD_CLONES
static void softmax_causal_row(float *s, int t, int width)
{
    float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
    for (int j = 0; j <= t; j++) maxv = s[j] > maxv ? s[j] : maxv;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j <= t; j++) {
        s[j] = gpt_expf(s[j] - maxv);
        sum += s[j];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j <= t; j++) s[j] *= inv;
    if (t + 1 < width) memset(s + t + 1, 0, (size_t)(width - t - 1) * sizeof(float));
}

/* Row t of datt becomes d(pre-softmax scores) times scale: att (datt - sum
 * att datt) scale over 0..t, zero above. */
GPT_SIMD_CLONES
static void softmax_causal_row_backward(float *d, const float *a, int t, int width, float scale)
{
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int j = 0; j <= t; j++) dot += a[j] * d[j];
#pragma omp simd
    for (int j = 0; j <= t; j++) d[j] = a[j] * (d[j] - dot) * scale;
    if (t + 1 < width) memset(d + t + 1, 0, (size_t)(width - t - 1) * sizeof(float));
}

void gpt_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                           int NH)
{
    const int hs = C / NH, C3 = 3 * C, R = block_rows(T);
    const float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
            const float *k = q + C, *v = q + 2 * C;
            float *a = att + ((size_t)b * NH + h) * T * T;
            float *o = out + (size_t)b * T * C + (size_t)h * hs;
            for (int t0 = 0; t0 < T; t0 += R) {
                const int rows = T - t0 < R ? T - t0 : R, keys = t0 + rows;
                float *s = a + (size_t)t0 * T;
                gpt_cpu_gemm(GPT_MATMUL_F32, false, true, rows, keys, hs, scale,
                            q + (size_t)t0 * C3, C3, k, C3, 0.0f, s, T);
                for (int i = 0; i < rows; i++) softmax_causal_row(s + (size_t)i * T, t0 + i, T);
                gpt_cpu_gemm(GPT_MATMUL_F32, false, false, rows, hs, keys, 1.0f, s,
                            T, v, C3, 0.0f, o + (size_t)t0 * C, C);
            }
        }
}

void gpt_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att,
                            int B, int T, int C, int NH)
{
    const int hs = C / NH, C3 = 3 * C, R = block_rows(T);
    const float scale = 1.0f / sqrtf((float)hs);
    float d[SCRATCH_FLOATS]; /* R x keys: d(att), then d(scores) */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const size_t off = (size_t)b * T * C3 + (size_t)h * hs;
            const float *q = qkv + off, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C;
            const float *a = att + ((size_t)b * NH + h) * T * T;
            const float *dy = dout + (size_t)b * T * C + (size_t)h * hs;
            for (int t0 = 0; t0 < T; t0 += R) {
                const int rows = T - t0 < R ? T - t0 : R, keys = t0 + rows;
                const float *ab = a + (size_t)t0 * T, *dyb = dy + (size_t)t0 * C;
                /* y = att v: d(att) = dy v^T, dv += att^T dy. */
                gpt_cpu_gemm(GPT_MATMUL_F32, false, true, rows, keys, hs, 1.0f, dyb,
                            C, v, C3, 0.0f, d, keys);
                gpt_cpu_gemm(GPT_MATMUL_F32, true, false, keys, hs, rows, 1.0f, ab, T,
                            dyb, C, 1.0f, dv, C3);
                for (int i = 0; i < rows; i++)
                    softmax_causal_row_backward(d + (size_t)i * keys, ab + (size_t)i * T, t0 + i,
                                                keys, scale);
                /* scores = scale q k^T: dq += ds k, dk += ds^T q. */
                gpt_cpu_gemm(GPT_MATMUL_F32, false, false, rows, hs, keys, 1.0f, d,
                            keys, k, C3, 1.0f, dq + (size_t)t0 * C3, C3);
                gpt_cpu_gemm(GPT_MATMUL_F32, true, false, keys, hs, rows, 1.0f, d, keys,
                            q + (size_t)t0 * C3, C3, 1.0f, dk, C3);
            }
        }
}
