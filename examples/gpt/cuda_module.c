/* Inside libgpt_cuda.so: the entry (cuda_module.h) and the functions of
 * model.h the CUDA model calls, forwarded to train_gpt's own. */
#include <stdio.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "cuda_module.h"

/* Set once by the entry, before the backend can be used. */
static const gpt_cuda_host *host;

bool gpt_acts_create(gpt_acts *a, const gpt_config *c, int B, bool ckpt, char *err,
                     size_t errlen)
{
    return host->acts_create(a, c, B, ckpt, err, errlen);
}

void gpt_acts_destroy(gpt_acts *a) { host->acts_destroy(a); }

int gpt_num_tensors(const gpt_config *c) { return host->num_tensors(c); }

void gpt_tensor_info(const gpt_config *c, int i, char name[64], int64_t shape[2], int *ndim,
                     size_t *numel, int *piece)
{
    host->tensor_info(c, i, name, shape, ndim, numel, piece);
}

__attribute__((visibility("default"))) int gpt_cuda_module_open_v1(
    const gpt_cuda_host *h, const gpt_backend **backend, char *err, size_t errlen);

int gpt_cuda_module_open_v1(const gpt_cuda_host *h, const gpt_backend **backend, char *err,
                            size_t errlen)
{
    *backend = NULL;
    if (h->backend_size != sizeof(gpt_backend) || h->config_size != sizeof(gpt_config) ||
        h->acts_size != sizeof(gpt_acts)) {
        snprintf(err, errlen, "%s is from another build of train_gpt: rebuild the two together",
                 GPT_CUDA_MODULE_FILE);
        return -1;
    }
    int rt = 0;
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess || rt < CUDART_VERSION) {
        (void)cudaGetLastError();
        snprintf(err, errlen, "the CUDA runtime is %d.%d, older than the %d.%d %s was built "
                 "with: install CUDA runtime %d.%d or newer", rt / 1000, rt % 1000 / 10,
                 CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, GPT_CUDA_MODULE_FILE,
                 CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
        return -1;
    }
    int maj = 0, min = 0, pat = 0;
    if (cublasGetProperty(MAJOR_VERSION, &maj) != CUBLAS_STATUS_SUCCESS ||
        cublasGetProperty(MINOR_VERSION, &min) != CUBLAS_STATUS_SUCCESS ||
        cublasGetProperty(PATCH_LEVEL, &pat) != CUBLAS_STATUS_SUCCESS ||
        maj * 10000 + min * 100 + pat < CUBLAS_VERSION) {
        snprintf(err, errlen, "cuBLAS is %d.%d.%d, older than the %d.%d.%d %s was built with: "
                 "install cuBLAS (libcublas) %d.%d.%d or newer", maj, min, pat,
                 CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH, GPT_CUDA_MODULE_FILE,
                 CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH);
        return -1;
    }
    host = h;
    *backend = &gpt_backend_cuda;
    return 0;
}
