/* CUDA twins of layers_cpu.h: same layouts, same accumulate-into-gradients
 * contract, device pointers, enqueued on `stream` (a cudaStream_t; NULL = the
 * legacy default stream) or on the cuBLAS handle's stream. Each returns a
 * status code as an int, so that C callers need no CUDA header: 0 on
 * success, a cudaError_t for a failure of the CUDA runtime (a launch reports
 * its own failure only, never an error an earlier call left behind), or
 * GPT_CUBLAS_ERROR_BASE + a cublasStatus_t for a failure of cuBLAS;
 * gpt_cuda_error_string names either.
 *
 * How they run (layers_cuda.cu has the details): matmuls, the attention's
 * included, on cuBLAS with bf16 operands and fp32 accumulation and output;
 * LayerNorm, softmax and cross-entropy a warp or a block per row with
 * coalesced loads; column sums (bias and LayerNorm gains' gradients) through
 * shared memory in a fixed order (cuda_plan.h). Each layer that needs
 * working memory takes a `scratch` of device memory of at least the bytes its
 * *_scratch_bytes function returns, 256-byte aligned (cudaMalloc's is),
 * busy until the stream has run the layer: one buffer of the largest size
 * serves every layer of a model run on one stream, allocated once
 * (model_cuda.c). tests/gpt/test_cuda_layers.c holds each to its CPU twin. */
#ifndef GPT_LAYERS_CUDA_H
#define GPT_LAYERS_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes from GPT_CUBLAS_ERROR_BASE up are cuBLAS's (above every
 * cudaError_t). */
#define GPT_CUBLAS_ERROR_BASE 0x100000
/* The reason for a status code of this file: cuBLAS's or CUDA's own text. */
const char *gpt_cuda_error_string(int code);

/* An opaque cuBLAS handle bound to a stream (cublasSetStream checked). */
typedef struct gpt_cublas gpt_cublas;
int gpt_cublas_create(gpt_cublas **out, void *stream);
void gpt_cublas_destroy(gpt_cublas *h);

/* Bytes of scratch the linear layer needs (forward and backward): bf16
 * copies of its operands, 2 (N IC + OC IC + N OC), and the bias gradient's
 * column partials, 4 OC gpt_colsum_slices(N). */
size_t gpt_cuda_linear_scratch_bytes(int N, int IC, int OC);

int gpt_cuda_linear_forward(gpt_cublas *h, float *out, const float *inp, const float *w,
                            const float *b, int N, int IC, int OC, void *scratch);
int gpt_cuda_linear_backward(gpt_cublas *h, float *dinp, float *dw, float *db,
                             const float *dout, const float *inp, const float *w, int N, int IC,
                             int OC, void *scratch);

/* Bytes of scratch LayerNorm's backward needs: the gains' column partials,
 * 8 C gpt_colsum_slices(N) (the forward needs none). */
size_t gpt_cuda_layernorm_scratch_bytes(int N, int C);

int gpt_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b, int N, int C, void *stream);
int gpt_cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                const float *inp, const float *w, const float *mean,
                                const float *rstd, int N, int C, void *stream, void *scratch);
int gpt_cuda_gelu_forward(float *out, const float *inp, size_t n, void *stream);
int gpt_cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n,
                           void *stream);

/* Bytes of scratch the attention needs (forward and backward), 0 when the
 * sizes overflow: head-major bf16 q, k, v, bf16 probabilities, fp32 head
 * outputs or gradients, fp32 dP and bf16 dY (gpt_att_ws_layout in
 * cuda_plan.h): 20 B T C + 6 B NH T^2 bytes, about 365 MB at GPT-2 small
 * (T 1024, C 768, NH 12) and B = 4. */
size_t gpt_cuda_attention_scratch_bytes(int B, int T, int C, int NH);

/* Causal self-attention through cuBLAS strided-batched GEMMs (S = Q K^T,
 * Y = P V; backward dP = dY V^T, dV = P^T dY, dQ = dS K, dK = dS^T Q) and a
 * warp-per-row causal softmax and its backward. att [B, NH, T, T] receives
 * the probabilities (fp32, zero above the diagonal), kept for backward. */
int gpt_cuda_attention_forward(gpt_cublas *h, float *out, float *att, const float *qkv, int B,
                               int T, int C, int NH, void *scratch);
int gpt_cuda_attention_backward(gpt_cublas *h, float *dqkv, const float *dout, const float *qkv,
                                const float *att, int B, int T, int C, int NH, void *scratch);
int gpt_cuda_embed_forward(float *out, const int *tok, const float *wte, const float *wpe,
                           int B, int T, int C, void *stream);
/* Bytes of scratch the embedding's backward needs: 8 B T (each position's
 * next position of the same token, and whether it is the token's first). */
size_t gpt_cuda_embed_scratch_bytes(int B, int T);
/* dwpe and dwte in the CPU twin's order, without atomics: bitwise its
 * result. */
int gpt_cuda_embed_backward(float *dwte, float *dwpe, const float *dout, const int *tok, int B,
                            int T, int C, void *stream, void *scratch);
/* Softmax in place and per-row losses -log p[target] into row_loss[N] (the
 * caller averages: a device-wide mean would need a second pass). */
int gpt_cuda_softmax_xent_forward(float *probs, float *row_loss, const int *target, int N, int V,
                                  void *stream);
int gpt_cuda_softmax_xent_backward(float *dlogits, const float *probs, const int *target, int N,
                                   int V, float dscale, void *stream);
/* y += x over n values (the residual connections). */
int gpt_cuda_add_inplace(float *y, const float *x, size_t n, void *stream);

/* fp32 <-> the engine's working dtype, given as a zc_dtype value (0 fp32,
 * 1 fp16, 2 bf16; rounding to nearest even). */
int gpt_cuda_widen(float *dst, const void *src, int dtype, size_t n, void *stream);
int gpt_cuda_narrow(void *dst, int dtype, const float *src, size_t n, void *stream);

#ifdef __cplusplus
}
#endif

#endif
