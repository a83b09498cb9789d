// CUDA twins of the CPU layers (layers_cuda.h), written as llm.c's and
// PyTorch's kernels are: a warp per row for LayerNorm (its loads coalesced:
// the 32 lanes read 32 consecutive floats), a block per row for the softmax
// and cross-entropy over the vocabulary (one pass for the maximum and the
// sum together, the online softmax, then one pass writing probabilities),
// column sums through shared memory in a fixed order (cuda_plan.h), and
// grid-stride elementwise kernels. The matmuls are cuBLAS's, bf16 operands
// and fp32 accumulation; the attention is in attention_cuda.cu.
//
// Sums run in a different order than the CPU's loops (a warp's butterfly,
// a block's partials), so results agree with the twins to rounding, not
// bitwise; but every order is fixed and no kernel uses atomics, so results
// repeat bit for bit run to run. The embeddings' gradients add in the CPU's
// own order and equal it bitwise.
#include "cuda_common.cuh"

#include <cfloat>
#include <new>

#include <cuda_fp16.h>

using namespace gpt;

extern "C" const char *gpt_cuda_error_string(int code)
{
    if (code >= GPT_CUBLAS_ERROR_BASE)
        return cublasGetStatusString((cublasStatus_t)(code - GPT_CUBLAS_ERROR_BASE));
    return cudaGetErrorString((cudaError_t)code);
}

extern "C" int gpt_cublas_create(gpt_cublas **out, void *stream)
{
    *out = nullptr;
    gpt_cublas *g = new (std::nothrow) gpt_cublas;
    if (!g) return (int)cudaErrorMemoryAllocation;
    int rc = blas_code(cublasCreate(&g->h));
    if (rc) {
        delete g;
        return rc;
    }
    g->s = (cudaStream_t)stream;
    // Unchecked, a failure here would leave the handle on the legacy stream,
    // racing the model's own stream instead of failing.
    rc = blas_code(cublasSetStream(g->h, g->s));
    if (rc) {
        cublasDestroy(g->h);
        delete g;
        return rc;
    }
    *out = g;
    return 0;
}

extern "C" void gpt_cublas_destroy(gpt_cublas *g)
{
    if (!g) return;
    cublasDestroy(g->h);
    delete g;
}

// ---- column sums ---------------------------------------------------------------------------
// part[a][s][c] for slice s (cuda_plan.h): array 0 sums d[n][c] (a bias's
// gradient, LayerNorm's db); with kLn, array 1 sums LayerNorm's
// (x[n][c] - mean[n]) * rstd[n] * d[n][c] (its dw). Lane = column, so every
// warp load reads 32 consecutive floats of a row; warp w takes rows
// lo + w, lo + w + 8, ...; the 8 warps' partials are added in warp order
// through shared memory.
template <bool kLn>
__global__ void __launch_bounds__(GPT_COLSUM_WARPS * 32)
colsum_partial_k(float *__restrict__ part, const float *__restrict__ d,
                 const float *__restrict__ x, const float *__restrict__ mean,
                 const float *__restrict__ rstd, int N, int C, int S)
{
    __shared__ float sh[2][GPT_COLSUM_WARPS][GPT_COLSUM_COLS];
    const int lane = lane_id(), warp = (int)(threadIdx.x / 32);
    const int c = (int)blockIdx.x * GPT_COLSUM_COLS + lane, s = (int)blockIdx.y;
    int lo, hi;
    gpt_colsum_rows(N, S, s, &lo, &hi);
    float a0 = 0.0f, a1 = 0.0f;
    if (c < C)
        for (int n = lo + warp; n < hi; n += GPT_COLSUM_WARPS) {
            const float dv = d[(size_t)n * C + c];
            a0 += dv;
            if (kLn) a1 += (x[(size_t)n * C + c] - mean[n]) * rstd[n] * dv;
        }
    sh[0][warp][lane] = a0;
    sh[1][warp][lane] = a1;
    __syncthreads();
    if (warp == 0 && c < C) {
        float t0 = sh[0][0][lane], t1 = sh[1][0][lane];
#pragma unroll
        for (int w = 1; w < GPT_COLSUM_WARPS; w++) {
            t0 += sh[0][w][lane];
            t1 += sh[1][w][lane];
        }
        part[(size_t)s * C + c] = t0;
        if (kLn) part[((size_t)S + s) * C + c] = t1;
    }
}

// dst_a[c] += the S partials of array a (blockIdx.y), in slice order.
__global__ void colsum_finish_k(float *__restrict__ dst0, float *__restrict__ dst1,
                                const float *__restrict__ part, int C, int S)
{
    const int c = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (c >= C) return;
    const float *p = part + (size_t)blockIdx.y * S * C;
    float acc = p[c];
    for (int s = 1; s < S; s++) acc += p[(size_t)s * C + c];
    float *dst = blockIdx.y ? dst1 : dst0;
    dst[c] += acc;
}

// Column sums of d[N, C] (and LayerNorm's dw with kLn) added to dst0 (dst1).
template <bool kLn>
static int colsum(float *dst0, float *dst1, const float *d, const float *x, const float *mean,
                  const float *rstd, int N, int C, float *part, cudaStream_t st)
{
    const int S = gpt_colsum_slices(N);
    dim3 grid((unsigned)blocks_for((size_t)C, GPT_COLSUM_COLS), (unsigned)S);
    TRY(launch(colsum_partial_k<kLn>, grid, GPT_COLSUM_WARPS * 32, st, part, d, x, mean, rstd,
               N, C, S));
    dim3 fin((unsigned)blocks_for((size_t)C, 256), kLn ? 2u : 1u);
    return launch(colsum_finish_k, fin, 256, st, dst0, dst1, (const float *)part, C, S);
}

// ---- linear ------------------------------------------------------------------------------

// Bytes of the linear scratch's bf16 operands, then (aligned) the column
// partials of the bias gradient.
static size_t linear_bf16_bytes(int N, int IC, int OC)
{
    return 2 * ((size_t)N * IC + (size_t)OC * IC + (size_t)N * OC);
}

static size_t linear_partials_at(int N, int IC, int OC)
{
    return (linear_bf16_bytes(N, IC, OC) + GPT_WS_ALIGN - 1) / GPT_WS_ALIGN * GPT_WS_ALIGN;
}

extern "C" size_t gpt_cuda_linear_scratch_bytes(int N, int IC, int OC)
{
    return linear_partials_at(N, IC, OC) + gpt_colsum_scratch_bytes(N, OC, 1);
}

__global__ void to_bf16_k(__nv_bfloat16 *__restrict__ o, const float *__restrict__ x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        o[i] = __float2bfloat16_rn(x[i]);
}

// out[n, j] += b[j]: blockIdx.x covers columns, blockIdx.y strides rows (no
// division per element).
__global__ void add_bias_k(float *__restrict__ out, const float *__restrict__ b, int N, int OC)
{
    const int j = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (j >= OC) return;
    const float bj = b[j];
    for (int n = (int)blockIdx.y; n < N; n += (int)gridDim.y) out[(size_t)n * OC + j] += bj;
}

// Grid of a grid-stride elementwise kernel over n values: enough blocks for
// any GPU (a few waves of 256 threads on 132 SMs), never more than needed.
static dim3 elementwise_grid(size_t n)
{
    const int b = blocks_for(n, 256);
    return dim3((unsigned)(b < 4096 ? b : 4096));
}

static int to_bf16(__nv_bfloat16 *o, const float *x, size_t n, cudaStream_t st)
{
    return launch(to_bf16_k, elementwise_grid(n), 256, st, o, x, n);
}

static int gemm(gpt_cublas *g, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                const void *A, int lda, const void *B, int ldb, float beta, float *C, int ldc)
{
    const float alpha = 1.0f;
    cublasStatus_t st = cublasGemmEx(g->h, ta, tb, m, n, k, &alpha, A, CUDA_R_16BF, lda, B,
                                     CUDA_R_16BF, ldb, &beta, C, CUDA_R_32F, ldc,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return blas_code(st);
}

// Row-major X[R, K] is column-major X^T: out[N, OC] = inp @ w^T becomes
// out^T = w^T^T inp^T, i.e. gemm(T, N) over the same memory.
extern "C" int gpt_cuda_linear_forward(gpt_cublas *g, float *out, const float *inp,
                                       const float *w, const float *b, int N, int IC, int OC,
                                       void *scratch)
{
    __nv_bfloat16 *xi = (__nv_bfloat16 *)scratch, *xw = xi + (size_t)N * IC;
    TRY(to_bf16(xi, inp, (size_t)N * IC, g->s));
    TRY(to_bf16(xw, w, (size_t)OC * IC, g->s));
    TRY(gemm(g, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, xw, IC, xi, IC, 0.0f, out, OC));
    if (b) {
        dim3 grid((unsigned)blocks_for((size_t)OC, 256), (unsigned)(N < 1024 ? N : 1024));
        TRY(launch(add_bias_k, grid, 256, g->s, out, b, N, OC));
    }
    return 0;
}

extern "C" int gpt_cuda_linear_backward(gpt_cublas *g, float *dinp, float *dw, float *db,
                                        const float *dout, const float *inp, const float *w,
                                        int N, int IC, int OC, void *scratch)
{
    __nv_bfloat16 *xi = (__nv_bfloat16 *)scratch, *xw = xi + (size_t)N * IC,
                  *xd = xw + (size_t)OC * IC;
    float *part = (float *)((char *)scratch + linear_partials_at(N, IC, OC));
    TRY(to_bf16(xi, inp, (size_t)N * IC, g->s));
    TRY(to_bf16(xw, w, (size_t)OC * IC, g->s));
    TRY(to_bf16(xd, dout, (size_t)N * OC, g->s));
    // dinp^T (IC x N) += w^T (IC x OC) dout^T (OC x N)
    if (dinp) TRY(gemm(g, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, xw, IC, xd, OC, 1.0f, dinp, IC));
    // dw^T (IC x OC) += inp^T (IC x N) dout (N x OC)
    TRY(gemm(g, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, xi, IC, xd, OC, 1.0f, dw, IC));
    if (db)
        TRY(colsum<false>(db, nullptr, dout, nullptr, nullptr, nullptr, N, OC, part, g->s));
    return 0;
}

// ---- LayerNorm -----------------------------------------------------------------------------
// A warp per row; the three passes over the row (mean, variance, output)
// re-read it from L1/L2, as llm.c's kernel does. The arithmetic is the CPU
// twin's: the variance over (x - m)^2 after the mean, 1 / sqrtf(v + 1e-5).

__global__ void __launch_bounds__(kRowThreads)
ln_fwd_k(float *__restrict__ out, float *__restrict__ mean, float *__restrict__ rstd,
         const float *__restrict__ inp, const float *__restrict__ w,
         const float *__restrict__ b, int N, int C)
{
    const size_t n = warp_row();
    if (n >= (size_t)N) return;
    const int lane = lane_id();
    const float *x = inp + n * C;
    float s = 0.0f;
    for (int i = lane; i < C; i += 32) s += x[i];
    const float m = warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int i = lane; i < C; i += 32) {
        const float dx = x[i] - m;
        v += dx * dx;
    }
    const float r = 1.0f / sqrtf(warp_sum(v) / (float)C + 1e-5f);
    float *o = out + n * C;
    for (int i = lane; i < C; i += 32) o[i] = (x[i] - m) * r * w[i] + b[i];
    if (lane == 0) {
        mean[n] = m;
        rstd[n] = r;
    }
}

// dinp += the normalisation's Jacobian applied to dout * w (the two row
// means of the CPU twin, by warp sums).
__global__ void __launch_bounds__(kRowThreads)
ln_bwd_rows_k(float *__restrict__ dinp, const float *__restrict__ dout,
              const float *__restrict__ inp, const float *__restrict__ w,
              const float *__restrict__ mean, const float *__restrict__ rstd, int N, int C)
{
    const size_t n = warp_row();
    if (n >= (size_t)N) return;
    const int lane = lane_id();
    const float *x = inp + n * C, *d = dout + n * C;
    float *dx = dinp + n * C;
    const float m = mean[n], s = rstd[n];
    float dm = 0.0f, dnm = 0.0f;
    for (int i = lane; i < C; i += 32) {
        const float norm = (x[i] - m) * s, dn = w[i] * d[i];
        dm += dn;
        dnm += dn * norm;
    }
    dm = warp_sum(dm) / (float)C;
    dnm = warp_sum(dnm) / (float)C;
    for (int i = lane; i < C; i += 32) {
        const float norm = (x[i] - m) * s, dn = w[i] * d[i];
        dx[i] += (dn - dm - norm * dnm) * s;
    }
}

extern "C" size_t gpt_cuda_layernorm_scratch_bytes(int N, int C)
{
    return gpt_colsum_scratch_bytes(N, C, 2);
}

extern "C" int gpt_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                          const float *w, const float *b, int N, int C,
                                          void *stream)
{
    return launch(ln_fwd_k, dim3((unsigned)blocks_for((size_t)N, kRowsPerBlock)), kRowThreads,
                  (cudaStream_t)stream, out, mean, rstd, inp, w, b, N, C);
}

extern "C" int gpt_cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                           const float *inp, const float *w, const float *mean,
                                           const float *rstd, int N, int C, void *stream,
                                           void *scratch)
{
    cudaStream_t s = (cudaStream_t)stream;
    TRY(launch(ln_bwd_rows_k, dim3((unsigned)blocks_for((size_t)N, kRowsPerBlock)),
               kRowThreads, s, dinp, dout, inp, w, mean, rstd, N, C));
    return colsum<true>(db, dw, dout, inp, mean, rstd, N, C, (float *)scratch, s);
}

// ---- GELU and the residual add: elementwise, grid-stride -------------------------------
// 16-byte loads and stores (four floats a thread) when every pointer is
// 16-byte aligned and n a multiple of 4, as is every activation of the
// model; one float a thread otherwise.

#define GELU_SCALE 0.7978845608028654f

__device__ __forceinline__ float gelu(float x)
{
    return 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
}

__device__ __forceinline__ float gelu_grad(float x)
{
    const float th = tanhf(GELU_SCALE * (x + 0.044715f * x * x * x));
    const float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

static bool vec4_ok(size_t n, const void *a, const void *b, const void *c = nullptr)
{
    auto al = [](const void *p) { return ((uintptr_t)p & 15u) == 0; };
    return n % 4 == 0 && al(a) && al(b) && al(c);
}

#define GRID_STRIDE(i, n)                                                       \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);    \
         i += (size_t)gridDim.x * blockDim.x)

template <bool V4>
__global__ void gelu_fwd_k(float *__restrict__ out, const float *__restrict__ inp, size_t n)
{
    if (V4) {
        GRID_STRIDE(i, n / 4)
        {
            const float4 x = ((const float4 *)inp)[i];
            ((float4 *)out)[i] = make_float4(gelu(x.x), gelu(x.y), gelu(x.z), gelu(x.w));
        }
    } else {
        GRID_STRIDE(i, n) out[i] = gelu(inp[i]);
    }
}

template <bool V4>
__global__ void gelu_bwd_k(float *__restrict__ dinp, const float *__restrict__ inp,
                           const float *__restrict__ dout, size_t n)
{
    if (V4) {
        GRID_STRIDE(i, n / 4)
        {
            const float4 x = ((const float4 *)inp)[i], d = ((const float4 *)dout)[i];
            float4 g = ((float4 *)dinp)[i];
            g.x += gelu_grad(x.x) * d.x;
            g.y += gelu_grad(x.y) * d.y;
            g.z += gelu_grad(x.z) * d.z;
            g.w += gelu_grad(x.w) * d.w;
            ((float4 *)dinp)[i] = g;
        }
    } else {
        GRID_STRIDE(i, n) dinp[i] += gelu_grad(inp[i]) * dout[i];
    }
}

extern "C" int gpt_cuda_gelu_forward(float *out, const float *inp, size_t n, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (vec4_ok(n, out, inp))
        return launch(gelu_fwd_k<true>, elementwise_grid(n / 4), 256, s, out, inp, n);
    return launch(gelu_fwd_k<false>, elementwise_grid(n), 256, s, out, inp, n);
}

extern "C" int gpt_cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n,
                                      void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (vec4_ok(n, dinp, inp, dout))
        return launch(gelu_bwd_k<true>, elementwise_grid(n / 4), 256, s, dinp, inp, dout, n);
    return launch(gelu_bwd_k<false>, elementwise_grid(n), 256, s, dinp, inp, dout, n);
}

template <bool V4>
__global__ void add_inplace_k(float *__restrict__ y, const float *__restrict__ x, size_t n)
{
    if (V4) {
        GRID_STRIDE(i, n / 4)
        {
            float4 a = ((float4 *)y)[i];
            const float4 b = ((const float4 *)x)[i];
            a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
            ((float4 *)y)[i] = a;
        }
    } else {
        GRID_STRIDE(i, n) y[i] += x[i];
    }
}

extern "C" int gpt_cuda_add_inplace(float *y, const float *x, size_t n, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (vec4_ok(n, y, x))
        return launch(add_inplace_k<true>, elementwise_grid(n / 4), 256, s, y, x, n);
    return launch(add_inplace_k<false>, elementwise_grid(n), 256, s, y, x, n);
}

// ---- embedding -----------------------------------------------------------------------------

// A warp per position (b, t): out = wte[tok] + wpe[t].
__global__ void __launch_bounds__(kRowThreads)
emb_fwd_k(float *__restrict__ out, const int *__restrict__ tok, const float *__restrict__ wte,
          const float *__restrict__ wpe, int N, int T, int C)
{
    const size_t n = warp_row();
    if (n >= (size_t)N) return;
    const float *e = wte + (size_t)tok[n] * C, *p = wpe + (n % (size_t)T) * C;
    float *o = out + n * C;
    for (int i = lane_id(); i < C; i += 32) o[i] = e[i] + p[i];
}

// dwpe[t, c] += dout[0, t, c] + dout[1, t, c] + ..., added in batch order
// into the running value as the CPU twin does: a thread per (t, c).
__global__ void emb_bwd_pos_k(float *__restrict__ dwpe, const float *__restrict__ dout, int B,
                              int T, int C)
{
    const size_t tc = blockIdx.x * (size_t)blockDim.x + threadIdx.x, TC = (size_t)T * C;
    if (tc >= TC) return;
    float acc = dwpe[tc];
    for (int b = 0; b < B; b++) acc += dout[(size_t)b * TC + tc];
    dwpe[tc] = acc;
}

// The embedding table's gradient in the CPU twin's order, without atomics:
// emb_links_k finds, for each position, the next position of the same token
// (-1: none) and whether it is the token's first position; then a warp per
// (first position, 32 columns) walks its token's positions in order, adding
// their rows into the running value: the same additions as the CPU's loop,
// so the same bits.
__global__ void __launch_bounds__(kRowThreads)
emb_links_k(int *__restrict__ next, int *__restrict__ head, const int *__restrict__ tok, int N)
{
    const size_t n = warp_row();
    if (n >= (size_t)N) return;
    const int lane = lane_id(), v = tok[n];
    int nx = -1;
    for (int m0 = (int)n + 1; m0 < N; m0 += 32) { // 32 candidates a step
        const int m = m0 + lane;
        const unsigned hit = __ballot_sync(0xffffffffu, m < N && tok[m] == v);
        if (hit) {
            nx = m0 + __ffs((int)hit) - 1;
            break;
        }
    }
    int first = 1;
    for (int m0 = 0; m0 < (int)n; m0 += 32) {
        const int m = m0 + lane;
        if (__any_sync(0xffffffffu, m < (int)n && tok[m] == v)) {
            first = 0;
            break;
        }
    }
    if (lane == 0) {
        next[n] = nx;
        head[n] = first;
    }
}

__global__ void __launch_bounds__(kRowThreads)
emb_bwd_tok_k(float *__restrict__ dwte, const float *__restrict__ dout,
              const int *__restrict__ tok, const int *__restrict__ next,
              const int *__restrict__ head, int N, int C)
{
    const size_t n = warp_row();
    const int c = (int)blockIdx.y * 32 + lane_id();
    if (n >= (size_t)N || !head[n] || c >= C) return;
    float *de = dwte + (size_t)tok[n] * C + c;
    float acc = *de;
    for (int m = (int)n; m >= 0; m = next[m]) acc += dout[(size_t)m * C + c];
    *de = acc;
}

extern "C" size_t gpt_cuda_embed_scratch_bytes(int B, int T)
{
    return 2 * (size_t)B * T * sizeof(int);
}

extern "C" int gpt_cuda_embed_forward(float *out, const int *tok, const float *wte,
                                      const float *wpe, int B, int T, int C, void *stream)
{
    const int N = B * T;
    return launch(emb_fwd_k, dim3((unsigned)blocks_for((size_t)N, kRowsPerBlock)), kRowThreads,
                  (cudaStream_t)stream, out, tok, wte, wpe, N, T, C);
}

extern "C" int gpt_cuda_embed_backward(float *dwte, float *dwpe, const float *dout,
                                       const int *tok, int B, int T, int C, void *stream,
                                       void *scratch)
{
    cudaStream_t s = (cudaStream_t)stream;
    const int N = B * T;
    int *next = (int *)scratch, *head = next + N;
    const unsigned rows = (unsigned)blocks_for((size_t)N, kRowsPerBlock);
    TRY(launch(emb_bwd_pos_k, dim3((unsigned)blocks_for((size_t)T * C, 256)), 256, s, dwpe, dout,
               B, T, C));
    TRY(launch(emb_links_k, dim3(rows), kRowThreads, s, next, head, tok, N));
    return launch(emb_bwd_tok_k, dim3(rows, (unsigned)blocks_for((size_t)C, 32)), kRowThreads, s,
                  dwte, dout, tok, (const int *)next, (const int *)head, N, C);
}

// ---- softmax and cross-entropy over the vocabulary ----------------------------------------
// A block per row of V logits. One pass finds the maximum and the sum of
// exp(x - max) together (each thread keeps its running pair, rescaling its
// sum when its maximum grows; the block combines the pairs), a second writes
// p = exp(x - max) / sum in place; then the row's loss.

constexpr int kXentThreads = 512;

// The pair (m, s) stands for s * exp(m - M) for any M: merging two rescales
// both to the larger maximum. -FLT_MAX, not -inf, so that an empty pair
// never computes inf - inf.
__device__ __forceinline__ void merge(float &m, float &s, float m2, float s2)
{
    const float mx = fmaxf(m, m2);
    s = s * expf(m - mx) + s2 * expf(m2 - mx);
    m = mx;
}

__global__ void __launch_bounds__(kXentThreads)
xent_fwd_k(float *__restrict__ probs, float *__restrict__ row_loss, const int *__restrict__ target,
           int V)
{
    __shared__ float sm[kXentThreads / 32], ss[kXentThreads / 32];
    __shared__ float row_max, row_inv;
    const size_t n = blockIdx.x;
    float *p = probs + n * V;
    float m = -FLT_MAX, s = 0.0f;
    for (int i = (int)threadIdx.x; i < V; i += kXentThreads) {
        const float x = p[i];
        if (x > m) {
            s *= expf(m - x);
            m = x;
        }
        s += expf(x - m);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        merge(m, s, m2, s2);
    }
    const int warp = (int)(threadIdx.x / 32);
    if (lane_id() == 0) {
        sm[warp] = m;
        ss[warp] = s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float M = sm[0], S = ss[0];
        for (int w = 1; w < kXentThreads / 32; w++) merge(M, S, sm[w], ss[w]);
        row_max = M;
        row_inv = 1.0f / S;
    }
    __syncthreads();
    const float M = row_max, inv = row_inv;
    for (int i = (int)threadIdx.x; i < V; i += kXentThreads) p[i] = expf(p[i] - M) * inv;
    __syncthreads(); // the block's writes are visible to thread 0
    // A probability that underflows to 0 would give inf: clamp to the
    // smallest normal float, as the CPU twin does.
    if (threadIdx.x == 0) row_loss[n] = -logf(fmaxf(p[target[n]], FLT_MIN));
}

// dlogits = probs * dscale, minus dscale at the target: a block per row.
__global__ void xent_bwd_k(float *__restrict__ dlogits, const float *__restrict__ probs,
                           const int *__restrict__ target, int V, float dscale)
{
    const size_t n = blockIdx.x;
    const int t = target[n];
    const float *p = probs + n * V;
    float *d = dlogits + n * V;
    for (int i = (int)threadIdx.x; i < V; i += (int)blockDim.x)
        d[i] = p[i] * dscale - (i == t ? dscale : 0.0f);
}

extern "C" int gpt_cuda_softmax_xent_forward(float *probs, float *row_loss, const int *target,
                                             int N, int V, void *stream)
{
    return launch(xent_fwd_k, dim3((unsigned)N), kXentThreads, (cudaStream_t)stream, probs,
                  row_loss, target, V);
}

extern "C" int gpt_cuda_softmax_xent_backward(float *dlogits, const float *probs,
                                              const int *target, int N, int V, float dscale,
                                              void *stream)
{
    return launch(xent_bwd_k, dim3((unsigned)N), 256, (cudaStream_t)stream, dlogits, probs,
                  target, V, dscale);
}

// ---- fp32 <-> the engine's working dtype -------------------------------------------------

// Codes of zc_dtype (include/zeroc/zeroc.h): the header is C, so the values
// are restated here.
enum { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2 };

__global__ void widen_k(float *dst, const void *src, int dt, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (dt == DT_BF16) dst[i] = __bfloat162float(((const __nv_bfloat16 *)src)[i]);
        else if (dt == DT_F16) dst[i] = __half2float(((const __half *)src)[i]);
        else dst[i] = ((const float *)src)[i];
    }
}

__global__ void narrow_k(void *dst, int dt, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (dt == DT_BF16) ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(src[i]);
        else if (dt == DT_F16) ((__half *)dst)[i] = __float2half_rn(src[i]);
        else ((float *)dst)[i] = src[i];
    }
}

extern "C" int gpt_cuda_widen(float *dst, const void *src, int dtype, size_t n, void *stream)
{
    if (dtype != DT_F32 && dtype != DT_F16 && dtype != DT_BF16) return (int)cudaErrorInvalidValue;
    return launch(widen_k, elementwise_grid(n), 256, (cudaStream_t)stream, dst, src, dtype, n);
}

extern "C" int gpt_cuda_narrow(void *dst, int dtype, const float *src, size_t n, void *stream)
{
    if (dtype != DT_F32 && dtype != DT_F16 && dtype != DT_BF16) return (int)cudaErrorInvalidValue;
    return launch(narrow_k, elementwise_grid(n), 256, (cudaStream_t)stream, dst, dtype, src, n);
}
