/* Inside libzeroc_cuda.so: where the plugin's forwarders to libzeroc
 * (host_calls.c) find the table the entry received. */
#ifndef ZC_CUDA_PLUGIN_HOST_CALLS_H
#define ZC_CUDA_PLUGIN_HOST_CALLS_H

#include "cuda_plugin/abi.h"

/* Called once by the entry, before any forwarder can run. */
void zc__cuda_plugin_set_host(const zc_cuda_host_calls *h);

#endif
