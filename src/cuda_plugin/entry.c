/* Inside libzeroc_cuda.so: the one exported function (abi.h), which checks
 * that this plugin, libzeroc and the CUDA libraries the loader found belong
 * together, then hands libzeroc the plugin's operations.
 *
 * By the time it runs, the dynamic loader has already found every library
 * this object needs (cudart, NCCL) and every symbol of them (RTLD_NOW), so
 * what is left to check is their versions: a runtime or an NCCL older than
 * the one this build needs is refused here, by name, rather than failing
 * later inside a collective. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "zc_build_config.h"

#if ZC_HAVE_NCCL
#include <nccl.h>

#include "comm/nccl.h"
#endif

#include "cuda_plugin/abi.h"
#include "cuda_plugin/host_calls.h"
#include "cuda_plugin/pinned.h"

/* The oldest NCCL the communicator works with: 2.14.3 brought the
 * non-blocking communicators (ncclConfig_t.blocking = 0) it is built on;
 * kernels/meson.build requires the same of the headers. */
#define NCCL_OLDEST 21403

/* count_reason of src/device/cuda.c, in the caller's buffer. */
static void unusable_reason(char *buf, size_t cap)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    (void)cudaGetLastError();
    snprintf(buf, cap, "%s",
             e != cudaSuccess ? cudaGetErrorString(e)
             : n > 0          ? "the CUDA runtime reports devices"
                              : "the CUDA runtime sees no device");
}

static zc_cuda_plugin_ops ops = {
    .version = ZC_CUDA_PLUGIN_VERSION,
    .shape = ZC_CUDA_PLUGIN_SHAPE_INIT,
    .device_count = zc__device_cuda_count,
    .device_open = zc__device_cuda_open,
    .unusable_reason = unusable_reason,
    .host_register = zc__cuda_plugin_host_register,
    .host_unregister = zc__cuda_plugin_host_unregister,
#if ZC_HAVE_HWLOC
    .device_cpuset = zc__cuda_plugin_device_cpuset,
#endif
#if ZC_HAVE_NCCL
    .nccl_create = zc__comm_nccl_create,
    .nccl_stall = zc__comm_nccl_stall,
    .nccl_from_env = zc__comm_nccl_from_env,
    .nccl_wrap = zc__comm_nccl_wrap,
#endif
};

/* The file a function of a loaded library lives in, for messages. */
static const char *file_of(void *sym)
{
    Dl_info info;
    return sym && dladdr(sym, &info) && info.dli_fname ? info.dli_fname : "?";
}

#define FN_ADDR(f) ((void *)(uintptr_t)(f))

__attribute__((visibility("default"))) int zc_cuda_plugin_open_v2(
    const zc_cuda_host_calls *host, const zc_cuda_plugin_ops **out, char *why, size_t cap);

static int open_locked(const zc_cuda_host_calls *host, const zc_cuda_plugin_ops **out, char *why,
                       size_t cap);

/* libzeroc calls the entry once; a test may call it again meanwhile (the
 * versions it stores are the same): serialised. */
static pthread_mutex_t entry_mu = PTHREAD_MUTEX_INITIALIZER;

int zc_cuda_plugin_open_v2(const zc_cuda_host_calls *host, const zc_cuda_plugin_ops **out,
                           char *why, size_t cap)
{
    pthread_mutex_lock(&entry_mu);
    int rc = open_locked(host, out, why, cap);
    pthread_mutex_unlock(&entry_mu);
    return rc;
}

static int open_locked(const zc_cuda_host_calls *host, const zc_cuda_plugin_ops **out, char *why,
                       size_t cap)
{
    *out = NULL;
    zc_cuda_plugin_shape mine = zc__cuda_plugin_shape();
    if (strcmp(host->version, ZC_CUDA_PLUGIN_VERSION) != 0 ||
        memcmp(&host->shape, &mine, sizeof mine) != 0) {
        snprintf(why, cap, "%s is from zeroc %s%s, this libzeroc is %s: install the two from "
                 "the same build", file_of(FN_ADDR(zc_cuda_plugin_open_v2)),
                 ZC_CUDA_PLUGIN_VERSION, strcmp(host->version, ZC_CUDA_PLUGIN_VERSION) == 0
                 ? " (another build of it)" : "", host->version);
        return -1;
    }
    zc__cuda_plugin_set_host(host);

    int rt = 0;
    cudaError_t e = cudaRuntimeGetVersion(&rt);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, cap, "cudaRuntimeGetVersion (%s): %s",
                 file_of(FN_ADDR(cudaRuntimeGetVersion)), cudaGetErrorString(e));
        return -1;
    }
    if (rt < CUDART_VERSION) {
        snprintf(why, cap, "the CUDA runtime %s is %d.%d, older than the %d.%d this zeroc was "
                 "built with: install CUDA runtime %d.%d or newer, or put its directory on "
                 "LD_LIBRARY_PATH", file_of(FN_ADDR(cudaRuntimeGetVersion)), rt / 1000,
                 rt % 1000 / 10, CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10,
                 CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
        return -1;
    }
    ops.cudart_version = rt;

#if ZC_HAVE_NCCL
    int nv = 0;
    ncclResult_t r = ncclGetVersion(&nv);
    if (r != ncclSuccess) {
        snprintf(why, cap, "ncclGetVersion (%s): %s", file_of(FN_ADDR(ncclGetVersion)),
                 ncclGetErrorString(r));
        return -1;
    }
    if (nv < NCCL_OLDEST) {
        snprintf(why, cap, "NCCL %s is %d.%d.%d; zeroc's NCCL communicator needs 2.14.3 or "
                 "newer (non-blocking communicators): install a newer NCCL 2 (libnccl2), or put "
                 "its directory on LD_LIBRARY_PATH", file_of(FN_ADDR(ncclGetVersion)),
                 nv / 10000, nv / 100 % 100, nv % 100);
        return -1;
    }
    ops.nccl_version = nv;
    ZC_LOGI("device", "CUDA plugin %s: CUDA runtime %d.%d (%s), NCCL %d.%d.%d (%s)",
            file_of(FN_ADDR(zc_cuda_plugin_open_v2)), rt / 1000, rt % 1000 / 10,
            file_of(FN_ADDR(cudaRuntimeGetVersion)), nv / 10000, nv / 100 % 100, nv % 100,
            file_of(FN_ADDR(ncclGetVersion)));
#else
    ZC_LOGI("device", "CUDA plugin %s: CUDA runtime %d.%d (%s), no NCCL in this build",
            file_of(FN_ADDR(zc_cuda_plugin_open_v2)), rt / 1000, rt % 1000 / 10,
            file_of(FN_ADDR(cudaRuntimeGetVersion)));
#endif
    *out = &ops;
    return 0;
}
