/* CUDA twins of layers_cpu.h: same layouts, same accumulate-into-gradients
 * contract, device pointers, enqueued on `stream` (a cudaStream_t; NULL = the
 * legacy default stream). Each returns a status code as an int, so that C
 * callers need no CUDA header: 0 on success, a cudaError_t for a failure of
 * the CUDA runtime (a launch reports its own failure only, never an error an
 * earlier call left behind), or GPT_CUBLAS_ERROR_BASE + a cublasStatus_t for
 * a failure of cuBLAS; gpt_cuda_error_string names either. The matmuls run
 * on cuBLAS (cublasGemmEx) with bf16 inputs and fp32 accumulation and
 * output: they round their fp32 operands to bf16 in `scratch`, which must
 * hold gpt_cuda_linear_scratch_elems() 16-bit values.
 * tests/gpt/test_cuda_layers.c holds each to its CPU twin. */
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

/* 16-bit elements the linear layer's scratch needs for these sizes. */
size_t gpt_cuda_linear_scratch_elems(int N, int IC, int OC);

int gpt_cuda_linear_forward(gpt_cublas *h, float *out, const float *inp, const float *w,
                            const float *b, int N, int IC, int OC, void *scratch);
int gpt_cuda_linear_backward(gpt_cublas *h, float *dinp, float *dw, float *db,
                             const float *dout, const float *inp, const float *w, int N, int IC,
                             int OC, void *scratch);

int gpt_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b, int N, int C, void *stream);
int gpt_cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                const float *inp, const float *w, const float *mean,
                                const float *rstd, int N, int C, void *stream);
int gpt_cuda_gelu_forward(float *out, const float *inp, size_t n, void *stream);
int gpt_cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n,
                           void *stream);
int gpt_cuda_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                               int NH, void *stream);
int gpt_cuda_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                const float *att, int B, int T, int C, int NH, void *stream);
int gpt_cuda_embed_forward(float *out, const int *tok, const float *wte, const float *wpe,
                           int B, int T, int C, void *stream);
int gpt_cuda_embed_backward(float *dwte, float *dwpe, const float *dout, const int *tok, int B,
                            int T, int C, void *stream);
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
