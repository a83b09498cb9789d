/* The whole GPT on a CUDA device (examples/gpt/model_cuda.c) against the CPU
 * model on a small shape: the loss within 1e-2 relative and every tensor's
 * gradient within 5e-2 of that tensor's largest CPU gradient. The bounds
 * come from the device matmuls' bf16 inputs (8 significant bits, a relative
 * error near 4e-3 per operand, compounded over two blocks and the head);
 * a wrong index or a missing term gives errors of the order of the
 * gradient itself. Skips when no CUDA device is present. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <cuda_runtime_api.h>

#include "model.h"
#include "model_cuda.h"
#include "require_gpu.h"

Test(gpt_cuda, whole_model_matches_cpu)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0)
        gpu_unavailable("no CUDA device");
    gpt_config c = {.vocab = 256, .seq = 16, .layers = 2, .heads = 4, .dim = 32};
    const int B = 3, N = B * c.seq, nt = gpt_num_tensors(&c);
    const size_t np = gpt_num_params(&c);
    float *p = malloc(np * 4), *g = malloc(np * 4), *gd = malloc(np * 4);
    int *tok = malloc(sizeof(int) * N), *tgt = malloc(sizeof(int) * N);
    size_t off = 0;
    for (int i = 0; i < nt; i++) {
        char name[64];
        int64_t shape[2];
        int ndim, piece;
        size_t n;
        gpt_tensor_info(&c, i, name, shape, &ndim, &n, &piece);
        /* GPT-2's initialisation, with the biases and gains perturbed so
         * that their gradients are not trivially shared */
        gpt_init_tensor(&c, i, 7, p + off);
        if (ndim == 1)
            for (size_t k = 0; k < n; k++) p[off + k] += 0.1f * (float)sin(1.0 + (double)(off + k));
        off += n;
    }
    for (int i = 0; i < N; i++) {
        tok[i] = (i * 37 + 11) % c.vocab;
        tgt[i] = (i * 53 + 5) % c.vocab;
    }
    char err[256];
    gpt_acts a;
    cr_assert(gpt_acts_create(&a, &c, B, false, err, sizeof err), "%s", err);
    double loss = gpt_forward_backward(&c, &a, p, g, tok, tgt);
    gpt_acts_destroy(&a);

    gpt_cuda_model m;
    cr_assert(gpt_cuda_model_create(&m, &c, B, false, NULL, err, sizeof err), "%s", err);
    float *Dp, *Dg;
    int *Dtok, *Dtgt;
    cr_assert_eq(cudaMalloc((void **)&Dp, np * 4), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&Dg, np * 4), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&Dtok, sizeof(int) * N), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&Dtgt, sizeof(int) * N), cudaSuccess);
    cudaMemcpy(Dp, p, np * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(Dtok, tok, sizeof(int) * N, cudaMemcpyHostToDevice);
    cudaMemcpy(Dtgt, tgt, sizeof(int) * N, cudaMemcpyHostToDevice);
    double dloss = 0;
    cr_assert_eq(gpt_cuda_forward_backward(&m, Dp, Dg, Dtok, Dtgt, &dloss), 0);
    cr_assert_eq(cudaMemcpy(gd, Dg, np * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    cr_assert_leq(fabs(dloss - loss), 1e-2 * loss, "loss: CUDA %.8g, CPU %.8g", dloss, loss);
    off = 0;
    for (int i = 0; i < nt; i++) {
        char name[64];
        int64_t shape[2];
        int ndim, piece;
        size_t n;
        gpt_tensor_info(&c, i, name, shape, &ndim, &n, &piece);
        double mx = 0;
        for (size_t k = 0; k < n; k++) mx = fmax(mx, fabs(g[off + k]));
        for (size_t k = 0; k < n; k++)
            cr_assert_leq(fabs(gd[off + k] - g[off + k]), 5e-2 * mx + 1e-7,
                          "%s[%zu]: CUDA %.8g, CPU %.8g (largest %.3g)", name, k, gd[off + k],
                          g[off + k], mx);
        off += n;
    }
    cudaFree(Dp); cudaFree(Dg); cudaFree(Dtok); cudaFree(Dtgt);
    gpt_cuda_model_destroy(&m);
    free(p); free(g); free(gd); free(tok); free(tgt);
}

/* Activation checkpointing on the device (model_cuda.c with ckpt): block
 * inputs kept aside, each block run again from its input before its
 * backward, give the loss and every gradient bitwise equal to the model
 * that keeps every block (the kernels and cuBLAS calls are the same, in the
 * same order, on the same values). The device twin of test_model_ckpt.c. */
Test(gpt_cuda, checkpointed_is_bitwise)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0)
        gpu_unavailable("no CUDA device");
    gpt_config c = {.vocab = 256, .seq = 16, .layers = 3, .heads = 2, .dim = 32};
    const int B = 2, N = B * c.seq, nt = gpt_num_tensors(&c), L = c.layers;
    const size_t np = gpt_num_params(&c), in_bytes = gpt_block_input_bytes(&c, B);
    float *p = malloc(np * 4), *g = malloc(np * 4), *g2 = malloc(np * 4);
    int *tok = malloc(sizeof(int) * N), *tgt = malloc(sizeof(int) * N);
    size_t off = 0;
    for (int i = 0; i < nt; i++) {
        char name[64];
        int64_t shape[2];
        int ndim, piece;
        size_t n;
        gpt_tensor_info(&c, i, name, shape, &ndim, &n, &piece);
        gpt_init_tensor(&c, i, 5, p + off);
        off += n;
    }
    for (int i = 0; i < N; i++) {
        tok[i] = (i * 31 + 1) % c.vocab;
        tgt[i] = (i * 17 + 9) % c.vocab;
    }
    char err[256];
    float *Dp, *Dg, *Dsaved;
    int *Dtok, *Dtgt;
    cr_assert_eq(cudaMalloc((void **)&Dp, np * 4), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&Dg, np * 4), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&Dsaved, in_bytes * (size_t)L), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&Dtok, sizeof(int) * N), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&Dtgt, sizeof(int) * N), cudaSuccess);
    cudaMemcpy(Dp, p, np * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(Dtok, tok, sizeof(int) * N, cudaMemcpyHostToDevice);
    cudaMemcpy(Dtgt, tgt, sizeof(int) * N, cudaMemcpyHostToDevice);

    gpt_cuda_model m;
    cr_assert(gpt_cuda_model_create(&m, &c, B, false, NULL, err, sizeof err), "%s", err);
    double loss = 0, loss2 = 0;
    cr_assert_eq(gpt_cuda_forward_backward(&m, Dp, Dg, Dtok, Dtgt, &loss), 0);
    cr_assert_eq(cudaMemcpy(g, Dg, np * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    gpt_cuda_model_destroy(&m);

    cr_assert(gpt_cuda_model_create(&m, &c, B, true, NULL, err, sizeof err), "%s", err);
    const float *P[64];
    float *G[64];
    off = 0;
    for (int i = 0; i < nt; i++) {
        char name[64];
        int64_t shape[2];
        int ndim, piece;
        size_t n;
        gpt_tensor_info(&c, i, name, shape, &ndim, &n, &piece);
        P[i] = Dp + off;
        G[i] = Dg + off;
        off += n;
    }
    cr_assert_eq(cudaMemset(Dg, 0, np * 4), cudaSuccess);
    cr_assert_eq(gpt_cuda_embed_forward_piece(&m, P[0], P[1], Dtok), 0);
    for (int l = 0; l < L; l++) {
        cr_assert_eq(cudaMemcpy((char *)Dsaved + in_bytes * (size_t)l, gpt_cuda_block_input(&m, l),
                                in_bytes, cudaMemcpyDeviceToDevice), cudaSuccess);
        cr_assert_eq(gpt_cuda_block_forward(&m, l, P + 2 + GPT_BLOCK_TENSORS * l), 0);
    }
    cr_assert_eq(gpt_cuda_head_forward(&m, P[nt - 2], P[nt - 1], P[0], Dtgt, &loss2), 0);
    cr_assert_eq(gpt_cuda_head_backward(&m, P[nt - 2], P[0], Dtgt, 1.0f, G[0], G[nt - 2],
                                        G[nt - 1]), 0);
    for (int l = L - 1; l >= 0; l--) {
        cr_assert_eq(cudaMemset(gpt_cuda_block_input(&m, l), 0xFF, in_bytes), cudaSuccess);
        cr_assert_eq(cudaMemcpy(gpt_cuda_block_input(&m, l), (char *)Dsaved + in_bytes * (size_t)l,
                                in_bytes, cudaMemcpyDeviceToDevice), cudaSuccess);
        cr_assert_eq(gpt_cuda_block_forward(&m, l, P + 2 + GPT_BLOCK_TENSORS * l), 0);
        cr_assert_eq(gpt_cuda_block_backward(&m, l, P + 2 + GPT_BLOCK_TENSORS * l,
                                             G + 2 + GPT_BLOCK_TENSORS * l), 0);
    }
    cr_assert_eq(gpt_cuda_embed_backward_piece(&m, Dtok, G[0], G[1]), 0);
    cr_assert_eq(cudaMemcpy(g2, Dg, np * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    cr_assert(loss2 == loss, "loss %.17g, with checkpointing %.17g", loss, loss2);
    cr_assert_eq(memcmp(g, g2, np * 4), 0, "the gradients differ");
    gpt_cuda_model_destroy(&m);
    cudaFree(Dp); cudaFree(Dg); cudaFree(Dsaved); cudaFree(Dtok); cudaFree(Dtgt);
    free(p); free(g); free(g2); free(tok); free(tgt);
}
