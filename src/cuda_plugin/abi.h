/* The contract between libzeroc and its CUDA plugin, libzeroc_cuda.so
 * (internal).
 *
 * Why a plugin: a program that links the CUDA runtime and NCCL maps them at
 * start-up, used or not - about 150 MiB of resident memory per process for a
 * CPU run (train_gpt's demo peaked at 191 MiB against 39 MiB without them,
 * bench/RESULTS.md, "CUDA on demand"). So the CUDA device backend
 * (src/device/cuda.c), the kernels (kernels/), the NCCL communicator
 * (src/comm/nccl.c) and the few CUDA calls of the pinned pool live in
 * libzeroc_cuda.so, linked normally against cudart and NCCL, and libzeroc
 * loads it (src/cuda_plugin/load.c) the first time the engine needs a GPU:
 * a CUDA device opened, devices counted for ZC_DEVICE_AUTO or
 * zc_comm_init_env where the driver reports any, an NCCL communicator made.
 * A CPU run never loads it.
 *
 * Why a plugin rather than dlsym'ing the CUDA runtime: nvcc-compiled kernels
 * register their fat binaries with the runtime from static constructors of
 * the object that holds them, so the kernels must sit in an object linked
 * against cudart; a table of runtime symbols cannot carry them.
 *
 * The two directions are two tables, handed over once by the plugin's one
 * exported function (ZC_CUDA_PLUGIN_ENTRY):
 *   - zc_cuda_host_calls: what the plugin's code needs of libzeroc (errors,
 *     logging, the counting allocator, the environment, the bootstrap's
 *     rendezvous). The plugin's src/cuda_plugin/host_calls.c defines the
 *     internal functions cuda.c and nccl.c call under their usual names and
 *     forwards them here, so those files compile unchanged on either side,
 *     and the thread's last error, the log level and the memory counters stay
 *     libzeroc's one copy.
 *   - zc_cuda_plugin_ops: what libzeroc asks of the plugin. The device and the
 *     communicator it returns carry their own ops tables pointing straight
 *     into the plugin, so the GPU path after loading costs exactly what it
 *     did when everything was one library: no lookup per call.
 *
 * The handshake: the entry's name carries ZC_CUDA_PLUGIN_ABI (a plugin of
 * another ABI has no such symbol), and each side checks the other's zeroc
 * version and the sizes of the structs they share (the tables themselves,
 * zc_device_ops, zc_comm_ops, ...; zc_cuda_plugin_shape), so a stale plugin
 * beside a newer libzeroc is refused with a message instead of misread. */
#ifndef ZC_CUDA_PLUGIN_ABI_H
#define ZC_CUDA_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "zc_build_config.h"

#include "base/alloc.h"
#include "base/env.h"
#include "base/log.h"
#include "comm/bootstrap.h"
#include "comm/comm.h"
#include "comm/rendezvous.h"
#include "device/device.h"

/* Bumped whenever a table below changes. */
#define ZC_CUDA_PLUGIN_ABI 2
#define ZC_CUDA_PLUGIN_ENTRY "zc_cuda_plugin_open_v2"
/* The plugin's file name, beside libzeroc (meson.build installs it there). */
#define ZC_CUDA_PLUGIN_FILE "libzeroc_cuda.so"

/* The library version both sides were built as ("0.1.0"). */
#define ZC_CUDA_PLUGIN_STR_(x) #x
#define ZC_CUDA_PLUGIN_STR(x) ZC_CUDA_PLUGIN_STR_(x)
#define ZC_CUDA_PLUGIN_VERSION                                                         \
    ZC_CUDA_PLUGIN_STR(ZEROC_VERSION_MAJOR) "." ZC_CUDA_PLUGIN_STR(ZEROC_VERSION_MINOR) "." \
    ZC_CUDA_PLUGIN_STR(ZEROC_VERSION_PATCH)

/* The sizes of the structs the two sides pass to each other, as each side
 * was compiled: equal, or the plugin is from another build. */
typedef struct zc_cuda_plugin_shape {
    size_t device_ops, comm_ops, device, comm, launch_env, mem_account, adam_shard,
        adam_coeffs, host_calls, plugin_ops;
} zc_cuda_plugin_shape;

typedef struct zc_cuda_host_calls {
    const char *version;       /* ZC_CUDA_PLUGIN_VERSION of libzeroc */
    zc_cuda_plugin_shape shape; /* zc__cuda_plugin_shape() as libzeroc sees it */

    /* Errors and logs: the plugin formats, libzeroc records (with "%s"). */
    __typeof__(&zc__error) error;
    __typeof__(&zc__error_context) error_context;
    __typeof__(&zc_last_error) last_error;
    __typeof__(&zc__log_enabled) log_enabled;
    __typeof__(&zc__log) log;

    /* The counting allocator and its fault injection. */
    __typeof__(&zc__host_alloc) host_alloc;
    __typeof__(&zc__host_free) host_free;
    __typeof__(&zc__mem_count) mem_count;
    __typeof__(&zc__mem_should_fail) mem_should_fail;

    /* Public helpers the plugin's code calls. */
    __typeof__(&zc_dtype_name) dtype_name;
    __typeof__(&zc_dtype_size) dtype_size;

    /* The environment and the choices made from it (one reader for both). */
    __typeof__(&zc__env) env;
    __typeof__(&zc__env_shown) env_shown;
    __typeof__(&zc__device_pick_from_env) device_pick_from_env;
    __typeof__(&zc__device_host) device_host;
    __typeof__(&zc__comm_timeout_env) comm_timeout_env;
    __typeof__(&zc__bootstrap_mode) bootstrap_mode;
    __typeof__(&zc__bootstrap_timeout) bootstrap_timeout;

    /* How the NCCL unique id reaches the other ranks. */
    __typeof__(&zc__rendezvous) rendezvous;
    /* NULL in a build without MPI. */
    zc_status (*mpi_bcast_blob)(const zc_launch_env *env, void *blob, size_t len,
                                double timeout_s);
} zc_cuda_host_calls;

typedef struct zc_cuda_plugin_ops {
    const char *version;       /* ZC_CUDA_PLUGIN_VERSION of the plugin */
    zc_cuda_plugin_shape shape; /* zc__cuda_plugin_shape() as the plugin sees it */
    int cudart_version;        /* cudaRuntimeGetVersion at load (13000 = 13.0) */
    int nccl_version;          /* ncclGetVersion at load; 0 without NCCL */

    /* src/device/device.h: zc__device_cuda_count, zc__device_cuda_open. */
    int (*device_count)(void);
    zc_status (*device_open)(int index, zc_device **out);
    /* Why device_count is 0 (the runtime's words), for messages. */
    void (*unusable_reason)(char *buf, size_t cap);

    /* Pinned host memory (src/offload/pinned_pool.c): cudaHostRegister with
     * cudaHostRegisterPortable, or its error's text in why. */
    int (*host_register)(void *p, size_t bytes, char *why, size_t cap);
    void (*host_unregister)(void *p);
    /* hwloc_cudart_get_device_cpuset (src/offload/numa.c): 0 and the CPUs
     * near GPU `device` in the hwloc cpuset, -1 when unknown. NULL in a
     * build without hwloc. */
    int (*device_cpuset)(void *hwloc_topology, int device, void *hwloc_cpuset);

    /* src/comm/nccl.h and bootstrap.h; NULL in a build without NCCL. */
    zc_status (*nccl_create)(int rank, int world, int device, const void *unique_id,
                             double init_timeout_s, zc_comm **out);
    zc_status (*nccl_stall)(zc_comm *c, unsigned ms);
    zc_status (*nccl_from_env)(const zc_launch_env *env, zc_comm **out);
    /* zc_comm_from_nccl (nccl.h: zc__comm_nccl_wrap). */
    zc_status (*nccl_wrap)(void *nc, int rank, int world, void *stream, int world_rank,
                           int node_ranks, zc_comm **out);
} zc_cuda_plugin_ops;

/* The shape as this side is compiled (a constant initializer, so the tables
 * can be static const). */
#define ZC_CUDA_PLUGIN_SHAPE_INIT                                                          \
    {                                                                                      \
        .device_ops = sizeof(zc_device_ops), .comm_ops = sizeof(zc_comm_ops),              \
        .device = sizeof(zc_device), .comm = sizeof(zc_comm),                              \
        .launch_env = sizeof(zc_launch_env), .mem_account = sizeof(zc_mem_account),        \
        .adam_shard = sizeof(zc_adam_shard), .adam_coeffs = sizeof(zc_adam_coeffs),        \
        .host_calls = sizeof(zc_cuda_host_calls), .plugin_ops = sizeof(zc_cuda_plugin_ops), \
    }

static inline zc_cuda_plugin_shape zc__cuda_plugin_shape(void)
{
    return (zc_cuda_plugin_shape)ZC_CUDA_PLUGIN_SHAPE_INIT;
}

/* The plugin's one exported function, ZC_CUDA_PLUGIN_ENTRY. Checks host's
 * version and shape and the CUDA libraries it was loaded with (the runtime
 * and NCCL no older than the build requires), then sets *ops (static, valid
 * until the process ends; the plugin is never unloaded). Returns 0, or -1
 * with the reason in why. Called once, before any other plugin code. */
typedef int (*zc_cuda_plugin_entry_fn)(const zc_cuda_host_calls *host,
                                       const zc_cuda_plugin_ops **ops, char *why, size_t cap);

#endif
