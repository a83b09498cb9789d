/* The CUDA backend of train_gpt (backend.h): model_cuda.c over device
 * memory, every operation enqueued on the rank's stream. The engine is
 * given the same stream (zc_engine_options.stream), so its zero-fills,
 * gathers and reductions are ordered with these kernels by events. */
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "backend.h"
#include "model_cuda.h"

static const char *err_str(int code) { return gpt_cuda_error_string(code); }

static int select_device(int index) { return (int)cudaSetDevice(index); }

static int stream_create(void **s)
{
    cudaStream_t st;
    int rc = (int)cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    *s = rc ? NULL : (void *)st;
    return rc;
}

static void stream_destroy(void *s)
{
    if (s) cudaStreamDestroy((cudaStream_t)s);
}

static bool model_create(void **out, const gpt_config *c, int B, zc_dtype dt, bool ckpt,
                         void *stream, char *err, size_t errlen)
{
    (void)dt; /* the CUDA layers' matmuls are bf16 whatever the dtype */
    gpt_cuda_model *m = calloc(1, sizeof *m);
    if (!m) return false;
    if (!gpt_cuda_model_create(m, c, B, ckpt, stream, err, errlen)) {
        free(m);
        return false;
    }
    *out = m;
    return true;
}

static void model_destroy(void *p)
{
    if (!p) return;
    gpt_cuda_model_destroy(p);
    free(p);
}

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) return NULL;
    if (cudaMemset(p, 0, bytes) != cudaSuccess) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

static float *alloc(size_t n) { return dev_alloc(n * sizeof(float)); }
static int *alloc_ints(size_t n) { return dev_alloc(n * sizeof(int)); }
static void release_mem(void *p) { cudaFree(p); }

static int upload_ints(int *dst, const int *host, size_t n, void *s)
{
    /* Pageable host memory: the copy has finished reading `host` when it
     * returns, so the caller may refill it at once. */
    return (int)cudaMemcpyAsync(dst, host, n * sizeof(int), cudaMemcpyHostToDevice,
                                (cudaStream_t)s);
}

static int zero(float *p, size_t n, void *s)
{
    return (int)cudaMemsetAsync(p, 0, n * sizeof(float), (cudaStream_t)s);
}

static int widen(float *dst, const void *src, zc_dtype dt, size_t n, void *s)
{
    return gpt_cuda_widen(dst, src, (int)dt, n, s);
}

static int narrow(void *dst, zc_dtype dt, const float *src, size_t n, void *s)
{
    return gpt_cuda_narrow(dst, (int)dt, src, n, s);
}

static float *block_input(void *m, int l) { return gpt_cuda_block_input(m, l); }

static int embed_forward(void *m, const float *wte, const float *wpe, const int *tok)
{
    return gpt_cuda_embed_forward_piece(m, wte, wpe, tok);
}

static int block_forward(void *m, int l, const float *const w[GPT_BLOCK_TENSORS])
{
    return gpt_cuda_block_forward(m, l, w);
}

static int head_forward(void *m, const float *lnfw, const float *lnfb, const float *wte,
                        const int *tgt, double *loss)
{
    return gpt_cuda_head_forward(m, lnfw, lnfb, wte, tgt, loss);
}

static int head_backward(void *m, const float *lnfw, const float *wte, const int *tgt,
                         float scale, float *dwte, float *dlnfw, float *dlnfb)
{
    return gpt_cuda_head_backward(m, lnfw, wte, tgt, scale, dwte, dlnfw, dlnfb);
}

static int block_backward(void *m, int l, const float *const w[GPT_BLOCK_TENSORS],
                          float *const g[GPT_BLOCK_TENSORS])
{
    return gpt_cuda_block_backward(m, l, w, g);
}

static int embed_backward(void *m, const int *tok, float *dwte, float *dwpe)
{
    return gpt_cuda_embed_backward_piece(m, tok, dwte, dwpe);
}

/* head_forward left the per-position losses in row_loss. */
static int loss_sum(void *p, const int *tgt, size_t rows, double *sum)
{
    gpt_cuda_model *m = p;
    float *h = malloc((rows ? rows : 1) * sizeof(float));
    if (!h) return (int)cudaErrorMemoryAllocation;
    int rc = (int)cudaMemcpyAsync(h, m->row_loss, rows * sizeof(float), cudaMemcpyDeviceToHost,
                                  (cudaStream_t)m->stream);
    if (!rc) rc = (int)cudaStreamSynchronize((cudaStream_t)m->stream);
    double s = 0.0;
    for (size_t r = 0; r < rows; r++) s += h[r];
    free(h);
    *sum = s;
    return rc;
}

static int probs_row(void *p, size_t row, float *host)
{
    gpt_cuda_model *m = p;
    const size_t V = (size_t)m->c.vocab;
    int rc = (int)cudaMemcpyAsync(host, m->a.probs + row * V, V * sizeof(float),
                                  cudaMemcpyDeviceToHost, (cudaStream_t)m->stream);
    return rc ? rc : (int)cudaStreamSynchronize((cudaStream_t)m->stream);
}

/* Dense bf16 tensor-core peaks from the vendors' datasheets, by a part of
 * the name the driver reports (the first match wins): the table of
 * bench/train/gpt_flops.py. */
static const struct {
    const char *key;
    double flops;
    const char *src;
} peaks[] = {
    {"H100 PCIe", 756e12, "H100 PCIe datasheet, dense bf16"},
    {"H100 NVL", 835e12, "H100 NVL datasheet, dense bf16"},
    {"GH200", 989.4e12, "GH200 datasheet, dense bf16"},
    {"H100", 989.4e12, "H100 SXM datasheet, dense bf16"},
    {"H200", 989.4e12, "H200 SXM datasheet, dense bf16"},
    {"A100", 312e12, "A100 datasheet, dense bf16"},
    {"L40S", 362.05e12, "L40S datasheet, dense bf16"},
};

static int peak_flops(double *flops, char *how, size_t cap)
{
    *flops = 0;
    int dev = 0;
    struct cudaDeviceProp prop;
    cudaError_t rc = cudaGetDevice(&dev);
    if (rc == cudaSuccess)
        rc = cudaGetDeviceProperties(&prop, dev);
    if (rc != cudaSuccess) {
        snprintf(how, cap, "cudaGetDeviceProperties: %s", cudaGetErrorString(rc));
        return 0;
    }
    for (size_t i = 0; i < sizeof peaks / sizeof peaks[0]; i++)
        if (strstr(prop.name, peaks[i].key)) {
            *flops = peaks[i].flops;
            snprintf(how, cap, "%s (%s)", peaks[i].src, prop.name);
            return 0;
        }
    snprintf(how, cap, "no datasheet peak known for '%s'; give --peak-flops", prop.name);
    return 0;
}

const gpt_backend gpt_backend_cuda = {
    .name = "cuda", .device = ZC_DEVICE_CUDA, .error_str = err_str,
    .select_device = select_device, .stream_create = stream_create, .stream_destroy = stream_destroy,
    .model_create = model_create, .model_destroy = model_destroy, .alloc = alloc,
    .alloc_ints = alloc_ints, .free = release_mem, .upload_ints = upload_ints, .zero = zero,
    .widen = widen, .narrow = narrow, .block_input = block_input, .embed_forward = embed_forward,
    .block_forward = block_forward, .head_forward = head_forward,
    .head_backward = head_backward, .block_backward = block_backward,
    .embed_backward = embed_backward, .loss_sum = loss_sum, .probs_row = probs_row,
    .peak_flops = peak_flops};
