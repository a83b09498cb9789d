/* The GPT on a CUDA device (model_cuda.h): model.c's pieces with the CUDA
 * layers. Keep the order of operations in step with model.c: the tests hold
 * the two to each other. */
#include "model_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#define TRY(call) do { int rc_ = (call); if (rc_) return rc_; } while (0)

static int zero(gpt_cuda_model *m, float *p, size_t n)
{
    return (int)cudaMemsetAsync(p, 0, n * sizeof(float), (cudaStream_t)m->stream);
}

static int copy(gpt_cuda_model *m, float *dst, const float *src, size_t n)
{
    return (int)cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                (cudaStream_t)m->stream);
}

bool gpt_cuda_model_create(gpt_cuda_model *m, const gpt_config *c, int B, bool ckpt,
                           void *stream, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->c = *c;
    m->stream = stream;
    /* Sizes as model.c's gpt_acts_create, which checks their arithmetic:
     * a host allocation of the same sizes is made and freed first. */
    gpt_acts h;
    if (!gpt_acts_create(&h, c, B, ckpt, err, errlen)) return false;
    gpt_acts_destroy(&h);
    /* ckpt: one block's buffers and two residual slots (model.h). */
    const size_t L = ckpt ? 1 : (size_t)c->layers, C = (size_t)c->dim, N = (size_t)B * c->seq;
    const size_t NC = N * C, NV = N * (size_t)c->vocab;
    const size_t att = L * (size_t)B * c->heads * c->seq * c->seq;
    m->a.B = B;
    m->a.T = c->seq;
    m->a.ckpt = ckpt;
    struct { float **p; size_t n; } t[] = {
        {&m->a.res, (ckpt ? 2 : L + 1) * NC}, {&m->a.ln1, L * NC}, {&m->a.ln1_mean, L * N},
        {&m->a.ln1_rstd, L * N}, {&m->a.qkv, L * 3 * NC}, {&m->a.att, att}, {&m->a.atty, L * NC},
        {&m->a.res2, L * NC}, {&m->a.ln2, L * NC}, {&m->a.ln2_mean, L * N},
        {&m->a.ln2_rstd, L * N}, {&m->a.fch, L * 4 * NC}, {&m->a.fch_gelu, L * 4 * NC},
        {&m->a.lnf, NC}, {&m->a.lnf_mean, N}, {&m->a.lnf_rstd, N}, {&m->a.probs, NV},
        {&m->a.dres, NC}, {&m->a.dres2, NC}, {&m->a.dln, NC}, {&m->a.datty, NC},
        {&m->a.dqkv, 3 * NC}, {&m->a.dfch, 4 * NC}, {&m->a.dfch_gelu, 4 * NC},
        {&m->a.dlogits, NV}, {&m->row_loss, N}};
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
        cudaError_t e = cudaMalloc((void **)t[k].p, t[k].n * sizeof(float));
        if (e != cudaSuccess) {
            snprintf(err, errlen, "cudaMalloc of %zu floats: %s", t[k].n, cudaGetErrorString(e));
            gpt_cuda_model_destroy(m);
            return false;
        }
    }
    /* One scratch for every layer (they run one after another on the
     * stream): the largest of the linear layers' (bf16 operands of the MLP,
     * N x 4C and 4C x C, or of the head, N x C, V x C, N x V, and the bias
     * partials), LayerNorm's and the embedding's backward, and the
     * attention's (about 365 MB at
     * GPT-2 small and B = 4: layers_cuda.h). Allocated here, once. */
    const int n = (int)N, d = c->dim;
    const size_t need[] = {gpt_cuda_linear_scratch_bytes(n, 4 * d, d),
                           gpt_cuda_linear_scratch_bytes(n, d, 4 * d),
                           gpt_cuda_linear_scratch_bytes(n, d, 3 * d),
                           gpt_cuda_linear_scratch_bytes(n, d, c->vocab),
                           gpt_cuda_layernorm_scratch_bytes(n, d),
                           gpt_cuda_embed_scratch_bytes(B, c->seq),
                           gpt_cuda_attention_scratch_bytes(B, c->seq, d, c->heads)};
    if (!need[6]) {
        snprintf(err, errlen, "the attention's workspace for B %d, T %d, C %d overflows", B,
                 c->seq, d);
        gpt_cuda_model_destroy(m);
        return false;
    }
    size_t s = 0;
    for (size_t k = 0; k < sizeof need / sizeof need[0]; k++)
        if (need[k] > s) s = need[k];
    m->scratch_bytes = s;
    int rc = (int)cudaMalloc(&m->scratch, s);
    if (!rc) rc = gpt_cublas_create(&m->blas, stream);
    if (rc) {
        snprintf(err, errlen, "cannot set up cuBLAS and its %zu-byte scratch: %s", s,
                 gpt_cuda_error_string(rc));
        gpt_cuda_model_destroy(m);
        return false;
    }
    return true;
}

void gpt_cuda_model_destroy(gpt_cuda_model *m)
{
    float *all[] = {m->a.res, m->a.ln1, m->a.ln1_mean, m->a.ln1_rstd, m->a.qkv, m->a.att,
                    m->a.atty, m->a.res2, m->a.ln2, m->a.ln2_mean, m->a.ln2_rstd, m->a.fch,
                    m->a.fch_gelu, m->a.lnf, m->a.lnf_mean, m->a.lnf_rstd, m->a.probs,
                    m->a.dres, m->a.dres2, m->a.dln, m->a.datty, m->a.dqkv, m->a.dfch,
                    m->a.dfch_gelu, m->a.dlogits, m->row_loss};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) cudaFree(all[k]);
    cudaFree(m->scratch);
    gpt_cublas_destroy(m->blas);
    memset(m, 0, sizeof *m);
}

/* Block l's slice of the per-block buffers (ckpt: the one block's). */
static size_t lay(const gpt_acts *a, int l) { return a->ckpt ? 0 : (size_t)l; }

float *gpt_cuda_block_input(gpt_cuda_model *m, int l)
{
    const size_t NC = (size_t)m->a.B * (size_t)m->a.T * (size_t)m->c.dim;
    return m->a.res + (m->a.ckpt ? (size_t)(l % 2) : (size_t)l) * NC;
}

int gpt_cuda_embed_forward_piece(gpt_cuda_model *m, const float *wte, const float *wpe,
                                 const int *tok)
{
    return gpt_cuda_embed_forward(m->a.res, tok, wte, wpe, m->a.B, m->a.T, m->c.dim, m->stream);
}

int gpt_cuda_block_forward(gpt_cuda_model *m, int l, const float *const w[GPT_BLOCK_TENSORS])
{
    gpt_acts *a = &m->a;
    const int B = a->B, T = a->T, C = m->c.dim, N = B * T;
    const size_t NC = (size_t)N * C, L = lay(a, l);
    void *s = m->stream;
    const float *x = gpt_cuda_block_input(m, l);
    float *ln1 = a->ln1 + L * NC, *m1 = a->ln1_mean + L * N, *r1 = a->ln1_rstd + L * N;
    float *qkv = a->qkv + L * 3 * NC, *att = a->att + L * (size_t)B * m->c.heads * T * T;
    float *atty = a->atty + L * NC, *res2 = a->res2 + L * NC, *ln2 = a->ln2 + L * NC;
    float *m2 = a->ln2_mean + L * N, *r2 = a->ln2_rstd + L * N;
    float *fch = a->fch + L * 4 * NC, *fg = a->fch_gelu + L * 4 * NC;
    float *out = gpt_cuda_block_input(m, l + 1);
    TRY(gpt_cuda_layernorm_forward(ln1, m1, r1, x, w[GPT_LN1_W], w[GPT_LN1_B], N, C, s));
    TRY(gpt_cuda_linear_forward(m->blas, qkv, ln1, w[GPT_QKV_W], w[GPT_QKV_B], N, C, 3 * C,
                                m->scratch));
    TRY(gpt_cuda_attention_forward(m->blas, atty, att, qkv, B, T, C, m->c.heads, m->scratch));
    TRY(gpt_cuda_linear_forward(m->blas, res2, atty, w[GPT_ATTPROJ_W], w[GPT_ATTPROJ_B], N, C,
                                C, m->scratch));
    TRY(gpt_cuda_add_inplace(res2, x, NC, s));
    TRY(gpt_cuda_layernorm_forward(ln2, m2, r2, res2, w[GPT_LN2_W], w[GPT_LN2_B], N, C, s));
    TRY(gpt_cuda_linear_forward(m->blas, fch, ln2, w[GPT_FC_W], w[GPT_FC_B], N, C, 4 * C,
                                m->scratch));
    TRY(gpt_cuda_gelu_forward(fg, fch, 4 * NC, s));
    TRY(gpt_cuda_linear_forward(m->blas, out, fg, w[GPT_FCPROJ_W], w[GPT_FCPROJ_B], N, 4 * C, C,
                                m->scratch));
    return gpt_cuda_add_inplace(out, res2, NC, s);
}

int gpt_cuda_head_forward(gpt_cuda_model *m, const float *lnfw, const float *lnfb,
                          const float *wte, const int *tgt, double *loss)
{
    gpt_acts *a = &m->a;
    const int N = a->B * a->T, C = m->c.dim;
    const float *x = gpt_cuda_block_input(m, m->c.layers);
    TRY(gpt_cuda_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x, lnfw, lnfb, N, C,
                                   m->stream));
    TRY(gpt_cuda_linear_forward(m->blas, a->probs, a->lnf, wte, NULL, N, C, m->c.vocab,
                                m->scratch));
    TRY(gpt_cuda_softmax_xent_forward(a->probs, m->row_loss, tgt, N, m->c.vocab, m->stream));
    float *rl = malloc((size_t)N * sizeof(float));
    if (!rl) return (int)cudaErrorMemoryAllocation;
    int rc = (int)cudaMemcpyAsync(rl, m->row_loss, (size_t)N * sizeof(float),
                                  cudaMemcpyDeviceToHost, (cudaStream_t)m->stream);
    if (!rc) rc = (int)cudaStreamSynchronize((cudaStream_t)m->stream);
    double s = 0;
    for (int i = 0; i < N; i++) s += rl[i];
    free(rl);
    *loss = s / N;
    return rc;
}

int gpt_cuda_head_backward(gpt_cuda_model *m, const float *lnfw, const float *wte,
                           const int *tgt, float loss_scale, float *dwte, float *dlnfw,
                           float *dlnfb)
{
    gpt_acts *a = &m->a;
    const int N = a->B * a->T, C = m->c.dim;
    const size_t NC = (size_t)N * C;
    const float *x = gpt_cuda_block_input(m, m->c.layers);
    TRY(gpt_cuda_softmax_xent_backward(a->dlogits, a->probs, tgt, N, m->c.vocab,
                                       loss_scale / (float)N, m->stream));
    TRY(zero(m, a->dln, NC));
    TRY(gpt_cuda_linear_backward(m->blas, a->dln, dwte, NULL, a->dlogits, a->lnf, wte, N, C,
                                 m->c.vocab, m->scratch));
    TRY(zero(m, a->dres, NC));
    return gpt_cuda_layernorm_backward(a->dres, dlnfw, dlnfb, a->dln, x, lnfw, a->lnf_mean,
                                       a->lnf_rstd, N, C, m->stream, m->scratch);
}

int gpt_cuda_block_backward(gpt_cuda_model *m, int l, const float *const w[GPT_BLOCK_TENSORS],
                            float *const g[GPT_BLOCK_TENSORS])
{
    gpt_acts *a = &m->a;
    const int B = a->B, T = a->T, C = m->c.dim, N = B * T;
    const size_t NC = (size_t)N * C, L = lay(a, l);
    void *s = m->stream;
    const float *x = gpt_cuda_block_input(m, l);
    const float *ln1 = a->ln1 + L * NC, *m1 = a->ln1_mean + L * N, *r1 = a->ln1_rstd + L * N;
    const float *qkv = a->qkv + L * 3 * NC, *att = a->att + L * (size_t)B * m->c.heads * T * T;
    const float *atty = a->atty + L * NC, *res2 = a->res2 + L * NC, *ln2 = a->ln2 + L * NC;
    const float *m2 = a->ln2_mean + L * N, *r2 = a->ln2_rstd + L * N;
    const float *fch = a->fch + L * 4 * NC, *fg = a->fch_gelu + L * 4 * NC;
    TRY(copy(m, a->dres2, a->dres, NC));
    TRY(zero(m, a->dfch_gelu, 4 * NC));
    TRY(gpt_cuda_linear_backward(m->blas, a->dfch_gelu, g[GPT_FCPROJ_W], g[GPT_FCPROJ_B], a->dres,
                                 fg, w[GPT_FCPROJ_W], N, 4 * C, C, m->scratch));
    TRY(zero(m, a->dfch, 4 * NC));
    TRY(gpt_cuda_gelu_backward(a->dfch, fch, a->dfch_gelu, 4 * NC, s));
    TRY(zero(m, a->dln, NC));
    TRY(gpt_cuda_linear_backward(m->blas, a->dln, g[GPT_FC_W], g[GPT_FC_B], a->dfch, ln2,
                                 w[GPT_FC_W], N, C, 4 * C, m->scratch));
    TRY(gpt_cuda_layernorm_backward(a->dres2, g[GPT_LN2_W], g[GPT_LN2_B], a->dln, res2,
                                    w[GPT_LN2_W], m2, r2, N, C, s, m->scratch));
    TRY(zero(m, a->datty, NC));
    TRY(gpt_cuda_linear_backward(m->blas, a->datty, g[GPT_ATTPROJ_W], g[GPT_ATTPROJ_B], a->dres2,
                                 atty, w[GPT_ATTPROJ_W], N, C, C, m->scratch));
    TRY(zero(m, a->dqkv, 3 * NC));
    TRY(gpt_cuda_attention_backward(m->blas, a->dqkv, a->datty, qkv, att, B, T, C, m->c.heads,
                                    m->scratch));
    TRY(zero(m, a->dln, NC));
    TRY(gpt_cuda_linear_backward(m->blas, a->dln, g[GPT_QKV_W], g[GPT_QKV_B], a->dqkv, ln1,
                                 w[GPT_QKV_W], N, C, 3 * C, m->scratch));
    TRY(copy(m, a->dres, a->dres2, NC));
    return gpt_cuda_layernorm_backward(a->dres, g[GPT_LN1_W], g[GPT_LN1_B], a->dln, x,
                                       w[GPT_LN1_W], m1, r1, N, C, s, m->scratch);
}

int gpt_cuda_embed_backward_piece(gpt_cuda_model *m, const int *tok, float *dwte, float *dwpe)
{
    return gpt_cuda_embed_backward(dwte, dwpe, m->a.dres, tok, m->a.B, m->a.T, m->c.dim,
                                   m->stream, m->scratch);
}

int gpt_cuda_forward_backward(gpt_cuda_model *m, const float *params, float *grads,
                              const int *tok, const int *tgt, double *loss)
{
    const gpt_config *c = &m->c;
    const int nt = gpt_num_tensors(c);
    const float **P = calloc((size_t)nt, sizeof *P);
    float **G = calloc((size_t)nt, sizeof *G);
    int rc = (int)cudaErrorMemoryAllocation;
    if (!P || !G) goto out;
    size_t off = 0;
    for (int i = 0; i < nt; i++) {
        char name[64];
        int64_t shape[2];
        int ndim, piece;
        size_t n;
        gpt_tensor_info(c, i, name, shape, &ndim, &n, &piece);
        P[i] = params + off;
        G[i] = grads ? grads + off : NULL;
        off += n;
    }
    if (grads && (rc = zero(m, grads, off))) goto out;
    if ((rc = gpt_cuda_embed_forward_piece(m, P[0], P[1], tok))) goto out;
    for (int l = 0; l < c->layers; l++)
        if ((rc = gpt_cuda_block_forward(m, l, P + 2 + GPT_BLOCK_TENSORS * l))) goto out;
    if ((rc = gpt_cuda_head_forward(m, P[nt - 2], P[nt - 1], P[0], tgt, loss))) goto out;
    if (grads) {
        if ((rc = gpt_cuda_head_backward(m, P[nt - 2], P[0], tgt, 1.0f, G[0], G[nt - 2],
                                         G[nt - 1])))
            goto out;
        for (int l = c->layers - 1; l >= 0; l--)
            if ((rc = gpt_cuda_block_backward(m, l, P + 2 + GPT_BLOCK_TENSORS * l,
                                              G + 2 + GPT_BLOCK_TENSORS * l)))
                goto out;
        rc = gpt_cuda_embed_backward_piece(m, tok, G[0], G[1]);
    }
out:
    free(P);
    free(G);
    return rc;
}
