/* Loading the CUDA plugin, libzeroc_cuda.so, when the engine first needs a
 * GPU (internal; CUDA builds only - a build without CUDA has
 * src/device/nocuda.c instead). abi.h says why there is a plugin.
 *
 * load.c defines, in libzeroc, the functions of device.h, nccl.h and
 * bootstrap.h that the plugin implements (zc__device_cuda_count,
 * zc__device_cuda_open, zc__comm_nccl_create, zc__comm_nccl_stall,
 * zc__comm_nccl_from_env): each loads the plugin on first use and calls it.
 * The pinned pool's CUDA calls come through the functions below.
 *
 * Where the plugin is looked for, first found wins:
 *   1. beside the object that holds libzeroc's code - libzeroc.so itself
 *      (installed, in the build tree, in scripts/gpu_bundle.sh's lib/), or
 *      the program that linked zeroc's static archive;
 *   2. for such a program inside the build tree (tests, benches, the
 *      uninstalled zeroc CLI), the build tree's top directory, where meson
 *      builds the plugin;
 *   3. by name, through the dynamic loader's own search from here
 *      (RUNPATH - the bundle's $ORIGIN/../lib, the installed CLI's libdir -,
 *      LD_LIBRARY_PATH, the system's directories).
 * A plugin found in 1 or 2 that fails to load is the error (the next place
 * is not tried: it would hide why the right one is broken).
 *
 * Nothing is loaded unless the NVIDIA driver's library (libcuda.so.1) can be
 * loaded: the CUDA runtime needs it to see any device, so without it there
 * is no GPU to find, and counting devices costs no mapping of cudart or NCCL.
 * Nor is anything loaded to count devices when the driver itself reports
 * none (driver_count.h: no GPU, or every one hidden by CUDA_VISIBLE_DEVICES);
 * asking for a CUDA device explicitly still loads the plugin, for the
 * runtime's own reason.
 * The outcome is decided once per process (success or the reason) and kept;
 * the plugin is never unloaded. Thread-safe. */
#ifndef ZC_CUDA_PLUGIN_LOAD_H
#define ZC_CUDA_PLUGIN_LOAD_H

#include <stddef.h>

#include "cuda_plugin/abi.h"

/* The plugin's operations, loading it on the first call; NULL when the
 * driver or the plugin cannot be loaded (zc__cuda_unusable_reason says
 * why). */
const zc_cuda_plugin_ops *zc__cuda_plugin(void);

/* Why no CUDA device can be used in this process, in buf: the driver or a
 * library that cannot be loaded (naming it and how to get it), or the CUDA
 * runtime's own reason. */
void zc__cuda_unusable_reason(char *buf, size_t cap);

/* The pinned pool's calls (src/offload): cudaHostRegister of [p, p+bytes)
 * (portable), 0 or -1 with the reason in why; its undoing; and the CPUs near
 * CUDA device `device` as a hwloc cpuset (hwloc_cudart_get_device_cpuset),
 * -1 when unknown. Callers have a device (zc__device_cuda_count() > 0), so
 * the plugin is loaded. */
int zc__cuda_host_register(void *p, size_t bytes, char *why, size_t cap);
void zc__cuda_host_unregister(void *p);
int zc__cuda_device_cpuset(void *hwloc_topology, int device, void *hwloc_cpuset);

/* The message for a failed dlopen of `file` with dlerror() text err: the
 * missing library named, with what it is and how to get it when it is one
 * of CUDA's (the driver, the runtime, NCCL) or the plugin itself. */
void zc__cuda_describe_dlerror(const char *file, const char *err, char *buf, size_t cap);

/* Test hook: loads the plugin at `path` (a file, or a bare name for the
 * dynamic loader's search) as the first call would, without the driver
 * check and without keeping it as this process's plugin. 0 and *ops, or -1
 * and the message a user would get in why. */
int zc__cuda_plugin_load_path(const char *path, const zc_cuda_plugin_ops **ops, char *why,
                              size_t cap);

#endif
