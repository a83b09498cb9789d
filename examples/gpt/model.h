/* A GPT-2-style decoder: token + position embeddings, `layers` pre-LayerNorm
 * blocks (causal self-attention, then a GELU MLP, each added to the residual
 * stream), a final LayerNorm and an LM head tied to the token embedding,
 * trained with cross-entropy.
 *
 * The model is split in the pieces a ZeRO training loop acquires one at a
 * time: the embedding (wte, wpe), each block (12 tensors), the final
 * LayerNorm. Forward and backward run piece by piece, so a caller can fetch a
 * block's weights just before it runs and hand its gradients back right after
 * (train.c); gpt_forward_backward runs every piece over flat buffers (tests). */
#ifndef GPT_MODEL_H
#define GPT_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "matmul_cpu.h"

typedef struct gpt_config {
    int vocab, seq, layers, heads, dim;
    int ctx;  /* positions of wpe (GPT-2's n_positions; 0: seq); seq <= ctx */
} gpt_config;

/* Tensors of one block, in registration order. */
enum {
    GPT_LN1_W, GPT_LN1_B, GPT_QKV_W, GPT_QKV_B, GPT_ATTPROJ_W, GPT_ATTPROJ_B,
    GPT_LN2_W, GPT_LN2_B, GPT_FC_W, GPT_FC_B, GPT_FCPROJ_W, GPT_FCPROJ_B,
    GPT_BLOCK_TENSORS
};

/* Checks the shape (each > 0, dim divisible by heads, seq <= GPT_MAX_SEQ,
 * every size fits the int and size_t arithmetic used below). On failure
 * writes why into err and returns false. */
bool gpt_config_check(const gpt_config *c, char *err, size_t errlen);

/* Tensors in registration order: wte, wpe, then 12 per block, then lnf.w,
 * lnf.b: 4 + 12 * layers. */
int gpt_num_tensors(const gpt_config *c);
/* Name ("h.3.attn.c_attn.weight", GPT-2's), shape and element count of tensor
 * i; *piece is 0 for the embedding, 1 + l for block l, layers + 1 for lnf. */
void gpt_tensor_info(const gpt_config *c, int i, char name[64], int64_t shape[2], int *ndim,
                     size_t *numel, int *piece);
/* Total number of parameters. */
size_t gpt_num_params(const gpt_config *c);
/* Training FLOPs per token (forward and backward): 6 x the parameters that
 * take part in matrix products (all but wpe, a lookup; wte once, as the
 * tied head's matmul) + 12 x layers x dim x seq for the attention scores
 * and their use (PaLM, appendix B; causal masking not discounted). The
 * formula of bench/train/gpt_flops.py, which scripts/gpu_check.py and the
 * PyTorch twin use. */
double gpt_flops_per_token(const gpt_config *c);

/* Initialisation as GPT-2: normal(0, 0.02) weights, residual projections
 * scaled by 1/sqrt(2 layers), zero biases, LayerNorm weight 1. Fills tensor i
 * (numel values) from a stream keyed by (seed, i), so every rank computes the
 * same values. */
void gpt_init_tensor(const gpt_config *c, int i, uint64_t seed, float *out);

/* Saved activations and backward scratch for micro-batches of B sequences of
 * c->seq tokens.
 *
 * With ckpt (activation checkpointing by block, train.c's
 * --checkpoint-activations block) the per-block buffers below hold one
 * block, and the residual stream two: block l reads slot l % 2 and writes
 * slot (l + 1) % 2 (gpt_block_input). The training loop saves each block's
 * input before the block runs (zeroc's activation store) and, in backward,
 * restores it into gpt_block_input(l) and runs gpt_block_forward(l) again
 * before gpt_block_backward(l): the same arithmetic on the same values, so
 * the gradients are bitwise those of the run that keeps every block. The
 * last block needs neither (gpt_ckpt_blocks): the head reads only the
 * residual slot it wrote, so its buffers still hold its activations. */
typedef struct gpt_acts {
    int B, T;
    bool ckpt;
    /* The precision of the linear layers' matmuls (the LM head's included):
     * GPT_MATMUL_F32 after gpt_acts_create; a caller that trains in bf16
     * may set GPT_MATMUL_BF16 (matmul_cpu.h). The attention's products stay
     * fp32. */
    gpt_matmul matmul;
    float *res;            /* [layers + 1][N, C] residual stream into each block, then out
                              (ckpt: [2][N, C]) */
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *res2, *ln2, *ln2_mean, *ln2_rstd,
        *fch, *fch_gelu;   /* per block, [layers][...] (ckpt: [1][...]) */
    float *lnf, *lnf_mean, *lnf_rstd, *probs;
    /* backward scratch (one block's worth) */
    float *dres, *dres2, *dln, *datty, *dqkv, *dfch, *dfch_gelu, *dlogits;
} gpt_acts;

/* Allocates for B sequences (ckpt: one block's buffers, see above); B * seq
 * * max(4 dim, vocab) and the attention maps must fit in size_t (checked).
 * Returns false (err says why) when not or when memory runs out. */
bool gpt_acts_create(gpt_acts *a, const gpt_config *c, int B, bool ckpt, char *err,
                     size_t errlen);
void gpt_acts_destroy(gpt_acts *a);
/* The bytes gpt_acts_create allocates for B sequences (the same table);
 * false when a size overflows. */
bool gpt_acts_bytes(const gpt_config *c, int B, bool ckpt, uint64_t *bytes);
/* The bytes of one block's checkpoint: its input, B x seq x dim floats. */
size_t gpt_block_input_bytes(const gpt_config *c, int B);
/* The checkpoints a training micro-step saves: every block's input but the
 * last block's. The last block runs on into its own backward straight after
 * the head's, so its activations are still in the one block's buffers and it
 * needs neither a checkpoint nor a recompute (as PyTorch's
 * checkpoint_sequential leaves its last segment). 0 for one layer. */
int gpt_ckpt_blocks(const gpt_config *c);
/* Block l's input in the residual stream (what it reads; ckpt: slot l % 2). */
float *gpt_block_input(const gpt_config *c, gpt_acts *a, int l);

/* The pieces. tok and tgt are [B, T]. */
void gpt_embed_forward_piece(const gpt_config *c, gpt_acts *a, const float *wte,
                             const float *wpe, const int *tok);
void gpt_block_forward(const gpt_config *c, gpt_acts *a, int l,
                       const float *const w[GPT_BLOCK_TENSORS]);
/* Final LayerNorm, logits against wte, softmax and the mean cross-entropy
 * over the B*T positions (returned). */
double gpt_head_forward(const gpt_config *c, gpt_acts *a, const float *lnfw, const float *lnfb,
                        const float *wte, const int *tgt);
/* Backward of the head for a loss multiplied by loss_scale: sets a->dres to
 * the gradient of the last residual and accumulates into dwte, dlnfw, dlnfb. */
void gpt_head_backward(const gpt_config *c, gpt_acts *a, const float *lnfw, const float *wte,
                       const int *tgt, float loss_scale, float *dwte, float *dlnfw,
                       float *dlnfb);
/* Backward of block l: a->dres holds the gradient of its output on entry and
 * of its input on return; accumulates into g[]. */
void gpt_block_backward(const gpt_config *c, gpt_acts *a, int l,
                        const float *const w[GPT_BLOCK_TENSORS],
                        float *const g[GPT_BLOCK_TENSORS]);
/* Accumulates the embedding gradients from a->dres. */
void gpt_embed_backward_piece(const gpt_config *c, gpt_acts *a, const int *tok, float *dwte,
                              float *dwpe);

/* Whole model over flat buffers in registration order (params, and grads that
 * are overwritten): returns the mean loss. grads may be NULL (forward only). */
double gpt_forward_backward(const gpt_config *c, gpt_acts *a, const float *params,
                            float *grads, const int *tok, const int *tgt);

#endif
