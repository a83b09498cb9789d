/* The status codes of examples/gpt/layers_cuda.cu (layers_cuda.h): a cuBLAS
 * failure comes back as GPT_CUBLAS_ERROR_BASE + its cublasStatus_t and is
 * named by cuBLAS's own text, a CUDA failure as its cudaError_t named by
 * CUDA's. Needs no device: the texts come from the libraries, and creating a
 * handle without a device fails in cuBLAS. */
#include <string.h>

#include <criterion/criterion.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "layers_cuda.h"

Test(gpt_cuda_status, codes_name_their_library)
{
    /* Above every CUDA runtime error (cudaErrorUnknown is 999, the largest
     * code the runtime's enum has ever used is below 10000). */
    cr_assert_gt(GPT_CUBLAS_ERROR_BASE, 10000);
    const cublasStatus_t sts[] = {CUBLAS_STATUS_NOT_INITIALIZED, CUBLAS_STATUS_ALLOC_FAILED,
                                  CUBLAS_STATUS_INVALID_VALUE, CUBLAS_STATUS_ARCH_MISMATCH,
                                  CUBLAS_STATUS_EXECUTION_FAILED, CUBLAS_STATUS_NOT_SUPPORTED};
    for (size_t i = 0; i < sizeof sts / sizeof sts[0]; i++)
        cr_assert_str_eq(gpt_cuda_error_string(GPT_CUBLAS_ERROR_BASE + (int)sts[i]),
                         cublasGetStatusString(sts[i]), "cuBLAS status %d", (int)sts[i]);
    const cudaError_t ces[] = {cudaErrorInvalidValue, cudaErrorMemoryAllocation,
                               cudaErrorNoDevice, cudaErrorUnknown};
    for (size_t i = 0; i < sizeof ces / sizeof ces[0]; i++)
        cr_assert_str_eq(gpt_cuda_error_string((int)ces[i]), cudaGetErrorString(ces[i]),
                         "CUDA error %d", (int)ces[i]);
}

/* Without a usable device cublasCreate fails: the code must carry cuBLAS's
 * status, not a generic CUDA error, and no handle comes back. */
Test(gpt_cuda_status, handle_creation_failure_keeps_the_cublas_status)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0)
        cr_skip_test("a CUDA device is present: cublasCreate succeeds here");
    (void)cudaGetLastError();
    gpt_cublas *h = (gpt_cublas *)(void *)&n; /* must be reset */
    int rc = gpt_cublas_create(&h, NULL);
    cr_assert_geq(rc, GPT_CUBLAS_ERROR_BASE, "code %d (%s) is not a cuBLAS status", rc,
                  gpt_cuda_error_string(rc));
    cr_assert_null(h);
    const char *why = gpt_cuda_error_string(rc);
    cr_assert(why && *why && strcmp(why, cudaGetErrorString(cudaErrorUnknown)),
              "the reason is '%s'", why ? why : "(null)");
}
