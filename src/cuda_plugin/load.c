/* Loading libzeroc_cuda.so on first need (load.h; why a plugin: abi.h). */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zc_build_config.h"

#include "comm/mpi.h"
#include "comm/nccl.h"
#include "cuda_plugin/driver_count.h"
#include "cuda_plugin/load.h"

/* What libzeroc lends the plugin (abi.h). */
static const zc_cuda_host_calls host_calls = {
    .version = ZC_CUDA_PLUGIN_VERSION,
    .shape = ZC_CUDA_PLUGIN_SHAPE_INIT,
    .error = zc__error,
    .error_context = zc__error_context,
    .last_error = zc_last_error,
    .log_enabled = zc__log_enabled,
    .log = zc__log,
    .host_alloc = zc__host_alloc,
    .host_free = zc__host_free,
    .mem_count = zc__mem_count,
    .mem_should_fail = zc__mem_should_fail,
    .dtype_name = zc_dtype_name,
    .dtype_size = zc_dtype_size,
    .env = zc__env,
    .env_shown = zc__env_shown,
    .device_pick_from_env = zc__device_pick_from_env,
    .device_host = zc__device_host,
    .comm_timeout_env = zc__comm_timeout_env,
    .bootstrap_mode = zc__bootstrap_mode,
    .bootstrap_timeout = zc__bootstrap_timeout,
    .rendezvous = zc__rendezvous,
#if ZC_HAVE_MPI
    .mpi_bcast_blob = zc__mpi_bcast_blob,
#endif
};

/* The libraries a plugin load can miss, and where a user gets each. */
static const struct {
    const char *prefix, *what;
} known_libs[] = {
    {"libcuda.so", "the NVIDIA driver's library: install the driver of this machine's GPU "
                   "(without one there is no CUDA device to use)"},
    {"libcudart.so", "the CUDA runtime: install the runtime of the CUDA version zeroc was "
                     "built with (NVIDIA's cuda-cudart package, or the toolkit under "
                     "/usr/local/cuda) and put its lib directory on LD_LIBRARY_PATH or in "
                     "/etc/ld.so.conf.d"},
    {"libnccl.so", "NCCL 2, which zeroc's CUDA backend links for its NCCL communicator: "
                   "install libnccl2 (NVIDIA's CUDA repository) and put its directory on "
                   "LD_LIBRARY_PATH unless it is a system one"},
    {ZC_CUDA_PLUGIN_FILE, "zeroc's CUDA backend, built with libzeroc when CUDA is found: "
                          "install it beside libzeroc (meson install does), or reconfigure "
                          "with -Dcuda=enabled"},
};

void zc__cuda_describe_dlerror(const char *file, const char *err, char *buf, size_t cap)
{
    if (!err)
        err = "unknown error";
    /* glibc: "NAME: cannot open shared object file: No such file or
     * directory", NAME being the library that is missing - the plugin
     * itself, or one it needs. */
    static const char missing[] = ": cannot open shared object file";
    const char *cut = strstr(err, missing);
    if (cut) {
        const char *name = err;
        const char *slash = memrchr(err, '/', (size_t)(cut - err));
        if (slash)
            name = slash + 1;
        size_t len = (size_t)(cut - name);
        for (size_t i = 0; i < sizeof known_libs / sizeof known_libs[0]; i++) {
            if (strncmp(name, known_libs[i].prefix, strlen(known_libs[i].prefix)) == 0) {
                snprintf(buf, cap, "%.*s cannot be found (%s); it is %s", (int)len, name, err,
                         known_libs[i].what);
                return;
            }
        }
        snprintf(buf, cap, "%s needs %.*s, which the dynamic loader cannot find (%s): install "
                 "it, or put its directory on LD_LIBRARY_PATH", file, (int)len, name, err);
        return;
    }
    if (strstr(err, "undefined symbol"))
        snprintf(buf, cap, "%s cannot be loaded (%s): a CUDA library the loader found is older "
                 "than the one zeroc was built with; install a newer one, or put the right "
                 "one's directory first on LD_LIBRARY_PATH", file, err);
    else
        snprintf(buf, cap, "%s cannot be loaded: %s", file, err);
}

/* The directory of the object that holds this code: libzeroc.so, or the
 * program that linked the static archive. */
static bool own_dir(char *dir, size_t cap)
{
    Dl_info info;
    struct link_map *lm = NULL;
    if (!dladdr1((void *)(uintptr_t)own_dir, &info, (void **)&lm, RTLD_DL_LINKMAP))
        return false;
    char exe[PATH_MAX];
    const char *path = lm && lm->l_name && lm->l_name[0] ? lm->l_name : NULL;
    if (!path) {
        /* The main program's link map has no name. */
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0)
            return false;
        exe[n] = '\0';
        path = exe;
    }
    const char *slash = strrchr(path, '/');
    if (!slash)
        return false;
    int n = snprintf(dir, cap, "%.*s", (int)(slash - path), path);
    return n >= 0 && (size_t)n < cap;
}

/* Whether dir lies inside the build tree this code was built in. */
static bool in_build_tree(const char *dir)
{
    char real_dir[PATH_MAX], real_root[PATH_MAX];
    if (!realpath(dir, real_dir) || !realpath(ZC_CUDA_PLUGIN_BUILD_DIR, real_root))
        return false;
    size_t n = strlen(real_root);
    return strncmp(real_dir, real_root, n) == 0 && (real_dir[n] == '\0' || real_dir[n] == '/');
}

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int zc__cuda_plugin_load_path(const char *path, const zc_cuda_plugin_ops **ops, char *why,
                              size_t cap)
{
    *ops = NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        zc__cuda_describe_dlerror(path, dlerror(), why, cap);
        return -1;
    }
    void *sym = dlsym(h, ZC_CUDA_PLUGIN_ENTRY);
    if (!sym) {
        /* Kept loaded: its libraries' static state may be in use. */
        snprintf(why, cap, "%s has no %s: it is from another version of zeroc; install the "
                 "libzeroc_cuda.so of this libzeroc's build beside it", path,
                 ZC_CUDA_PLUGIN_ENTRY);
        return -1;
    }
    zc_cuda_plugin_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry); /* object to function pointer, as dlsym's users do */
    char detail[768];
    if (entry(&host_calls, ops, detail, sizeof detail) != 0) {
        snprintf(why, cap, "%s", detail);
        *ops = NULL;
        return -1;
    }
    return 0;
}

/* ---- the process's one plugin ------------------------------------------- */

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const zc_cuda_plugin_ops *loaded;
static char failure[1024]; /* why `loaded` is NULL */

static void load_once(void)
{
    /* The runtime's own first step: no driver library, no device. */
    if (!dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
        zc__cuda_describe_dlerror("libcuda.so.1", dlerror(), failure, sizeof failure);
        ZC_LOGD("device", "CUDA not loaded: %s", failure);
        return;
    }
    /* 1 and 2 of load.h; 3, the loader's search, when neither has it. */
    char own[PATH_MAX] = "", path[PATH_MAX + sizeof ZC_CUDA_PLUGIN_FILE + 1];
    const char *where[2];
    int nwhere = 0;
    if (own_dir(own, sizeof own)) {
        where[nwhere++] = own;
        if (in_build_tree(own))
            where[nwhere++] = ZC_CUDA_PLUGIN_BUILD_DIR;
    }
    bool by_name = true;
    for (int i = 0; i < nwhere && by_name; i++) {
        snprintf(path, sizeof path, "%s/%s", where[i], ZC_CUDA_PLUGIN_FILE);
        by_name = !is_file(path);
    }
    if (by_name)
        snprintf(path, sizeof path, "%s", ZC_CUDA_PLUGIN_FILE);
    const zc_cuda_plugin_ops *ops = NULL;
    char why[sizeof failure - 128];
    if (zc__cuda_plugin_load_path(path, &ops, why, sizeof why) == 0) {
        loaded = ops;
        return;
    }
    static const char not_found[] = ZC_CUDA_PLUGIN_FILE " cannot be found";
    if (by_name && strncmp(why, not_found, sizeof not_found - 1) == 0)
        snprintf(failure, sizeof failure, "%s (looked beside %s, then on the loader's path)", why,
                 own[0] ? own : "libzeroc");
    else
        snprintf(failure, sizeof failure, "%s", why);
    /* The driver is here, so a GPU may be too: training on the CPU instead
     * without a word would be a surprise. */
    ZC_LOGW("device", "the CUDA backend cannot be loaded: %s", failure);
}

const zc_cuda_plugin_ops *zc__cuda_plugin(void)
{
    pthread_once(&once, load_once);
    return loaded;
}

void zc__cuda_unusable_reason(char *buf, size_t cap)
{
    /* A driver that sees no device says so without the plugin being loaded
     * (driver_count.h); once it is loaded, its runtime's reason. */
    if (!loaded && zc__cuda_driver_device_count(buf, cap) == 0)
        return;
    const zc_cuda_plugin_ops *ops = zc__cuda_plugin();
    if (ops)
        ops->unusable_reason(buf, cap);
    else
        snprintf(buf, cap, "%s", failure);
}

/* ---- what libzeroc calls ------------------------------------------------- */

int zc__device_cuda_count(void)
{
    /* No device by the driver's own count: nothing of CUDA's runtime or
     * NCCL is loaded to learn it (driver_count.h). */
    if (zc__cuda_driver_device_count(NULL, 0) == 0)
        return 0;
    const zc_cuda_plugin_ops *ops = zc__cuda_plugin();
    return ops ? ops->device_count() : 0;
}

zc_status zc__device_cuda_open(int index, zc_device **out)
{
    *out = NULL;
    const zc_cuda_plugin_ops *ops = zc__cuda_plugin();
    if (!ops) {
        char why[sizeof failure + 32];
        zc__cuda_unusable_reason(why, sizeof why);
        return ZC_ERR(ZC_ERR_UNSUPPORTED, "device 'cuda' requested but unusable: %s", why);
    }
    return ops->device_open(index, out);
}

int zc__cuda_host_register(void *p, size_t bytes, char *why, size_t cap)
{
    const zc_cuda_plugin_ops *ops = zc__cuda_plugin();
    if (!ops) {
        snprintf(why, cap, "the CUDA backend is not loaded");
        return -1;
    }
    return ops->host_register(p, bytes, why, cap);
}

void zc__cuda_host_unregister(void *p)
{
    const zc_cuda_plugin_ops *ops = zc__cuda_plugin();
    if (ops)
        ops->host_unregister(p);
}

int zc__cuda_device_cpuset(void *hwloc_topology, int device, void *hwloc_cpuset)
{
    const zc_cuda_plugin_ops *ops = zc__cuda_plugin();
    return ops && ops->device_cpuset ? ops->device_cpuset(hwloc_topology, device, hwloc_cpuset)
                                     : -1;
}

#if ZC_HAVE_NCCL
/* NCCL needs the plugin: without it the error is why it could not load. */
static zc_status nccl_ops(const char *call, const zc_cuda_plugin_ops **ops)
{
    *ops = zc__cuda_plugin();
    if (*ops)
        return ZC_OK;
    char why[sizeof failure + 32];
    zc__cuda_unusable_reason(why, sizeof why);
    return ZC_ERR(ZC_ERR_UNSUPPORTED, "%s: the NCCL communicator is unusable: %s", call, why);
}

zc_status zc__comm_nccl_create(int rank, int world, int device, const void *unique_id,
                               double init_timeout_s, zc_comm **out)
{
    *out = NULL;
    const zc_cuda_plugin_ops *ops;
    ZC_CHECK(nccl_ops("nccl create", &ops));
    return ops->nccl_create(rank, world, device, unique_id, init_timeout_s, out);
}

zc_status zc__comm_nccl_stall(zc_comm *c, unsigned ms)
{
    const zc_cuda_plugin_ops *ops;
    ZC_CHECK(nccl_ops("nccl stall", &ops));
    return ops->nccl_stall(c, ms);
}

zc_status zc__comm_nccl_from_env(const zc_launch_env *env, zc_comm **out)
{
    *out = NULL;
    const zc_cuda_plugin_ops *ops;
    ZC_CHECK(nccl_ops("zc_comm_init_env", &ops));
    return ops->nccl_from_env(env, out);
}

zc_status zc__comm_nccl_wrap(void *nc, int rank, int world, void *stream, int world_rank,
                             int node_ranks, zc_comm **out)
{
    *out = NULL;
    const zc_cuda_plugin_ops *ops;
    ZC_CHECK(nccl_ops("zc_comm_from_nccl", &ops));
    return ops->nccl_wrap(nc, rank, world, stream, world_rank, node_ranks, out);
}
#endif
