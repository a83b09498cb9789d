/* The CPU layers' matrix products (matmul_cpu.h): fp32 through OpenBLAS,
 * bf16 through oneDNN's matmul where the build and the CPU have it. */
#include "matmul_cpu.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "vecmath_cpu.h"

static void sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

#ifdef GPT_HAVE_DNNL
#include <pthread.h>

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

/* One engine for the process (oneDNN engines are thread-safe); each call
 * makes its own stream and primitive, which oneDNN's primitive cache makes
 * cheap after a shape's first call. */
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;
static char engine_why[160];

static void engine_init(void)
{
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if ((isa & dnnl_cpu_isa_avx512_core_bf16) != dnnl_cpu_isa_avx512_core_bf16) {
        snprintf(engine_why, sizeof engine_why,
                 "the CPU has no bf16 instructions (AVX-512 BF16 or AMX; oneDNN's ISA 0x%x)",
                 (unsigned)isa);
        return;
    }
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) {
        engine = NULL;
        snprintf(engine_why, sizeof engine_why, "oneDNN could not create a CPU engine");
    }
}

bool gpt_matmul_bf16_available(char *why, size_t len)
{
    pthread_once(&engine_once, engine_init);
    if (!engine && why) snprintf(why, len, "%s", engine_why);
    return engine != NULL;
}

void gpt_matmul_set_threads(int n) { omp_set_num_threads(n > 0 ? n : 1); }

/* dst = src rounded to bf16 (nearest even, NaN kept), rows x cols of a
 * matrix with leading dimension ld into a packed one. */
GPT_SIMD_CLONES
static void to_bf16(uint16_t *dst, const float *src, int rows, int cols, int ld)
{
    for (int r = 0; r < rows; r++) {
        const float *s = src + (size_t)r * ld;
        uint16_t *d = dst + (size_t)r * cols;
#pragma omp simd
        for (int c = 0; c < cols; c++) {
            uint32_t x;
            memcpy(&x, &s[c], sizeof x);
            uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
            d[c] = (x & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : (uint16_t)rounded;
        }
    }
}

/* C = op(A) op(B) + beta C with A and B already packed in bf16 (stored
 * layout, so op(.) is a choice of strides). False when oneDNN refuses. */
static bool bf16_matmul(bool ta, bool tb, int M, int N, int K, float alpha, const uint16_t *A,
                      const uint16_t *B, float beta, float *C, int ldc)
{
    dnnl_memory_desc_t a_md, b_md, c_md;
    dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
    dnnl_dims_t as = {ta ? 1 : K, ta ? M : 1}, bs = {tb ? 1 : N, tb ? K : 1}, cs = {ldc, 1};
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_stream_t stream = NULL;
    dnnl_memory_t mem[3] = {NULL, NULL, NULL};
    bool ok = dnnl_memory_desc_init_by_strides(&a_md, 2, ad, dnnl_bf16, as) == dnnl_success &&
              dnnl_memory_desc_init_by_strides(&b_md, 2, bd, dnnl_bf16, bs) == dnnl_success &&
              dnnl_memory_desc_init_by_strides(&c_md, 2, cd, dnnl_f32, cs) == dnnl_success &&
              dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md) == dnnl_success &&
              dnnl_primitive_attr_create(&attr) == dnnl_success;
    /* alpha: an output scale, applied to the product before the sum. */
    if (ok && alpha != 1.0f)
        ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha) == dnnl_success;
    /* beta 1: the sum post-op adds the product to what C holds. */
    if (ok && beta != 0.0f)
        ok = dnnl_post_ops_create(&po) == dnnl_success &&
             dnnl_post_ops_append_sum(po, beta) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    ok = ok && dnnl_primitive_desc_create(&pd, &desc, attr, engine, NULL) == dnnl_success &&
         dnnl_primitive_create(&prim, pd) == dnnl_success &&
         dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) == dnnl_success &&
         dnnl_memory_create(&mem[0], &a_md, engine, (void *)A) == dnnl_success &&
         dnnl_memory_create(&mem[1], &b_md, engine, (void *)B) == dnnl_success &&
         dnnl_memory_create(&mem[2], &c_md, engine, C) == dnnl_success;
    if (ok) {
        /* Past this point C may be partly written: no fallback can redo it. */
        dnnl_exec_arg_t args[3] = {
            {DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]}, {DNNL_ARG_DST, mem[2]}};
        if (dnnl_primitive_execute(prim, stream, 3, args) != dnnl_success ||
            dnnl_stream_wait(stream) != dnnl_success) {
            fprintf(stderr, "gpt_cpu_gemm: oneDNN's bf16 matmul %dx%dx%d failed while running\n",
                    M, N, K);
            abort();
        }
    }
    for (int i = 0; i < 3; i++)
        if (mem[i]) dnnl_memory_destroy(mem[i]);
    if (stream) dnnl_stream_destroy(stream);
    if (prim) dnnl_primitive_destroy(prim);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return ok;
}

/* The bf16 product, or false (nothing written) when it cannot run. */
static bool gemm_bf16(bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                      int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (!gpt_matmul_bf16_available(NULL, 0)) return false;
    const size_t na = (size_t)M * K, nb = (size_t)K * N;
    uint16_t *buf = malloc((na + nb) * sizeof(uint16_t));
    if (!buf) return false;
    /* Stored shapes: A is M x K (K x M transposed), B is K x N (N x K). */
    to_bf16(buf, A, ta ? K : M, ta ? M : K, lda);
    to_bf16(buf + na, B, tb ? N : K, tb ? K : N, ldb);
    bool ok = bf16_matmul(ta, tb, M, N, K, alpha, buf, buf + na, beta, C, ldc);
    free(buf);
    return ok;
}
#else
bool gpt_matmul_bf16_available(char *why, size_t len)
{
    if (why) snprintf(why, len, "this build has no oneDNN (libdnnl-dev)");
    return false;
}

void gpt_matmul_set_threads(int n) { (void)n; }

static bool gemm_bf16(bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                      int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    return false;
}
#endif

void gpt_cpu_gemm(gpt_matmul mm, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0) return;
    if (mm == GPT_MATMUL_BF16 && K > 0 &&
        gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
        return;
    sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
