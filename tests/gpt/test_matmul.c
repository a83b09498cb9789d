/* The CPU layers' matrix products (examples/gpt/matmul_cpu.h) against a
 * double-precision product, every transpose and beta: fp32 always; bf16
 * where this build and CPU run it (else skipped, saying why), held to the
 * product of the bf16-rounded inputs (rounded here through frexp, not the
 * bit arithmetic of matmul_cpu.c) summed in fp32 - and shown to differ from the fp32 product,
 * so a bf16 path that quietly computed in fp32 fails. Without bf16
 * instructions (oneDNN's DNNL_MAX_CPU_ISA cap stands in for such a CPU), a
 * bf16 request computes exactly the fp32 product. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "layers_cpu.h"
#include "matmul_cpu.h"
#include "model.h"
#include "ref.h"

enum { M = 37, N = 29, K = 83, LD = 91 };

typedef struct {
    float A[LD * LD], B[LD * LD], C[M * LD];
    double want[M * N], mag[M * N];
} problem;

/* Values with mantissa bits below bf16's, so rounding them shows. */
static void fill(float *x, int n, uint64_t *s)
{
    for (int i = 0; i < n; i++) x[i] = (float)ref_uniform(s) * 1.7f;
}

/* x to bf16's 8 significant bits, ties to even (nearbyint's default mode);
 * normal values only, which is all fill makes. */
static float as_bf16(float x)
{
    int e;
    double m = frexp(x, &e); /* |m| in [0.5, 1) */
    return (float)ldexp(nearbyint(m * 256.0) / 256.0, e);
}

/* want = alpha op(A) op(B) + beta C0 in double (inputs rounded to bf16 when
 * asked); mag = the sum of |terms|, the scale of the rounding error. */
static void reference(problem *p, bool ta, bool tb, float alpha, float beta, bool bf16)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, m = 0;
            for (int k = 0; k < K; k++) {
                float a = ta ? p->A[k * LD + i] : p->A[i * LD + k];
                float b = tb ? p->B[j * LD + k] : p->B[k * LD + j];
                if (bf16) a = as_bf16(a), b = as_bf16(b);
                s += (double)a * b;
                m += fabs((double)a * b);
            }
            double c0 = p->C[i * LD + j];
            p->want[i * N + j] = alpha * s + beta * c0;
            p->mag[i * N + j] = fabs(alpha) * m + fabs(beta * c0);
        }
}

/* Runs every transpose and beta combination; returns how many outputs were
 * further from the plain fp32-input product than fp32 sums explain. */
static int check_all(gpt_matmul mm)
{
    static problem p;
    uint64_t s = 41;
    int off_fp32 = 0;
    for (int v = 0; v < 8; v++) {
        const bool ta = v & 1, tb = v & 2;
        const float beta = (v & 4) ? 1.0f : 0.0f, alpha = (v & 4) ? 0.75f : 1.0f;
        fill(p.A, LD * LD, &s);
        fill(p.B, LD * LD, &s);
        fill(p.C, M * LD, &s);
        reference(&p, ta, tb, alpha, beta, mm == GPT_MATMUL_BF16);
        float keep = p.C[N]; /* past the N columns: must stay */
        gpt_cpu_gemm(mm, ta, tb, M, N, K, alpha, p.A, LD, p.B, LD, beta, p.C, LD);
        cr_assert_eq(p.C[N], keep, "wrote past the N columns of a row");
        double tol = 2.0 * K * 1.2e-7; /* twice the worst fp32 summation bound */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double got = p.C[i * LD + j], w = p.want[i * N + j], m = p.mag[i * N + j];
                cr_assert_leq(fabs(got - w), tol * m + 1e-30,
                              "%s ta %d tb %d beta %g: C[%d][%d] = %.9g, want %.9g", mm ? "bf16"
                              : "fp32", ta, tb, beta, i, j, got, w);
            }
        if (mm == GPT_MATMUL_BF16) {
            /* The exact products of rounded and of unrounded inputs must be
             * further apart than the tolerance, or the check above could not
             * tell bf16 from fp32. */
            static double rounded[M * N];
            reference(&p, ta, tb, 1.0f, 0.0f, true);
            memcpy(rounded, p.want, sizeof rounded);
            reference(&p, ta, tb, 1.0f, 0.0f, false);
            for (int i = 0; i < M * N; i++)
                if (fabs(rounded[i] - p.want[i]) > 3 * tol * p.mag[i]) off_fp32++;
        }
    }
    return off_fp32;
}

Test(gpt_matmul, fp32_products_every_transpose) { check_all(GPT_MATMUL_F32); }

Test(gpt_matmul, bf16_products_round_inputs_and_sum_in_fp32)
{
    char why[200] = "";
    if (!gpt_matmul_bf16_available(why, sizeof why)) cr_skip_test("no bf16 matmuls: %s", why);
    int off = check_all(GPT_MATMUL_BF16);
    cr_assert_gt(off, M * N, "the bf16 results are indistinguishable from fp32 inputs");
}

/* Without bf16 instructions a bf16 request is the fp32 product, bit for bit.
 * The cap must be set before oneDNN first looks at the CPU: this test runs
 * in its own process (Criterion forks one per test). */
static void cap_isa(void)
{
    setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE", 1);
    setenv("DNNL_MAX_CPU_ISA", "AVX512_CORE", 1);
}

Test(gpt_matmul, bf16_request_without_bf16_instructions_is_fp32, .init = cap_isa)
{
    char why[200] = "";
    cr_assert(!gpt_matmul_bf16_available(why, sizeof why), "bf16 matmuls despite the cap");
    cr_assert(strstr(why, "bf16 instructions") || strstr(why, "no oneDNN"), "why: %s", why);
    static float A[M * K], B[K * N], C1[M * N], C2[M * N];
    uint64_t s = 43;
    fill(A, M * K, &s);
    fill(B, K * N, &s);
    gpt_cpu_gemm(GPT_MATMUL_BF16, false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C1, N);
    gpt_cpu_gemm(GPT_MATMUL_F32, false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C2, N);
    cr_assert(!memcmp(C1, C2, sizeof C1), "a bf16 request without bf16 differs from fp32");
}

/* The whole model with bf16 matmuls: its gradient is the fp32 model's within
 * bf16's rounding (a few 1e-3 of the largest), and not the same bits. */
Test(gpt_matmul, model_gradient_with_bf16_matmuls)
{
    char why[200] = "";
    if (!gpt_matmul_bf16_available(why, sizeof why)) cr_skip_test("no bf16 matmuls: %s", why);
    gpt_config c = {.vocab = 256, .seq = 16, .layers = 2, .heads = 2, .dim = 32};
    const int B = 2, nt = B * c.seq;
    size_t n = gpt_num_params(&c), off = 0;
    float *p = malloc(n * sizeof(float)), *g32 = malloc(n * sizeof(float));
    float *g16 = malloc(n * sizeof(float));
    int *tok = malloc(sizeof(int) * (size_t)nt), *tgt = malloc(sizeof(int) * (size_t)nt);
    for (int i = 0; i < gpt_num_tensors(&c); i++) {
        char name[64];
        int64_t shape[2];
        int ndim, piece;
        size_t k;
        gpt_tensor_info(&c, i, name, shape, &ndim, &k, &piece);
        gpt_init_tensor(&c, i, 5, p + off);
        off += k;
    }
    uint64_t s = 44;
    for (int i = 0; i < nt; i++) {
        tok[i] = (int)(ref_rand(&s) % 256);
        tgt[i] = (int)(ref_rand(&s) % 256);
    }
    char err[256];
    gpt_acts a;
    cr_assert(gpt_acts_create(&a, &c, B, false, err, sizeof err), "%s", err);
    double l32 = gpt_forward_backward(&c, &a, p, g32, tok, tgt);
    a.matmul = GPT_MATMUL_BF16;
    double l16 = gpt_forward_backward(&c, &a, p, g16, tok, tgt);
    cr_assert_leq(fabs(l16 - l32), 1e-2, "loss %.6f with bf16 matmuls, %.6f in fp32", l16, l32);
    double big = 0, diff = 0;
    for (size_t i = 0; i < n; i++) {
        big = fmax(big, fabs(g32[i]));
        diff = fmax(diff, fabs(g16[i] - g32[i]));
    }
    cr_assert_leq(diff, 2e-2 * big, "gradient off by %.3g of the largest %.3g", diff, big);
    cr_assert_gt(diff, 0.0, "bf16 matmuls gave the fp32 gradient bit for bit");
    gpt_acts_destroy(&a);
    free(p); free(g32); free(g16); free(tok); free(tgt);
}
