/* The GPT model: parameter table, initialisation, activations, and forward /
 * backward piece by piece (model.h). The layers are in layers_cpu.c. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers_cpu.h"

bool gpt_config_check(const gpt_config *c, char *err, size_t errlen)
{
    if (c->vocab < 2 || c->seq < 1 || c->layers < 1 || c->heads < 1 || c->dim < 1) {
        snprintf(err, errlen, "every model size must be positive (vocab >= 2)");
        return false;
    }
    if (c->dim % c->heads) {
        snprintf(err, errlen, "--dim %d is not a multiple of --heads %d", c->dim, c->heads);
        return false;
    }
    if (c->seq > GPT_MAX_SEQ) {
        snprintf(err, errlen, "--seq %d is longer than %d", c->seq, GPT_MAX_SEQ);
        return false;
    }
    if (c->ctx && (c->ctx < c->seq || c->ctx > GPT_MAX_SEQ)) {
        snprintf(err, errlen, "a context of %d positions, not in [--seq %d, %d]", c->ctx,
                 c->seq, GPT_MAX_SEQ);
        return false;
    }
    /* The layers index with int products such as N * 4C and vocab * dim;
     * keep every per-tensor size inside int. */
    int64_t big = (int64_t)4 * c->dim * c->dim;
    if ((int64_t)c->vocab * c->dim > big) big = (int64_t)c->vocab * c->dim;
    if (big > INT32_MAX / 4) {
        snprintf(err, errlen, "a weight of %lld elements is too large for this example",
                 (long long)big);
        return false;
    }
    return true;
}

int gpt_num_tensors(const gpt_config *c) { return 4 + GPT_BLOCK_TENSORS * c->layers; }

void gpt_tensor_info(const gpt_config *c, int i, char name[64], int64_t shape[2], int *ndim,
                     size_t *numel, int *piece)
{
    const int64_t C = c->dim;
    static const char *const block_names[GPT_BLOCK_TENSORS] = {
        "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
        "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
        "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
    /* Output rows x input columns (the layout gpt_linear_forward expects). */
    static const int rows[GPT_BLOCK_TENSORS] = {1, 1, 3, 3, 1, 1, 1, 1, 4, 4, 1, 1};
    static const int cols[GPT_BLOCK_TENSORS] = {0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 0};
    const int nt = gpt_num_tensors(c);
    if (i < 2) {
        snprintf(name, 64, "%s", i == 0 ? "wte" : "wpe");
        shape[0] = i == 0 ? c->vocab : c->ctx > 0 ? c->ctx : c->seq;
        shape[1] = C;
        *ndim = 2;
        *piece = 0;
    } else if (i >= nt - 2) {
        snprintf(name, 64, "ln_f.%s", i == nt - 2 ? "weight" : "bias");
        shape[0] = C;
        shape[1] = 1;
        *ndim = 1;
        *piece = c->layers + 1;
    } else {
        int l = (i - 2) / GPT_BLOCK_TENSORS, k = (i - 2) % GPT_BLOCK_TENSORS;
        snprintf(name, 64, "h.%d.%s", l, block_names[k]);
        shape[0] = rows[k] * C;
        shape[1] = cols[k] ? cols[k] * C : 1;
        *ndim = cols[k] ? 2 : 1;
        *piece = 1 + l;
    }
    *numel = (size_t)shape[0] * (size_t)shape[1];
}

double gpt_flops_per_token(const gpt_config *c)
{
    const double P = (double)gpt_num_params(c), L = c->layers, D = c->dim, T = c->seq;
    return 6.0 * (P - T * D) + 12.0 * L * D * T;
}

size_t gpt_num_params(const gpt_config *c)
{
    size_t n = 0;
    for (int i = 0; i < gpt_num_tensors(c); i++) {
        char name[64];
        int64_t shape[2];
        int ndim, piece;
        size_t k;
        gpt_tensor_info(c, i, name, shape, &ndim, &k, &piece);
        n += k;
    }
    return n;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void gpt_init_tensor(const gpt_config *c, int i, uint64_t seed, float *out)
{
    char name[64];
    int64_t shape[2];
    int ndim, piece;
    size_t n;
    gpt_tensor_info(c, i, name, shape, &ndim, &n, &piece);
    if (ndim == 1) {
        /* Biases 0, LayerNorm weights 1 (names end in ln_*.weight). */
        float v = strstr(name, "ln_") && strstr(name, ".weight") ? 1.0f : 0.0f;
        for (size_t k = 0; k < n; k++) out[k] = v;
        return;
    }
    /* GPT-2 scales the projections into the residual stream so its variance
     * does not grow with depth. */
    double std = 0.02;
    if (strstr(name, "c_proj.weight")) std /= sqrt(2.0 * c->layers);
    uint64_t s = seed ^ (0x6a09e667f3bcc909ull * (uint64_t)(i + 1));
    for (size_t k = 0; k < n; k += 2) {
        /* Box-Muller: two normals from two uniforms in (0, 1]. */
        double u1 = ((splitmix(&s) >> 11) + 1) * 0x1p-53, u2 = (splitmix(&s) >> 11) * 0x1p-53;
        double r = sqrt(-2.0 * log(u1));
        out[k] = (float)(std * r * cos(2.0 * M_PI * u2));
        if (k + 1 < n) out[k + 1] = (float)(std * r * sin(2.0 * M_PI * u2));
    }
}

/* ---- activations ---------------------------------------------------------- */

static bool mul3(size_t a, size_t b, size_t c, size_t *out)
{
    return !__builtin_mul_overflow(a, b, out) && !__builtin_mul_overflow(*out, c, out);
}

/* The buffers of gpt_acts_create for B sequences: where each goes and how
 * many floats it holds (one table, so gpt_acts_bytes cannot drift from
 * what is allocated). Returns how many, or 0 when a size overflows. */
typedef struct acts_slot { float **p; size_t n; } acts_slot;
enum { ACTS_SLOTS = 25 };

static int acts_table(gpt_acts *a, const gpt_config *c, int B, bool ckpt,
                      acts_slot t[ACTS_SLOTS])
{
    /* ckpt: one block's buffers and two residual slots (model.h). */
    const size_t L = ckpt ? 1 : (size_t)c->layers, C = (size_t)c->dim, T = (size_t)c->seq;
    size_t N, NC, att, NV, widest;
    /* widest: the largest per-layer buffer (4 N C, the MLP) over every layer,
     * in bytes; with it and att checked, every size below fits size_t. */
    if (B < 1 || !mul3((size_t)B, T, 1, &N) || !mul3(N, C, 4, &NC) ||
        !mul3((size_t)B * c->heads, T, T, &att) || !mul3(N, (size_t)c->vocab, 1, &NV) ||
        !mul3(att, L, sizeof(float), &att) || !mul3(NC, L + 1, sizeof(float), &widest) ||
        NC > INT32_MAX || NV > INT32_MAX)
        return 0;
    NC /= 4;
    const acts_slot all[ACTS_SLOTS] = {
        {&a->res, (ckpt ? 2 : L + 1) * NC}, {&a->ln1, L * NC}, {&a->ln1_mean, L * N}, {&a->ln1_rstd, L * N},
        {&a->qkv, L * 3 * NC}, {&a->att, att / sizeof(float)}, {&a->atty, L * NC},
        {&a->res2, L * NC}, {&a->ln2, L * NC}, {&a->ln2_mean, L * N}, {&a->ln2_rstd, L * N},
        {&a->fch, L * 4 * NC}, {&a->fch_gelu, L * 4 * NC}, {&a->lnf, NC}, {&a->lnf_mean, N},
        {&a->lnf_rstd, N}, {&a->probs, NV}, {&a->dres, NC}, {&a->dres2, NC}, {&a->dln, NC},
        {&a->datty, NC}, {&a->dqkv, 3 * NC}, {&a->dfch, 4 * NC}, {&a->dfch_gelu, 4 * NC},
        {&a->dlogits, NV}};
    memcpy(t, all, sizeof all);
    return ACTS_SLOTS;
}

bool gpt_acts_bytes(const gpt_config *c, int B, bool ckpt, uint64_t *bytes)
{
    gpt_acts a;
    acts_slot t[ACTS_SLOTS];
    const int n = acts_table(&a, c, B, ckpt, t);
    uint64_t sum = 0;
    for (int k = 0; k < n; k++)
        if (__builtin_add_overflow(sum, (uint64_t)t[k].n, &sum))
            return false;
    return n > 0 && !__builtin_mul_overflow(sum, (uint64_t)sizeof(float), bytes);
}

bool gpt_acts_create(gpt_acts *a, const gpt_config *c, int B, bool ckpt, char *err,
                     size_t errlen)
{
    memset(a, 0, sizeof *a);
    acts_slot t[ACTS_SLOTS];
    const int n = acts_table(a, c, B, ckpt, t);
    if (n == 0) {
        snprintf(err, errlen, "batch %d x seq %d is too large for this model", B, c->seq);
        return false;
    }
    a->B = B;
    a->T = c->seq;
    a->ckpt = ckpt;
    for (int k = 0; k < n; k++) {
        *t[k].p = calloc(t[k].n, sizeof(float));
        if (!*t[k].p) {
            snprintf(err, errlen, "out of memory for activations (%zu floats)", t[k].n);
            gpt_acts_destroy(a);
            return false;
        }
    }
    return true;
}

void gpt_acts_destroy(gpt_acts *a)
{
    float *all[] = {a->res, a->ln1, a->ln1_mean, a->ln1_rstd, a->qkv, a->att, a->atty, a->res2,
                    a->ln2, a->ln2_mean, a->ln2_rstd, a->fch, a->fch_gelu, a->lnf, a->lnf_mean,
                    a->lnf_rstd, a->probs, a->dres, a->dres2, a->dln, a->datty, a->dqkv,
                    a->dfch, a->dfch_gelu, a->dlogits};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) free(all[k]);
    memset(a, 0, sizeof *a);
}

size_t gpt_block_input_bytes(const gpt_config *c, int B)
{
    return (size_t)B * (size_t)c->seq * (size_t)c->dim * sizeof(float);
}

int gpt_ckpt_blocks(const gpt_config *c) { return c->layers - 1; }

/* Block l's slice of the per-block buffers (ckpt: the one block's). */
static size_t lay(const gpt_acts *a, int l) { return a->ckpt ? 0 : (size_t)l; }

float *gpt_block_input(const gpt_config *c, gpt_acts *a, int l)
{
    const size_t NC = (size_t)a->B * (size_t)a->T * (size_t)c->dim;
    return a->res + (a->ckpt ? (size_t)(l % 2) : (size_t)l) * NC;
}

/* ---- forward -------------------------------------------------------------- */

void gpt_embed_forward_piece(const gpt_config *c, gpt_acts *a, const float *wte,
                             const float *wpe, const int *tok)
{
    gpt_embed_forward(a->res, tok, wte, wpe, a->B, a->T, c->dim);
}

void gpt_block_forward(const gpt_config *c, gpt_acts *a, int l,
                       const float *const w[GPT_BLOCK_TENSORS])
{
    const int B = a->B, T = a->T, C = c->dim, N = B * T;
    const size_t NC = (size_t)N * C, L = lay(a, l);
    const float *x = gpt_block_input(c, a, l);
    float *ln1 = a->ln1 + L * NC, *m1 = a->ln1_mean + L * N, *r1 = a->ln1_rstd + L * N;
    float *qkv = a->qkv + L * 3 * NC, *att = a->att + L * (size_t)B * c->heads * T * T;
    float *atty = a->atty + L * NC, *res2 = a->res2 + L * NC, *ln2 = a->ln2 + L * NC;
    float *m2 = a->ln2_mean + L * N, *r2 = a->ln2_rstd + L * N;
    float *fch = a->fch + L * 4 * NC, *fg = a->fch_gelu + L * 4 * NC;
    float *out = gpt_block_input(c, a, l + 1);

    gpt_layernorm_forward(ln1, m1, r1, x, w[GPT_LN1_W], w[GPT_LN1_B], N, C);
    gpt_linear_forward_mm(a->matmul, qkv, ln1, w[GPT_QKV_W], w[GPT_QKV_B], N, C, 3 * C);
    gpt_attention_forward(atty, att, qkv, B, T, C, c->heads);
    /* The products without bias, then bias and residual (or bias and GELU)
     * in one pass over the output. */
    gpt_linear_forward_mm(a->matmul, res2, atty, w[GPT_ATTPROJ_W], NULL, N, C, C);
    gpt_bias_residual(res2, w[GPT_ATTPROJ_B], x, N, C);
    gpt_layernorm_forward(ln2, m2, r2, res2, w[GPT_LN2_W], w[GPT_LN2_B], N, C);
    gpt_linear_forward_mm(a->matmul, fch, ln2, w[GPT_FC_W], NULL, N, C, 4 * C);
    gpt_bias_gelu_forward(fg, fch, w[GPT_FC_B], N, 4 * C);
    gpt_linear_forward_mm(a->matmul, out, fg, w[GPT_FCPROJ_W], NULL, N, 4 * C, C);
    gpt_bias_residual(out, w[GPT_FCPROJ_B], res2, N, C);
}

double gpt_head_forward(const gpt_config *c, gpt_acts *a, const float *lnfw, const float *lnfb,
                        const float *wte, const int *tgt)
{
    const int N = a->B * a->T, C = c->dim;
    const float *x = gpt_block_input(c, a, c->layers);
    gpt_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x, lnfw, lnfb, N, C);
    gpt_linear_forward_mm(a->matmul, a->probs, a->lnf, wte, NULL, N, C, c->vocab);
    return gpt_softmax_xent_forward(a->probs, tgt, N, c->vocab);
}

/* ---- backward ------------------------------------------------------------- */

void gpt_head_backward(const gpt_config *c, gpt_acts *a, const float *lnfw, const float *wte,
                       const int *tgt, float loss_scale, float *dwte, float *dlnfw,
                       float *dlnfb)
{
    const int N = a->B * a->T, C = c->dim;
    const size_t NC = (size_t)N * C;
    const float *x = gpt_block_input(c, a, c->layers);
    gpt_softmax_xent_backward(a->dlogits, a->probs, tgt, N, c->vocab, loss_scale / (float)N);
    gpt_linear_backward_set_mm(a->matmul, a->dln, dwte, NULL, a->dlogits, a->lnf, wte, N, C,
                               c->vocab);
    memset(a->dres, 0, NC * sizeof(float));
    gpt_layernorm_backward(a->dres, dlnfw, dlnfb, a->dln, x, lnfw, a->lnf_mean, a->lnf_rstd, N,
                           C);
}

void gpt_block_backward(const gpt_config *c, gpt_acts *a, int l,
                        const float *const w[GPT_BLOCK_TENSORS],
                        float *const g[GPT_BLOCK_TENSORS])
{
    const int B = a->B, T = a->T, C = c->dim, N = B * T;
    const size_t NC = (size_t)N * C, L = lay(a, l);
    const float *x = gpt_block_input(c, a, l);
    const float *ln1 = a->ln1 + L * NC, *m1 = a->ln1_mean + L * N, *r1 = a->ln1_rstd + L * N;
    const float *qkv = a->qkv + L * 3 * NC, *att = a->att + L * (size_t)B * c->heads * T * T;
    const float *atty = a->atty + L * NC, *res2 = a->res2 + L * NC, *ln2 = a->ln2 + L * NC;
    const float *m2 = a->ln2_mean + L * N, *r2 = a->ln2_rstd + L * N;
    const float *fch = a->fch + L * 4 * NC, *fg = a->fch_gelu + L * 4 * NC;

    /* out = res2 + mlp(ln2(res2)): the residual passes dres straight to res2.
     * Each activation gradient's first write is a _set form (no zeroing). */
    memcpy(a->dres2, a->dres, NC * sizeof(float));
    gpt_linear_backward_set_mm(a->matmul, a->dfch_gelu, g[GPT_FCPROJ_W], g[GPT_FCPROJ_B], a->dres,
                               fg, w[GPT_FCPROJ_W], N, 4 * C, C);
    gpt_gelu_backward_set(a->dfch, fch, a->dfch_gelu, 4 * NC);
    gpt_linear_backward_set_mm(a->matmul, a->dln, g[GPT_FC_W], g[GPT_FC_B], a->dfch, ln2,
                               w[GPT_FC_W], N, C, 4 * C);
    gpt_layernorm_backward(a->dres2, g[GPT_LN2_W], g[GPT_LN2_B], a->dln, res2, w[GPT_LN2_W], m2,
                           r2, N, C);
    /* res2 = x + attn(ln1(x)) */
    gpt_linear_backward_set_mm(a->matmul, a->datty, g[GPT_ATTPROJ_W], g[GPT_ATTPROJ_B], a->dres2,
                               atty, w[GPT_ATTPROJ_W], N, C, C);
    memset(a->dqkv, 0, 3 * NC * sizeof(float)); /* the attention adds per row block */
    gpt_attention_backward(a->dqkv, a->datty, qkv, att, B, T, C, c->heads);
    gpt_linear_backward_set_mm(a->matmul, a->dln, g[GPT_QKV_W], g[GPT_QKV_B], a->dqkv, ln1,
                               w[GPT_QKV_W], N, C, 3 * C);
    memcpy(a->dres, a->dres2, NC * sizeof(float));
    gpt_layernorm_backward(a->dres, g[GPT_LN1_W], g[GPT_LN1_B], a->dln, x, w[GPT_LN1_W], m1, r1,
                           N, C);
}

void gpt_embed_backward_piece(const gpt_config *c, gpt_acts *a, const int *tok, float *dwte,
                              float *dwpe)
{
    gpt_embed_backward(dwte, dwpe, a->dres, tok, a->B, a->T, c->dim);
}

/* ---- whole model over flat buffers ---------------------------------------- */

double gpt_forward_backward(const gpt_config *c, gpt_acts *a, const float *params,
                            float *grads, const int *tok, const int *tgt)
{
    const int nt = gpt_num_tensors(c);
    size_t off = 0;
    const float *P[4 + GPT_BLOCK_TENSORS * 64];
    float *G[4 + GPT_BLOCK_TENSORS * 64];
    const float **pp = P;
    float **gg = G;
    const float **pheap = NULL;
    float **gheap = NULL;
    if (nt > (int)(sizeof P / sizeof P[0])) { /* deep models: tables on the heap */
        pheap = calloc((size_t)nt, sizeof *pheap);
        gheap = calloc((size_t)nt, sizeof *gheap);
        if (!pheap || !gheap) {
            free(pheap);
            free(gheap);
            return NAN;
        }
        pp = pheap;
        gg = gheap;
    }
    for (int i = 0; i < nt; i++) {
        char name[64];
        int64_t shape[2];
        int ndim, piece;
        size_t n;
        gpt_tensor_info(c, i, name, shape, &ndim, &n, &piece);
        pp[i] = params + off;
        gg[i] = grads ? grads + off : NULL;
        off += n;
    }
    if (grads) memset(grads, 0, off * sizeof(float));
    gpt_embed_forward_piece(c, a, pp[0], pp[1], tok);
    for (int l = 0; l < c->layers; l++)
        gpt_block_forward(c, a, l, pp + 2 + GPT_BLOCK_TENSORS * l);
    double loss = gpt_head_forward(c, a, pp[nt - 2], pp[nt - 1], pp[0], tgt);
    if (grads) {
        gpt_head_backward(c, a, pp[nt - 2], pp[0], tgt, 1.0f, gg[0], gg[nt - 2], gg[nt - 1]);
        for (int l = c->layers - 1; l >= 0; l--)
            gpt_block_backward(c, a, l, pp + 2 + GPT_BLOCK_TENSORS * l,
                               gg + 2 + GPT_BLOCK_TENSORS * l);
        gpt_embed_backward_piece(c, a, tok, gg[0], gg[1]);
    }
    free(pheap);
    free(gheap);
    return loss;
}
