// Causal self-attention on the GPU as llm.c's attention.cuh does it: q, k, v
// permuted to the head-major layout [B*NH, T, hs] in bf16, the scores and
// the weighted sums by cuBLAS strided-batched GEMMs (bf16 operands, fp32
// accumulation and output; the six calls are described in cuda_plan.h,
// where tests/gpt/test_cuda_plan.c runs them on the host), and a warp per
// row for the causal softmax and its backward. The working buffers live in
// the caller's scratch (gpt_att_ws_layout: allocated once by the model).
#include "cuda_common.cuh"

#include <cmath>

extern "C" {
#include "layers_cpu.h" // GPT_MAX_SEQ
}

using namespace gpt;

// Most scores per row one lane keeps in registers: T <= GPT_MAX_SEQ.
constexpr int kSoftmaxPerLane = GPT_MAX_SEQ / 32;
static_assert(GPT_MAX_SEQ % 32 == 0, "a softmax row is whole registers of a warp");

// qkv [B, T, 3C] fp32 -> q, k, v head-major bf16 (one thread per element of
// each; consecutive threads read consecutive floats of a head).
__global__ void permute_qkv_k(__nv_bfloat16 *__restrict__ q, __nv_bfloat16 *__restrict__ k,
                              __nv_bfloat16 *__restrict__ v, const float *__restrict__ qkv,
                              int B, int T, int C, int NH)
{
    const size_t n = (size_t)B * T * C;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        int b, h, t, i;
        gpt_head_major_split(e, T, C, NH, &b, &h, &t, &i);
        const size_t at = gpt_qkv_index(0, b, h, t, i, T, C, NH);
        q[e] = __float2bfloat16_rn(qkv[at]);
        k[e] = __float2bfloat16_rn(qkv[at + C]);
        v[e] = __float2bfloat16_rn(qkv[at + 2 * (size_t)C]);
    }
}

// x [B, T, C] fp32 -> head-major bf16 (dout for the backward GEMMs).
__global__ void permute_btc_k(__nv_bfloat16 *__restrict__ o, const float *__restrict__ x, int B,
                              int T, int C, int NH)
{
    const size_t n = (size_t)B * T * C;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        int b, h, t, i;
        gpt_head_major_split(e, T, C, NH, &b, &h, &t, &i);
        o[e] = __float2bfloat16_rn(x[gpt_btc_index(b, h, t, i, T, C, NH)]);
    }
}

// Head-major Y fp32 -> out [B, T, C] (the heads side by side).
__global__ void unpermute_k(float *__restrict__ out, const float *__restrict__ y, int B, int T,
                            int C, int NH)
{
    const size_t n = (size_t)B * T * C;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        int b, h, t, i;
        gpt_head_major_split(e, T, C, NH, &b, &h, &t, &i);
        out[gpt_btc_index(b, h, t, i, T, C, NH)] = y[e];
    }
}

// dqkv += head-major dQ, dK, dV (the layer's accumulate contract).
__global__ void accumulate_dqkv_k(float *__restrict__ dqkv, const float *__restrict__ dq,
                                  const float *__restrict__ dk, const float *__restrict__ dv,
                                  int B, int T, int C, int NH)
{
    const size_t n = (size_t)B * T * C;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        int b, h, t, i;
        gpt_head_major_split(e, T, C, NH, &b, &h, &t, &i);
        const size_t at = gpt_qkv_index(0, b, h, t, i, T, C, NH);
        dqkv[at] += dq[e];
        dqkv[at + C] += dk[e];
        dqkv[at + 2 * (size_t)C] += dv[e];
    }
}

// The causal softmax, a warp per row r = (b, h, t) of the scores: reads the
// raw scores S (att's row, as the GEMM left it), scales them, and writes the
// probabilities over it (zero above the diagonal) and their bf16 copy P for
// the next GEMM. The row stays in registers: element j is lane j % 32's
// register j / 32. The arithmetic is the CPU twin's (scale after the dot
// product, expf(s - max), times 1 / sum).
__global__ void __launch_bounds__(kRowThreads)
softmax_fwd_k(float *__restrict__ att, __nv_bfloat16 *__restrict__ p, int rows, int T,
              float scale)
{
    const size_t r = warp_row();
    if (r >= (size_t)rows) return;
    const int lane = lane_id(), t = (int)(r % (size_t)T);
    float *a = att + r * T;
    __nv_bfloat16 *pr = p + r * T;
    float v[kSoftmaxPerLane];
    float mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < kSoftmaxPerLane; k++) {
        const int j = lane + 32 * k;
        v[k] = j <= t ? a[j] * scale : -INFINITY;
        mx = fmaxf(mx, v[k]);
    }
    mx = warp_max(mx); // finite: column 0 is always in the row
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kSoftmaxPerLane; k++) {
        const int j = lane + 32 * k;
        v[k] = j <= t ? expf(v[k] - mx) : 0.0f;
        sum += v[k];
    }
    const float inv = 1.0f / warp_sum(sum);
#pragma unroll
    for (int k = 0; k < kSoftmaxPerLane; k++) {
        const int j = lane + 32 * k;
        if (j < T) {
            const float pj = v[k] * inv; // 0 above the diagonal
            a[j] = pj;
            pr[j] = __float2bfloat16_rn(pj);
        }
    }
}

// The softmax's backward, a warp per row: dS = att * (dP - sum(att * dP)) *
// scale on and below the diagonal, 0 above, in bf16 for the dQ and dK GEMMs.
__global__ void __launch_bounds__(kRowThreads)
softmax_bwd_k(__nv_bfloat16 *__restrict__ ds, const float *__restrict__ att,
              const float *__restrict__ dp, int rows, int T, float scale)
{
    const size_t r = warp_row();
    if (r >= (size_t)rows) return;
    const int lane = lane_id(), t = (int)(r % (size_t)T);
    const float *a = att + r * T, *d = dp + r * T;
    float av[kSoftmaxPerLane], dv[kSoftmaxPerLane];
    float dot = 0.0f;
#pragma unroll
    for (int k = 0; k < kSoftmaxPerLane; k++) {
        const int j = lane + 32 * k;
        av[k] = j <= t ? a[j] : 0.0f;
        dv[k] = j <= t ? d[j] : 0.0f;
        dot += av[k] * dv[k];
    }
    dot = warp_sum(dot);
    __nv_bfloat16 *o = ds + r * T;
#pragma unroll
    for (int k = 0; k < kSoftmaxPerLane; k++) {
        const int j = lane + 32 * k;
        if (j < T) o[j] = __float2bfloat16_rn(j <= t ? av[k] * (dv[k] - dot) * scale : 0.0f);
    }
}

// fp32 -> bf16, elementwise (the saved probabilities, for dV = P^T dY).
__global__ void att_to_bf16_k(__nv_bfloat16 *__restrict__ o, const float *__restrict__ x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        o[i] = __float2bfloat16_rn(x[i]);
}

static dim3 grid_over(size_t n)
{
    const int b = blocks_for(n, 256);
    return dim3((unsigned)(b < 8192 ? b : 8192));
}

// The buffers of cuda_plan.h's GEMMs for this call.
struct att_bufs {
    void *p[GPT_ATT_NBUF];
};

static att_bufs bufs_of(void *scratch, float *att, const gpt_att_ws &w, size_t btc)
{
    char *base = (char *)scratch;
    att_bufs b = {};
    __nv_bfloat16 *q = (__nv_bfloat16 *)(base + w.qkv16);
    float *f = (float *)(base + w.f32);
    b.p[GPT_ATT_Q] = q;
    b.p[GPT_ATT_K] = q + btc;
    b.p[GPT_ATT_V] = q + 2 * btc;
    b.p[GPT_ATT_P] = base + w.p16;
    b.p[GPT_ATT_S] = att;
    b.p[GPT_ATT_Y] = f;
    b.p[GPT_ATT_DY] = base + w.dy16;
    b.p[GPT_ATT_DP] = base + w.dp;
    b.p[GPT_ATT_DS] = base + w.p16; // P's place, once dV = P^T dY has read it
    b.p[GPT_ATT_DQ] = f;
    b.p[GPT_ATT_DK] = f + btc;
    b.p[GPT_ATT_DV] = f + 2 * btc;
    return b;
}

static int run_gemm(gpt_cublas *g, int which, int B, int T, int C, int NH, const att_bufs &b)
{
    const gpt_gemm m = gpt_att_gemm(which, B, T, C, NH);
    const float alpha = 1.0f, beta = 0.0f;
    return blas_code(cublasGemmStridedBatchedEx(
        g->h, m.ta ? CUBLAS_OP_T : CUBLAS_OP_N, m.tb ? CUBLAS_OP_T : CUBLAS_OP_N, m.m, m.n, m.k,
        &alpha, b.p[m.a], CUDA_R_16BF, m.lda, m.sa, b.p[m.b], CUDA_R_16BF, m.ldb, m.sb, &beta,
        b.p[m.c], CUDA_R_32F, m.ldc, m.sc, m.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

extern "C" size_t gpt_cuda_attention_scratch_bytes(int B, int T, int C, int NH)
{
    gpt_att_ws w;
    return gpt_att_ws_layout(B, T, C, NH, &w) ? w.bytes : 0;
}

// The shapes every call checks: the softmax keeps a row in registers.
static int check_shape(int B, int T, int C, int NH, gpt_att_ws *w)
{
    if (T > GPT_MAX_SEQ || !gpt_att_ws_layout(B, T, C, NH, w)) return (int)cudaErrorInvalidValue;
    return 0;
}

extern "C" int gpt_cuda_attention_forward(gpt_cublas *g, float *out, float *att, const float *qkv,
                                          int B, int T, int C, int NH, void *scratch)
{
    gpt_att_ws w;
    TRY(check_shape(B, T, C, NH, &w));
    const size_t btc = (size_t)B * T * C;
    const int rows = B * NH * T;
    const float scale = 1.0f / sqrtf((float)(C / NH));
    const att_bufs b = bufs_of(scratch, att, w, btc);
    __nv_bfloat16 *q = (__nv_bfloat16 *)b.p[GPT_ATT_Q];
    TRY(launch(permute_qkv_k, grid_over(btc), 256, g->s, q, q + btc, q + 2 * btc, qkv, B, T, C,
               NH));
    TRY(run_gemm(g, GPT_GEMM_S, B, T, C, NH, b)); // raw scores into att
    TRY(launch(softmax_fwd_k, dim3((unsigned)blocks_for((size_t)rows, kRowsPerBlock)),
               kRowThreads, g->s, att, (__nv_bfloat16 *)b.p[GPT_ATT_P], rows, T, scale));
    TRY(run_gemm(g, GPT_GEMM_Y, B, T, C, NH, b));
    return launch(unpermute_k, grid_over(btc), 256, g->s, out, (const float *)b.p[GPT_ATT_Y], B,
                  T, C, NH);
}

extern "C" int gpt_cuda_attention_backward(gpt_cublas *g, float *dqkv, const float *dout,
                                           const float *qkv, const float *att, int B, int T,
                                           int C, int NH, void *scratch)
{
    gpt_att_ws w;
    TRY(check_shape(B, T, C, NH, &w));
    const size_t btc = (size_t)B * T * C, btt = (size_t)B * NH * T * T;
    const int rows = B * NH * T;
    const float scale = 1.0f / sqrtf((float)(C / NH));
    // att is only read: S's slot in the GEMM table is never written here.
    const att_bufs b = bufs_of(scratch, (float *)att, w, btc);
    __nv_bfloat16 *q = (__nv_bfloat16 *)b.p[GPT_ATT_Q];
    // The workspace is shared by every layer: q, k, v and P are rebuilt
    // from this layer's saved qkv and att.
    TRY(launch(permute_qkv_k, grid_over(btc), 256, g->s, q, q + btc, q + 2 * btc, qkv, B, T, C,
               NH));
    TRY(launch(permute_btc_k, grid_over(btc), 256, g->s, (__nv_bfloat16 *)b.p[GPT_ATT_DY], dout,
               B, T, C, NH));
    TRY(launch(att_to_bf16_k, grid_over(btt), 256, g->s, (__nv_bfloat16 *)b.p[GPT_ATT_P], att,
               btt));
    TRY(run_gemm(g, GPT_GEMM_DP, B, T, C, NH, b));
    TRY(run_gemm(g, GPT_GEMM_DV, B, T, C, NH, b));
    TRY(launch(softmax_bwd_k, dim3((unsigned)blocks_for((size_t)rows, kRowsPerBlock)),
               kRowThreads, g->s, (__nv_bfloat16 *)b.p[GPT_ATT_DS], att,
               (const float *)b.p[GPT_ATT_DP], rows, T, scale));
    TRY(run_gemm(g, GPT_GEMM_DQ, B, T, C, NH, b));
    TRY(run_gemm(g, GPT_GEMM_DK, B, T, C, NH, b));
    const float *f = (const float *)b.p[GPT_ATT_DQ];
    return launch(accumulate_dqkv_k, grid_over(btc), 256, g->s, dqkv, f, f + btc, f + 2 * btc, B,
                  T, C, NH);
}
