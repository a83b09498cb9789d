/* Counting CUDA devices by asking the NVIDIA driver itself (internal; CUDA
 * builds only).
 *
 * Why: counting devices is how ZC_DEVICE_AUTO, zc_comm_init_env and the
 * pinned pool decide whether there is a GPU at all, and the CUDA runtime's
 * count needs the plugin, which maps the runtime and NCCL (about 150 MiB per
 * process, abi.h). On a machine whose driver
 * sees no GPU - none installed, or all hidden by CUDA_VISIBLE_DEVICES, as for
 * a CPU job on a GPU node - the driver's own answer (cuInit, cuDeviceGetCount
 * of libcuda.so.1) says so without loading any of that. When the driver has
 * devices, or cannot answer plainly, the runtime in the plugin decides, as
 * before. */
#ifndef ZC_CUDA_PLUGIN_DRIVER_COUNT_H
#define ZC_CUDA_PLUGIN_DRIVER_COUNT_H

#include <stddef.h>

/* The number of devices the driver reports, asked once per process (the
 * answer is kept; the driver reads CUDA_VISIBLE_DEVICES once too): 0 when
 * cuInit reports CUDA_ERROR_NO_DEVICE or the count is 0, with the reason in
 * why (naming the driver's error and CUDA_VISIBLE_DEVICES when it is set);
 * the count when positive; -1 when the driver gives no plain answer (no
 * libcuda.so.1, no such entry points, another error), where the caller asks
 * the runtime. Thread-safe. */
int zc__cuda_driver_device_count(char *why, size_t cap);

#endif
