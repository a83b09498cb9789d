/* The matrix products of the CPU layers, row-major:
 * C[M, N] = alpha op(A)[M, K] op(B)[K, N] + beta C, op = transpose when the flag
 * says so, in one of two precisions:
 *
 * GPT_MATMUL_F32: fp32 inputs and accumulation (OpenBLAS's cblas_sgemm).
 * GPT_MATMUL_BF16: A and B rounded to bf16 (nearest even), products summed
 *   in fp32, C fp32 - what torch.autocast(bfloat16) and cuBLAS's bf16 GEMM
 *   compute. It runs on oneDNN's matmul (AMX or AVX-512 BF16 kernels), and
 *   only where gpt_matmul_bf16_available says so: the build has oneDNN and
 *   the CPU has bf16 instructions (without them oneDNN would emulate bf16,
 *   slower than fp32). A call that cannot get its scratch or a oneDNN
 *   primitive computes in fp32 instead (correct, less rounded). */
#ifndef GPT_MATMUL_CPU_H
#define GPT_MATMUL_CPU_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { GPT_MATMUL_F32, GPT_MATMUL_BF16 } gpt_matmul;

void gpt_cpu_gemm(gpt_matmul mm, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* Whether GPT_MATMUL_BF16 runs as bf16 here; when not, writes why into why
 * (may be NULL). */
bool gpt_matmul_bf16_available(char *why, size_t len);

/* Threads the calling thread's bf16 matmuls may use (its oneDNN OpenMP
 * team; OpenBLAS's count is the process's: openblas_set_num_threads). A rank
 * thread that shares the cores with other ranks sets 1. */
void gpt_matmul_set_threads(int n);

#endif
