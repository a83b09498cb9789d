/* The arithmetic of the CUDA layers that needs no GPU to check: the
 * attention's layouts and its six cuBLAS calls (as data), the workspace
 * layouts, and how the column reductions cut their rows. layers_cuda.cu runs
 * what these describe; tests/gpt/test_cuda_plan.c runs the same
 * descriptions with a plain column-major GEMM on the host and holds the
 * result to the CPU layers (layers_cpu.c).
 *
 * Plain C, static inline: included by layers_cuda.cu (nvcc, where
 * GPT_PLAN_HD makes the index helpers device functions too), model_cuda.c
 * and the test. */
#ifndef GPT_CUDA_PLAN_H
#define GPT_CUDA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define GPT_PLAN_HD __host__ __device__
#else
#define GPT_PLAN_HD
#endif

/* ---- attention layouts ------------------------------------------------------------------- */
/* qkv is [B, T, 3C] (q, k, v each C wide, head h at columns h*hs ..); out is
 * [B, T, C]. The cuBLAS calls want each head's rows contiguous: the
 * "head-major" layout [B*NH, T, hs]. */

/* Index in qkv of element i of head h's q (which 0), k (1) or v (2) at (b, t). */
GPT_PLAN_HD static inline size_t gpt_qkv_index(int which, int b, int h, int t, int i, int T,
                                               int C, int NH)
{
    return ((size_t)b * T + t) * 3 * (size_t)C + (size_t)which * C + (size_t)h * (C / NH) + i;
}

/* Index in a [B, T, C] tensor of element i of head h at (b, t). */
GPT_PLAN_HD static inline size_t gpt_btc_index(int b, int h, int t, int i, int T, int C, int NH)
{
    return ((size_t)b * T + t) * C + (size_t)h * (C / NH) + i;
}

/* The (b, h, t, i) of element e of a head-major [B*NH, T, hs] tensor. */
GPT_PLAN_HD static inline void gpt_head_major_split(size_t e, int T, int C, int NH, int *b, int *h,
                                                    int *t, int *i)
{
    const size_t hs = (size_t)(C / NH);
    *i = (int)(e % hs);
    e /= hs;
    *t = (int)(e % (size_t)T);
    e /= (size_t)T;
    *h = (int)(e % (size_t)NH);
    *b = (int)(e / (size_t)NH);
}

/* ---- attention's GEMMs ------------------------------------------------------------------- */
/* The buffers a GEMM names: head-major q, k, v (bf16); P the probabilities
 * (bf16, [B*NH, T, T], zero above the diagonal); S the scores / the layer's
 * att buffer (fp32, [B*NH, T, T]); Y the heads' outputs (fp32, head-major);
 * dY (bf16, head-major); dP (fp32, [B*NH, T, T]); dS the scores' gradient
 * (bf16, [B*NH, T, T], in P's place once dV is done); dQ, dK, dV (fp32,
 * head-major). */
enum gpt_att_buf {
    GPT_ATT_Q, GPT_ATT_K, GPT_ATT_V, GPT_ATT_P, GPT_ATT_S, GPT_ATT_Y, GPT_ATT_DY, GPT_ATT_DP,
    GPT_ATT_DS, GPT_ATT_DQ, GPT_ATT_DK, GPT_ATT_DV, GPT_ATT_NBUF
};

/* One cublasGemmStridedBatchedEx, column-major as cuBLAS reads it:
 * C_j = op(A_j) op(B_j) for j < batch, A_j = a + j * sa (elements), op(X) = X^T when
 * the flag is set; bf16 A and B, fp32 C and accumulation, alpha 1, beta 0. */
typedef struct gpt_gemm {
    int ta, tb;
    int m, n, k, lda, ldb, ldc;
    long long sa, sb, sc;
    int batch;
    enum gpt_att_buf a, b, c;
} gpt_gemm;

/* The GEMMs, in the order they run: forward S = Q K^T, Y = P V; backward
 * dP = dY V^T, dV = P^T dY, then (after the softmax's backward) dQ = dS K,
 * dK = dS^T Q. Row-major X[r, c] is column-major X^T with ld c, so each
 * row-major product is written as its transpose. */
enum { GPT_GEMM_S, GPT_GEMM_Y, GPT_GEMM_DP, GPT_GEMM_DV, GPT_GEMM_DQ, GPT_GEMM_DK, GPT_NGEMM };

static inline gpt_gemm gpt_gemm_of(int ta, int tb, int m, int n, int k, int lda, int ldb,
                                   int ldc, long long sa, long long sb, long long sc, int batch,
                                   enum gpt_att_buf a, enum gpt_att_buf b, enum gpt_att_buf c)
{
    gpt_gemm g;
    g.ta = ta, g.tb = tb, g.m = m, g.n = n, g.k = k, g.lda = lda, g.ldb = ldb, g.ldc = ldc;
    g.sa = sa, g.sb = sb, g.sc = sc, g.batch = batch, g.a = a, g.b = b, g.c = c;
    return g;
}

static inline gpt_gemm gpt_att_gemm(int which, int B, int T, int C, int NH)
{
    const int hs = C / NH, bat = B * NH;
    const long long th = (long long)T * hs, tt = (long long)T * T;
    switch (which) {
    case GPT_GEMM_S: /* S^T[t2, t] = sum_i k[t2, i] q[t, i]: (K^T)^T Q^T */
        return gpt_gemm_of(1, 0, T, T, hs, hs, hs, T, th, th, tt, bat, GPT_ATT_K, GPT_ATT_Q,
                           GPT_ATT_S);
    case GPT_GEMM_Y: /* Y^T[i, t] = sum_t2 v[t2, i] P[t, t2]: V^T P^T */
        return gpt_gemm_of(0, 0, hs, T, T, hs, T, hs, th, tt, th, bat, GPT_ATT_V, GPT_ATT_P,
                           GPT_ATT_Y);
    case GPT_GEMM_DP: /* dP^T[t2, t] = sum_i v[t2, i] dY[t, i] */
        return gpt_gemm_of(1, 0, T, T, hs, hs, hs, T, th, th, tt, bat, GPT_ATT_V, GPT_ATT_DY,
                           GPT_ATT_DP);
    case GPT_GEMM_DV: /* dV^T[i, t2] = sum_t dY[t, i] P[t, t2]: dY^T (P^T)^T */
        return gpt_gemm_of(0, 1, hs, T, T, hs, T, hs, th, tt, th, bat, GPT_ATT_DY, GPT_ATT_P,
                           GPT_ATT_DV);
    case GPT_GEMM_DQ: /* dQ^T[i, t] = sum_t2 k[t2, i] dS[t, t2]: K^T dS^T */
        return gpt_gemm_of(0, 0, hs, T, T, hs, T, hs, th, tt, th, bat, GPT_ATT_K, GPT_ATT_DS,
                           GPT_ATT_DQ);
    default: /* GPT_GEMM_DK: dK^T[i, t2] = sum_t q[t, i] dS[t, t2]: Q^T (dS^T)^T */
        return gpt_gemm_of(0, 1, hs, T, T, hs, T, hs, th, tt, th, bat, GPT_ATT_Q, GPT_ATT_DS,
                           GPT_ATT_DK);
    }
}

/* ---- workspaces -------------------------------------------------------------------------- */
/* Every region starts on a 256-byte boundary (cuBLAS's and the 16-byte
 * vector loads' alignment). */
#define GPT_WS_ALIGN 256

/* *off = the next aligned offset after *off, then *off += bytes; false on
 * overflow. */
static inline int gpt_ws_take(size_t *off, size_t bytes, size_t *at)
{
    size_t o = (*off + GPT_WS_ALIGN - 1) / GPT_WS_ALIGN * GPT_WS_ALIGN;
    if (o < *off || o + bytes < o)
        return 0;
    *at = o;
    *off = o + bytes;
    return 1;
}

/* a * b * c without overflow (0 on overflow). */
static inline int gpt_mul3(size_t a, size_t b, size_t c, size_t *out)
{
    if (a && b > SIZE_MAX / a)
        return 0;
    size_t ab = a * b;
    if (ab && c > SIZE_MAX / ab)
        return 0;
    *out = ab * c;
    return 1;
}

/* The attention's workspace, byte offsets into one buffer:
 *   qkv16  3 x [B*NH, T, hs] bf16   q, k, v head-major (forward and backward)
 *   p16    [B*NH, T, T] bf16        P (forward; backward: P, then dS)
 *   f32    3 x [B*NH, T, hs] fp32   Y (forward); dQ, dK, dV (backward)
 *   dp     [B*NH, T, T] fp32        dP (backward)
 *   dy16   [B*NH, T, hs] bf16       dY (backward)
 * In all 20 B T C + 6 B NH T^2 bytes plus alignment: at GPT-2 small
 * (C 768, NH 12, T 1024) and B = 4, 63 MB + 302 MB. Returns 0 when the sizes
 * overflow. */
typedef struct gpt_att_ws {
    size_t qkv16, p16, f32, dp, dy16, bytes;
} gpt_att_ws;

static inline int gpt_att_ws_layout(int B, int T, int C, int NH, gpt_att_ws *w)
{
    size_t btc, tt, off = 0;
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0 || C % NH)
        return 0;
    if (!gpt_mul3((size_t)B, (size_t)T, (size_t)C, &btc) ||
        !gpt_mul3((size_t)B * (size_t)NH, (size_t)T, (size_t)T, &tt) || btc > SIZE_MAX / 16 ||
        tt > SIZE_MAX / 8)
        return 0;
    return gpt_ws_take(&off, 3 * btc * 2, &w->qkv16) && gpt_ws_take(&off, tt * 2, &w->p16) &&
           gpt_ws_take(&off, 3 * btc * 4, &w->f32) && gpt_ws_take(&off, tt * 4, &w->dp) &&
           gpt_ws_take(&off, btc * 2, &w->dy16) && (w->bytes = off, 1);
}

/* ---- column reductions ------------------------------------------------------------------- */
/* A column sum over N rows (bias and LayerNorm gains' gradients) runs in two
 * launches: gpt_colsum_slices(N) slices of consecutive rows, each summed per
 * column by a thread block (its warps take rows in turn, then add their
 * 32-column partials through shared memory in warp order) into a partial
 * row; then one thread per column adds the slices' partials in slice order
 * to the gradient. The order depends on N only, so results repeat run to
 * run and device to device. */
#define GPT_COLSUM_MAX_SLICES 32
#define GPT_COLSUM_ROWS_PER_SLICE 64 /* at least, until the slices run out */
#define GPT_COLSUM_COLS 32           /* columns per thread block */
#define GPT_COLSUM_WARPS 8

GPT_PLAN_HD static inline int gpt_colsum_slices(int N)
{
    int s = N / GPT_COLSUM_ROWS_PER_SLICE + (N % GPT_COLSUM_ROWS_PER_SLICE != 0);
    return s < 1 ? 1 : s > GPT_COLSUM_MAX_SLICES ? GPT_COLSUM_MAX_SLICES : s;
}

/* Rows [*lo, *hi) of slice s of S over N rows. */
GPT_PLAN_HD static inline void gpt_colsum_rows(int N, int S, int s, int *lo, int *hi)
{
    *lo = (int)((long long)N * s / S);
    *hi = (int)((long long)N * (s + 1) / S);
}

/* Bytes of fp32 partials for `arrays` column sums of C columns over N rows. */
static inline size_t gpt_colsum_scratch_bytes(int N, int C, int arrays)
{
    return (size_t)gpt_colsum_slices(N) * (size_t)C * sizeof(float) * (size_t)arrays;
}

#endif
