/* The CUDA layers of examples/gpt against their CPU twins on random data,
 * at shapes that exercise every path of the kernels: rows narrower and
 * wider than a warp and not multiples of 32, several column blocks and row
 * slices of the column sums, sequences from 5 to GPT_MAX_SEQ (the causal
 * softmax keeps up to 32 scores per lane), vocabularies of 50 and 50257.
 * fp32 kernels agree within 2e-5 relative (device and host libm differ by an
 * ulp or two in expf and tanhf; warp and block sums add in another order);
 * the embeddings' gradients add in the CPU's order and agree exactly. The cuBLAS matmuls take bf16 inputs (8 significant bits), so
 * they agree within 1e-2 of the largest output; the attention's inputs here
 * are bf16 values already, so its probabilities (fp32 softmax of exactly
 * summed bf16 products) agree within 2e-5, and only what goes through the
 * bf16 copies of P, dY and dS has the bf16 bound. Every test skips when no
 * CUDA device is present. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <cuda_runtime_api.h>

#include "layers_cpu.h"
#include "layers_cuda.h"
#include "precision.h"
#include "require_gpu.h"

static void need_device(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) gpu_unavailable("no CUDA device");
}

static uint64_t rs = 99;
static float rnd(void)
{
    uint64_t z = (rs += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (float)((double)((z ^ (z >> 31)) >> 11) * 0x1p-52 - 1.0);
}

static float *host(size_t n, float amp)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = amp * rnd();
    return p;
}

static void *dev(const void *h, size_t bytes)
{
    void *d = NULL;
    cr_assert_eq(cudaMalloc(&d, bytes), cudaSuccess);
    if (h) cr_assert_eq(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    else cr_assert_eq(cudaMemset(d, 0, bytes), cudaSuccess);
    return d;
}

/* Copies n floats back and holds them to want within rel * (1 + |want|)
 * (rel_of_max: within rel * max|want| instead). */
static void expect(const char *what, const float *d, const float *want, size_t n, double rel,
                   bool rel_of_max)
{
    float *got = malloc(n * sizeof(float));
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess, "%s", what);
    cr_assert_eq(cudaMemcpy(got, d, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    double mx = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        if (got[i] == want[i]) continue; /* also equal infinities */
        double tol = rel_of_max ? rel * mx + 1e-6 : rel * (1 + fabs(want[i]));
        cr_assert_leq(fabs(got[i] - want[i]), tol, "%s[%zu]: CUDA %.8g, CPU %.8g", what, i,
                      got[i], want[i]);
    }
    free(got);
}

static void check_linear(int N, int IC, int OC)
{
    float *x = host((size_t)N * IC, 1), *w = host((size_t)OC * IC, 0.5f), *b = host(OC, 0.5f);
    float *dout = host((size_t)N * OC, 1), *out = calloc((size_t)N * OC, 4);
    float *dx = host((size_t)N * IC, 0.1f), *dw = host((size_t)OC * IC, 0.1f),
          *db = host(OC, 0.1f);
    float *Dx = dev(x, 4 * (size_t)N * IC), *Dw = dev(w, 4 * (size_t)OC * IC), *Db = dev(b, 4 * OC),
          *Dd = dev(dout, 4 * (size_t)N * OC), *Do = dev(NULL, 4 * (size_t)N * OC),
          *Ddx = dev(dx, 4 * (size_t)N * IC), *Ddw = dev(dw, 4 * (size_t)OC * IC),
          *Ddb = dev(db, 4 * OC);
    void *scr = dev(NULL, gpt_cuda_linear_scratch_bytes(N, IC, OC));
    gpt_cublas *h = NULL;
    cr_assert_eq(gpt_cublas_create(&h, NULL), 0);
    gpt_linear_forward(out, x, w, b, N, IC, OC);
    cr_assert_eq(gpt_cuda_linear_forward(h, Do, Dx, Dw, Db, N, IC, OC, scr), 0);
    expect("linear forward", Do, out, (size_t)N * OC, 1e-2, true);
    gpt_linear_backward(dx, dw, db, dout, x, w, N, IC, OC);
    cr_assert_eq(gpt_cuda_linear_backward(h, Ddx, Ddw, Ddb, Dd, Dx, Dw, N, IC, OC, scr), 0);
    expect("linear dinp", Ddx, dx, (size_t)N * IC, 1e-2, true);
    expect("linear dw", Ddw, dw, (size_t)OC * IC, 1e-2, true);
    expect("linear db", Ddb, db, OC, 2e-5, false); /* fp32 column sums */
    gpt_cublas_destroy(h);
    void *all[] = {Dx, Dw, Db, Dd, Do, Ddx, Ddw, Ddb, scr};
    for (size_t i = 0; i < 9; i++) cudaFree(all[i]);
    free(x); free(w); free(b); free(dout); free(out); free(dx); free(dw); free(db);
}

/* One slice and column block; 5 slices (N 300) and 4 column blocks, the
 * last one partial (OC 100). */
Test(gpt_cuda, linear)
{
    need_device();
    check_linear(37, 48, 40);
    check_linear(300, 64, 100);
}

static void check_layernorm(int N, int C)
{
    const size_t NC = (size_t)N * C;
    float *x = host(NC, 2), *w = host(C, 1), *b = host(C, 1), *d = host(NC, 1);
    float *o = calloc(NC, 4), *m = calloc(N, 4), *r = calloc(N, 4);
    float *dx = host(NC, 0.1f), *dw = host(C, 0.1f), *db = host(C, 0.1f);
    float *Dx = dev(x, 4 * NC), *Dw = dev(w, 4 * C), *Db = dev(b, 4 * C), *Dd = dev(d, 4 * NC),
          *Do = dev(NULL, 4 * NC), *Dm = dev(NULL, 4 * N), *Dr = dev(NULL, 4 * N),
          *Ddx = dev(dx, 4 * NC), *Ddw = dev(dw, 4 * C), *Ddb = dev(db, 4 * C);
    void *scr = dev(NULL, gpt_cuda_layernorm_scratch_bytes(N, C));
    gpt_layernorm_forward(o, m, r, x, w, b, N, C);
    cr_assert_eq(gpt_cuda_layernorm_forward(Do, Dm, Dr, Dx, Dw, Db, N, C, NULL), 0);
    expect("layernorm out", Do, o, NC, 2e-5, false);
    expect("layernorm mean", Dm, m, N, 2e-5, false);
    expect("layernorm rstd", Dr, r, N, 2e-5, false);
    gpt_layernorm_backward(dx, dw, db, d, x, w, m, r, N, C);
    cr_assert_eq(gpt_cuda_layernorm_backward(Ddx, Ddw, Ddb, Dd, Dx, Dw, Dm, Dr, N, C, NULL, scr),
                 0);
    expect("layernorm dinp", Ddx, dx, NC, 2e-5, false);
    /* sums over N rows: their rounding grows with N (relative to the sum
     * of magnitudes, ~sqrt(N) times the result's) */
    expect("layernorm dw", Ddw, dw, C, 1e-5 * sqrt((double)N), false);
    expect("layernorm db", Ddb, db, C, 1e-5 * sqrt((double)N), false);
    void *all[] = {Dx, Dw, Db, Dd, Do, Dm, Dr, Ddx, Ddw, Ddb, scr};
    for (size_t i = 0; i < 11; i++) cudaFree(all[i]);
    free(x); free(w); free(b); free(d); free(o); free(m); free(r); free(dx); free(dw); free(db);
}

/* Rows narrower than a warp; wider and not a multiple of 32 over 5 slices;
 * GPT-2 small's width over several column blocks. */
Test(gpt_cuda, layernorm)
{
    need_device();
    check_layernorm(33, 24);
    check_layernorm(300, 100);
    check_layernorm(70, 768);
}

static void check_gelu_and_add(int N)
{
    float *x = host(N, 4), *d = host(N, 1), *o = calloc(N, 4), *dx = host(N, 0.1f);
    float *Dx = dev(x, 4 * N), *Dd = dev(d, 4 * N), *Do = dev(NULL, 4 * N), *Ddx = dev(dx, 4 * N);
    gpt_gelu_forward(o, x, N);
    cr_assert_eq(gpt_cuda_gelu_forward(Do, Dx, N, NULL), 0);
    expect("gelu", Do, o, N, 2e-5, false);
    gpt_gelu_backward(dx, x, d, N);
    cr_assert_eq(gpt_cuda_gelu_backward(Ddx, Dx, Dd, N, NULL), 0);
    expect("gelu backward", Ddx, dx, N, 2e-5, false);
    for (int i = 0; i < N; i++) o[i] += x[i];
    cr_assert_eq(gpt_cuda_add_inplace(Do, Dx, N, NULL), 0);
    expect("add", Do, o, N, 2e-5, false);
    cudaFree(Dx); cudaFree(Dd); cudaFree(Do); cudaFree(Ddx);
    free(x); free(d); free(o); free(dx);
}

/* Four floats a thread (N a multiple of 4), and one (N odd). */
Test(gpt_cuda, gelu_and_add)
{
    need_device();
    check_gelu_and_add(1000);
    check_gelu_and_add(1003);
}

/* x rounded to bf16, so that the device's own rounding of it is exact. */
static float bf16_value(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

static void check_attention(int B, int T, int C, int NH)
{
    const size_t NQ = (size_t)B * T * 3 * C, NO = (size_t)B * T * C, NA = (size_t)B * NH * T * T;
    float *q = host(NQ, 1.5f), *d = host(NO, 1), *o = calloc(NO, 4), *a = calloc(NA, 4);
    for (size_t i = 0; i < NQ; i++) q[i] = bf16_value(q[i]);
    for (size_t i = 0; i < NO; i++) d[i] = bf16_value(d[i]);
    float *dq = host(NQ, 0.1f);
    float *Dq = dev(q, 4 * NQ), *Dd = dev(d, 4 * NO), *Do = dev(NULL, 4 * NO),
          *Da = dev(NULL, 4 * NA), *Ddq = dev(dq, 4 * NQ);
    size_t ws = gpt_cuda_attention_scratch_bytes(B, T, C, NH);
    cr_assert_gt(ws, 0);
    void *scr = dev(NULL, ws);
    gpt_cublas *h = NULL;
    cr_assert_eq(gpt_cublas_create(&h, NULL), 0);
    gpt_attention_forward(o, a, q, B, T, C, NH);
    cr_assert_eq(gpt_cuda_attention_forward(h, Do, Da, Dq, B, T, C, NH, scr), 0);
    expect("attention probabilities", Da, a, NA, 2e-5, false);
    expect("attention out", Do, o, NO, 1e-2, true);
    gpt_attention_backward(dq, d, q, a, B, T, C, NH);
    cr_assert_eq(gpt_cuda_attention_backward(h, Ddq, Dd, Dq, Da, B, T, C, NH, scr), 0);
    expect("attention dqkv", Ddq, dq, NQ, 1e-2, true);
    gpt_cublas_destroy(h);
    cudaFree(Dq); cudaFree(Dd); cudaFree(Do); cudaFree(Da); cudaFree(Ddq); cudaFree(scr);
    free(q); free(d); free(o); free(a); free(dq);
}

/* Rows shorter than a warp; 70 (three registers a lane, the last partial);
 * GPT_MAX_SEQ (all 32). */
Test(gpt_cuda, attention)
{
    need_device();
    check_attention(2, 17, 32, 4);
    check_attention(2, 70, 96, 2);
    check_attention(1, GPT_MAX_SEQ, 64, 2);
}

/* Shapes the layer refuses: longer than GPT_MAX_SEQ, C not a multiple of
 * NH. */
Test(gpt_cuda, attention_refuses_bad_shapes)
{
    need_device();
    gpt_cublas *h = NULL;
    cr_assert_eq(gpt_cublas_create(&h, NULL), 0);
    float *p = dev(NULL, 64);
    cr_assert_eq(gpt_cuda_attention_forward(h, p, p, p, 1, GPT_MAX_SEQ + 1, 4, 1, p),
                 (int)cudaErrorInvalidValue);
    cr_assert_eq(gpt_cuda_attention_backward(h, p, p, p, p, 1, 8, 10, 3, p),
                 (int)cudaErrorInvalidValue);
    cr_assert_eq(gpt_cuda_attention_scratch_bytes(1, 8, 10, 3), 0);
    gpt_cublas_destroy(h);
    cudaFree(p);
}

static void check_xent(int N, int V, float amp)
{
    int *tgt = malloc(sizeof(int) * N);
    for (int i = 0; i < N; i++) tgt[i] = (int)(((size_t)i * 7919 + 13) % (size_t)V);
    const size_t NV = (size_t)N * V;
    float *logits = host(NV, amp), *dl = calloc(NV, 4), *rl = calloc(N, 4);
    int *Dt = dev(tgt, sizeof(int) * N);
    float *Dp = dev(logits, 4 * NV), *Drl = dev(NULL, 4 * N), *Ddl = dev(NULL, 4 * NV);
    double loss = gpt_softmax_xent_forward(logits, tgt, N, V);
    cr_assert_eq(gpt_cuda_softmax_xent_forward(Dp, Drl, Dt, N, V, NULL), 0);
    expect("softmax", Dp, logits, NV, 2e-5, false);
    cr_assert_eq(cudaMemcpy(rl, Drl, 4 * N, cudaMemcpyDeviceToHost), cudaSuccess);
    double s = 0;
    for (int i = 0; i < N; i++) s += rl[i];
    cr_assert_leq(fabs(s / N - loss), 1e-5 * loss, "loss: CUDA %.8g, CPU %.8g", s / N, loss);
    gpt_softmax_xent_backward(dl, logits, tgt, N, V, 1.0f / N);
    cr_assert_eq(gpt_cuda_softmax_xent_backward(Ddl, Dp, Dt, N, V, 1.0f / N, NULL), 0);
    expect("xent backward", Ddl, dl, NV, 2e-5, false);
    cudaFree(Dt); cudaFree(Dp); cudaFree(Drl); cudaFree(Ddl);
    free(tgt); free(logits); free(dl); free(rl);
}

Test(gpt_cuda, embedding_and_xent)
{
    need_device();
    enum { B = 3, T = 7, C = 40, V = 50, N = B * T };
    int tok[N];
    /* 11 tokens over 21 positions: repeats, the first at 0 and later */
    for (int i = 0; i < N; i++) tok[i] = (i * 13) % 11;
    float *wte = host(V * C, 1), *wpe = host(T * C, 1), *d = host(N * C, 1), *o = calloc(N * C, 4);
    float *dwte = host(V * C, 0.1f), *dwpe = host(T * C, 0.1f);
    int *Dt = dev(tok, sizeof tok);
    float *Dwte = dev(wte, 4 * V * C), *Dwpe = dev(wpe, 4 * T * C), *Dd = dev(d, 4 * N * C),
          *Do = dev(NULL, 4 * N * C), *Ddwte = dev(dwte, 4 * V * C), *Ddwpe = dev(dwpe, 4 * T * C);
    gpt_embed_forward(o, tok, wte, wpe, B, T, C);
    cr_assert_eq(gpt_cuda_embed_forward(Do, Dt, Dwte, Dwpe, B, T, C, NULL), 0);
    expect("embedding", Do, o, N * C, 0, false);
    gpt_embed_backward(dwte, dwpe, d, tok, B, T, C);
    void *scr = dev(NULL, gpt_cuda_embed_scratch_bytes(B, T));
    cr_assert_eq(gpt_cuda_embed_backward(Ddwte, Ddwpe, Dd, Dt, B, T, C, NULL, scr), 0);
    /* the CPU's order, so the same bits */
    expect("embedding dwte", Ddwte, dwte, V * C, 0, false);
    expect("embedding dwpe", Ddwpe, dwpe, T * C, 0, false);

    void *all[] = {Dt, Dwte, Dwpe, Dd, Do, Ddwte, Ddwpe, scr};
    for (size_t i = 0; i < 8; i++) cudaFree(all[i]);
    free(wte); free(wpe); free(d); free(o); free(dwte); free(dwpe);
    /* a row narrower than the block; GPT-2's vocabulary (not a multiple of
     * 4), with logits wide enough that the running maximum moves */
    check_xent(N, V, 3);
    check_xent(8, 50257, 12);
}

/* The conversions between fp32 and the engine's 16-bit dtypes, against the
 * host conversions train_gpt's CPU path uses (both round to nearest even,
 * so they agree bit for bit), over values that include ties, subnormals
 * and overflow. */

Test(gpt_cuda, widen_and_narrow)
{
    need_device();
    enum { N = 4096 };
    float *x = malloc(N * 4), *back = malloc(N * 4), *want = malloc(N * 4);
    /* fp32-sized: the conversions also have an fp32 branch, whose copy the
     * compiler checks against the buffer's size */
    uint16_t *h = malloc(N * 4), *hw = malloc(N * 4);
    for (int i = 0; i < N; i++) x[i] = ldexpf(rnd(), (i % 64) - 40); /* 2^-40 .. 2^23 */
    x[0] = 70000.0f;      /* past fp16's range: inf */
    x[1] = 1.0f + 0x1p-8f; /* halfway between two bf16 values */
    float *Dx = dev(x, N * 4), *Db = dev(NULL, N * 4);
    void *Dh = dev(NULL, N * 2);
    const zc_dtype dts[2] = {ZC_DTYPE_BF16, ZC_DTYPE_F16};
    for (int k = 0; k < 2; k++) {
        gpt_store_dtype(hw, dts[k], x, N);
        gpt_load_f32(want, hw, dts[k], N);
        cr_assert_eq(gpt_cuda_narrow(Dh, (int)dts[k], Dx, N, NULL), 0);
        cr_assert_eq(cudaMemcpy(h, Dh, N * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        for (int i = 0; i < N; i++)
            cr_assert_eq(h[i], hw[i], "%s narrow of %a: CUDA 0x%04x, CPU 0x%04x",
                         zc_dtype_name(dts[k]), x[i], h[i], hw[i]);
        cr_assert_eq(gpt_cuda_widen(Db, Dh, (int)dts[k], N, NULL), 0);
        expect("widen", Db, want, N, 0, false);
    }
    cr_assert_neq(gpt_cuda_widen(Db, Dh, 99, N, NULL), 0, "an unknown dtype is refused");
    cudaFree(Dx); cudaFree(Db); cudaFree(Dh);
    free(x); free(back); free(want); free(h); free(hw);
}

/* An error an earlier call left pending on this thread (a failed cudaMalloc,
 * not cleared) is not this layer's: the launch succeeds and says so, and the
 * caller's error is still there for the caller. */
Test(gpt_cuda, launch_does_not_report_an_earlier_error)
{
    need_device();
    enum { N = 256 };
    float *x = host(N, 1), *o = calloc(N, 4);
    float *Dx = dev(x, 4 * N), *Do = dev(NULL, 4 * N);
    void *huge = NULL;
    cr_assert_neq(cudaMalloc(&huge, (size_t)1 << 62), cudaSuccess);
    int rc = gpt_cuda_gelu_forward(Do, Dx, N, NULL);
    cr_assert_eq(rc, 0, "the launch reported an earlier error: %s", gpt_cuda_error_string(rc));
    cr_assert_eq(cudaGetLastError(), cudaErrorMemoryAllocation,
                 "the caller's pending error was consumed by the layer");
    gpt_gelu_forward(o, x, N);
    expect("gelu after a pending error", Do, o, N, 2e-5, false);
    cudaFree(Dx); cudaFree(Do);
    free(x); free(o);
}
