/* Activation checkpointing by block in the GPT model (model.h, gpt_acts
 * with ckpt): the model that keeps one block's activations, whose training
 * loop saves each block's input and in backward restores it and runs the
 * block's forward again before its backward, gives the loss and every
 * gradient bitwise equal to gpt_forward_backward's, which keeps every
 * block's activations. The host twin of test_cuda_model.c's checkpointed
 * case; train_gpt does the same through the engine's store
 * (check_gpt_ckpt.py). */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "model.h"

static void fill(const gpt_config *c, float *p)
{
    size_t off = 0;
    for (int i = 0; i < gpt_num_tensors(c); i++) {
        char name[64];
        int64_t shape[2];
        int ndim, piece;
        size_t n;
        gpt_tensor_info(c, i, name, shape, &ndim, &n, &piece);
        gpt_init_tensor(c, i, 11, p + off);
        off += n;
    }
}

Test(gpt_ckpt, recompute_is_bitwise)
{
    const gpt_config c = {.vocab = 256, .seq = 16, .layers = 3, .heads = 2, .dim = 32};
    const int B = 2, N = B * c.seq, nt = gpt_num_tensors(&c), L = c.layers;
    const size_t np = gpt_num_params(&c), in_bytes = gpt_block_input_bytes(&c, B);
    float *p = malloc(np * 4), *g = malloc(np * 4), *g2 = calloc(np, 4);
    int *tok = malloc(sizeof(int) * N), *tgt = malloc(sizeof(int) * N);
    fill(&c, p);
    for (int i = 0; i < N; i++) {
        tok[i] = (i * 29 + 3) % c.vocab;
        tgt[i] = (i * 41 + 7) % c.vocab;
    }
    char err[256];
    gpt_acts a;
    cr_assert(gpt_acts_create(&a, &c, B, false, err, sizeof err), "%s", err);
    const double loss = gpt_forward_backward(&c, &a, p, g, tok, tgt);
    uint64_t full = 0, one = 0;
    cr_assert(gpt_acts_bytes(&c, B, false, &full) && gpt_acts_bytes(&c, B, true, &one));
    cr_assert_lt(one, full, "one block's activations (%llu) not below all (%llu)",
                 (unsigned long long)one, (unsigned long long)full);
    gpt_acts_destroy(&a);

    /* The pieces, with the block inputs kept aside (the store's part). */
    gpt_acts k;
    cr_assert(gpt_acts_create(&k, &c, B, true, err, sizeof err), "%s", err);
    const float *P[64];
    float *G[64];
    size_t off = 0;
    for (int i = 0; i < nt; i++) {
        char name[64];
        int64_t shape[2];
        int ndim, piece;
        size_t n;
        gpt_tensor_info(&c, i, name, shape, &ndim, &n, &piece);
        P[i] = p + off;
        G[i] = g2 + off;
        off += n;
    }
    float *saved = malloc(in_bytes * (size_t)L);
    gpt_embed_forward_piece(&c, &k, P[0], P[1], tok);
    for (int l = 0; l < L; l++) {
        memcpy((char *)saved + in_bytes * (size_t)l, gpt_block_input(&c, &k, l), in_bytes);
        gpt_block_forward(&c, &k, l, P + 2 + GPT_BLOCK_TENSORS * l);
    }
    const double loss2 = gpt_head_forward(&c, &k, P[nt - 2], P[nt - 1], P[0], tgt);
    gpt_head_backward(&c, &k, P[nt - 2], P[0], tgt, 1.0f, G[0], G[nt - 2], G[nt - 1]);
    for (int l = L - 1; l >= 0; l--) {
        /* What the slot held was overwritten by the blocks since. */
        memset(gpt_block_input(&c, &k, l), 0xFF, in_bytes);
        memcpy(gpt_block_input(&c, &k, l), (char *)saved + in_bytes * (size_t)l, in_bytes);
        gpt_block_forward(&c, &k, l, P + 2 + GPT_BLOCK_TENSORS * l);
        gpt_block_backward(&c, &k, l, P + 2 + GPT_BLOCK_TENSORS * l, G + 2 + GPT_BLOCK_TENSORS * l);
    }
    gpt_embed_backward_piece(&c, &k, tok, G[0], G[1]);
    cr_assert(loss2 == loss, "loss %.17g, with checkpointing %.17g", loss, loss2);
    cr_assert_eq(memcmp(g, g2, np * 4), 0, "the gradients differ");
    gpt_acts_destroy(&k);
    free(saved);
    free(p); free(g); free(g2); free(tok); free(tgt);
}
