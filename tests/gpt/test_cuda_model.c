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
