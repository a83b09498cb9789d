/* Inside libzeroc_cuda.so: the CUDA calls of the pinned host pool and of its
 * NUMA placement (src/offload/pinned_pool.c, numa.c), which run in libzeroc
 * and reach these through the plugin's ops (abi.h). */
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "cuda_plugin/pinned.h"

#if ZC_HAVE_HWLOC
#include <hwloc.h>
#include <hwloc/cudart.h>
#endif

int zc__cuda_plugin_host_register(void *p, size_t bytes, char *why, size_t cap)
{
    cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
    if (e == cudaSuccess)
        return 0;
    (void)cudaGetLastError(); /* not sticky: the next call starts clean */
    snprintf(why, cap, "%s", cudaGetErrorString(e));
    return -1;
}

void zc__cuda_plugin_host_unregister(void *p) { (void)cudaHostUnregister(p); }

#if ZC_HAVE_HWLOC
int zc__cuda_plugin_device_cpuset(void *topology, int device, void *cpuset)
{
    return hwloc_cudart_get_device_cpuset((hwloc_topology_t)topology, device,
                                          (hwloc_cpuset_t)cpuset);
}
#endif
