// CUDA twins of the CPU layers (layers_cuda.h). The kernels are the simple
// rung of the ladder: one thread per row (or per (b, t, head) for
// attention), the same loops and order of operations as layers_cpu.c, so a
// difference from the twin is a bug, not a reassociation. Gradients that
// several threads add to (attention's k and v, the embedding rows) use
// atomicAdd: their order, and so their last bits, may vary run to run.
#include "layers_cuda.h"

#include <new>
#include <utility>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

struct gpt_cublas {
    cublasHandle_t h;
    cudaStream_t s;
};

static int blocks(size_t n, int t) { return (int)((n + (size_t)t - 1) / (size_t)t); }

// A cuBLAS status as this file's status code (layers_cuda.h), so the caller
// reads cuBLAS's own reason instead of a generic CUDA error.
static int blas_code(cublasStatus_t st)
{
    return st == CUBLAS_STATUS_SUCCESS ? 0 : GPT_CUBLAS_ERROR_BASE + (int)st;
}

// Enqueues kernel k and returns the status of this launch alone. Not a launch
// followed by cudaGetLastError(): that returns (and clears) whatever error
// an earlier, unrelated call of this thread left behind, and would report it
// as this launch's. cudaLaunchKernelEx returns this launch's own result; the
// copy the runtime also keeps as the thread's last error is cleared, since
// the return value reports it. Faults while the kernel runs surface at the
// next synchronisation.
template <typename... K, typename... A>
static int launch(void (*k)(K...), int nblocks, int threads, cudaStream_t st, A &&...args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)nblocks);
    cfg.blockDim = dim3((unsigned)threads);
    cfg.stream = st;
    cudaError_t e = cudaLaunchKernelEx(&cfg, k, std::forward<A>(args)...);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return (int)e;
}

// Returns from the calling function with the first failing status.
#define TRY(call)                    \
    do {                             \
        int try_rc_ = (call);        \
        if (try_rc_) return try_rc_; \
    } while (0)

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

extern "C" size_t gpt_cuda_linear_scratch_elems(int N, int IC, int OC)
{
    return (size_t)N * IC + (size_t)OC * IC + (size_t)N * OC;
}

__global__ void to_bf16(__nv_bfloat16 *o, const float *x, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) o[i] = __float2bfloat16_rn(x[i]);
}

__global__ void add_bias(float *out, const float *b, int N, int OC)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < (size_t)N * OC) out[i] += b[i % OC];
}

// db[j] += sum over rows of dout[:, j], rows in order (deterministic).
__global__ void col_sum(float *db, const float *dout, int N, int OC)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= OC) return;
    float s = 0.0f;
    for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + j];
    db[j] += s;
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
    TRY(launch(to_bf16, blocks((size_t)N * IC, 256), 256, g->s, xi, inp, (size_t)N * IC));
    TRY(launch(to_bf16, blocks((size_t)OC * IC, 256), 256, g->s, xw, w, (size_t)OC * IC));
    int rc = gemm(g, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, xw, IC, xi, IC, 0.0f, out, OC);
    if (rc) return rc;
    if (b) TRY(launch(add_bias, blocks((size_t)N * OC, 256), 256, g->s, out, b, N, OC));
    return 0;
}

extern "C" int gpt_cuda_linear_backward(gpt_cublas *g, float *dinp, float *dw, float *db,
                                        const float *dout, const float *inp, const float *w,
                                        int N, int IC, int OC, void *scratch)
{
    __nv_bfloat16 *xi = (__nv_bfloat16 *)scratch, *xw = xi + (size_t)N * IC,
                  *xd = xw + (size_t)OC * IC;
    TRY(launch(to_bf16, blocks((size_t)N * IC, 256), 256, g->s, xi, inp, (size_t)N * IC));
    TRY(launch(to_bf16, blocks((size_t)OC * IC, 256), 256, g->s, xw, w, (size_t)OC * IC));
    TRY(launch(to_bf16, blocks((size_t)N * OC, 256), 256, g->s, xd, dout, (size_t)N * OC));
    int rc = 0;
    // dinp^T (IC x N) += w^T (IC x OC) dout^T (OC x N)
    if (dinp) rc = gemm(g, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, xw, IC, xd, OC, 1.0f, dinp, IC);
    // dw^T (IC x OC) += inp^T (IC x N) dout (N x OC)
    if (!rc) rc = gemm(g, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, xi, IC, xd, OC, 1.0f, dw, IC);
    if (rc) return rc;
    if (db) TRY(launch(col_sum, blocks((size_t)OC, 128), 128, g->s, db, dout, N, OC));
    return 0;
}

__global__ void ln_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w,
                       const float *b, int N, int C)
{
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const float *x = inp + (size_t)n * C;
    float *o = out + (size_t)n * C;
    float m = 0.0f, v = 0.0f;
    for (int i = 0; i < C; i++) m += x[i];
    m /= (float)C;
    for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
    v /= (float)C;
    float s = 1.0f / sqrtf(v + 1e-5f);
    for (int i = 0; i < C; i++) o[i] = (x[i] - m) * s * w[i] + b[i];
    mean[n] = m;
    rstd[n] = s;
}

__global__ void ln_bwd_x(float *dinp, const float *dout, const float *inp, const float *w,
                         const float *mean, const float *rstd, int N, int C)
{
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
    float *dx = dinp + (size_t)n * C;
    const float m = mean[n], s = rstd[n];
    float dm = 0.0f, dnm = 0.0f;
    for (int i = 0; i < C; i++) {
        float norm = (x[i] - m) * s, dn = w[i] * d[i];
        dm += dn;
        dnm += dn * norm;
    }
    dm /= (float)C;
    dnm /= (float)C;
    for (int i = 0; i < C; i++) {
        float norm = (x[i] - m) * s, dn = w[i] * d[i];
        dx[i] += (dn - dm - norm * dnm) * s;
    }
}

// dw, db: one thread per column, rows in order (deterministic).
__global__ void ln_bwd_w(float *dw, float *db, const float *dout, const float *inp,
                         const float *mean, const float *rstd, int N, int C)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int n = 0; n < N; n++) {
        float d = dout[(size_t)n * C + i];
        sb += d;
        sw += (inp[(size_t)n * C + i] - mean[n]) * rstd[n] * d;
    }
    dw[i] += sw;
    db[i] += sb;
}

extern "C" int gpt_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                          const float *w, const float *b, int N, int C,
                                          void *stream)
{
    TRY(launch(ln_fwd, blocks((size_t)N, 128), 128, (cudaStream_t)stream,
               out, mean, rstd, inp, w, b, N, C));
    return 0;
}

extern "C" int gpt_cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                           const float *inp, const float *w, const float *mean,
                                           const float *rstd, int N, int C, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    TRY(launch(ln_bwd_x, blocks((size_t)N, 128), 128, s, dinp, dout, inp, w, mean, rstd, N, C));
    TRY(launch(ln_bwd_w, blocks((size_t)C, 128), 128, s, dw, db, dout, inp, mean, rstd, N, C));
    return 0;
}

#define GELU_SCALE 0.7978845608028654f

__global__ void gelu_fwd(float *out, const float *inp, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
}

__global__ void gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = inp[i];
    float th = tanhf(GELU_SCALE * (x + 0.044715f * x * x * x));
    float sech2 = 1.0f - th * th;
    float g = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] += g * dout[i];
}

extern "C" int gpt_cuda_gelu_forward(float *out, const float *inp, size_t n, void *stream)
{
    TRY(launch(gelu_fwd, blocks(n, 256), 256, (cudaStream_t)stream, out, inp, n));
    return 0;
}

extern "C" int gpt_cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n,
                                      void *stream)
{
    TRY(launch(gelu_bwd, blocks(n, 256), 256, (cudaStream_t)stream, dinp, inp, dout, n));
    return 0;
}

// One thread per (b, t, h): the row of att is its scratch.
__global__ void att_fwd(float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= B * T * NH) return;
    const int h = r % NH, t = (r / NH) % T, b = r / (NH * T), hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const float *q = qkv + ((size_t)b * T + t) * C3 + h * hs;
    float *a = att + (((size_t)b * NH + h) * T + t) * T;
    float maxv = -INFINITY;
    for (int t2 = 0; t2 <= t; t2++) {
        const float *k = qkv + ((size_t)b * T + t2) * C3 + C + h * hs;
        float s = 0.0f;
        for (int i = 0; i < hs; i++) s += q[i] * k[i];
        s *= scale;
        a[t2] = s;
        maxv = fmaxf(maxv, s);
    }
    float sum = 0.0f;
    for (int t2 = 0; t2 <= t; t2++) {
        a[t2] = expf(a[t2] - maxv);
        sum += a[t2];
    }
    const float inv = 1.0f / sum;
    for (int t2 = 0; t2 <= t; t2++) a[t2] *= inv;
    for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0.0f;
    float *o = out + ((size_t)b * T + t) * C + h * hs;
    for (int i = 0; i < hs; i++) {
        float acc = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) acc += a[t2] * qkv[((size_t)b * T + t2) * C3 + 2 * C + h * hs + i];
        o[i] = acc;
    }
}

__global__ void att_bwd(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                        int T, int C, int NH)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= B * T * NH) return;
    const int h = r % NH, t = (r / NH) % T, b = r / (NH * T), hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const float *a = att + (((size_t)b * NH + h) * T + t) * T;
    const float *d = dout + ((size_t)b * T + t) * C + h * hs;
    const float *q = qkv + ((size_t)b * T + t) * C3 + h * hs;
    float *dq = dqkv + ((size_t)b * T + t) * C3 + h * hs;
    // First pass: sum_t2 att[t2] datt[t2], with datt[t2] = v[t2] . d.
    float dot_ad = 0.0f;
    for (int t2 = 0; t2 <= t; t2++) {
        const float *v = qkv + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
        float *dv = dqkv + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
        float s = 0.0f;
        for (int i = 0; i < hs; i++) {
            s += v[i] * d[i];
            atomicAdd(&dv[i], a[t2] * d[i]);
        }
        dot_ad += a[t2] * s;
    }
    for (int t2 = 0; t2 <= t; t2++) {
        const float *v = qkv + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
        const float *k = qkv + ((size_t)b * T + t2) * C3 + C + h * hs;
        float *dk = dqkv + ((size_t)b * T + t2) * C3 + C + h * hs;
        float s = 0.0f;
        for (int i = 0; i < hs; i++) s += v[i] * d[i]; // datt[t2] again: no T-sized scratch
        float dpre = a[t2] * (s - dot_ad) * scale;
        for (int i = 0; i < hs; i++) {
            dq[i] += k[i] * dpre;
            atomicAdd(&dk[i], q[i] * dpre);
        }
    }
}

extern "C" int gpt_cuda_attention_forward(float *out, float *att, const float *qkv, int B, int T,
                                          int C, int NH, void *stream)
{
    TRY(launch(att_fwd, blocks((size_t)B * T * NH, 64), 64, (cudaStream_t)stream,
               out, att, qkv, B, T, C, NH));
    return 0;
}

extern "C" int gpt_cuda_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                           const float *att, int B, int T, int C, int NH,
                                           void *stream)
{
    TRY(launch(att_bwd, blocks((size_t)B * T * NH, 64), 64, (cudaStream_t)stream,
               dqkv, dout, qkv, att, B, T, C, NH));
    return 0;
}

__global__ void emb_fwd(float *out, const int *tok, const float *wte, const float *wpe, int B,
                        int T, int C)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * C) return;
    size_t n = i / C;
    int c = (int)(i % C), t = (int)(n % T);
    out[i] = wte[(size_t)tok[n] * C + c] + wpe[(size_t)t * C + c];
}

__global__ void emb_bwd(float *dwte, float *dwpe, const float *dout, const int *tok, int B, int T,
                        int C)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * C) return;
    size_t n = i / C;
    int c = (int)(i % C), t = (int)(n % T);
    atomicAdd(&dwte[(size_t)tok[n] * C + c], dout[i]);
    atomicAdd(&dwpe[(size_t)t * C + c], dout[i]);
}

extern "C" int gpt_cuda_embed_forward(float *out, const int *tok, const float *wte,
                                      const float *wpe, int B, int T, int C, void *stream)
{
    TRY(launch(emb_fwd, blocks((size_t)B * T * C, 256), 256, (cudaStream_t)stream,
               out, tok, wte, wpe, B, T, C));
    return 0;
}

extern "C" int gpt_cuda_embed_backward(float *dwte, float *dwpe, const float *dout,
                                       const int *tok, int B, int T, int C, void *stream)
{
    TRY(launch(emb_bwd, blocks((size_t)B * T * C, 256), 256, (cudaStream_t)stream,
               dwte, dwpe, dout, tok, B, T, C));
    return 0;
}

__global__ void xent_fwd(float *probs, float *row_loss, const int *target, int N, int V)
{
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    float *p = probs + (size_t)n * V;
    float maxv = -INFINITY, sum = 0.0f;
    for (int i = 0; i < V; i++) maxv = fmaxf(maxv, p[i]);
    for (int i = 0; i < V; i++) {
        p[i] = expf(p[i] - maxv);
        sum += p[i];
    }
    const float inv = 1.0f / sum;
    for (int i = 0; i < V; i++) p[i] *= inv;
    row_loss[n] = -logf(fmaxf(p[target[n]], 1.17549435e-38f));
}

__global__ void xent_bwd(float *dlogits, const float *probs, const int *target, int N, int V,
                         float dscale)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)N * V) return;
    size_t n = i / V;
    int v = (int)(i % V);
    dlogits[i] = probs[i] * dscale - (v == target[n] ? dscale : 0.0f);
}

extern "C" int gpt_cuda_softmax_xent_forward(float *probs, float *row_loss, const int *target,
                                             int N, int V, void *stream)
{
    TRY(launch(xent_fwd, blocks((size_t)N, 128), 128, (cudaStream_t)stream,
               probs, row_loss, target, N, V));
    return 0;
}

extern "C" int gpt_cuda_softmax_xent_backward(float *dlogits, const float *probs,
                                              const int *target, int N, int V, float dscale,
                                              void *stream)
{
    TRY(launch(xent_bwd, blocks((size_t)N * V, 256), 256, (cudaStream_t)stream,
               dlogits, probs, target, N, V, dscale));
    return 0;
}

__global__ void add_inplace(float *y, const float *x, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}

extern "C" int gpt_cuda_add_inplace(float *y, const float *x, size_t n, void *stream)
{
    TRY(launch(add_inplace, blocks(n, 256), 256, (cudaStream_t)stream, y, x, n));
    return 0;
}

// Codes of zc_dtype (include/zeroc/zeroc.h): the header is C, so the values
// are restated here.
enum { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2 };

__global__ void widen_k(float *dst, const void *src, int dt, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (dt == DT_BF16) dst[i] = __bfloat162float(((const __nv_bfloat16 *)src)[i]);
    else if (dt == DT_F16) dst[i] = __half2float(((const __half *)src)[i]);
    else dst[i] = ((const float *)src)[i];
}

__global__ void narrow_k(void *dst, int dt, const float *src, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (dt == DT_BF16) ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(src[i]);
    else if (dt == DT_F16) ((__half *)dst)[i] = __float2half_rn(src[i]);
    else ((float *)dst)[i] = src[i];
}

extern "C" int gpt_cuda_widen(float *dst, const void *src, int dtype, size_t n, void *stream)
{
    if (dtype != DT_F32 && dtype != DT_F16 && dtype != DT_BF16) return (int)cudaErrorInvalidValue;
    if (n) TRY(launch(widen_k, blocks(n, 256), 256, (cudaStream_t)stream, dst, src, dtype, n));
    return 0;
}

extern "C" int gpt_cuda_narrow(void *dst, int dtype, const float *src, size_t n, void *stream)
{
    if (dtype != DT_F32 && dtype != DT_F16 && dtype != DT_BF16) return (int)cudaErrorInvalidValue;
    if (n) TRY(launch(narrow_k, blocks(n, 256), 256, (cudaStream_t)stream, dst, dtype, src, n));
    return 0;
}
