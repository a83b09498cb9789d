/* Where train_gpt's model runs: the CPU (model.c, host memory) or a CUDA
 * device (model_cuda.c, device memory). The training loop in train.c is
 * written once against this table; each entry returns 0 or a backend error
 * code that error_str names. Pointers handed to the model functions are in
 * the backend's memory (what alloc returns, or what the engine hands out
 * for the backend's zc_device_kind). */
#ifndef GPT_BACKEND_H
#define GPT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include <zeroc/zeroc.h>

#include "model.h"

typedef struct gpt_backend {
    const char *name;            /* "cpu", "cuda": the --device value */
    zc_device_kind device;       /* the engine's device for this backend */
    const char *(*error_str)(int code);
    /* Makes GPU `index` (zc_cuda_device_index) current on the calling thread,
     * before its stream and buffers are made (the CPU: nothing to do). */
    int (*select_device)(int index);
    /* A stream for the engine and the kernels (NULL on the CPU). */
    int (*stream_create)(void **stream);
    void (*stream_destroy)(void *stream);
    /* A model for B sequences that trains in dtype dt (the CPU runs its
     * matmuls in bf16 for ZC_DTYPE_BF16 where it can: matmul_cpu.h); with
     * ckpt it keeps one block's activations (model.h, gpt_acts). */
    bool (*model_create)(void **m, const gpt_config *c, int B, zc_dtype dt, bool ckpt,
                         void *stream, char *err, size_t errlen);
    void (*model_destroy)(void *m);
    /* n floats or ints of backend memory, zeroed; NULL when out of memory. */
    float *(*alloc)(size_t n);
    int *(*alloc_ints)(size_t n);
    void (*free)(void *p);
    int (*upload_ints)(int *dst, const int *host, size_t n, void *stream);
    int (*zero)(float *p, size_t n, void *stream);
    /* fp32 <-> the engine's working dtype, in backend memory. */
    int (*widen)(float *dst, const void *src, zc_dtype dt, size_t n, void *stream);
    int (*narrow)(void *dst, zc_dtype dt, const float *src, size_t n, void *stream);
    /* Block l's input (gpt_block_input_bytes(c, B) bytes of backend memory):
     * what activation checkpointing saves before the block runs and restores
     * before it is run again in backward. */
    float *(*block_input)(void *m, int l);
    /* The pieces of model.h. head_forward's loss is the mean over B x T. */
    int (*embed_forward)(void *m, const float *wte, const float *wpe, const int *tok);
    int (*block_forward)(void *m, int l, const float *const w[GPT_BLOCK_TENSORS]);
    int (*head_forward)(void *m, const float *lnfw, const float *lnfb, const float *wte,
                        const int *tgt, double *loss);
    int (*head_backward)(void *m, const float *lnfw, const float *wte, const int *tgt,
                         float loss_scale, float *dwte, float *dlnfw, float *dlnfb);
    int (*block_backward)(void *m, int l, const float *const w[GPT_BLOCK_TENSORS],
                          float *const g[GPT_BLOCK_TENSORS]);
    int (*embed_backward)(void *m, const int *tok, float *dwte, float *dwpe);
    /* After head_forward: the sum of -log p[target] over the first `rows`
     * positions (tgt_host: the targets, on the host). */
    int (*loss_sum)(void *m, const int *tgt_host, size_t rows, double *sum);
    /* After head_forward: copies the probabilities of position `row` (vocab
     * floats) to the host. */
    int (*probs_row)(void *m, size_t row, float *host);
    /* The device's peak FLOP/s for MFU, the whole device (the CPU: the cores
     * this process may run on, zc_host_peak_flops; a GPU: its datasheet's
     * dense bf16 peak by name), and where it comes from in how; 0 with the
     * reason in how when unknown. */
    int (*peak_flops)(double *flops, char *how, size_t cap);
} gpt_backend;

extern const gpt_backend gpt_backend_cpu;
/* Defined in libgpt_cuda.so (backend_cuda.c), which train_gpt loads for
 * --device cuda (cuda_module.h), and linked directly by the CUDA tests. */
extern const gpt_backend gpt_backend_cuda;

#endif
