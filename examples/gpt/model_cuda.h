/* The GPT of model.h on a CUDA device: the same pieces, in the same order,
 * over device buffers, with the layers of layers_cuda.h (cuBLAS bf16 matmuls
 * with fp32 accumulation, the attention's included; fp32 everything else). Every pointer given to
 * these functions is device memory; work is enqueued on the stream given at
 * create. tests/gpt/test_cuda_model.c holds the whole model's loss and
 * gradients to the CPU model. */
#ifndef GPT_MODEL_CUDA_H
#define GPT_MODEL_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "layers_cuda.h"
#include "model.h"

typedef struct gpt_cuda_model {
    gpt_config c;
    gpt_acts a;        /* the fields of model.h, allocated on the device */
    float *row_loss;   /* [B * T] */
    void *scratch;     /* the layers' working memory (layers_cuda.h), one buffer */
    size_t scratch_bytes; /* its size: the largest layer's need */
    gpt_cublas *blas;
    void *stream;
} gpt_cuda_model;

/* Allocates activations for B sequences on the current device (ckpt: one
 * block's, as model.h's gpt_acts). Returns false with err (the CUDA error or
 * the size that does not fit). */
bool gpt_cuda_model_create(gpt_cuda_model *m, const gpt_config *c, int B, bool ckpt,
                           void *stream, char *err, size_t errlen);
/* Block l's input on the device (model.h's gpt_block_input). */
float *gpt_cuda_block_input(gpt_cuda_model *m, int l);
void gpt_cuda_model_destroy(gpt_cuda_model *m);

/* Each returns 0 or the first status code (layers_cuda.h) as an int. */
int gpt_cuda_embed_forward_piece(gpt_cuda_model *m, const float *wte, const float *wpe,
                                 const int *tok);
int gpt_cuda_block_forward(gpt_cuda_model *m, int l, const float *const w[GPT_BLOCK_TENSORS]);
/* Mean loss into *loss (waits for the stream). */
int gpt_cuda_head_forward(gpt_cuda_model *m, const float *lnfw, const float *lnfb,
                          const float *wte, const int *tgt, double *loss);
int gpt_cuda_head_backward(gpt_cuda_model *m, const float *lnfw, const float *wte,
                           const int *tgt, float loss_scale, float *dwte, float *dlnfw,
                           float *dlnfb);
int gpt_cuda_block_backward(gpt_cuda_model *m, int l, const float *const w[GPT_BLOCK_TENSORS],
                            float *const g[GPT_BLOCK_TENSORS]);
int gpt_cuda_embed_backward_piece(gpt_cuda_model *m, const int *tok, float *dwte, float *dwpe);

/* Whole model over flat device buffers in registration order (grads are
 * overwritten; NULL: forward only), as gpt_forward_backward. */
int gpt_cuda_forward_backward(gpt_cuda_model *m, const float *params, float *grads,
                              const int *tok, const int *tgt, double *loss);

#endif
