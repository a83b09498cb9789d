/* The layers of a GPT-2-style decoder on the CPU, fp32, forward and backward.
 *
 * Layout: activations are row-major [N, C] with N = B*T rows (batch-major,
 * then position). Backward functions ACCUMULATE (+=) into parameter gradients
 * and into input gradients, so a tensor used twice (the residual stream, the
 * tied embedding) gets the sum of its uses; callers zero them first. The
 * matmuls are gpt_cpu_gemm's (matmul_cpu.h): fp32 (OpenBLAS) in the functions
 * below, and in bf16 with fp32 accumulation (oneDNN) through the _mm forms
 * of the linear layer when asked; the rest are loops the compiler
 * vectorises. */
#ifndef GPT_LAYERS_CPU_H
#define GPT_LAYERS_CPU_H

#include <stddef.h>

#include "matmul_cpu.h"

/* Longest sequence the attention handles (GPT-2's context). */
#define GPT_MAX_SEQ 1024

/* out[N, OC] = inp[N, IC] @ w[OC, IC]^T + b (b may be NULL). */
void gpt_linear_forward(float *out, const float *inp, const float *w, const float *b, int N,
                        int IC, int OC);
/* dinp += dout @ w; dw += dout^T @ inp; db += column sums of dout (db may be NULL). */
void gpt_linear_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                         const float *w, int N, int IC, int OC);
/* The same with the matmuls in precision mm. */
void gpt_linear_forward_mm(gpt_matmul mm, float *out, const float *inp, const float *w,
                           const float *b, int N, int IC, int OC);
void gpt_linear_backward_mm(gpt_matmul mm, float *dinp, float *dw, float *db,
                            const float *dout, const float *inp, const float *w, int N, int IC,
                            int OC);

/* The same as gpt_linear_backward_mm, except that dinp is written, not added
 * to (its first use: no zeroing beforehand). dw and db still accumulate. */
void gpt_linear_backward_set_mm(gpt_matmul mm, float *dinp, float *dw, float *db,
                                const float *dout, const float *inp, const float *w, int N,
                                int IC, int OC);
/* The passes after a linear layer computed without its bias (b NULL), fused
 * so that its output is read and written once more instead of twice:
 * out[n, j] = (out[n, j] + b[j]) + res[n, j] (bias, then the residual), and
 * h[n, j] += b[j], out[n, j] = GELU(h[n, j]) (bias, then the MLP's GELU;
 * h keeps the pre-activation for backward). Rows of C columns. */
void gpt_bias_residual(float *out, const float *b, const float *res, int N, int C);
void gpt_bias_gelu_forward(float *out, float *h, const float *b, int N, int C);

/* Per row: out = (x - mean) / sqrt(var + 1e-5) * w + b; saves mean and rstd. */
void gpt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                           const float *w, const float *b, int N, int C);
void gpt_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C);

/* GPT-2's tanh approximation of GELU, elementwise over n values. */
void gpt_gelu_forward(float *out, const float *inp, size_t n);
void gpt_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
/* dinp = GELU'(inp) dout (written, not added to). */
void gpt_gelu_backward_set(float *dinp, const float *inp, const float *dout, size_t n);

/* Causal multi-head self-attention. qkv is [B, T, 3C] (q, k, v each C wide,
 * head h at columns h*hs .. h*hs+hs-1); out is [B, T, C]; att [B, NH, T, T]
 * keeps the softmax probabilities for backward (entries above the diagonal
 * are zero). */
void gpt_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                           int NH);
void gpt_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att,
                            int B, int T, int C, int NH);

/* x[b, t, :] = wte[tok[b, t], :] + wpe[t, :]. */
void gpt_embed_forward(float *out, const int *tok, const float *wte, const float *wpe, int B,
                       int T, int C);
void gpt_embed_backward(float *dwte, float *dwpe, const float *dout, const int *tok, int B,
                        int T, int C);

/* Softmax over each row of logits [N, V] in place, then the mean over rows
 * of -log p[row, target[row]] (returned, in double). */
double gpt_softmax_xent_forward(float *probs_inout, const int *target, int N, int V);
/* dlogits = (probs - onehot(target)) * dscale: the gradient of the mean loss
 * is dscale = loss_scale / N. */
void gpt_softmax_xent_backward(float *dlogits, const float *probs, const int *target, int N,
                               int V, float dscale);

#endif
