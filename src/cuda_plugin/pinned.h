/* Inside libzeroc_cuda.so: the pinned pool's CUDA calls (pinned.c), as the
 * entry puts them in the plugin's ops (abi.h). */
#ifndef ZC_CUDA_PLUGIN_PINNED_H
#define ZC_CUDA_PLUGIN_PINNED_H

#include <stddef.h>

#include "zc_build_config.h"

/* cudaHostRegister(p, bytes, cudaHostRegisterPortable): 0, or -1 with the
 * runtime's words in why. */
int zc__cuda_plugin_host_register(void *p, size_t bytes, char *why, size_t cap);
void zc__cuda_plugin_host_unregister(void *p);
#if ZC_HAVE_HWLOC
/* hwloc_cudart_get_device_cpuset on a hwloc_topology_t and hwloc_cpuset_t. */
int zc__cuda_plugin_device_cpuset(void *topology, int device, void *cpuset);
#endif

#endif
