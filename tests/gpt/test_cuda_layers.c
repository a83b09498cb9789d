/* The CUDA layers of examples/gpt against their CPU twins on random data.
 * fp32 kernels agree within 2e-5 relative (device and host libm differ by an
 * ulp or two in expf and tanhf; atomics reorder a few sums); the cuBLAS
 * matmuls take bf16 inputs (8 significant bits), so they agree within 1e-2
 * of the largest output. Every test skips when no CUDA device is present. */
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

Test(gpt_cuda, linear)
{
    need_device();
    enum { N = 37, IC = 48, OC = 40 };
    float *x = host(N * IC, 1), *w = host(OC * IC, 0.5f), *b = host(OC, 0.5f);
    float *dout = host(N * OC, 1), *out = calloc(N * OC, 4);
    float *dx = host(N * IC, 0.1f), *dw = host(OC * IC, 0.1f), *db = host(OC, 0.1f);
    float *Dx = dev(x, sizeof(float) * N * IC), *Dw = dev(w, sizeof(float) * OC * IC),
          *Db = dev(b, sizeof(float) * OC), *Dd = dev(dout, sizeof(float) * N * OC),
          *Do = dev(NULL, sizeof(float) * N * OC), *Ddx = dev(dx, sizeof(float) * N * IC),
          *Ddw = dev(dw, sizeof(float) * OC * IC), *Ddb = dev(db, sizeof(float) * OC);
    void *scr = dev(NULL, 2 * gpt_cuda_linear_scratch_elems(N, IC, OC));
    gpt_cublas *h = NULL;
    cr_assert_eq(gpt_cublas_create(&h, NULL), 0);
    gpt_linear_forward(out, x, w, b, N, IC, OC);
    cr_assert_eq(gpt_cuda_linear_forward(h, Do, Dx, Dw, Db, N, IC, OC, scr), 0);
    expect("linear forward", Do, out, N * OC, 1e-2, true);
    gpt_linear_backward(dx, dw, db, dout, x, w, N, IC, OC);
    cr_assert_eq(gpt_cuda_linear_backward(h, Ddx, Ddw, Ddb, Dd, Dx, Dw, N, IC, OC, scr), 0);
    expect("linear dinp", Ddx, dx, N * IC, 1e-2, true);
    expect("linear dw", Ddw, dw, OC * IC, 1e-2, true);
    expect("linear db", Ddb, db, OC, 2e-5, false); /* fp32 column sums */
    gpt_cublas_destroy(h);
    void *all[] = {Dx, Dw, Db, Dd, Do, Ddx, Ddw, Ddb, scr};
    for (size_t i = 0; i < 9; i++) cudaFree(all[i]);
    free(x); free(w); free(b); free(dout); free(out); free(dx); free(dw); free(db);
}

Test(gpt_cuda, layernorm)
{
    need_device();
    enum { N = 33, C = 24 };
    float *x = host(N * C, 2), *w = host(C, 1), *b = host(C, 1), *d = host(N * C, 1);
    float *o = calloc(N * C, 4), *m = calloc(N, 4), *r = calloc(N, 4);
    float *dx = host(N * C, 0.1f), *dw = host(C, 0.1f), *db = host(C, 0.1f);
    float *Dx = dev(x, 4 * N * C), *Dw = dev(w, 4 * C), *Db = dev(b, 4 * C), *Dd = dev(d, 4 * N * C),
          *Do = dev(NULL, 4 * N * C), *Dm = dev(NULL, 4 * N), *Dr = dev(NULL, 4 * N),
          *Ddx = dev(dx, 4 * N * C), *Ddw = dev(dw, 4 * C), *Ddb = dev(db, 4 * C);
    gpt_layernorm_forward(o, m, r, x, w, b, N, C);
    cr_assert_eq(gpt_cuda_layernorm_forward(Do, Dm, Dr, Dx, Dw, Db, N, C, NULL), 0);
    expect("layernorm out", Do, o, N * C, 2e-5, false);
    gpt_layernorm_backward(dx, dw, db, d, x, w, m, r, N, C);
    cr_assert_eq(gpt_cuda_layernorm_backward(Ddx, Ddw, Ddb, Dd, Dx, Dw, Dm, Dr, N, C, NULL), 0);
    expect("layernorm dinp", Ddx, dx, N * C, 2e-5, false);
    expect("layernorm dw", Ddw, dw, C, 2e-5, false);
    expect("layernorm db", Ddb, db, C, 2e-5, false);
    void *all[] = {Dx, Dw, Db, Dd, Do, Dm, Dr, Ddx, Ddw, Ddb};
    for (size_t i = 0; i < 10; i++) cudaFree(all[i]);
    free(x); free(w); free(b); free(d); free(o); free(m); free(r); free(dx); free(dw); free(db);
}

Test(gpt_cuda, gelu_and_add)
{
    need_device();
    enum { N = 1000 };
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

Test(gpt_cuda, attention)
{
    need_device();
    enum { B = 2, T = 17, C = 32, NH = 4, NQ = B * T * 3 * C, NO = B * T * C, NA = B * NH * T * T };
    float *q = host(NQ, 1.5f), *d = host(NO, 1), *o = calloc(NO, 4), *a = calloc(NA, 4);
    float *dq = host(NQ, 0.1f);
    float *Dq = dev(q, 4 * NQ), *Dd = dev(d, 4 * NO), *Do = dev(NULL, 4 * NO),
          *Da = dev(NULL, 4 * NA), *Ddq = dev(dq, 4 * NQ);
    gpt_attention_forward(o, a, q, B, T, C, NH);
    cr_assert_eq(gpt_cuda_attention_forward(Do, Da, Dq, B, T, C, NH, NULL), 0);
    expect("attention out", Do, o, NO, 2e-5, false);
    expect("attention probabilities", Da, a, NA, 2e-5, false);
    gpt_attention_backward(dq, d, q, a, B, T, C, NH);
    cr_assert_eq(gpt_cuda_attention_backward(Ddq, Dd, Dq, Da, B, T, C, NH, NULL), 0);
    expect("attention dqkv", Ddq, dq, NQ, 1e-4, false);
    cudaFree(Dq); cudaFree(Dd); cudaFree(Do); cudaFree(Da); cudaFree(Ddq);
    free(q); free(d); free(o); free(a); free(dq);
}

Test(gpt_cuda, embedding_and_xent)
{
    need_device();
    enum { B = 3, T = 7, C = 16, V = 50, N = B * T };
    int tok[N];
    for (int i = 0; i < N; i++) tok[i] = (i * 13) % V;
    float *wte = host(V * C, 1), *wpe = host(T * C, 1), *d = host(N * C, 1), *o = calloc(N * C, 4);
    float *dwte = host(V * C, 0.1f), *dwpe = host(T * C, 0.1f);
    int *Dt = dev(tok, sizeof tok);
    float *Dwte = dev(wte, 4 * V * C), *Dwpe = dev(wpe, 4 * T * C), *Dd = dev(d, 4 * N * C),
          *Do = dev(NULL, 4 * N * C), *Ddwte = dev(dwte, 4 * V * C), *Ddwpe = dev(dwpe, 4 * T * C);
    gpt_embed_forward(o, tok, wte, wpe, B, T, C);
    cr_assert_eq(gpt_cuda_embed_forward(Do, Dt, Dwte, Dwpe, B, T, C, NULL), 0);
    expect("embedding", Do, o, N * C, 0, false);
    gpt_embed_backward(dwte, dwpe, d, tok, B, T, C);
    cr_assert_eq(gpt_cuda_embed_backward(Ddwte, Ddwpe, Dd, Dt, B, T, C, NULL), 0);
    expect("embedding dwte", Ddwte, dwte, V * C, 2e-5, false);
    expect("embedding dwpe", Ddwpe, dwpe, T * C, 2e-5, false);

    float *logits = host(N * V, 3), *dl = calloc(N * V, 4), *rl = calloc(N, 4);
    float *Dp = dev(logits, 4 * N * V), *Drl = dev(NULL, 4 * N), *Ddl = dev(NULL, 4 * N * V);
    double loss = gpt_softmax_xent_forward(logits, tok, N, V);
    cr_assert_eq(gpt_cuda_softmax_xent_forward(Dp, Drl, Dt, N, V, NULL), 0);
    expect("softmax", Dp, logits, N * V, 2e-5, false);
    cr_assert_eq(cudaMemcpy(rl, Drl, 4 * N, cudaMemcpyDeviceToHost), cudaSuccess);
    double s = 0;
    for (int i = 0; i < N; i++) s += rl[i];
    cr_assert_leq(fabs(s / N - loss), 1e-5 * loss, "loss: CUDA %.8g, CPU %.8g", s / N, loss);
    gpt_softmax_xent_backward(dl, logits, tok, N, V, 1.0f / N);
    cr_assert_eq(gpt_cuda_softmax_xent_backward(Ddl, Dp, Dt, N, V, 1.0f / N, NULL), 0);
    expect("xent backward", Ddl, dl, N * V, 2e-5, false);
    void *all[] = {Dt, Dwte, Dwpe, Dd, Do, Ddwte, Ddwpe, Dp, Drl, Ddl};
    for (size_t i = 0; i < 10; i++) cudaFree(all[i]);
    free(wte); free(wpe); free(d); free(o); free(dwte); free(dwpe); free(logits); free(dl); free(rl);
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
